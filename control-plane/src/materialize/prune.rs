//! `ferry materialize --prune`: deletes the vectors of entities that are no longer in a
//! service's sources, after that service's vectors were written. Only the service's keys at its
//! current fingerprint are looked at (those of older fingerprints are `--key-ttl`'s to expire).
//! Keys are found with SCAN and the service's key prefix, never KEYS (which blocks Redis for a
//! walk of the whole keyspace), and removed with UNLINK in batches (memory freed off Redis's
//! main thread).

use redis::aio::ConnectionLike;

use super::MaterializeError;
use ferry_repo::{FeatureService, Registry};

/// Keys asked of each SCAN step: a hint to Redis, which bounds the work of one call.
const SCAN_COUNT: usize = 1000;

/// What pruning one service did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Keys under the service's prefix that SCAN returned (SCAN may return a key twice).
    pub scanned: u64,
    /// Keys removed (UNLINK's count: a key that expired meanwhile is not counted).
    pub removed: u64,
}

/// `prefix` as a SCAN MATCH pattern that matches the keys starting with it: glob characters
/// escaped (names cannot hold them today; the pattern must not depend on that), then `*`.
fn match_pattern(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 2);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('*');
    out
}

/// A SCAN reply, `[cursor, [key, ...]]`, or None for any other shape. Envoy's redis_proxy in
/// front of several shards answers with one such pair per shard, concatenated (seen with Envoy
/// 1.40 and a 3-master Redis Cluster): a cursor that cannot be continued, so it is refused.
fn scan_reply(reply: redis::Value) -> Option<(u64, Vec<Vec<u8>>)> {
    use redis::{FromRedisValue, Value};
    let Value::Array(mut parts) = reply else {
        return None;
    };
    if parts.len() != 2 {
        return None;
    }
    let keys = Vec::<Vec<u8>>::from_redis_value(parts.pop()?).ok()?;
    let cursor = u64::from_redis_value(parts.pop()?).ok()?;
    Some((cursor, keys))
}

/// Removes the keys of `service` whose entity is not in `entities` (sorted, as
/// [`ferry_repo::tables::service_entities`] returns them), UNLINKing `batch_size` at a time.
pub async fn prune_service<C: ConnectionLike>(
    reg: &Registry,
    service: &FeatureService,
    entities: &[&str],
    conn: &mut C,
    batch_size: usize,
) -> Result<Pruned, MaterializeError> {
    let fail = |source| MaterializeError::Prune {
        service: service.name.clone(),
        source,
    };
    let prefix = ferry_protos::redis_key(&reg.project, &service.name, service.fingerprint, "");
    let pattern = match_pattern(&prefix);
    let mut pruned = Pruned::default();
    let mut stale: Vec<Vec<u8>> = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let reply: redis::Value = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(conn)
            .await
            .map_err(fail)?;
        let (next, keys) = scan_reply(reply).ok_or_else(|| MaterializeError::PruneScanReply {
            service: service.name.clone(),
        })?;
        pruned.scanned += keys.len() as u64;
        stale.extend(keys.into_iter().filter(|k| {
            let entity = k.get(prefix.len()..).unwrap_or_default();
            // Not UTF-8: no entity key Ferry writes, so stale under Ferry's own prefix.
            std::str::from_utf8(entity).map_or(true, |e| entities.binary_search(&e).is_err())
        }));
        if stale.len() >= batch_size.max(1) || (next == 0 && !stale.is_empty()) {
            if entities.is_empty() {
                return Err(MaterializeError::PruneEverything {
                    service: service.name.clone(),
                });
            }
            let removed: u64 = redis::cmd("UNLINK")
                .arg(&stale)
                .query_async(conn)
                .await
                .map_err(fail)?;
            pruned.removed += removed;
            stale.clear();
        }
        if next == 0 {
            return Ok(pruned);
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_two_part_scan_reply_is_read() {
        use redis::Value;
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            scan_reply(Value::Array(vec![
                bulk("17"),
                Value::Array(vec![bulk("k1"), bulk("k2")])
            ])),
            Some((17, vec![b"k1".to_vec(), b"k2".to_vec()]))
        );
        // One pair per shard, as Envoy's redis_proxy answers for a Redis Cluster.
        let per_shard = Value::Array(vec![
            bulk("0"),
            Value::Array(vec![]),
            bulk("0"),
            Value::Array(vec![bulk("k")]),
        ]);
        assert_eq!(scan_reply(per_shard), None);
        assert_eq!(scan_reply(Value::Okay), None);
    }

    #[test]
    fn the_pattern_is_the_prefix_with_globs_escaped() {
        assert_eq!(
            match_pattern("ferry:banking:scoring:00000000000000ab:"),
            "ferry:banking:scoring:00000000000000ab:*"
        );
        assert_eq!(match_pattern("a*b?c[d]e\\"), "a\\*b\\?c\\[d\\]e\\\\*");
    }
}
