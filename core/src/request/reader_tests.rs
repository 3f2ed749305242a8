//! The reader call: one request for the whole batch, and the reader's answers judged.

use super::*;
use crate::config::fixture::{config, FP};

#[test]
fn one_request_for_the_whole_batch() {
    let c = config();
    let keys = ["u1".to_string(), "u2".to_string()];
    let call = reader_request(&c, &c.routes[0], &keys, &[0, 1]);
    assert_eq!((call.order, call.lookup_sizes), (vec![0, 1], vec![2]));
    let req = VectorRequest::decode(call.body.as_slice()).unwrap();
    assert_eq!(req.project, "banking");
    assert_eq!(req.lookups.len(), 1);
    assert_eq!(req.lookups[0].fingerprint, FP);
    assert_eq!(req.lookups[0].entity_keys, ["u1", "u2"]);
}

#[test]
fn reader_answers_are_judged() {
    assert!(check_reader_status(Some(200), b"", 100).is_ok());
    let judge = |status, body: &[u8]| {
        let e = check_reader_status(status, body, 100).unwrap_err();
        (e.status(), e.code(), e.message())
    };
    assert_eq!(judge(None, b"").1, "reader_unavailable");
    let redis_down = br#"{"error":"redis_unavailable","message":"connection refused"}"#;
    assert_eq!(
        judge(Some(503), redis_down),
        (
            503,
            "redis_unavailable",
            "feature store (Redis) unavailable: connection refused".into()
        )
    );
    let redis_slow = br#"{"error":"redis_timeout","message":"no answer in 50 ms"}"#;
    assert_eq!(judge(Some(504), redis_slow).1, "redis_timeout");
    // Envoy's own replies when the reader cluster is down or slow carry no reader JSON.
    let envoy_503 = b"upstream connect error or disconnect/reset before headers";
    assert_eq!(judge(Some(503), envoy_503).0, 503);
    assert_eq!(judge(Some(503), envoy_503).1, "reader_unavailable");
    assert_eq!(
        judge(Some(504), b"upstream request timeout").1,
        "reader_timeout"
    );
    let refused = br#"{"error":"batch_too_large","message":"1001 keys"}"#;
    assert_eq!(
        judge(Some(413), refused),
        (
            502,
            "reader_rejected",
            "feature reader refused the call (413): 1001 keys".into()
        )
    );
}
