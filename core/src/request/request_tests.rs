//! A request's way through the executor: enriched and resumed, with a body that ends in
//! trailers, in header mode, with ids over the limit; what is counted.

use std::time::Duration;

use super::testing::*;
use super::Action;
use crate::config::fixture::{config, route_with, FP};
use crate::host::Host;
use ferry_protos::v1::{self as pb, value::Kind};
use ferry_test_support::snapshot::header_format;
use ferry_test_support::vector::{vector, NOW_US as NOW};

#[test]
fn enriches_through_one_dispatch_and_resumes() {
    let mut f = filter(config(), "POST", "/v1/models/fraud:predict", BODY);
    assert_eq!(f.on_request_headers(false), Action::Pause);
    assert_eq!(f.host().request_header("content-length"), None);
    assert_eq!(
        f.host().request_header("x-ferry-status"),
        None,
        "client's x-ferry-* removed"
    );
    assert_eq!(f.on_request_body(10, false), Action::Pause);
    assert_eq!(f.on_request_body(BODY.len(), true), Action::Pause);
    let calls = f.host().dispatched.borrow().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "ferry_reader");
    assert!(calls[0].1.contains(&(":path".into(), "/v1/vectors".into())));
    assert_eq!(calls[0].3, Duration::from_millis(100));
    let v = vector(
        FP,
        vec![
            (
                NOW,
                vec![Some(Kind::Int64Val(30)), Some(Kind::FloatVal(1.5))],
            ),
            (NOW, vec![Some(Kind::Int64Val(2))]),
        ],
    );
    reader_ok(&f, vec![v]);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow());
    let body = f.host().body.borrow().clone();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["instances"][0]["profile__age"], 30);
    assert_eq!(
        f.host().request_header("content-length"),
        Some(body.len().to_string())
    );
    assert_eq!(f.host().request_header("x-ferry-status"), Some("ok".into()));
    assert_eq!(
        f.host().request_header("x-ferry-fingerprint"),
        Some("123456789abcdef0".into())
    );
    f.on_response_headers();
    let told = f.host().response_headers.borrow().clone();
    assert!(
        told.contains(&("x-ferry-status".into(), "ok".into())),
        "{told:?}"
    );
    assert!(told.contains(&("x-ferry-fingerprint".into(), "123456789abcdef0".into())));
}

#[test]
fn a_body_that_ends_with_trailers_is_enriched() {
    let mut f = filter(config(), "POST", "/v1/models/fraud:predict", BODY);
    assert_eq!(f.on_request_headers(false), Action::Pause);
    assert_eq!(f.on_request_body(BODY.len(), false), Action::Pause);
    assert_eq!(f.on_request_trailers(), Action::Pause, "trailers wait");
    assert_eq!(f.host().dispatched.borrow().len(), 1);
    reader_ok(&f, vec![good_vector(30)]);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow());
    let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
    assert_eq!(body["instances"][0]["profile__age"], 30);

    // Ferry's names are removed from trailers too; other trailers go on.
    let mut f = filter(config(), "POST", "/other", BODY);
    *f.host().trailers.borrow_mut() = vec![
        ("x-ferry-status".into(), "ok".into()),
        ("grpc-status".into(), "0".into()),
    ];
    f.on_request_headers(false);
    assert_eq!(f.on_request_trailers(), Action::Continue);
    assert_eq!(f.host().request_trailer_names(), ["grpc-status"]);

    // A bad body ending in trailers is answered, not forwarded.
    let mut f = filter(config(), "POST", "/v1/models/fraud:predict", "{oops");
    f.on_request_headers(false);
    f.on_request_body(5, false);
    assert_eq!(f.on_request_trailers(), Action::Pause);
    assert_eq!(sent(&f).1["error"], "malformed_json");
    // Trailers right after the headers: no body.
    let mut f = filter(config(), "POST", "/v1/models/fraud:predict", "");
    f.on_request_headers(false);
    assert_eq!(f.on_request_trailers(), Action::Pause);
    assert_eq!(sent(&f).1["error"], "no_body");
}

#[test]
fn header_mode_enriches_a_get_without_touching_its_body() {
    let c = route_with(header_format);
    let mut f = filter(c, "GET", "/v1/models/fraud", "");
    f.host().set_request_header("x-user-id", Some("u1"));
    f.host()
        .set_request_header("x-ferry-features", Some("{\"forged\":1}"));
    assert_eq!(f.on_request_headers(true), Action::Pause);
    assert_eq!(
        f.host().request_header("x-ferry-features"),
        None,
        "forged header removed"
    );
    reader_ok(&f, vec![good_vector(30)]);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow());
    assert_eq!(
        f.host().request_header("x-ferry-features").as_deref(),
        Some(r#"{"profile__age":30,"profile__score":1.5,"txn__count":2}"#)
    );
    assert_eq!(
        f.host().request_header("content-length"),
        Some("0".into()),
        "untouched"
    );
    assert_eq!(f.host().request_header("x-ferry-status"), Some("ok".into()));

    let c = route_with(header_format);
    let mut f = filter(c, "GET", "/v1/models/fraud", "");
    assert_eq!(f.on_request_headers(true), Action::Pause);
    assert_eq!(sent(&f).0, 400, "no id header");
}

#[test]
fn header_mode_holds_a_body_and_trailers_until_the_features_are_written() {
    let c = route_with(header_format);
    let mut f = filter(c, "POST", "/v1/models/fraud", "\0\0\0\0\x05hello");
    f.host().set_request_header("x-user-id", Some("u1"));
    assert_eq!(f.on_request_headers(false), Action::Pause);
    assert_eq!(f.on_request_body(5, false), Action::Pause);
    assert_eq!(f.on_request_body(10, true), Action::Pause);
    assert_eq!(f.on_request_trailers(), Action::Pause);
    assert!(f.host().request_header("x-ferry-features").is_none());
    reader_ok(&f, vec![good_vector(30)]);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow());
    assert!(f.host().request_header("x-ferry-features").is_some());
    // Once resumed, later callbacks go on.
    assert_eq!(f.on_request_trailers(), Action::Continue);
}

#[test]
fn an_over_long_id_is_the_clients_fault_on_every_route() {
    let part = "u".repeat(ferry_protos::limits::MAX_KEY_PART_BYTES);
    for policy in [
        pb::ReaderErrorPolicy::ReaderErrorReject,
        pb::ReaderErrorPolicy::ReaderErrorForward,
    ] {
        let body = format!(r#"{{"instances":[{{"user_id":"{part}x"}}]}}"#);
        let c = route_with(|r| r.on_reader_error = policy as i32);
        let mut f = filter(c, "POST", "/v1/models/fraud", &body);
        f.on_request_headers(false);
        assert_eq!(f.on_request_body(body.len(), true), Action::Pause);
        assert_eq!(
            (sent(&f).0, sent(&f).1["error"].as_str()),
            (400, Some("invalid_entity_id"))
        );
        assert!(f.host().dispatched.borrow().is_empty(), "no reader call");
        // At the limit: looked up.
        let body = format!(r#"{{"instances":[{{"user_id":"{part}"}}]}}"#);
        let c = route_with(|r| r.on_reader_error = policy as i32);
        let mut f = filter(c, "POST", "/v1/models/fraud", &body);
        f.on_request_headers(false);
        assert_eq!(f.on_request_body(body.len(), true), Action::Pause);
        assert_eq!(f.host().dispatched.borrow().len(), 1);
    }
}

#[test]
fn counts_outcomes() {
    let mut f = filter(config(), "POST", "/v1/models/fraud", "{oops");
    f.on_request_headers(false);
    f.on_request_body(5, true);
    // Every metric has id 1 in `filter()`: one rejection counted once.
    assert_eq!(f.host().metrics.borrow().get(&1), Some(&1));
}
