//! What the ABI tests (and the bench) share: the fixtures of ferry-test-support under the names
//! these tests use, the vectors of the fixture's service, a configured host, and requests,
//! reader answers and assertions on what the filter did.
#![allow(dead_code)]

use ferry_protos::v1::{self as pb, value::Kind};
use ferry_test_support::vector::scoring;
use ferry_wasm_host::{Action, Host, Stream};
use prost::Message;

pub use ferry_test_support::reader::response as reader_response;
pub use ferry_test_support::snapshot::{route_with as snapshot_with, snapshot, DAY_US, FP, FP_HEX};
pub use ferry_test_support::vector::vector;

/// Host time of the tests (the host's default clock).
pub const NOW_US: i64 = ferry_wasm_host::DEFAULT_TIME_US;
pub const PATH: &str = "/v1/models/fraud:predict";
pub const MAX_BODY: usize = ferry_test_support::snapshot::MAX_BODY as usize;

/// The built filter, configured with `snapshot`.
pub fn host_with(snapshot: &pb::Snapshot) -> Host {
    let host = Host::load_filter();
    assert!(
        host.configure(&snapshot.encode_to_vec()),
        "the filter refused the snapshot:\n{}",
        host.log_text()
    );
    host
}

pub fn host() -> Host {
    host_with(&snapshot())
}

/// The built filter, configured with [`snapshot_with`]`(route)` whose service's entity key is
/// an int64.
pub fn int64_keyed_host(route: impl FnOnce(&mut pb::Route)) -> Host {
    let mut snap = snapshot_with(route);
    snap.services[0].entity_keys[0].r#type = pb::ValueType::Int64 as i32;
    host_with(&snap)
}

/// A complete, fresh vector for the fixture's service.
pub fn good_vector(age: i64, event_time_us: i64) -> Vec<u8> {
    scoring(event_time_us, Some(age), Some(0.25), Some(9))
}

pub fn kserve_body(ids: &[&str]) -> String {
    let instances: Vec<String> = ids
        .iter()
        .map(|id| format!(r#"{{"user_id":"{id}","amount":12.5}}"#))
        .collect();
    format!(r#"{{"instances":[{}]}}"#, instances.join(","))
}

/// Request headers of a POST to `path` with a `content-length` for `body_len`.
pub fn post_headers(path: &str, body_len: usize) -> Vec<(&'static str, String)> {
    vec![
        (":method", "POST".into()),
        (":path", path.to_string()),
        (":authority", "models.example".into()),
        ("content-type", "application/json".into()),
        ("content-length", body_len.to_string()),
    ]
}

/// Sends a POST with its body in one chunk; returns the actions of both callbacks.
pub fn post(s: &Stream, path: &str, body: &[u8]) -> (Action, Action) {
    let h = s.request_headers(&post_headers(path, body.len()), false);
    let b = s.request_body(body, true);
    (h, b)
}

/// The only call dispatched so far.
pub fn the_call(host: &Host) -> ferry_wasm_host::DispatchedCall {
    let calls = host.dispatched_calls();
    assert_eq!(
        calls.len(),
        1,
        "expected exactly one dispatched call: {calls:?}"
    );
    calls[0].clone()
}

/// The JSON of a local reply's body, with its status.
pub fn reply_json(s: &Stream) -> (u32, serde_json::Value) {
    let r = s.local_reply().expect("a local reply");
    let json = serde_json::from_slice(&r.body)
        .unwrap_or_else(|e| panic!("reply body is not JSON ({e}): {:?}", r.body));
    (r.status, json)
}

// Shared by the per-format ABI tests (kserve_v2, json_body, header_mode, format_policies).

/// No hostcall Envoy would have refused, and the VM is alive.
pub fn assert_clean(host: &Host) {
    assert!(host.abi_errors().is_empty(), "{:?}", host.abi_errors());
    assert!(host.dead().is_none(), "{:?}", host.dead());
}

/// Answers the only pending reader call of `s` with a 200 holding `vectors`.
pub fn answer(host: &Host, s: &Stream, vectors: Vec<Vec<u8>>) {
    let call = host
        .dispatched_calls()
        .into_iter()
        .rfind(|c| c.context_id == s.id())
        .expect("a reader call by this stream");
    s.call_response(call.token, &[(":status", "200")], &reader_response(vectors));
}

/// The entity keys of the stream's (last) reader call.
pub fn asked_keys(host: &Host, s: &Stream) -> Vec<String> {
    let call = host
        .dispatched_calls()
        .into_iter()
        .rfind(|c| c.context_id == s.id())
        .expect("a reader call by this stream");
    let req = pb::VectorRequest::decode(call.body.as_slice()).expect("a VectorRequest");
    assert_eq!(req.lookups.len(), 1, "{req:?}");
    req.lookups[0].entity_keys.clone()
}

/// The forwarded request body, parsed, after checking its `content-length` matches it.
pub fn body_json(s: &Stream) -> serde_json::Value {
    let body = s.request_body_bytes();
    assert_eq!(
        s.request_header("content-length"),
        Some(body.len().to_string()),
        "content-length of the forwarded body"
    );
    serde_json::from_slice(&body).unwrap_or_else(|e| {
        panic!(
            "the forwarded body is not JSON ({e}): {}",
            String::from_utf8_lossy(&body)
        )
    })
}

/// The stream was answered once, locally, with `status` and the JSON error `code` of `route`;
/// returns the error body.
pub fn assert_error(s: &Stream, status: u32, code: &str, route: &str) -> serde_json::Value {
    let (got, json) = reply_json(s);
    assert_eq!(
        (got, json["error"].as_str()),
        (status, Some(code)),
        "{json}"
    );
    let r = s.local_reply().unwrap();
    assert_eq!(r.header("x-ferry-error"), Some(code));
    assert_eq!(r.header("content-type"), Some("application/json"));
    // A request that matched no route (e.g. `no_route`) names none.
    if route.is_empty() {
        assert!(json.get("route").is_none(), "{json}");
    } else {
        assert_eq!(json["route"], route, "{json}");
    }
    assert!(
        json["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{json}"
    );
    assert!(!s.resumed(), "an answered request is not resumed");
    assert_eq!(s.local_replies().len(), 1);
    json
}

/// The reader's own errors, and Envoy's own 504 for the reader cluster: (the reader call's
/// `:status`, its body, the status and error code the filter answers the client with).
pub const READER_ERRORS: [(&str, &[u8], u32, &str); 3] = [
    (
        "503",
        br#"{"error":"redis_unavailable","message":"down"}"#,
        503,
        "redis_unavailable",
    ),
    ("504", b"upstream request timeout", 504, "reader_timeout"),
    ("500", b"oops", 502, "reader_error"),
];

/// The request went on degraded by `error`: the headers the model sees say so.
pub fn assert_degraded_by(s: &Stream, error: &str) {
    assert_eq!(
        s.request_header("x-ferry-status").as_deref(),
        Some("degraded")
    );
    assert_eq!(s.request_header("x-ferry-error").as_deref(), Some(error));
}

/// The JSON error `err`'s message mentions `text`.
pub fn assert_says(err: &serde_json::Value, text: &str) {
    let message = err["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(text),
        "the message does not say {text:?}: {err}"
    );
}

/// The `x-ferry-*` summary headers of an enriched request: (entities, missing, stale, status).
pub fn assert_summary(s: &Stream, entities: usize, missing: usize, stale: usize, status: &str) {
    let want = [
        ("x-ferry-service", "scoring".to_string()),
        ("x-ferry-fingerprint", FP_HEX.to_string()),
        ("x-ferry-entities", entities.to_string()),
        ("x-ferry-missing", missing.to_string()),
        ("x-ferry-stale", stale.to_string()),
        ("x-ferry-status", status.to_string()),
    ];
    for (name, value) in want {
        assert_eq!(
            s.request_header(name).as_deref(),
            Some(value.as_str()),
            "{name}"
        );
    }
}

/// A JSON array of numbers as f64 (floats may be written as 0 or 0.0, 1.5 or 1.50).
pub fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("not a number: {x}")))
        .collect()
}

/// A JSON array of integers.
pub fn ints(v: &serde_json::Value) -> Vec<i64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_i64().unwrap_or_else(|| panic!("not an integer: {x}")))
        .collect()
}

/// A vector for the fixture's service with these values (`None` = null), written now.
pub fn vector_of(age: Option<i64>, score: Option<f32>, count: Option<i64>) -> Vec<u8> {
    scoring(NOW_US, age, score, count)
}

/// A fresh profile but a `txn` view written two days ago (stale under its 1-day ttl).
pub fn stale_vector(age: i64) -> Vec<u8> {
    vector(
        FP,
        vec![
            (
                NOW_US,
                vec![Some(Kind::Int64Val(age)), Some(Kind::FloatVal(0.5))],
            ),
            (NOW_US - 2 * DAY_US, vec![Some(Kind::Int64Val(9))]),
        ],
    )
}

/// The fixture's service with a third view, `more` (never stale), of every other value type:
/// active bool, city string, ratio float64, rank int32, emb float32_list, blob bytes.
pub fn typed_snapshot(f: impl FnOnce(&mut pb::Route)) -> pb::Snapshot {
    use ferry_test_support::snapshot::{feature, view};
    use pb::ValueType as T;
    let mut s = snapshot_with(f);
    s.services[0].views.push(view(
        "more",
        0,
        vec![
            feature("active", T::Bool, None),
            feature("city", T::String, None),
            feature("ratio", T::Float64, None),
            feature("rank", T::Int32, None),
            feature("emb", T::Float32List, None),
            feature("blob", T::Bytes, None),
        ],
    ));
    s
}

/// Values of the `more` view of [`typed_snapshot`].
pub struct More {
    pub active: Option<bool>,
    pub city: Option<String>,
    pub ratio: Option<f64>,
    pub rank: Option<i32>,
    pub emb: Option<Vec<f32>>,
    pub blob: Option<Vec<u8>>,
}

impl More {
    pub fn nulls() -> More {
        More {
            active: None,
            city: None,
            ratio: None,
            rank: None,
            emb: None,
            blob: None,
        }
    }
}

/// A fresh vector for [`typed_snapshot`]'s service: age, score 0.25, count 9, then `more`.
pub fn typed_vector(age: i64, more: More) -> Vec<u8> {
    vector(
        FP,
        vec![
            (
                NOW_US,
                vec![Some(Kind::Int64Val(age)), Some(Kind::FloatVal(0.25))],
            ),
            (NOW_US, vec![Some(Kind::Int64Val(9))]),
            (
                NOW_US,
                vec![
                    more.active.map(Kind::BoolVal),
                    more.city.map(Kind::StringVal),
                    more.ratio.map(Kind::DoubleVal),
                    more.rank.map(Kind::Int32Val),
                    more.emb
                        .map(|values| Kind::FloatListVal(pb::FloatList { values })),
                    more.blob.map(Kind::BytesVal),
                ],
            ),
        ],
    )
}
