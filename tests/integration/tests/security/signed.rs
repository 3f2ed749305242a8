//! The matrix's cases on the pull path: what a man in the middle of the filter's snapshot pull
//! can answer, each refused by the filter while the snapshot it holds keeps enriching.

use ferry_protos::v1::SignedSnapshot;
use ferry_test_support::signed::{key, sign};
use prost::Message;

use super::pull::MAX_BYTES;
use super::{Ctx, Fut};

pub fn replayed_lower_sequence(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let older = SignedSnapshot::decode(&*c.pull.older.body).map_err(|e| e.to_string())?;
        let held = c.pull.held_envelope().sequence;
        let refusal = format!(
            "its sequence {} is lower than the held snapshot's {held}",
            older.sequence
        );
        c.pull
            .refused(&c.stack, c.pull.older.body.clone(), &refusal)
            .await
    })
}

pub fn tampered_signature(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let mut e = c.pull.held_envelope();
        e.sequence += 1;
        e.signature[0] ^= 1;
        let refusal = format!("its signature does not verify under key '{}'", e.key_id);
        c.pull.refused(&c.stack, e.encode_to_vec(), &refusal).await
    })
}

pub fn unknown_key(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let held = c.pull.held_envelope();
        let e = sign(&key(7), "k-unknown", held.sequence + 2, &held.snapshot);
        let refusal = "signed with key 'k-unknown', which is not configured";
        c.pull.refused(&c.stack, e.encode_to_vec(), refusal).await
    })
}

pub fn oversize(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let body = vec![0u8; MAX_BYTES + 1];
        let refusal = format!(
            "the answer is {} bytes, over snapshot_max_bytes {MAX_BYTES}",
            MAX_BYTES + 1
        );
        c.pull.refused(&c.stack, body, &refusal).await
    })
}
