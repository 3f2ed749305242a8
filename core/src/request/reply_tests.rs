//! Ferry's own answers: errors as JSON bodies or gRPC statuses, and a `feast_rest` route
//! answering with the features.

use std::collections::HashMap;

use super::testing::*;
use super::{Action, HttpFilter};
use crate::config::fixture::{config, route_with};
use crate::host::testing::FakeHost;
use crate::host::Host;
use ferry_protos::v1::{self as pb};
use ferry_test_support::vector as vectors;
use ferry_test_support::vector::NOW_US as NOW;
use prost::Message;

#[test]
fn bad_requests_are_answered_with_json_errors() {
    let mut f = filter(config(), "POST", "/v1/models/fraud", "{oops");
    f.on_request_headers(false);
    assert_eq!(f.on_request_body(5, true), Action::Pause);
    let (status, body) = sent(&f);
    assert_eq!(
        (status, body["error"].as_str()),
        (400, Some("malformed_json"))
    );
    assert_eq!(body["route"], "fraud");
    assert!(f.host().dispatched.borrow().is_empty());

    let mut f = filter(config(), "POST", "/v1/models/fraud", "");
    assert_eq!(f.on_request_headers(true), Action::Pause);
    assert_eq!(sent(&f).0, 400);
}

#[test]
fn a_grpc_client_gets_its_errors_as_grpc_statuses() {
    use crate::format::kserve_v2_grpc::frame;
    let grpc_filter = |body: &[u8]| {
        let c = route_with(|r| r.format = pb::Format::KserveV2Grpc as i32);
        let mut f = filter(c, "POST", "/v1/models/fraud", "");
        *f.host().body.borrow_mut() = body.to_vec();
        let h = f.host();
        h.set_request_header("content-type", Some("application/grpc"));
        h.set_request_header("content-length", None);
        f.on_request_headers(false);
        f.on_request_body(body.len(), true);
        f
    };
    let grpc_reply = |f: &HttpFilter<FakeHost>| {
        let (status, headers, body) = f.host().sent.borrow().clone().expect("a reply");
        assert_eq!((status, body.len()), (200, 0));
        let h: HashMap<String, String> = headers.into_iter().collect();
        assert_eq!(h["content-type"], "application/grpc");
        (
            h["grpc-status"].clone(),
            h["grpc-message"].clone(),
            h["x-ferry-error"].clone(),
        )
    };
    let f = grpc_filter(&frame(b"abc"));
    let (status, message, code) = grpc_reply(&f);
    assert_eq!(
        (status.as_str(), code.as_str()),
        ("3", "malformed_protobuf")
    );
    assert!(message.starts_with("malformed_protobuf: request body is not a valid protobuf"));
    // A well-formed call whose reader is away: UNAVAILABLE.
    let request = model_infer("u1");
    let mut f = grpc_filter(&frame(&request.encode_to_vec()));
    assert!(f.host().sent.borrow().is_none());
    f.on_call_response(7, 0, 0);
    let (status, message, _) = grpc_reply(&f);
    assert_eq!(status, "14", "{message}");
    assert!(message.starts_with("reader_unavailable: "), "{message}");
}

#[test]
fn a_feast_rest_route_answers_itself_and_forwards_nothing() {
    let c = route_with(|r| {
        r.format = pb::Format::FeastRest as i32;
        r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
    });
    let body = r#"{"features":["txn:count"],"entities":{"user_id":["u1","u2"]}}"#;
    let mut f = filter(c, "POST", "/v1/models/fraud", body);
    assert_eq!(f.on_request_headers(false), Action::Pause);
    assert_eq!(f.on_request_body(body.len(), true), Action::Pause);
    reader_ok(
        &f,
        vec![
            vectors::scoring(NOW, Some(1), Some(0.5), Some(9)),
            Vec::new(),
        ],
    );
    f.on_call_response(7, 3, 100);
    assert!(!*f.host().resumed.borrow(), "never forwarded");
    let (status, v) = sent(&f);
    assert_eq!(status, 200);
    assert_eq!(
        v["metadata"]["feature_names"],
        serde_json::json!(["user_id", "count"])
    );
    assert_eq!(v["results"][1]["values"], serde_json::json!([9, null]));
    assert_eq!(
        v["results"][1]["statuses"],
        serde_json::json!(["PRESENT", "NOT_FOUND"])
    );
}
