//! The signed snapshot's conventions, shared by the signer (`ferry serve --signing-key`) and
//! the verifier (the wasm filter): what exactly is signed, and the content types that tell a
//! signed answer from an unsigned one.

/// `GET /v1/snapshot`'s content type for a [`crate::v1::SignedSnapshot`].
pub const CONTENT_TYPE: &str = "application/x-ferry-signed-snapshot";
/// `GET /v1/snapshot`'s content type for a bare `ferry.v1.Snapshot` (no signing key).
pub const UNSIGNED_CONTENT_TYPE: &str = "application/x-protobuf";
/// Longest key id: ids are names an operator writes (`k1`, `2026-11`), not payloads.
pub const MAX_KEY_ID_BYTES: usize = 128;
/// The highest snapshot sequence any part of Ferry issues or accepts (2^50). Sequences are
/// `max(last + 1, now in ms)`, so this is some 35,000 years of milliseconds; it stays well
/// below 2^53, where a double (Lua's numbers, JSON readers) stops telling `n` from `n + 1`,
/// and a sequence over it (written into Redis, a state file or an envelope by someone else) is
/// refused rather than adopted: one adopted at 2^60 would lock every later snapshot out (#35).
pub const MAX_SEQUENCE: u64 = 1 << 50;

/// `sequence` if it is within [`MAX_SEQUENCE`].
pub fn bounded_sequence(sequence: u64) -> Option<u64> {
    (sequence <= MAX_SEQUENCE).then_some(sequence)
}

/// The first bytes of every signed payload: a signature over a snapshot can never verify as
/// one over any other message a key of the same operator signs (a token, a certificate).
const DOMAIN: &[u8] = b"ferry.v1.SignedSnapshot\0";

/// The bytes an Ed25519 signature of a snapshot covers: the domain, the sequence (8 bytes,
/// big-endian), the key id (its length as 4 bytes big-endian, then its bytes), then the
/// snapshot's bytes to the end. Every part but the last has a fixed or stated length, so no two
/// (sequence, key id, snapshot) give the same payload.
pub fn payload(sequence: u64, key_id: &str, snapshot: &[u8]) -> Vec<u8> {
    let id = key_id.as_bytes();
    let mut out = Vec::with_capacity(DOMAIN.len() + 12 + id.len() + snapshot.len());
    out.extend_from_slice(DOMAIN);
    out.extend_from_slice(&sequence.to_be_bytes());
    // A key id is at most MAX_KEY_ID_BYTES; the saturation only keeps this total.
    out.extend_from_slice(&u32::try_from(id.len()).unwrap_or(u32::MAX).to_be_bytes());
    out.extend_from_slice(id);
    out.extend_from_slice(snapshot);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_is_domain_separated_and_unambiguous() {
        let p = payload(7, "k1", b"snap");
        assert!(p.starts_with(b"ferry.v1.SignedSnapshot\0"));
        assert_eq!(&p[24..32], &7u64.to_be_bytes());
        assert_eq!(&p[32..36], &2u32.to_be_bytes());
        assert!(p.ends_with(b"k1snap"));
        // Moving bytes between the key id and the snapshot changes the payload.
        assert_ne!(payload(7, "k1s", b"nap"), p);
        assert_ne!(payload(8, "k1", b"snap"), p);
    }

    #[test]
    fn sequences_are_bounded_well_below_two_to_the_53() {
        const { assert!(MAX_SEQUENCE < (1 << 53) / 4) };
        assert_eq!(bounded_sequence(MAX_SEQUENCE), Some(MAX_SEQUENCE));
        assert_eq!(bounded_sequence(1 << 60), None);
        // A double still tells every bounded sequence from the next one.
        let top = MAX_SEQUENCE as f64;
        assert_ne!(top + 1.0, top);
    }
}
