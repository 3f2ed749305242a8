//! Verifying a pulled snapshot's signature: the plugin configuration's public keys
//! (`snapshot_keys`, several for rotation) and the check of a `ferry.v1.SignedSnapshot`
//! against them. What is signed is `ferry_protos::signed::payload`, the signer's rule too.

use base64::Engine;
use ed25519_dalek::{Signature, VerifyingKey};
use ferry_protos::signed::{bounded_sequence, payload, MAX_KEY_ID_BYTES, MAX_SEQUENCE};
use ferry_protos::v1::SignedSnapshot;
use serde_json::Value;

/// One configured public key: `{"id": "k1", "ed25519": "BASE64"}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotKey {
    pub id: String,
    key: VerifyingKey,
}

/// The keys a pulled snapshot may be signed with; never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys(Vec<SnapshotKey>);

/// A signed snapshot whose signature verified.
#[derive(Debug)]
pub struct Opened {
    /// The `ferry.v1.Snapshot` bytes that were signed.
    pub snapshot: Vec<u8>,
    pub sequence: u64,
    pub key_id: String,
}

/// Why a signed snapshot was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("not a ferry.v1.SignedSnapshot: {0}")]
    Undecodable(String),
    #[error("the signed snapshot has no signature")]
    Unsigned,
    #[error("signed with key '{id}', which is not configured (snapshot_keys: {known})")]
    UnknownKey { id: String, known: String },
    #[error("its signature does not verify under key '{0}'")]
    BadSignature(String),
    #[error("its sequence {0} is over the highest a signer issues ({MAX_SEQUENCE})")]
    SequenceOutOfRange(u64),
}

impl Keys {
    /// The JSON form's `snapshot_keys`: a non-empty array of `{"id", "ed25519"}` objects with
    /// distinct ids, each key 32 bytes of standard base64 and a valid Ed25519 point.
    pub fn from_json(value: &Value) -> Result<Keys, String> {
        let items = value
            .as_array()
            .filter(|a| !a.is_empty())
            .ok_or("must be a non-empty array of {\"id\": ..., \"ed25519\": \"BASE64\"}")?;
        let mut keys: Vec<SnapshotKey> = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let key = one_key(item).map_err(|e| format!("key {i}: {e}"))?;
            if keys.iter().any(|k| k.id == key.id) {
                return Err(format!("key {i}: id '{}' is given twice", key.id));
            }
            keys.push(key);
        }
        Ok(Keys(keys))
    }

    pub fn ids(&self) -> String {
        let ids: Vec<&str> = self.0.iter().map(|k| k.id.as_str()).collect();
        ids.join(", ")
    }

    /// Decodes `body` as a `ferry.v1.SignedSnapshot` and verifies its signature under the
    /// configured key it names (strict verification: no malleable signature, no weak key).
    pub fn open(&self, body: &[u8]) -> Result<Opened, SignatureError> {
        let signed = <SignedSnapshot as prost::Message>::decode(body)
            .map_err(|e| SignatureError::Undecodable(e.to_string()))?;
        if signed.signature.is_empty() {
            return Err(SignatureError::Unsigned);
        }
        let Some(key) = self.0.iter().find(|k| k.id == signed.key_id) else {
            return Err(SignatureError::UnknownKey {
                id: signed.key_id.chars().take(MAX_KEY_ID_BYTES).collect(),
                known: self.ids(),
            });
        };
        let bad = || SignatureError::BadSignature(key.id.clone());
        let signature = Signature::from_slice(&signed.signature).map_err(|_| bad())?;
        let message = payload(signed.sequence, &signed.key_id, &signed.snapshot);
        key.key
            .verify_strict(&message, &signature)
            .map_err(|_| bad())?;
        // Checked after the signature, so that only a key holder learns of the bound; a signed
        // sequence over it is still refused: held, it would keep every later snapshot out.
        bounded_sequence(signed.sequence)
            .ok_or(SignatureError::SequenceOutOfRange(signed.sequence))?;
        Ok(Opened {
            snapshot: signed.snapshot,
            sequence: signed.sequence,
            key_id: signed.key_id,
        })
    }
}

fn one_key(item: &Value) -> Result<SnapshotKey, String> {
    let obj = item
        .as_object()
        .ok_or("must be an object {\"id\": ..., \"ed25519\": \"BASE64\"}")?;
    if let Some(k) = obj.keys().find(|k| !matches!(k.as_str(), "id" | "ed25519")) {
        return Err(format!("unknown key '{k}' (known: id, ed25519)"));
    }
    let id = obj
        .get("id")
        .and_then(Value::as_str)
        .ok_or("'id' must be a string")?;
    if id.is_empty() || id.len() > MAX_KEY_ID_BYTES || id.chars().any(char::is_control) {
        return Err(format!(
            "'id' must be 1 to {MAX_KEY_ID_BYTES} bytes without control characters"
        ));
    }
    let b64 = obj
        .get("ed25519")
        .and_then(Value::as_str)
        .ok_or("'ed25519' must be a string (the public key, base64)")?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_err(|e| format!("'ed25519' is not base64: {e}"))?;
    let bytes: [u8; 32] = raw.as_slice().try_into().map_err(|_| {
        format!(
            "'ed25519' is {} bytes, an Ed25519 public key is 32 (`ferry keygen` prints one)",
            raw.len()
        )
    })?;
    let key = VerifyingKey::from_bytes(&bytes)
        .ok()
        .filter(|k| !k.is_weak())
        .ok_or("'ed25519' is not a usable Ed25519 public key")?;
    Ok(SnapshotKey {
        id: id.to_owned(),
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_test_support::signed::{key, key_json, sign};
    use prost::Message;

    fn keys(json: &str) -> Result<Keys, String> {
        Keys::from_json(&serde_json::from_str(json).unwrap())
    }

    #[test]
    fn a_signature_verifies_under_its_key_and_nothing_else_does() {
        let (k1, k2) = (key(1), key(2));
        let both = keys(&format!(
            "[{},{}]",
            key_json("k1", &k1),
            key_json("k2", &k2)
        ))
        .unwrap();
        let signed = sign(&k2, "k2", 9, b"snapshot bytes");
        let opened = both.open(&signed.encode_to_vec()).unwrap();
        assert_eq!(
            (opened.snapshot.as_slice(), opened.sequence),
            (&b"snapshot bytes"[..], 9)
        );

        let mut tampered = signed.clone();
        tampered.snapshot.push(b'!');
        let mut resequenced = signed.clone();
        resequenced.sequence = 10;
        let mut flipped = signed.clone();
        flipped.signature[3] ^= 1;
        let mut relabelled = sign(&k1, "k1", 9, b"snapshot bytes");
        relabelled.key_id = "k2".into();
        for (what, bad) in [
            ("payload", tampered),
            ("sequence", resequenced),
            ("signature", flipped),
            ("key id", relabelled),
        ] {
            let e = both.open(&bad.encode_to_vec()).unwrap_err();
            assert_eq!(e, SignatureError::BadSignature("k2".into()), "{what}");
        }
        let mut unknown = sign(&k1, "k9", 9, b"s");
        let e = both.open(&unknown.encode_to_vec()).unwrap_err().to_string();
        assert!(e.contains("key 'k9', which is not configured") && e.contains("k1, k2"));
        unknown.signature.clear();
        assert_eq!(
            both.open(&unknown.encode_to_vec()).unwrap_err(),
            SignatureError::Unsigned
        );
        assert!(matches!(
            both.open(b"\xff\xff"),
            Err(SignatureError::Undecodable(_))
        ));
        // Signed by a configured key, yet over the bound: refused (#35).
        let high = sign(&k1, "k1", 1 << 60, b"s");
        assert_eq!(
            both.open(&high.encode_to_vec()).unwrap_err(),
            SignatureError::SequenceOutOfRange(1 << 60)
        );
        let top = sign(&k1, "k1", MAX_SEQUENCE, b"s");
        assert_eq!(
            both.open(&top.encode_to_vec()).unwrap().sequence,
            MAX_SEQUENCE
        );
    }

    #[test]
    fn bad_keys_are_refused_by_name() {
        let good = key_json("k1", &key(1));
        let cases = [
            ("[]".to_string(), "non-empty array"),
            ("{}".to_string(), "non-empty array"),
            ("[7]".to_string(), "key 0: must be an object"),
            (
                r#"[{"ed25519":"AAAA"}]"#.to_string(),
                "'id' must be a string",
            ),
            (
                r#"[{"id":"","ed25519":"AAAA"}]"#.to_string(),
                "'id' must be 1 to",
            ),
            (r#"[{"id":"a"}]"#.to_string(), "'ed25519' must be a string"),
            (r#"[{"id":"a","ed25519":"%%"}]"#.to_string(), "not base64"),
            (r#"[{"id":"a","ed25519":"AAAA"}]"#.to_string(), "is 3 bytes"),
            (
                r#"[{"id":"a","ed25519":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}]"#
                    .to_string(),
                "not a usable",
            ),
            (r#"[{"id":"a","key":"x"}]"#.to_string(), "unknown key 'key'"),
            (format!("[{good},{good}]"), "key 1: id 'k1' is given twice"),
        ];
        for (json, expected) in cases {
            let e = keys(&json).unwrap_err();
            assert!(e.contains(expected), "{json}: {e}");
        }
    }
}
