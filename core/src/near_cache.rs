//! The near cache: recently read vectors kept in proxy-wasm shared data, shared by Envoy's
//! worker threads. Shared data cannot delete or list keys, so the cache is set-associative over
//! a fixed number of keys: an entity hashes to one set (one shared-data value) holding at most
//! [`WAYS`] entries of at most [`MAX_ENTRY_BYTES`] each, and a full set evicts its oldest entry.
//! Memory is bounded by construction: sets × WAYS × MAX_ENTRY_BYTES ≤ the configured bytes.
//! Entries are keyed by fingerprint, so a schema change never serves an old vector; TTLs are
//! still checked on every read, since they are about the data's event time.

/// Entries per set.
pub const WAYS: usize = 4;
/// Largest cached entry (id + vector + header); larger vectors are simply not cached.
pub const MAX_ENTRY_BYTES: usize = 512;
const SET_BYTES: u64 = (WAYS * MAX_ENTRY_BYTES) as u64;
/// Entry header: inserted-at (u64 ms) + id length (u16) + vector length (u16).
const HEADER: usize = 12;

/// Number of sets for a byte budget (at least 1).
pub fn sets_for(max_bytes: u64) -> u32 {
    u32::try_from((max_bytes / SET_BYTES).max(1)).unwrap_or(u32::MAX)
}

/// The identity of a cached vector: fingerprint, service and entity key.
pub fn entry_id(fingerprint: u64, service: &str, entity_key: &str) -> Vec<u8> {
    let mut id = Vec::with_capacity(8 + service.len() + 1 + entity_key.len());
    id.extend_from_slice(&fingerprint.to_be_bytes());
    id.extend_from_slice(service.as_bytes());
    id.push(0);
    id.extend_from_slice(entity_key.as_bytes());
    id
}

/// The shared-data key of the set holding `id`.
pub fn set_key(id: &[u8], sets: u32) -> String {
    // FNV-1a: stable across workers and restarts, good enough to spread ids over sets.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("ferry.nc.{}", h % u64::from(sets.max(1)))
}

struct Entry<'a> {
    at_ms: u64,
    id: &'a [u8],
    vector: &'a [u8],
}

/// Parses a set; a malformed tail (never written by this code) ends the parse.
fn entries(set: &[u8]) -> Vec<Entry<'_>> {
    let mut out = Vec::with_capacity(WAYS);
    let mut rest = set;
    while rest.len() >= HEADER {
        let at_ms = u64::from_be_bytes(rest[..8].try_into().unwrap_or_default());
        let id_len = usize::from(u16::from_be_bytes([rest[8], rest[9]]));
        let v_len = usize::from(u16::from_be_bytes([rest[10], rest[11]]));
        let Some(body) = rest.get(HEADER..HEADER + id_len + v_len) else {
            break;
        };
        out.push(Entry {
            at_ms,
            id: &body[..id_len],
            vector: &body[id_len..],
        });
        rest = &rest[HEADER + id_len + v_len..];
    }
    out
}

/// The cached vector for `id` if it was inserted at most `max_age_ms` ago.
pub fn lookup<'a>(set: &'a [u8], id: &[u8], now_ms: u64, max_age_ms: u32) -> Option<&'a [u8]> {
    entries(set)
        .into_iter()
        .find(|e| e.id == id)
        .filter(|e| now_ms.saturating_sub(e.at_ms) <= u64::from(max_age_ms))
        .map(|e| e.vector)
}

/// Result of adding an entry to a set.
#[derive(Debug, PartialEq)]
pub enum Insert {
    /// The new set value, and whether another entity's entry was evicted for it.
    Write { set: Vec<u8>, evicted: bool },
    /// The entry is over [`MAX_ENTRY_BYTES`]: not cached.
    TooLarge,
}

pub fn insert(set: Option<&[u8]>, id: &[u8], vector: &[u8], now_ms: u64) -> Insert {
    if HEADER + id.len() + vector.len() > MAX_ENTRY_BYTES {
        return Insert::TooLarge;
    }
    let mut kept: Vec<Entry<'_>> = set.map(entries).unwrap_or_default();
    kept.retain(|e| e.id != id);
    let mut evicted = false;
    if kept.len() >= WAYS {
        if let Some(oldest) = kept
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.at_ms)
            .map(|(i, _)| i)
        {
            kept.remove(oldest);
            evicted = true;
        }
    }
    kept.push(Entry {
        at_ms: now_ms,
        id,
        vector,
    });
    let mut out = Vec::with_capacity(
        kept.iter()
            .map(|e| HEADER + e.id.len() + e.vector.len())
            .sum(),
    );
    for e in kept {
        out.extend_from_slice(&e.at_ms.to_be_bytes());
        // Both lengths fit u16: every entry is at most MAX_ENTRY_BYTES.
        out.extend_from_slice(&(e.id.len() as u16).to_be_bytes());
        out.extend_from_slice(&(e.vector.len() as u16).to_be_bytes());
        out.extend_from_slice(e.id);
        out.extend_from_slice(e.vector);
    }
    Insert::Write { set: out, evicted }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(set: Option<&[u8]>, id: &[u8], v: &[u8], now: u64) -> (Vec<u8>, bool) {
        match insert(set, id, v, now) {
            Insert::Write { set, evicted } => (set, evicted),
            Insert::TooLarge => panic!("too large"),
        }
    }

    #[test]
    fn hit_within_max_age_only() {
        let id = entry_id(7, "svc", "u1");
        let (set, evicted) = write(None, &id, b"vec", 1_000);
        assert!(!evicted);
        assert_eq!(lookup(&set, &id, 1_500, 500), Some(&b"vec"[..]));
        assert_eq!(lookup(&set, &id, 1_501, 500), None, "older than max age");
        assert_eq!(
            lookup(&set, &entry_id(8, "svc", "u1"), 1_000, 500),
            None,
            "other fingerprint"
        );
        assert_eq!(lookup(&set, &entry_id(7, "svc", "u2"), 1_000, 500), None);
    }

    #[test]
    fn full_set_evicts_its_oldest_entry_and_updates_replace() {
        let mut set = Vec::new();
        for i in 0..WAYS as u64 {
            let (s, evicted) = write(
                Some(&set),
                &entry_id(1, "s", &format!("u{i}")),
                b"v",
                100 + i,
            );
            assert!(!evicted);
            set = s;
        }
        let (set, evicted) = write(Some(&set), &entry_id(1, "s", "u0"), b"new", 200);
        assert!(!evicted, "same id: replaced in place");
        assert_eq!(
            lookup(&set, &entry_id(1, "s", "u0"), 200, 10),
            Some(&b"new"[..])
        );
        let (set, evicted) = write(Some(&set), &entry_id(1, "s", "u9"), b"v9", 300);
        assert!(evicted);
        assert_eq!(
            lookup(&set, &entry_id(1, "s", "u1"), 300, 1000),
            None,
            "u1 was the oldest"
        );
        assert_eq!(
            lookup(&set, &entry_id(1, "s", "u9"), 300, 1000),
            Some(&b"v9"[..])
        );
        assert!(set.len() <= WAYS * MAX_ENTRY_BYTES);
    }

    #[test]
    fn oversize_entries_are_not_cached_and_bytes_are_bounded() {
        assert_eq!(
            insert(None, b"id", &[0; MAX_ENTRY_BYTES], 0),
            Insert::TooLarge
        );
        assert_eq!(sets_for(64 << 20), 32_768);
        assert_eq!(sets_for(0), 1);
        let k = set_key(&entry_id(1, "s", "u1"), 10);
        assert!(k.starts_with("ferry.nc.") && k[9..].parse::<u32>().unwrap() < 10);
    }

    #[test]
    fn garbage_sets_never_panic() {
        for junk in [&b""[..], b"\x00", &[0xff; 11], &[0xff; 40], &[0; 12]] {
            assert_eq!(lookup(junk, b"x", 0, 10), None);
            assert!(matches!(
                insert(Some(junk), b"x", b"v", 0),
                Insert::Write { .. }
            ));
        }
    }
}
