//! Signed snapshots for tests, by the signer's rule (`ferry_protos::signed::payload`): keys from
//! a seed, the `snapshot_keys` entry of a key, and envelopes at any sequence, so tests can
//! tamper with each part.

use ed25519_dalek::{Signer, SigningKey};
use ferry_protos::signed::payload;
use ferry_protos::v1::SignedSnapshot;

/// A deterministic key: the same seed is the same key in every test.
pub fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

/// The public key as standard base64 (what `snapshot_keys` holds).
pub fn public_b64(key: &SigningKey) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(key.verifying_key().to_bytes())
}

/// `{"id": ID, "ed25519": BASE64}` for `key`.
pub fn key_json(id: &str, key: &SigningKey) -> String {
    format!(r#"{{"id":"{id}","ed25519":"{}"}}"#, public_b64(key))
}

/// `snapshot` signed by `key` under `id` at `sequence`.
pub fn sign(key: &SigningKey, id: &str, sequence: u64, snapshot: &[u8]) -> SignedSnapshot {
    let sig = key.sign(&payload(sequence, id, snapshot));
    SignedSnapshot {
        snapshot: snapshot.to_vec(),
        sequence,
        key_id: id.to_owned(),
        signature: sig.to_bytes().to_vec(),
    }
}
