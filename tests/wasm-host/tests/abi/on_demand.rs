//! ABI tests of on-demand features: the built .wasm computes them per instance after the reader
//! call (values, statuses, `request.time` from the host's clock, an `INVALID` counted), and a
//! route over request fields only is enriched without a dispatched call.

use super::support::*;
use ferry_test_support::on_demand::with_risk;
use ferry_test_support::vector::scoring;
use ferry_wasm_host::Action;
use serde_json::{json, Value as Json};

#[test]
fn derived_features_are_computed_in_the_wasm_filter() {
    let host = host_with(&with_risk());
    let now_us = 1_800_000_000_000_000;
    host.set_time_us(now_us);
    let s = host.stream();
    let body = r#"{"instances":[{"user_id":"u1","amount":500,"country":"FR","risk__ratio":1},
                                {"user_id":"u2","amount":1500.5}]}"#;
    assert_eq!(
        post(&s, PATH, body.as_bytes()),
        (Action::Pause, Action::Pause)
    );
    let call = host.dispatched_calls().pop().expect("a reader call");
    let vectors = vec![
        scoring(now_us, Some(30), Some(2.0), Some(1)),
        scoring(now_us, Some(31), Some(0.0), Some(2)),
    ];
    s.call_response(call.token, &[(":status", "200")], &reader_response(vectors));
    assert!(s.resumed());
    let out: Json = serde_json::from_slice(&s.request_body_bytes()).unwrap();
    let i = &out["instances"];
    assert_eq!(i[0]["risk__ratio"], json!(250.0), "the client's 1 replaced");
    assert_eq!(i[0]["risk__age_at"], json!(now_us / 1_000_000 - 30));
    assert_eq!(i[0]["risk__abroad"], json!(false));
    assert_eq!(i[1]["risk__big"], json!(true));
    let st = &out["ferry"]["statuses"];
    assert_eq!(st[1]["risk__ratio"], "INVALID", "division by zero");
    assert_eq!(st[1]["risk__huge"], "INVALID", "int overflow");
    assert_eq!(st[1]["risk__abroad"], "NOT_FOUND", "no country");
    assert_eq!(out["ferry"]["derived_version"], "00000000000000aa");
    assert_eq!(
        s.request_header("x-ferry-derived-version").as_deref(),
        Some("00000000000000aa")
    );
    assert_eq!(host.metric("ferry_derived_invalid").unwrap().value, 2);
    assert!(host.abi_errors().is_empty(), "{:?}", host.abi_errors());
}

#[test]
fn request_fields_only_need_no_reader_call() {
    let host = host_with(&with_risk());
    let s = host.stream();
    let body = br#"{"instances":[{"amount":2.5},{"amount":"x"}]}"#;
    assert_eq!(post(&s, "/req", body), (Action::Pause, Action::Pause));
    assert!(host.dispatched_calls().is_empty());
    let reply = s.local_reply().expect("a 400");
    assert_eq!(reply.status, 400);
    let s = host.stream();
    let body = br#"{"instances":[{"amount":2.5}]}"#;
    assert_eq!(post(&s, "/req", body), (Action::Pause, Action::Continue));
    assert!(host.dispatched_calls().is_empty(), "no reader call");
    let out: Json = serde_json::from_slice(&s.request_body_bytes()).unwrap();
    assert_eq!(out["instances"][0]["req__double_amount"], json!(5.0));
}
