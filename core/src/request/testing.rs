//! What the request tests share: a filter on a fake host holding one request, the reader's
//! scripted answers, and what Ferry sent back.

use std::collections::HashMap;
use std::rc::Rc;

use super::HttpFilter;
use crate::config::Config;
use crate::host::testing::FakeHost;
use crate::metrics::Metrics;
use ferry_protos::inference::{model_infer_request::InferInputTensor, *};
use ferry_test_support::reader;
use ferry_test_support::vector::{scoring, NOW_US as NOW};

pub const BODY: &str = r#"{"instances":[{"user_id":"u1"}]}"#;

/// A filter on a fake host holding this request (and a forged `x-ferry-status`).
pub fn filter(c: Config, method: &str, path: &str, body: &str) -> HttpFilter<FakeHost> {
    let host = FakeHost {
        now_us: NOW,
        ..Default::default()
    };
    *host.headers.borrow_mut() = vec![
        (":method".into(), method.into()),
        (":path".into(), path.into()),
        ("content-length".into(), body.len().to_string()),
        ("x-ferry-status".into(), "forged".into()),
    ];
    *host.body.borrow_mut() = body.as_bytes().to_vec();
    HttpFilter::new(
        host,
        Some(Rc::new(c)),
        Rc::new(Metrics::define(|_, _| Some(1))),
    )
}

/// A POST of `body` to `/v1/models/fraud` on `c`, its headers and whole body given: on a body
/// route, its reader call is out.
pub fn posted(c: Config, body: &str) -> HttpFilter<FakeHost> {
    let mut f = filter(c, "POST", "/v1/models/fraud", body);
    f.on_request_headers(false);
    f.on_request_body(body.len(), true);
    f
}

/// A new stream, a POST to `/v1/models/fraud` at `now_us`, on `shared` as the shared data
/// (the near cache) Envoy's workers see.
pub fn stream(
    c: &Rc<Config>,
    metrics: &Rc<Metrics>,
    now_us: i64,
    shared: HashMap<String, (Vec<u8>, u32)>,
) -> HttpFilter<FakeHost> {
    let host = FakeHost {
        now_us,
        shared: std::cell::RefCell::new(shared),
        ..Default::default()
    };
    *host.headers.borrow_mut() = vec![
        (":method".into(), "POST".into()),
        (":path".into(), "/v1/models/fraud".into()),
    ];
    HttpFilter::new(host, Some(c.clone()), metrics.clone())
}

/// The reader's answer to the call out: `status` and `body`.
pub fn reader_answers(f: &HttpFilter<FakeHost>, status: u16, body: &[u8]) {
    *f.host().call_status.borrow_mut() = Some(status);
    *f.host().call_body.borrow_mut() = body.to_vec();
}

pub fn reader_ok(f: &HttpFilter<FakeHost>, vectors: Vec<Vec<u8>>) {
    reader_answers(f, 200, &reader::response(vectors));
}

/// The fixture's scoring vector, fresh, with this age.
pub fn good_vector(age: i64) -> Vec<u8> {
    scoring(NOW, Some(age), Some(1.5), Some(2))
}

/// Ferry's local reply: its status and JSON body.
pub fn sent(f: &HttpFilter<FakeHost>) -> (u16, serde_json::Value) {
    let s = f.host().sent.borrow().clone().expect("a local reply");
    (s.0, serde_json::from_slice(&s.2).unwrap())
}

/// A `ModelInfer` call for one user, its id a BYTES tensor.
pub fn model_infer(user: &str) -> ModelInferRequest {
    ModelInferRequest {
        inputs: vec![InferInputTensor {
            name: "user_id".into(),
            datatype: "BYTES".into(),
            shape: vec![1],
            contents: Some(InferTensorContents {
                bytes_contents: vec![user.as_bytes().to_vec()],
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}
