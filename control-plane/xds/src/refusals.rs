//! What each node NACKed, across its streams: a version an Envoy refused is not sent to it
//! again when it reconnects (its next stream is seeded from here). Keyed by (node id, type,
//! version), so one Envoy's refusal never keeps a version from another node.
//!
//! Bounded: [`PER_NODE`] versions per node (the oldest goes first) and [`MAX_NODES`] nodes (the
//! least recently seen goes first). An Envoy without a node id is not remembered at all: every
//! such Envoy would share one entry.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use super::resource_type::ResourceType;

/// Refusals kept per node.
pub const PER_NODE: usize = 16;
/// Nodes remembered.
pub const MAX_NODES: usize = 1024;

#[derive(Debug, Default)]
struct NodeRefusals {
    /// (type, version) refused, oldest first.
    refused: VecDeque<(ResourceType, String)>,
    /// When this node was last recorded or looked up (a counter): the eviction order.
    seen: u64,
}

#[derive(Debug, Default)]
struct Inner {
    by_node: HashMap<String, NodeRefusals>,
    clock: u64,
}

#[derive(Debug, Default)]
pub struct Refusals {
    inner: Mutex<Inner>,
}

impl Refusals {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data behind: keep going.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What `node_id` refused before, to seed a new stream.
    pub fn of(&self, node_id: &str) -> Vec<(ResourceType, String)> {
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        inner.by_node.get_mut(node_id).map_or_else(Vec::new, |n| {
            n.seen = now;
            n.refused.iter().cloned().collect()
        })
    }

    pub fn record(&self, node_id: &str, resource_type: ResourceType, version: &str) {
        if node_id.is_empty() {
            return;
        }
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        if !inner.by_node.contains_key(node_id) && inner.by_node.len() >= MAX_NODES {
            let oldest = inner
                .by_node
                .iter()
                .min_by_key(|(_, n)| n.seen)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                inner.by_node.remove(&k);
            }
        }
        let node = inner.by_node.entry(node_id.to_owned()).or_default();
        node.seen = now;
        if node
            .refused
            .iter()
            .any(|(t, v)| *t == resource_type && v == version)
        {
            return;
        }
        if node.refused.len() >= PER_NODE {
            node.refused.pop_front();
        }
        node.refused.push_back((resource_type, version.to_owned()));
    }

    /// The node ACKed `version`: it can take it after all (its .wasm is back, or another
    /// Envoy shares its id), so it is not withheld from this node's next streams.
    pub fn forget(&self, node_id: &str, resource_type: ResourceType, version: &str) {
        let mut inner = self.lock();
        if let Some(node) = inner.by_node.get_mut(node_id) {
            node.refused
                .retain(|(t, v)| !(*t == resource_type && v == version));
            if node.refused.is_empty() {
                inner.by_node.remove(node_id);
            }
        }
    }

    /// Nodes with at least one refusal remembered.
    #[cfg(test)]
    pub fn nodes(&self) -> usize {
        self.lock().by_node.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ECDS: ResourceType = ResourceType::ExtensionConfig;

    #[test]
    fn refusals_are_per_node_deduplicated_and_bounded() {
        let r = Refusals::default();
        r.record("a", ECDS, "bad");
        r.record("a", ECDS, "bad");
        assert_eq!(r.of("a"), [(ECDS, "bad".to_owned())]);
        assert!(r.of("b").is_empty(), "another node is not affected");
        for i in 0..PER_NODE {
            r.record("a", ECDS, &format!("v{i}"));
        }
        let a = r.of("a");
        assert_eq!(a.len(), PER_NODE);
        assert_eq!(a[0], (ECDS, "v0".to_owned()), "the oldest went first");
    }

    #[test]
    fn the_least_recently_seen_node_goes_first() {
        let r = Refusals::default();
        for i in 0..MAX_NODES {
            r.record(&format!("n{i}"), ECDS, "bad");
        }
        assert_eq!(r.nodes(), MAX_NODES);
        // n0 reconnects (looked up): n1 is now the least recently seen.
        assert_eq!(r.of("n0").len(), 1);
        r.record("new", ECDS, "bad");
        assert_eq!(r.nodes(), MAX_NODES);
        assert!(r.of("n1").is_empty(), "evicted");
        assert_eq!(r.of("n0").len(), 1);
        assert_eq!(r.of("new").len(), 1);
        // Recording for a known node evicts nobody.
        r.record("n2", ECDS, "worse");
        assert_eq!(r.nodes(), MAX_NODES);
        assert_eq!(r.of("n2").len(), 2);
    }

    #[test]
    fn an_ack_forgets_that_version_and_nodes_without_an_id_are_not_remembered() {
        let r = Refusals::default();
        r.record("a", ECDS, "v1");
        r.record("a", ECDS, "v2");
        r.forget("a", ECDS, "v1");
        assert_eq!(r.of("a"), [(ECDS, "v2".to_owned())]);
        r.forget("a", ECDS, "v2");
        assert_eq!(r.nodes(), 0, "a node with nothing refused takes no room");
        r.record("", ECDS, "v1");
        assert_eq!(r.nodes(), 0);
        assert!(r.of("").is_empty());
    }
}

#[cfg(test)]
mod identity_tests {
    use super::*;
    use crate::Node;

    #[test]
    fn a_nack_under_another_identity_never_touches_a_real_nodes_entry() {
        let node = |identity: Option<&str>| Node {
            id: "envoy-a".into(),
            cluster: String::new(),
            identity: identity.map(str::to_owned),
        };
        let (real, forger) = (
            node(Some("spiffe://c/ns/ml/sa/envoy")),
            node(Some("spiffe://c/ns/ml/sa/web")),
        );
        let r = Refusals::default();
        r.record(&forger.key(), ResourceType::ExtensionConfig, "v2");
        assert!(
            r.of(&real.key()).is_empty(),
            "the forged NACK is the forger's own"
        );
        r.record(&real.key(), ResourceType::ExtensionConfig, "v3");
        r.forget(&forger.key(), ResourceType::ExtensionConfig, "v3");
        assert_eq!(r.of(&real.key()).len(), 1, "nor can a forged ACK clear it");
        assert_eq!(
            node(None).key(),
            "envoy-a",
            "without mTLS: the node id as sent"
        );
    }
}
