//! Builders shared by the ABI tests and the bench: a small valid snapshot (the filter's own test
//! fixture is not exported, so this is its twin), stored vectors, reader answers, and a
//! configured host.
#![allow(dead_code)]

use ferry_protos::v1::{self as pb, value::Kind};
use ferry_wasm_host::{Action, Host, Stream};
use prost::Message;

pub const FP: u64 = 0x1234_5678_9abc_def0;
pub const FP_HEX: &str = "123456789abcdef0";
pub const DAY_US: i64 = 86_400_000_000;
/// Host time of the tests (the host's default clock).
pub const NOW_US: i64 = ferry_wasm_host::DEFAULT_TIME_US;
pub const PATH: &str = "/v1/models/fraud:predict";
pub const MAX_BODY: usize = 4096;

fn feature(name: &str, t: pb::ValueType, default: Option<Kind>) -> pb::Feature {
    pb::Feature {
        name: name.into(),
        r#type: t as i32,
        default_value: default.map(|k| pb::Value { kind: Some(k) }),
    }
}

/// Project `banking`, service `scoring` (views `profile`: age int64 default -1, score float32,
/// never stale; `txn`: count int64, ttl 1 day), route `fraud` on `/v1/models/fraud`, KServe v1,
/// `user_id`, strict policies, 4096-byte bodies, 10 entities, 100 ms reader timeout.
pub fn snapshot() -> pb::Snapshot {
    use pb::ValueType as T;
    pb::Snapshot {
        project: "banking".into(),
        version: "v1".into(),
        reader_cluster: "ferry_reader".into(),
        reader_authority: "ferry-reader".into(),
        services: vec![pb::FeatureService {
            name: "scoring".into(),
            fingerprint: FP,
            entity_keys: vec![pb::EntityKey {
                entity: "user".into(),
                join_key: "user_id".into(),
                r#type: T::String as i32,
            }],
            views: vec![
                pb::ServiceView {
                    name: "profile".into(),
                    ttl_seconds: 0,
                    features: vec![
                        feature("age", T::Int64, Some(Kind::Int64Val(-1))),
                        feature("score", T::Float32, None),
                    ],
                },
                pb::ServiceView {
                    name: "txn".into(),
                    ttl_seconds: 86_400,
                    features: vec![feature("count", T::Int64, None)],
                },
            ],
        }],
        routes: vec![pb::Route {
            name: "fraud".into(),
            r#match: Some(pb::RouteMatch {
                path_prefix: "/v1/models/fraud".into(),
                path_exact: String::new(),
            }),
            service: "scoring".into(),
            format: pb::Format::KserveV1 as i32,
            entity_fields: vec!["user_id".into()],
            feature_names: pb::FeatureNames::Full as i32,
            on_missing_entity: pb::MissingEntityPolicy::MissingReject as i32,
            on_stale: pb::StalePolicy::StaleNull as i32,
            on_reader_error: pb::ReaderErrorPolicy::ReaderErrorReject as i32,
            max_body_bytes: MAX_BODY as u32,
            max_entities: 10,
            reader_timeout_ms: 100,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The snapshot with its route changed.
pub fn snapshot_with(f: impl FnOnce(&mut pb::Route)) -> pb::Snapshot {
    let mut s = snapshot();
    f(&mut s.routes[0]);
    s
}

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

/// A stored vector: per view, (event time, values); `None` is a null value.
pub fn vector(fp: u64, views: Vec<(i64, Vec<Option<Kind>>)>) -> Vec<u8> {
    pb::StoredVector {
        fingerprint: fp,
        views: views
            .into_iter()
            .map(|(t, vals)| pb::ViewValues {
                event_time_us: t,
                values: vals.into_iter().map(|kind| pb::Value { kind }).collect(),
            })
            .collect(),
    }
    .encode_to_vec()
}

/// A complete, fresh vector for the fixture's service.
pub fn good_vector(age: i64, event_time_us: i64) -> Vec<u8> {
    vector(
        FP,
        vec![
            (
                event_time_us,
                vec![Some(Kind::Int64Val(age)), Some(Kind::FloatVal(0.25))],
            ),
            (event_time_us, vec![Some(Kind::Int64Val(9))]),
        ],
    )
}

/// The reader's 200 answer: one lookup, these vectors (empty = not found).
pub fn reader_response(vectors: Vec<Vec<u8>>) -> Vec<u8> {
    pb::VectorResponse {
        results: vec![pb::LookupResult { vectors }],
    }
    .encode_to_vec()
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
