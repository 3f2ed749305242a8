//! Feast's Redis layout (Feast 0.4x-0.67, `infra/online_stores/redis.py` and
//! `key_encoding_utils.py`): the hash key of an entity and the field names inside it. Shared by
//! `ferry apply` (which puts the field names into the snapshot) and the reader (which builds
//! the hash keys from the request's ids).

use crate::limits::{MAX_FEAST_VIEWS, MAX_JOIN_KEYS};
use crate::v1::{FeastJoinKey, FeastLayout};
use crate::{is_valid_name, ENTITY_KEY_SEPARATOR};

/// Feast's `ValueType.STRING`, written before every join key name.
const STRING_TYPE: u32 = 2;
/// Feast's `ValueType.INT64`.
const INT64_TYPE: u32 = 4;

/// MurmurHash3 x86_32 with seed 0, as Feast's `_mmh3` computes it (through the `mmh3` package).
pub fn murmur3_32(data: &[u8]) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h: u32 = 0;
    let mut blocks = data.chunks_exact(4);
    for block in blocks.by_ref() {
        let k = u32::from_le_bytes([block[0], block[1], block[2], block[3]]);
        h ^= k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h = h.rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        let mut k: u32 = 0;
        for (i, b) in tail.iter().enumerate() {
            k |= u32::from(*b) << (8 * i);
        }
        h ^= k.wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    }
    // `data.len()` fits: feature refs are short names (the hash folds the length mod 2^32).
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// The hash field of a feature: murmur3 of `view:feature`, 4 bytes little-endian.
pub fn feature_field(view: &str, feature: &str) -> Vec<u8> {
    murmur3_32(format!("{view}:{feature}").as_bytes())
        .to_le_bytes()
        .to_vec()
}

/// The hash field holding a view's event time.
pub fn timestamp_field(view: &str) -> Vec<u8> {
    format!("_ts:{view}").into_bytes()
}

/// The Redis key of one entity's hash: entity key serialization v3 of the join keys (sorted by
/// name, as `join_keys` are) with the parts of `entity_key` (joined by the unit separator, in
/// the same order), followed by the project's bytes. Errs when the key has the wrong number of
/// parts or an int64 part is not an integer.
pub fn hash_key(
    project: &str,
    join_keys: &[FeastJoinKey],
    entity_key: &str,
) -> Result<Vec<u8>, String> {
    let parts: Vec<&str> = entity_key.split(ENTITY_KEY_SEPARATOR).collect();
    if parts.len() != join_keys.len() {
        return Err(format!(
            "entity key has {} part(s), the service has {} join key(s)",
            parts.len(),
            join_keys.len()
        ));
    }
    let mut out = Vec::with_capacity(64 + entity_key.len() + project.len());
    push_u32(&mut out, join_keys.len());
    for k in join_keys {
        out.extend_from_slice(&STRING_TYPE.to_le_bytes());
        push_u32(&mut out, k.name.len());
        out.extend_from_slice(k.name.as_bytes());
    }
    for (k, part) in join_keys.iter().zip(parts) {
        if k.int64 {
            let v: i64 = part.parse().map_err(|_| {
                format!(
                    "id {part:?} of int64 join key '{}' is not an integer",
                    k.name
                )
            })?;
            out.extend_from_slice(&INT64_TYPE.to_le_bytes());
            push_u32(&mut out, 8);
            out.extend_from_slice(&v.to_le_bytes());
        } else {
            out.extend_from_slice(&STRING_TYPE.to_le_bytes());
            push_u32(&mut out, part.len());
            out.extend_from_slice(part.as_bytes());
        }
    }
    out.extend_from_slice(project.as_bytes());
    Ok(out)
}

/// Why a layout is not one `ferry apply` could have built, if it is not: a valid project, 1 to
/// [`MAX_JOIN_KEYS`] join keys with valid names, 1 to [`MAX_FEAST_VIEWS`] views, each with a
/// timestamp field `_ts:VIEW` and at least one 4-byte feature field. The reader refuses any
/// other: what it sends to Redis is then bounded by the limits on counts alone.
pub fn layout_problem(layout: &FeastLayout) -> Option<String> {
    if !is_valid_name(&layout.project) {
        return Some(format!("project {:?} is not a valid name", layout.project));
    }
    if layout.join_keys.is_empty() || layout.join_keys.len() > MAX_JOIN_KEYS {
        return Some(format!(
            "has {} join keys; 1 to {MAX_JOIN_KEYS} expected",
            layout.join_keys.len()
        ));
    }
    if let Some(k) = layout.join_keys.iter().find(|k| !is_valid_name(&k.name)) {
        return Some(format!("join key {:?} is not a valid name", k.name));
    }
    if layout.views.is_empty() || layout.views.len() > MAX_FEAST_VIEWS {
        return Some(format!(
            "has {} views; 1 to {MAX_FEAST_VIEWS} expected",
            layout.views.len()
        ));
    }
    let precomputed = !layout.precomputed_field.is_empty();
    if precomputed && layout.precomputed_field.len() != 4 {
        return Some("precomputed field must be 4 bytes".into());
    }
    layout.views.iter().enumerate().find_map(|(i, v)| {
        if precomputed_problem(v, precomputed) {
            return Some(format!(
                "views[{i}]: with a precomputed field, a view needs its name and one name per \
                 feature field, each of 1 to {MAX_PRECOMPUTED_NAME_BYTES} bytes"
            ));
        }
        let view = v.timestamp_field.strip_prefix(b"_ts:".as_slice());
        if !view.is_some_and(|name| std::str::from_utf8(name).is_ok_and(is_valid_name)) {
            return Some(format!("views[{i}]: timestamp field is not _ts:VIEW"));
        }
        if v.feature_fields.is_empty() || v.feature_fields.iter().any(|f| f.len() != 4) {
            return Some(format!(
                "views[{i}]: feature fields must be one or more of 4 bytes each"
            ));
        }
        None
    })
}

/// Longest name of a view or feature in a precomputed vector (`VIEW@vN__FEATURE`).
pub const MAX_PRECOMPUTED_NAME_BYTES: usize = 300;

/// Whether a view's precomputed names are missing (with a precomputed field), present
/// (without), or of the wrong count or length.
fn precomputed_problem(v: &crate::v1::FeastView, precomputed: bool) -> bool {
    if !precomputed {
        return !v.precomputed_view.is_empty() || !v.precomputed_names.is_empty();
    }
    let bad = |n: &String| n.is_empty() || n.len() > MAX_PRECOMPUTED_NAME_BYTES;
    bad(&v.precomputed_view)
        || v.precomputed_names.len() != v.feature_fields.len()
        || v.precomputed_names.iter().any(bad)
}

/// The field of a `precompute_online` service's precomputed vector: Feast writes it as the
/// feature `vector` of the synthetic view `__precomputed__SERVICE` (never versioned).
pub fn precomputed_field(service: &str) -> Vec<u8> {
    feature_field(&format!("__precomputed__{service}"), "vector")
}

/// Lengths are bounded far below 2^32 (ids by `limits`, names by `is_valid_name`).
fn push_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    // Expected values computed with Feast 0.67's own `feast.infra.online_stores.helpers._mmh3`
    // and `_redis_key` (mmh3 5.3.0).
    #[test]
    fn murmur3_matches_feasts_mmh3() {
        for (input, expected) in [
            ("", "00000000"),
            ("a", "b269253c"),
            ("ab", "5fd7bf9b"),
            ("abc", "fa93ddb3"),
            ("abcd", "6a67ed43"),
            ("user_profile:age", "7337e8a7"),
            ("driver_hourly_stats:conv_rate", "6160e3da"),
            ("__precomputed__svc:vector", "f8f85c5a"),
            ("héllo:wörld", "aa8880c3"),
        ] {
            assert_eq!(
                hex(&murmur3_32(input.as_bytes()).to_le_bytes()),
                expected,
                "{input}"
            );
        }
        assert_eq!(hex(&feature_field("user_profile", "age")), "7337e8a7");
        assert_eq!(timestamp_field("v"), b"_ts:v".to_vec());
    }

    fn key(name: &str, int64: bool) -> FeastJoinKey {
        FeastJoinKey {
            name: name.into(),
            int64,
        }
    }

    #[test]
    fn hash_keys_match_feasts_redis_key() {
        assert_eq!(
            hex(&hash_key("proj", &[key("user_id", false)], "u1").unwrap()),
            "010000000200000007000000757365725f69640200000002000000753170726f6a"
        );
        let composite = crate::entity_key(&["m1", "-5"]);
        assert_eq!(
            hex(&hash_key(
                "proj",
                &[key("merchant_id", false), key("user_id", true)],
                &composite
            )
            .unwrap()),
            "02000000020000000b0000006d65726368616e745f69640200000007000000757365725f69640200\
             0000020000006d310400000008000000fbffffffffffffff70726f6a"
        );
    }

    #[test]
    fn bad_ids_are_refused_with_the_reason() {
        let err = hash_key("p", &[key("n", true)], "x1").unwrap_err();
        assert!(err.contains("\"x1\"") && err.contains("'n'"), "{err}");
        let err = hash_key("p", &[key("a", false), key("b", false)], "x").unwrap_err();
        assert!(
            err.contains("1 part(s)") && err.contains("2 join key(s)"),
            "{err}"
        );
    }

    #[test]
    fn layouts_apply_could_not_build_are_refused() {
        use crate::v1::FeastView;
        let good = FeastLayout {
            project: "p".into(),
            join_keys: vec![key("user_id", false)],
            views: vec![FeastView {
                timestamp_field: timestamp_field("v"),
                feature_fields: vec![feature_field("v", "a")],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(layout_problem(&good), None);
        let mut precomputed = good.clone();
        precomputed.precomputed_field = precomputed_field("s");
        precomputed.views[0].precomputed_view = "v@v2".into();
        precomputed.views[0].precomputed_names = vec!["v@v2__a".into()];
        assert_eq!(layout_problem(&precomputed), None);
        assert_eq!(hex(&precomputed_field("svc")), "f8f85c5a");
        let bad_pre = |change: fn(&mut FeastLayout), expected: &str| {
            let mut layout = precomputed.clone();
            change(&mut layout);
            let why = layout_problem(&layout).unwrap();
            assert!(why.contains(expected), "{why} does not contain {expected}");
        };
        bad_pre(|l| l.precomputed_field = vec![1], "4 bytes");
        bad_pre(|l| l.views[0].precomputed_names.clear(), "one name per");
        bad_pre(|l| l.views[0].precomputed_view.clear(), "one name per");
        bad_pre(|l| l.views[0].precomputed_names[0] = "x".repeat(301), "300");
        bad_pre(|l| l.precomputed_field.clear(), "one name per");
        let bad = |change: fn(&mut FeastLayout), expected: &str| {
            let mut layout = good.clone();
            change(&mut layout);
            let why = layout_problem(&layout).unwrap();
            assert!(why.contains(expected), "{why} does not contain {expected}");
        };
        bad(|l| l.project = "a:b".into(), "project");
        bad(|l| l.join_keys.clear(), "0 join keys");
        bad(|l| l.join_keys = vec![key("k", false); 5], "5 join keys");
        bad(|l| l.join_keys[0].name = "x".repeat(200), "join key");
        bad(|l| l.views.clear(), "0 views");
        bad(|l| l.views = vec![l.views[0].clone(); 257], "257 views");
        bad(|l| l.views[0].timestamp_field = b"v".to_vec(), "_ts:VIEW");
        bad(
            |l| l.views[0].timestamp_field = b"_ts:".to_vec(),
            "_ts:VIEW",
        );
        bad(|l| l.views[0].feature_fields = vec![Vec::new()], "4 bytes");
        bad(|l| l.views[0].feature_fields.clear(), "4 bytes");
    }
}
