//! A FeatureService's fingerprint: a stable hash of its entity key schema and its selected
//! features with their types. It pins the stored vector layout: the filter rejects any vector
//! whose fingerprint differs from the snapshot's, and the fingerprint is part of the Redis key,
//! so a schema change writes new keys beside the old ones.
//!
//! Canonical text (version 1), hashed with SHA-256; the fingerprint is the first 8 bytes,
//! big-endian:
//! ```text
//! ferry-fp-v1
//! key {join_key} {type}              one per entity key, sorted by join_key
//! feature {view}:{feature} {type}    one per selected feature, sorted by (view, feature)
//! ```
//! Listing order does not matter; TTLs, defaults and routes are not part of the layout and do
//! not change it.

use sha2::{Digest, Sha256};

use crate::types::{FeatureType, KeyType};

/// The canonical text the fingerprint hashes.
pub fn canonical_text(keys: &[(&str, KeyType)], features: &[(&str, &str, FeatureType)]) -> String {
    let mut keys = keys.to_vec();
    keys.sort();
    let mut features = features.to_vec();
    features.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let mut text = String::from("ferry-fp-v1\n");
    for (join_key, ty) in keys {
        text.push_str(&format!("key {join_key} {}\n", ty.as_str()));
    }
    for (view, feature, ty) in features {
        text.push_str(&format!("feature {view}:{feature} {}\n", ty.as_str()));
    }
    text
}

/// The fingerprint of a FeatureService with these entity keys and selected features.
pub fn fingerprint(keys: &[(&str, KeyType)], features: &[(&str, &str, FeatureType)]) -> u64 {
    let digest = Sha256::digest(canonical_text(keys, features).as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The version of a service's derived part: the first 8 bytes of SHA-256 of the canonical
/// text of its on-demand features' definitions, as 16 hex digits. On-demand views are never
/// part of the fingerprint (nothing of them is stored): changing an expression changes this,
/// and needs no materialize.
pub fn derived_version(canonical: &str) -> String {
    let digest = Sha256::digest(canonical.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use FeatureType as F;

    const KEYS: [(&str, KeyType); 2] = [
        ("user_id", KeyType::String),
        ("merchant_id", KeyType::Int64),
    ];
    const FEATURES: [(&str, &str, FeatureType); 3] = [
        ("user_profile", "age", F::Int64),
        ("transactions", "txn_count_7d", F::Int64),
        ("user_profile", "credit_score", F::Float32),
    ];

    #[test]
    fn canonical_text_is_sorted_and_lowercase() {
        assert_eq!(
            canonical_text(&KEYS, &FEATURES),
            "ferry-fp-v1\n\
             key merchant_id int64\n\
             key user_id string\n\
             feature transactions:txn_count_7d int64\n\
             feature user_profile:age int64\n\
             feature user_profile:credit_score float32\n"
        );
    }

    #[test]
    fn known_value_is_pinned() {
        // The first 8 bytes of SHA-256 of the canonical text above. If this changes, every
        // stored vector in every Redis becomes unreadable: never change it for fingerprint v1.
        let text = canonical_text(&KEYS, &FEATURES);
        let digest = Sha256::digest(text.as_bytes());
        let expected = u64::from_be_bytes(digest[..8].try_into().unwrap());
        assert_eq!(fingerprint(&KEYS, &FEATURES), expected);
        assert_eq!(
            ferry_protos::fingerprint_hex(fingerprint(
                &[("id", KeyType::String)],
                &[("v", "f", F::Bool)]
            )),
            "d406285a15764528"
        );
    }

    #[test]
    fn independent_of_listing_order() {
        let fp = fingerprint(&KEYS, &FEATURES);
        let mut keys = KEYS;
        keys.reverse();
        let mut features = FEATURES;
        features.reverse();
        assert_eq!(fingerprint(&keys, &features), fp);
        features.swap(0, 1);
        assert_eq!(fingerprint(&keys, &features), fp);
    }

    #[test]
    fn changes_with_a_type_a_feature_or_a_key() {
        let fp = fingerprint(&KEYS, &FEATURES);
        let mut retyped = FEATURES;
        retyped[2].2 = F::Float64;
        assert_ne!(fingerprint(&KEYS, &retyped), fp);
        assert_ne!(fingerprint(&KEYS, &FEATURES[..2]), fp);
        let mut renamed = FEATURES;
        renamed[0].1 = "age_years";
        assert_ne!(fingerprint(&KEYS, &renamed), fp);
        let mut moved = FEATURES;
        moved[0].0 = "user_profile_v2";
        assert_ne!(fingerprint(&KEYS, &moved), fp);
        assert_ne!(fingerprint(&KEYS[..1], &FEATURES), fp);
        let mut key_retyped = KEYS;
        key_retyped[1].1 = KeyType::String;
        assert_ne!(fingerprint(&key_retyped, &FEATURES), fp);
    }
}
