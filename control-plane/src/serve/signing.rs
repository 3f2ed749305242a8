//! Signed snapshots for the pull path (Istio, Envoy Gateway): with `--signing-key`, what
//! `GET /v1/snapshot` serves is a `ferry.v1.SignedSnapshot`, the current snapshot's bytes with
//! its sequence, signed with Ed25519 over `ferry_protos::signed::payload` (the filter checks
//! the same payload, `ferry_core::signature`). The envelope is built once per snapshot made
//! current and shared by every poller, as the unsigned bytes are.
//!
//! Sequences: every snapshot made current gets `max(last + 1, now in ms)`, the last one being
//! saved with the snapshot in the state directory ([`super::persist`]) before it is served. So
//! a restart continues above every number issued, and even a lost state directory does not
//! reissue one while the clock moves forward. Replicas (`--shared-state`) share it the same
//! way: `last` is the one stored in Redis, under a compare-and-set ([`super::shared`]).

use std::path::Path;

use base64::Engine;
use bytes::Bytes;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey};
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use ferry_protos::signed::{payload, CONTENT_TYPE, MAX_KEY_ID_BYTES, UNSIGNED_CONTENT_TYPE};
use ferry_protos::v1::SignedSnapshot;
use prost::Message as _;
use sha2::{Digest, Sha256};

/// The private key `ferry serve` signs with, and the id the filter knows it by.
pub struct Signer {
    key: SigningKey,
    pub key_id: String,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({})", self.key_id)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    #[error("{0}")]
    Invalid(String),
}

impl Signer {
    /// The PKCS#8 PEM private key in `path` (`openssl genpkey -algorithm ed25519`,
    /// `ferry keygen`); its id is `id`, or derived from the public key ([`key_id`]).
    pub fn from_file(path: &Path, id: Option<String>) -> Result<Signer, KeyError> {
        let file = |reason: String| KeyError::File {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| file(e.to_string()))?;
        let key = SigningKey::from_pkcs8_pem(text.trim()).map_err(|e| {
            file(format!(
                "not an Ed25519 private key in PKCS#8 PEM ({e}); make one with `ferry keygen` or \
                 `openssl genpkey -algorithm ed25519`"
            ))
        })?;
        let key_id = match id {
            Some(id) => checked_id(id)?,
            None => key_id(&key.verifying_key()),
        };
        Ok(Signer { key, key_id })
    }

    /// The entry of the filter's `snapshot_keys` that verifies this signer.
    pub fn plugin_key(&self) -> serde_json::Value {
        plugin_key(&self.key_id, &self.key.verifying_key())
    }

    /// The signed envelope of `snapshot` (encoded) at `sequence`.
    pub fn envelope(&self, sequence: u64, snapshot: &Bytes) -> Bytes {
        let signature = self.key.sign(&payload(sequence, &self.key_id, snapshot));
        let signed = SignedSnapshot {
            snapshot: snapshot.to_vec(),
            sequence,
            key_id: self.key_id.clone(),
            signature: signature.to_bytes().to_vec(),
        };
        Bytes::from(signed.encode_to_vec())
    }
}

/// The sequence of the next snapshot made current after `last`; None when it would pass
/// [`ferry_protos::signed::MAX_SEQUENCE`] (a clock or a stored sequence gone absurd): refused,
/// never issued.
pub fn next_sequence(last: u64, now_ms: u64) -> Option<u64> {
    ferry_protos::signed::bounded_sequence(last.saturating_add(1).max(now_ms))
}

/// What `GET /v1/snapshot` answers for the current snapshot (its `signed` envelope and its
/// `encoded` bytes): the envelope when there is a signing key, else the bytes; with its
/// content type.
pub fn served<'a>(signed: Option<&'a Bytes>, encoded: &'a Bytes) -> (&'static str, &'a Bytes) {
    match signed {
        Some(envelope) => (CONTENT_TYPE, envelope),
        None => (UNSIGNED_CONTENT_TYPE, encoded),
    }
}

/// A key's default id: `k-` and the first 6 bytes of the SHA-256 of its public key, in hex,
/// so `ferry serve`, `ferry keygen` and `ferry plugin-config` agree without being told.
pub fn key_id(public: &VerifyingKey) -> String {
    let digest = Sha256::digest(public.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("k-{hex}")
}

/// `{"id": ID, "ed25519": BASE64}`, the form of the filter's `snapshot_keys`.
pub fn plugin_key(id: &str, public: &VerifyingKey) -> serde_json::Value {
    let b64 = base64::engine::general_purpose::STANDARD.encode(public.as_bytes());
    serde_json::json!({ "id": id, "ed25519": b64 })
}

fn checked_id(id: String) -> Result<String, KeyError> {
    if id.is_empty() || id.len() > MAX_KEY_ID_BYTES || id.chars().any(char::is_control) {
        return Err(KeyError::Invalid(format!(
            "key id '{id}' must be 1 to {MAX_KEY_ID_BYTES} bytes without control characters"
        )));
    }
    Ok(id)
}

/// A new private key from the OS's random source, as PKCS#8 PEM.
pub fn generate() -> Result<(SigningKey, String), KeyError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed)
        .map_err(|e| KeyError::Invalid(format!("no randomness from the OS: {e}")))?;
    let key = SigningKey::from_bytes(&seed);
    let pem = key
        .to_pkcs8_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .map_err(|e| KeyError::Invalid(format!("encoding the key: {e}")))?;
    Ok((key, pem.to_string()))
}

/// A public key for the filter, as `ferry plugin-config --snapshot-key` takes it: `[ID=]`
/// then 32 bytes of base64, or a file holding a public key (`-----BEGIN PUBLIC KEY-----`, what
/// `openssl pkey -pubout` writes) or a private key (its public half is taken).
pub fn public_key(arg: &str) -> Result<serde_json::Value, KeyError> {
    let (id, value) = match arg.split_once('=') {
        Some((id, v)) if !id.contains('/') && !v.is_empty() && !id.is_empty() => {
            (Some(id.to_owned()), v)
        }
        _ => (None, arg),
    };
    let key = if Path::new(value).is_file() {
        let text = std::fs::read_to_string(value).map_err(|e| KeyError::File {
            path: value.to_owned(),
            reason: e.to_string(),
        })?;
        VerifyingKey::from_public_key_pem(text.trim())
            .or_else(|_| SigningKey::from_pkcs8_pem(text.trim()).map(|k| k.verifying_key()))
            .map_err(|_| KeyError::File {
                path: value.to_owned(),
                reason: "holds no Ed25519 public or private key in PEM".into(),
            })?
    } else {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(value.trim())
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok())
            .ok_or_else(|| {
                KeyError::Invalid(format!(
                    "'{value}' is neither a key file nor 32 bytes of base64"
                ))
            })?;
        VerifyingKey::from_bytes(&raw)
            .map_err(|e| KeyError::Invalid(format!("not an Ed25519 public key: {e}")))?
    };
    let id = match id {
        Some(id) => checked_id(id)?,
        None => key_id(&key),
    };
    Ok(plugin_key(&id, &key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::signature::Keys;

    #[test]
    fn a_generated_key_signs_what_the_filter_verifies_under_its_printed_entry() {
        let dir = tempfile::tempdir().unwrap();
        let (_, pem) = generate().unwrap();
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{pem}");
        let path = dir.path().join("signing.pem");
        std::fs::write(&path, &pem).unwrap();
        let signer = Signer::from_file(&path, None).unwrap();
        assert!(signer.key_id.starts_with("k-") && signer.key_id.len() == 14);
        // plugin-config from the private key file, or from the printed base64, agree.
        let entry = signer.plugin_key();
        assert_eq!(public_key(&path.display().to_string()).unwrap(), entry);
        let b64 = entry["ed25519"].as_str().unwrap();
        assert_eq!(public_key(b64).unwrap(), entry);
        assert_eq!(public_key(&format!("k1={b64}")).unwrap()["id"], "k1");

        let keys = Keys::from_json(&serde_json::json!([entry])).unwrap();
        let envelope = signer.envelope(7, &Bytes::from_static(b"snapshot"));
        let opened = keys.open(&envelope).unwrap();
        assert_eq!(
            (opened.sequence, opened.snapshot),
            (7, b"snapshot".to_vec())
        );
        // Another key's signature is refused.
        std::fs::write(&path, generate().unwrap().1).unwrap();
        let other = Signer::from_file(&path, Some(signer.key_id.clone())).unwrap();
        assert!(keys.open(&other.envelope(8, &Bytes::new())).is_err());
    }

    /// A key as `openssl genpkey -algorithm ed25519` writes it (RFC 8410's example key).
    #[test]
    fn an_openssl_key_loads_and_bad_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("openssl.pem");
        std::fs::write(
            &path,
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        let signer = Signer::from_file(&path, Some("2026-11".into())).unwrap();
        assert_eq!(signer.key_id, "2026-11");
        let public = "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n";
        let pub_path = dir.path().join("openssl.pub");
        std::fs::write(&pub_path, public).unwrap();
        let entry = public_key(&format!("2026-11={}", pub_path.display())).unwrap();
        assert_eq!(entry, signer.plugin_key());

        std::fs::write(&path, "not a key").unwrap();
        let e = Signer::from_file(&path, None).unwrap_err().to_string();
        assert!(e.contains("openssl.pem") && e.contains("PKCS#8 PEM"), "{e}");
        let e = public_key("AAAA").unwrap_err().to_string();
        assert!(e.contains("neither a key file nor 32 bytes"), "{e}");
        let e = Signer::from_file(&pub_path, Some(String::new()));
        assert!(e.is_err());
    }

    /// A run of `ferry serve` over `store`, signing with `signer`.
    fn serve_run(
        store: &crate::serve::persist::StateDir,
        repo: &Path,
        signer: &std::sync::Arc<Signer>,
    ) -> crate::serve::state::State {
        let filter = crate::serve::resources::FilterOptions {
            filter_name: "ferry".into(),
            wasm_path: "/ferry.wasm".into(),
            runtime: crate::envoy_config::Runtime::Wasm,
        };
        let reader = crate::envoy_config::TEMPLATE_READER_CLUSTER.into();
        let state = crate::serve::state::State::new(filter, reader, Some(store.clone()))
            .with_signer(Some(signer.clone()));
        crate::serve::startup::first_snapshot(&state, store, repo).unwrap();
        state
    }

    #[test]
    fn every_snapshot_made_current_is_signed_at_a_higher_sequence_across_restarts() {
        use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};
        let (repo, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        let pem = repo.path().join("key.pem");
        std::fs::write(&pem, generate().unwrap().1).unwrap();
        let signer = std::sync::Arc::new(Signer::from_file(&pem, Some("k1".into())).unwrap());
        let keys = Keys::from_json(&serde_json::json!([signer.plugin_key()])).unwrap();
        let store = crate::serve::persist::StateDir::open(&repo.path().join(".ferry")).unwrap();
        let opened = |s: &crate::serve::state::State| {
            let c = s.current().unwrap();
            let (ctype, body) = served(c.signed.as_ref(), &c.encoded);
            assert_eq!(ctype, CONTENT_TYPE);
            let o = keys.open(body).unwrap();
            assert_eq!(
                o.snapshot,
                c.encoded.to_vec(),
                "the served snapshot, signed"
            );
            assert_eq!(o.sequence, c.sequence);
            o.sequence
        };
        let s = serve_run(&store, repo.path(), &signer);
        let first = opened(&s);
        assert_eq!(
            store.load().unwrap().unwrap().sequence,
            first,
            "saved first"
        );
        let original = s.current().unwrap().snapshot.clone();
        let mut other = original.clone();
        assert!(other.routes.pop().is_some());
        s.offer(other.clone(), "push").unwrap();
        let second = opened(&s);
        assert!(second > first, "{second} > {first}");
        // The same snapshot again changes nothing, and takes no number.
        s.offer(other, "push").unwrap();
        assert_eq!(opened(&s), second);
        drop(s);
        // Restarted: the restored snapshot keeps its sequence, and bytes (same signature).
        let before = store.load().unwrap().unwrap();
        let s = serve_run(&store, repo.path(), &signer);
        assert_eq!(opened(&s), second);
        assert_eq!(store.load().unwrap().unwrap(), before);
        // The next one (a rollback to the first content) is above it.
        let c = s.current().unwrap().snapshot.clone();
        assert!(s.offer(original, "push").unwrap().changed);
        assert!(opened(&s) > second);
        // Without a signing key: the bare snapshot.
        let unsigned = crate::serve::state::State::new(
            crate::serve::resources::FilterOptions {
                filter_name: "ferry".into(),
                wasm_path: "/ferry.wasm".into(),
                runtime: crate::envoy_config::Runtime::Wasm,
            },
            crate::envoy_config::TEMPLATE_READER_CLUSTER.into(),
            None,
        );
        unsigned.offer(c, "push").unwrap();
        let current = unsigned.current().unwrap();
        assert_eq!(
            served(current.signed.as_ref(), &current.encoded),
            (UNSIGNED_CONTENT_TYPE, &current.encoded)
        );
    }

    #[test]
    fn sequences_rise_with_the_clock_and_never_repeat() {
        assert_eq!(next_sequence(0, 1_700_000_000_000), Some(1_700_000_000_000));
        assert_eq!(
            next_sequence(1_700_000_000_000, 1_700_000_000_000),
            Some(1_700_000_000_001)
        );
        // The clock went back: still above the last one.
        assert_eq!(next_sequence(1_800_000_000_000, 5), Some(1_800_000_000_001));
        // Never past the bound, whatever the last one or the clock says.
        let max = ferry_protos::signed::MAX_SEQUENCE;
        assert_eq!(next_sequence(max - 1, 5), Some(max));
        assert_eq!(next_sequence(max, 5), None);
        assert_eq!(next_sequence(0, 1 << 60), None);
        assert_eq!(next_sequence(u64::MAX, 5), None);
    }
}
