//! Proxy-wasm shared data in the native build (the near cache's sets, a pulled snapshot's held
//! sequence): a process-wide map shared by Envoy's worker threads, with shared data's contract
//! (a value and a CAS token per key). Sharded by key hash so workers rarely wait on one another's lock.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Mutex, OnceLock};

const SHARDS: usize = 64;

type Shard = Mutex<HashMap<String, (Vec<u8>, u32)>>;

pub struct SharedStore {
    shards: Vec<Shard>,
    hasher: RandomState,
}

impl Default for SharedStore {
    fn default() -> Self {
        SharedStore {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: RandomState::new(),
        }
    }
}

impl SharedStore {
    fn shard(&self, key: &str) -> Option<&Shard> {
        let i = (self.hasher.hash_one(key) % SHARDS as u64) as usize;
        self.shards.get(i)
    }

    /// The value under `key` and its CAS token.
    pub fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        // A poisoned shard (a panic while holding it; nothing here panics) reads as empty.
        let Some(Ok(map)) = self.shard(key).map(Mutex::lock) else {
            return (None, None);
        };
        match map.get(key) {
            Some((v, cas)) => (Some(v.clone()), Some(*cas)),
            None => (None, None),
        }
    }

    /// Writes `value` unless `cas` is given and no longer the key's token.
    pub fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        let Some(Ok(mut map)) = self.shard(key).map(Mutex::lock) else {
            return false;
        };
        let current = map.get(key).map(|(_, c)| *c);
        if cas.is_some() && cas != current {
            return false;
        }
        let next = current.map_or(1, |c| c.wrapping_add(1).max(1));
        map.insert(key.to_owned(), (value.to_vec(), next));
        true
    }

    /// Forgets every key: a test driving many unrelated cases through the one process-wide
    /// store starts each from an empty near cache, as each case's Wasm VM does.
    #[cfg(any(test, feature = "testing"))]
    pub fn clear(&self) {
        for shard in &self.shards {
            if let Ok(mut map) = shard.lock() {
                map.clear();
            }
        }
    }
}

/// The one store of this Envoy process.
pub fn store() -> &'static SharedStore {
    static STORE: OnceLock<SharedStore> = OnceLock::new();
    STORE.get_or_init(SharedStore::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_guards_concurrent_writers() {
        let s = SharedStore::default();
        assert_eq!(s.get("k"), (None, None));
        assert!(s.set("k", b"a", None));
        let (v, cas) = s.get("k");
        assert_eq!(v.as_deref(), Some(&b"a"[..]));
        assert!(s.set("k", b"b", cas));
        // The first token is stale now: a writer that read before the second write loses.
        assert!(!s.set("k", b"c", cas));
        assert_eq!(s.get("k").0.as_deref(), Some(&b"b"[..]));
        // A CAS on a key that was never written fails too.
        assert!(!s.set("other", b"x", Some(1)));
    }

    #[test]
    fn threads_share_one_store() {
        let s = std::sync::Arc::new(SharedStore::default());
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        s.set(&format!("k{t}.{i}"), &[t as u8], None);
                    }
                })
            })
            .collect();
        for h in handles {
            assert!(h.join().is_ok());
        }
        for t in 0..4u8 {
            assert_eq!(s.get(&format!("k{t}.99")).0, Some(vec![t]));
        }
    }
}
