//! ABI tests of the gRPC ModelInfer format in the built filter: a raw-mode request is rewritten
//! with its length prefix, and an error reaches Envoy as a gRPC local reply (the gRPC status in
//! `proxy_send_local_response`'s own argument, not a JSON body).

use ferry_protos::inference::model_infer_request::InferInputTensor;
use ferry_protos::inference::ModelInferRequest;
use ferry_protos::v1 as pb;
use ferry_wasm_host::{Action, Stream};
use prost::Message;

use super::support::*;

const PATH: &str = "/inference.GRPCInferenceService/ModelInfer";

fn grpc_route(r: &mut pb::Route) {
    r.format = pb::Format::KserveV2Grpc as i32;
    r.r#match = Some(pb::RouteMatch {
        path_prefix: PATH.into(),
        ..Default::default()
    });
}

fn framed(message: &[u8]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend((message.len() as u32).to_be_bytes());
    body.extend(message);
    body
}

/// A gRPC POST (no content-length, as gRPC clients send it): both callbacks' actions.
fn call(s: &Stream, body: &[u8]) -> (Action, Action) {
    let headers = [
        (":method", "POST"),
        (":path", PATH),
        (":authority", "models.example"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ];
    let h = s.request_headers(&headers, false);
    (h, s.request_body(body, true))
}

#[test]
fn a_raw_model_infer_request_gets_raw_feature_tensors_and_a_new_prefix() {
    let host = host_with(&snapshot_with(grpc_route));
    let request = ModelInferRequest {
        inputs: vec![InferInputTensor {
            name: "user_id".into(),
            datatype: "BYTES".into(),
            shape: vec![1],
            ..Default::default()
        }],
        raw_input_contents: vec![[2u32.to_le_bytes().as_slice(), b"u1"].concat()],
        ..Default::default()
    };
    let s = host.stream();
    assert_eq!(
        call(&s, &framed(&request.encode_to_vec())),
        (Action::Pause, Action::Pause)
    );
    assert_eq!(asked_keys(&host, &s), ["u1"]);
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    assert!(s.resumed(), "log:\n{}", host.log_text());
    let body = s.request_body_bytes();
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    assert_eq!(
        (body[0], len),
        (0, body.len() - 5),
        "the prefix frames the new body"
    );
    let out = ModelInferRequest::decode(&body[5..]).unwrap();
    let names: Vec<&str> = out.inputs.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["user_id", "profile__age", "profile__score", "txn__count"]
    );
    assert_eq!(out.raw_input_contents.len(), 4, "raw in, raw out");
    assert_eq!(out.raw_input_contents[1], 30i64.to_le_bytes());
    assert!(out.parameters.contains_key("ferry_statuses"));
    assert_clean(&host);
}

#[test]
fn errors_are_grpc_local_replies() {
    let host = host_with(&snapshot_with(grpc_route));
    let s = host.stream();
    call(&s, &framed(b"\xff\xff\xff"));
    let r = s.local_reply().expect("a local reply");
    assert_eq!((r.status, r.grpc_status), (200, 3), "INVALID_ARGUMENT");
    let message = String::from_utf8(r.body.clone()).unwrap();
    assert!(message.starts_with("malformed_protobuf: "), "{message}");
    assert_eq!(r.header("x-ferry-error"), Some("malformed_protobuf"));
    assert!(host.dispatched_calls().is_empty());
    assert_clean(&host);
}
