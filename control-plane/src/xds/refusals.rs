//! What each node refused, across its streams: a version an Envoy NACKed is not sent to it
//! again, not even after it reconnects (its next stream is seeded from here).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::resource_type::ResourceType;

/// Refusals kept per node; the oldest goes first.
const PER_NODE: usize = 16;

#[derive(Debug, Default)]
pub struct Refusals {
    /// node id → (type, version) it refused, oldest first, at most [`PER_NODE`].
    by_node: Mutex<HashMap<String, Vec<(ResourceType, String)>>>,
}

impl Refusals {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<(ResourceType, String)>>> {
        // A panic while holding the lock leaves plain data behind: keep going.
        self.by_node.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `node_id` refused before, to seed a new stream.
    pub fn of(&self, node_id: &str) -> Vec<(ResourceType, String)> {
        self.lock().get(node_id).cloned().unwrap_or_default()
    }

    pub fn record(&self, node_id: &str, resource_type: ResourceType, version: &str) {
        let mut by_node = self.lock();
        let list = by_node.entry(node_id.to_owned()).or_default();
        if list
            .iter()
            .any(|(t, v)| *t == resource_type && v == version)
        {
            return;
        }
        if list.len() >= PER_NODE {
            list.remove(0);
        }
        list.push((resource_type, version.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_per_node_deduplicated_and_bounded() {
        let r = Refusals::default();
        let ecds = ResourceType::ExtensionConfig;
        r.record("a", ecds, "bad");
        r.record("a", ecds, "bad");
        assert_eq!(r.of("a"), [(ecds, "bad".to_owned())]);
        assert!(r.of("b").is_empty());
        for i in 0..PER_NODE {
            r.record("a", ecds, &format!("v{i}"));
        }
        let a = r.of("a");
        assert_eq!(a.len(), PER_NODE);
        assert_eq!(a[0], (ecds, "v0".to_owned()), "the oldest went first");
    }
}
