//! A shared record's signature (#35): whoever can write Redis can write `ferry:cp:*`; what the
//! replicas serve is only what a replica holding one of the deployment's keys signed, at the
//! sequence it signed.

use bytes::Bytes;
use ferry_core::signature::{Keys, SignatureError};

use super::signing::Signer;

/// What a replica signs its shared records with and verifies the others' under: its own
/// signing key, and the other keys of the deployment (`--shared-state-key`, for a rotation
/// where replicas hold different keys for a while).
pub struct Seal {
    signer: std::sync::Arc<Signer>,
    keys: Keys,
}

impl std::fmt::Debug for Seal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Seal({:?}; verifies {})", self.signer, self.keys.ids())
    }
}

impl Seal {
    /// `signer`'s key, and `others` (entries of [`super::signing::public_key`]).
    pub fn new(
        signer: std::sync::Arc<Signer>,
        others: Vec<serde_json::Value>,
    ) -> Result<Seal, String> {
        let mut entries = vec![signer.plugin_key()];
        entries.extend(others);
        let keys = Keys::from_json(&serde_json::Value::Array(entries))?;
        Ok(Seal { signer, keys })
    }

    /// The ids of the keys a record may be signed with.
    pub fn ids(&self) -> String {
        self.keys.ids()
    }

    /// The envelope stored for `encoded` at `sequence`.
    pub fn seal(&self, sequence: u64, encoded: &[u8]) -> Bytes {
        self.signer
            .envelope(sequence, &Bytes::copy_from_slice(encoded))
    }

    /// The snapshot bytes of `envelope` if it verifies under the deployment's keys at
    /// `sequence` (the record's field, the one the compare-and-set orders by): else why not, and
    /// the `reason` label it is counted under.
    pub fn open(&self, envelope: &[u8], sequence: u64) -> Result<Vec<u8>, (&'static str, String)> {
        let opened = self.keys.open(envelope).map_err(|e| {
            let reason = match e {
                SignatureError::Undecodable(_) => "undecodable",
                SignatureError::Unsigned => "unsigned",
                SignatureError::UnknownKey { .. } => "unknown_key",
                SignatureError::BadSignature(_) => "bad_signature",
                SignatureError::SequenceOutOfRange(_) => "sequence_out_of_range",
            };
            (reason, format!("the shared record is refused: {e}"))
        })?;
        if opened.sequence != sequence {
            return Err((
                "sequence_mismatch",
                format!(
                    "the shared record is refused: stored at sequence {sequence}, signed at {}",
                    opened.sequence
                ),
            ));
        }
        Ok(opened.snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer(dir: &std::path::Path, name: &str) -> std::sync::Arc<Signer> {
        let (_, pem) = super::super::signing::generate().unwrap();
        let path = dir.join(name);
        std::fs::write(&path, pem).unwrap();
        std::sync::Arc::new(Signer::from_file(&path, None).unwrap())
    }

    #[test]
    fn a_record_verifies_under_the_deployments_keys_at_its_own_sequence_only() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, stranger) = (
            signer(dir.path(), "a"),
            signer(dir.path(), "b"),
            signer(dir.path(), "s"),
        );
        let seal_a = Seal::new(a.clone(), vec![b.plugin_key()]).unwrap();
        let seal_b = Seal::new(b, vec![]).unwrap();
        let by_a = seal_a.seal(7, b"snap");
        assert_eq!(seal_a.open(&by_a, 7).unwrap(), b"snap");
        // Another replica's key the deployment names; not one it does not.
        assert_eq!(seal_a.open(&seal_b.seal(9, b"x"), 9).unwrap(), b"x");
        assert_eq!(seal_b.open(&by_a, 7).unwrap_err().0, "unknown_key");
        let forged = Seal::new(stranger, vec![]).unwrap().seal(8, b"evil");
        assert_eq!(seal_a.open(&forged, 8).unwrap_err().0, "unknown_key");
        // A signed record moved to another sequence, or tampered with.
        assert_eq!(seal_a.open(&by_a, 8).unwrap_err().0, "sequence_mismatch");
        let mut tampered = by_a.to_vec();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        let e = seal_a.open(&tampered, 7).unwrap_err().0;
        assert!(matches!(e, "bad_signature" | "undecodable"), "{e}");
        assert_eq!(seal_a.open(b"snap", 7).unwrap_err().0, "undecodable");
        // Two keys under one id are a start error.
        assert!(Seal::new(a.clone(), vec![a.plugin_key()]).is_err());
    }
}
