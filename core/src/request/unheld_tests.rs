//! The state machine when Envoy does not hold the request headers while the body is read (no
//! `allow_on_headers_stop_iteration`, as under Istio and Envoy Gateway): body routes let the
//! headers go on and hold the body; header mode still holds everything from the headers.

use super::testing::{self, good_vector, model_infer, reader_ok, BODY};
use super::{Action, HttpFilter};
use crate::config::fixture::{config, route_with};
use crate::config::Config;
use crate::host::testing::FakeHost;
use crate::host::Host;
use ferry_test_support::snapshot::header_format;

fn unheld(mut c: Config, method: &str, path: &str, body: &str) -> HttpFilter<FakeHost> {
    c.headers_held = false;
    testing::filter(c, method, path, body)
}

fn headers(f: &HttpFilter<FakeHost>) -> Vec<(String, String)> {
    f.host().headers.borrow().clone()
}

fn reader_answers(f: &HttpFilter<FakeHost>, age: i64) {
    reader_ok(f, vec![good_vector(age)]);
}

#[test]
fn a_body_route_lets_the_headers_go_and_rewrites_only_the_body() {
    let mut f = unheld(config(), "POST", "/v1/models/fraud:predict", BODY);
    assert_eq!(f.on_request_headers(false), Action::Continue);
    assert_eq!(f.host().request_header("content-length"), None);
    assert_eq!(f.host().request_header("x-ferry-status"), None, "forged");
    let sent_upstream = headers(&f);
    assert_eq!(f.on_request_body(10, false), Action::Pause);
    assert_eq!(f.on_request_body(BODY.len(), true), Action::Pause);
    assert_eq!(f.host().dispatched.borrow().len(), 1);
    reader_answers(&f, 30);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow(), "{:?}", f.host().sent.borrow());
    let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
    assert_eq!(body["instances"][0]["profile__age"], 30);
    assert_eq!(
        headers(&f),
        sent_upstream,
        "no request header written after the headers went on"
    );
    f.on_response_headers();
    let told = f.host().response_headers.borrow().clone();
    assert!(
        told.contains(&("x-ferry-status".into(), "ok".into())),
        "{told:?}"
    );
}

#[test]
fn a_bad_body_is_still_answered_after_the_headers_went_on() {
    let mut f = unheld(config(), "POST", "/v1/models/fraud:predict", "{oops");
    assert_eq!(f.on_request_headers(false), Action::Continue);
    assert_eq!(f.on_request_body(5, true), Action::Pause);
    let sent = f.host().sent.borrow().clone().expect("a local reply");
    assert_eq!(sent.0, 400);
    assert!(f.host().dispatched.borrow().is_empty());
}

#[test]
fn checks_on_the_headers_still_answer_before_anything_goes_on() {
    let mut f = unheld(config(), "POST", "/v1/models/fraud:predict", "");
    assert_eq!(f.on_request_headers(true), Action::Pause);
    assert_eq!(f.host().sent.borrow().as_ref().map(|s| s.0), Some(400));
}

#[test]
fn header_mode_still_holds_the_request_from_the_headers() {
    let mut f = unheld(route_with(header_format), "GET", "/v1/models/fraud", "");
    f.host().set_request_header("x-user-id", Some("u1"));
    assert_eq!(f.on_request_headers(true), Action::Pause);
    reader_answers(&f, 30);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow());
    assert!(f.host().request_header("x-ferry-features").is_some());
    assert_eq!(f.host().request_header("x-ferry-status"), Some("ok".into()));
}

/// A model that answers on the headers (the demo model streams its echo) answers while Ferry
/// still holds the body: that response waits, and gets the summary, or gives way to Ferry's
/// answer.
#[test]
fn an_early_response_waits_for_the_request() {
    let mut f = unheld(config(), "POST", "/v1/models/fraud:predict", BODY);
    assert_eq!(f.on_request_headers(false), Action::Continue);
    assert_eq!(f.on_response_headers(), Action::Pause, "reading the body");
    assert_eq!(f.on_request_body(BODY.len(), true), Action::Pause);
    reader_answers(&f, 30);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow());
    assert!(*f.host().response_resumed.borrow());
    let told = f.host().response_headers.borrow().clone();
    assert!(
        told.contains(&("x-ferry-status".into(), "ok".into())),
        "{told:?}"
    );

    let mut f = unheld(config(), "POST", "/v1/models/fraud:predict", "{oops");
    assert_eq!(f.on_request_headers(false), Action::Continue);
    assert_eq!(f.on_response_headers(), Action::Pause);
    assert_eq!(f.on_request_body(5, true), Action::Pause);
    assert_eq!(f.host().sent.borrow().as_ref().map(|s| s.0), Some(400));
    assert!(
        !*f.host().response_resumed.borrow(),
        "Ferry's answer instead"
    );

    // Once the request went on, a response passes.
    let mut f = unheld(config(), "POST", "/v1/models/fraud:predict", BODY);
    f.on_request_headers(false);
    f.on_request_body(BODY.len(), true);
    reader_answers(&f, 30);
    f.on_call_response(7, 3, 100);
    assert_eq!(f.on_response_headers(), Action::Continue);
    assert!(!*f.host().response_resumed.borrow());
}

#[test]
fn a_binary_tensor_request_is_refused_when_headers_are_not_held() {
    // Its Inference-Header-Content-Length could not follow the rewritten body: never forwarded.
    let c = route_with(|r| r.format = ferry_protos::v1::Format::KserveV2 as i32);
    let mut f = unheld(c, "POST", "/v1/models/fraud:predict", BODY);
    f.host()
        .headers
        .borrow_mut()
        .push(("inference-header-content-length".into(), "10".into()));
    assert_eq!(f.on_request_headers(false), Action::Pause);
    let sent = f.host().sent.borrow().clone().expect("a local reply");
    assert_eq!(sent.0, 400);
    assert!(String::from_utf8_lossy(&sent.2).contains("bad_binary_framing"));
    assert!(f.host().dispatched.borrow().is_empty());
}

#[test]
fn a_grpc_model_infer_call_is_enriched_without_held_headers() {
    use crate::format::kserve_v2_grpc::{frame, unframe};
    use ferry_protos::inference::ModelInferRequest;
    use prost::Message;
    let c = route_with(|r| r.format = ferry_protos::v1::Format::KserveV2Grpc as i32);
    let request = model_infer("u1");
    let body = frame(&request.encode_to_vec());
    let mut f = unheld(c, "POST", "/v1/models/fraud", "");
    *f.host().body.borrow_mut() = body.clone();
    f.host().set_request_header("content-length", None);
    f.host()
        .set_request_header("content-type", Some("application/grpc"));
    assert_eq!(f.on_request_headers(false), Action::Continue);
    let sent_upstream = headers(&f);
    assert_eq!(f.on_request_body(body.len(), true), Action::Pause);
    reader_answers(&f, 30);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow(), "{:?}", f.host().sent.borrow());
    let out = f.host().body.borrow().clone();
    let out = ModelInferRequest::decode(unframe(&out).unwrap()).unwrap();
    let age = &out.inputs[1];
    assert_eq!(
        (
            age.name.as_str(),
            age.contents.clone().unwrap().int64_contents
        ),
        ("profile__age", vec![30])
    );
    assert_eq!(
        headers(&f),
        sent_upstream,
        "no header written after they went on"
    );
}
