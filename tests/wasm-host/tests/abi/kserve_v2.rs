//! ABI tests of the KServe v2 / Open Inference Protocol format: ids from a named input tensor,
//! features appended as one typed tensor per feature (or one packed FP32 tensor), nulls as
//! their type's zero with the statuses in `parameters.ferry_statuses`, and the client's tensors
//! under Ferry's names dropped. Policies shared with the other formats: `format_policies`.

use ferry_protos::v1 as pb;
use ferry_wasm_host::{Action, Host, Stream};
use prost::Message;
use serde_json::{json, Value as Json};

use super::support::*;

pub const V2_PATH: &str = "/v2/models/fraud/infer";

/// The fixture's route, speaking KServe v2 on `/v2/models/fraud`.
pub fn v2_route(r: &mut pb::Route) {
    r.format = pb::Format::KserveV2 as i32;
    r.r#match = Some(pb::RouteMatch {
        path_prefix: "/v2/models/fraud".into(),
        path_exact: String::new(),
        ..Default::default()
    });
}

/// [`v2_route`], packed: Ferry's features as one FP32 tensor.
pub fn packed_v2_route(r: &mut pb::Route) {
    v2_route(r);
    r.packed = true;
}

/// A BYTES id tensor `user_id` of shape [N].
pub fn ids_tensor(ids: &[&str]) -> Json {
    json!({"name": "user_id", "shape": [ids.len()], "datatype": "BYTES", "data": ids})
}

/// Posts `body` on the v2 path: both callbacks pause, and exactly one reader call is made.
fn send(host: &Host, body: &Json) -> Stream {
    let s = host.stream();
    let bytes = serde_json::to_vec(body).unwrap();
    assert_eq!(
        post(&s, V2_PATH, &bytes),
        (Action::Pause, Action::Pause),
        "log:\n{}",
        host.log_text()
    );
    s
}

/// The input tensors named `name` in a forwarded body.
fn tensors<'a>(v: &'a Json, name: &str) -> Vec<&'a Json> {
    v["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .filter(|t| t["name"] == name)
        .collect()
}

/// The one input tensor named `name`.
fn tensor<'a>(v: &'a Json, name: &str) -> &'a Json {
    let t = tensors(v, name);
    assert_eq!(t.len(), 1, "one tensor named {name}: {}", v["inputs"]);
    t[0]
}

fn names(v: &Json) -> Vec<&str> {
    v["inputs"]
        .as_array()
        .expect("inputs")
        .iter()
        .map(|t| t["name"].as_str().expect("a tensor name"))
        .collect()
}

/// `parameters.ferry_statuses`, a JSON string (OIP parameters are scalars), parsed.
fn statuses(v: &Json) -> Json {
    let text = v["parameters"]["ferry_statuses"]
        .as_str()
        .unwrap_or_else(|| panic!("ferry_statuses is a string: {}", v["parameters"]));
    serde_json::from_str(text).expect("ferry_statuses holds JSON")
}

#[test]
fn v2_bytes_ids_become_one_typed_tensor_per_feature() {
    let host = host_with(&snapshot_with(v2_route));
    let body = json!({
        "id": "req-1",
        "inputs": [
            {"name": "amount", "shape": [2], "datatype": "FP32", "data": [12.5, 3.0]},
            ids_tensor(&["u1", "u2"]),
        ],
        "outputs": [{"name": "probability"}],
        "parameters": {"content_type": "np"},
    });
    let s = send(&host, &body);
    assert_eq!(asked_keys(&host, &s), ["u1", "u2"]);
    answer(
        &host,
        &s,
        vec![good_vector(30, NOW_US), good_vector(41, NOW_US)],
    );
    assert!(s.resumed(), "log:\n{}", host.log_text());
    let v = body_json(&s);
    assert_eq!(
        names(&v),
        [
            "amount",
            "user_id",
            "profile__age",
            "profile__score",
            "txn__count"
        ],
        "the client's tensors first, in order, then one per feature in the service's order"
    );
    assert_eq!(tensor(&v, "amount"), &body["inputs"][0]);
    assert_eq!(tensor(&v, "user_id"), &body["inputs"][1]);
    let age = tensor(&v, "profile__age");
    assert_eq!(
        (&age["datatype"], &age["shape"]),
        (&json!("INT64"), &json!([2]))
    );
    assert_eq!(ints(&age["data"]), [30, 41]);
    let score = tensor(&v, "profile__score");
    assert_eq!(
        (&score["datatype"], &score["shape"]),
        (&json!("FP32"), &json!([2]))
    );
    assert_eq!(floats(&score["data"]), [0.25, 0.25]);
    let count = tensor(&v, "txn__count");
    assert_eq!(
        (&count["datatype"], &count["shape"]),
        (&json!("INT64"), &json!([2]))
    );
    assert_eq!(ints(&count["data"]), [9, 9]);
    assert_eq!(v["id"], "req-1");
    assert_eq!(v["outputs"], body["outputs"]);
    assert_eq!(
        v["parameters"]["content_type"], "np",
        "client parameters kept"
    );
    assert_eq!(v["parameters"]["ferry_service"], "scoring");
    assert_eq!(v["parameters"]["ferry_fingerprint"], FP_HEX);
    assert_eq!(statuses(&v), json!([{}, {}]));
    assert_summary(&s, 2, 0, 0, "ok");
    assert_clean(&host);
}

#[test]
fn v2_ids_of_shape_n_by_1_flat_or_nested() {
    let host = host_with(&snapshot_with(v2_route));
    for data in [json!([["u1"], ["u2"]]), json!(["u1", "u2"])] {
        let body = json!({"inputs": [
            {"name": "user_id", "shape": [2, 1], "datatype": "BYTES", "data": data},
        ]});
        let s = send(&host, &body);
        assert_eq!(asked_keys(&host, &s), ["u1", "u2"], "{data}");
        answer(
            &host,
            &s,
            vec![good_vector(1, NOW_US), good_vector(2, NOW_US)],
        );
        let v = body_json(&s);
        assert_eq!(tensor(&v, "user_id"), &body["inputs"][0], "left as sent");
        let age = tensor(&v, "profile__age");
        assert_eq!(age["shape"], json!([2]), "features are [N]");
        assert_eq!(ints(&age["data"]), [1, 2]);
    }
    assert_clean(&host);
}

#[test]
fn v2_int64_ids() {
    let host = int64_keyed_host(v2_route);
    let cases = [
        (
            json!({"name": "user_id", "shape": [3], "datatype": "INT64", "data": [7, -2, 9_007_199_254_740_993_i64]}),
            vec!["7", "-2", "9007199254740993"],
        ),
        (
            json!({"name": "user_id", "shape": [2, 1], "datatype": "INT64", "data": [[5], [6]]}),
            vec!["5", "6"],
        ),
        (
            json!({"name": "user_id", "shape": [1], "datatype": "INT32", "data": [12]}),
            vec!["12"],
        ),
    ];
    for (ids, keys) in cases {
        let s = send(&host, &json!({"inputs": [ids]}));
        assert_eq!(asked_keys(&host, &s), keys);
        let n = keys.len();
        answer(
            &host,
            &s,
            (0..n).map(|i| good_vector(i as i64, NOW_US)).collect(),
        );
        let v = body_json(&s);
        assert_eq!(tensor(&v, "profile__age")["shape"], json!([n]));
    }
    let refused = [
        (
            json!({"name": "user_id", "shape": [1], "datatype": "BYTES", "data": ["7"]}),
            "bad_request_shape",
        ),
        (
            json!({"name": "user_id", "shape": [1], "datatype": "INT64", "data": [1.5]}),
            "invalid_entity_id",
        ),
        (
            json!({"name": "user_id", "shape": [1], "datatype": "INT64", "data": ["7"]}),
            "invalid_entity_id",
        ),
    ];
    let calls = host.dispatched_calls().len();
    for (ids, code) in refused {
        let s = host.stream();
        post(&s, V2_PATH, json!({"inputs": [ids]}).to_string().as_bytes());
        assert_error(&s, 400, code, "fraud");
    }
    assert_eq!(host.dispatched_calls().len(), calls, "no reader call");
    assert_clean(&host);
}

#[test]
fn v2_every_value_type_has_its_datatype_and_embeddings_are_n_by_d() {
    let host = host_with(&typed_snapshot(v2_route));
    let s = send(&host, &json!({"inputs": [ids_tensor(&["u1", "u2"])]}));
    let more = |active, city: &str, ratio, rank, emb: Vec<f32>, blob: &[u8]| More {
        active: Some(active),
        city: Some(city.into()),
        ratio: Some(ratio),
        rank: Some(rank),
        emb: Some(emb),
        blob: Some(blob.to_vec()),
    };
    answer(
        &host,
        &s,
        vec![
            typed_vector(
                30,
                more(
                    true,
                    "Zürich",
                    0.5,
                    3,
                    vec![0.5, -1.25, 2.0],
                    b"\x01\x02\x03",
                ),
            ),
            typed_vector(41, more(false, "Bern", -2.5, -4, vec![1.0, 0.0, 0.25], b"")),
        ],
    );
    assert!(s.resumed(), "log:\n{}", host.log_text());
    let v = body_json(&s);
    let want = [
        ("profile__age", "INT64", json!([2])),
        ("profile__score", "FP32", json!([2])),
        ("txn__count", "INT64", json!([2])),
        ("more__active", "BOOL", json!([2])),
        ("more__city", "BYTES", json!([2])),
        ("more__ratio", "FP64", json!([2])),
        ("more__rank", "INT32", json!([2])),
        ("more__emb", "FP32", json!([2, 3])),
        ("more__blob", "BYTES", json!([2])),
    ];
    for (name, datatype, shape) in &want {
        let t = tensor(&v, name);
        assert_eq!(
            (t["datatype"].as_str(), &t["shape"]),
            (Some(*datatype), shape),
            "{name}: {t}"
        );
    }
    assert_eq!(tensor(&v, "more__active")["data"], json!([true, false]));
    assert_eq!(tensor(&v, "more__city")["data"], json!(["Zürich", "Bern"]));
    assert_eq!(floats(&tensor(&v, "more__ratio")["data"]), [0.5, -2.5]);
    assert_eq!(ints(&tensor(&v, "more__rank")["data"]), [3, -4]);
    assert_eq!(
        floats(&tensor(&v, "more__emb")["data"]),
        [0.5, -1.25, 2.0, 1.0, 0.0, 0.25],
        "row-major [N, D]"
    );
    assert_eq!(
        tensor(&v, "more__blob")["data"],
        json!(["AQID", ""]),
        "bytes as base64"
    );
    assert_eq!(statuses(&v), json!([{}, {}]));
    assert_clean(&host);
}

#[test]
fn v2_nulls_are_their_types_zero_and_reported_in_parameters() {
    let host = host_with(&typed_snapshot(|r| {
        v2_route(r);
        r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
    }));
    let s = send(
        &host,
        &json!({"inputs": [ids_tensor(&["u1", "u2", "ghost"])]}),
    );
    let full = More {
        emb: Some(vec![0.5, 1.5]),
        ..More::nulls()
    };
    let nulls = vector(
        FP,
        vec![
            (NOW_US, vec![Some(pb::value::Kind::Int64Val(7)), None]),
            (NOW_US, vec![None]),
            (NOW_US, vec![None, None, None, None, None, None]),
        ],
    );
    answer(&host, &s, vec![typed_vector(30, full), nulls, vec![]]);
    assert!(s.resumed(), "log:\n{}", host.log_text());
    let v = body_json(&s);
    assert_eq!(ints(&tensor(&v, "profile__age")["data"]), [30, 7, 0]);
    assert_eq!(
        floats(&tensor(&v, "profile__score")["data"]),
        [0.25, 0.0, 0.0]
    );
    assert_eq!(ints(&tensor(&v, "txn__count")["data"]), [9, 0, 0]);
    assert_eq!(
        tensor(&v, "more__active")["data"],
        json!([false, false, false])
    );
    assert_eq!(tensor(&v, "more__city")["data"], json!(["", "", ""]));
    assert_eq!(floats(&tensor(&v, "more__ratio")["data"]), [0.0; 3]);
    assert_eq!(ints(&tensor(&v, "more__rank")["data"]), [0; 3]);
    let emb = tensor(&v, "more__emb");
    assert_eq!(
        emb["shape"],
        json!([3, 2]),
        "D from the entity that has one"
    );
    assert_eq!(floats(&emb["data"]), [0.5, 1.5, 0.0, 0.0, 0.0, 0.0]);
    assert_eq!(tensor(&v, "more__blob")["data"], json!(["", "", ""]));

    let st = statuses(&v);
    let more_nulls = ["active", "city", "ratio", "rank", "blob"];
    let mut first = serde_json::Map::new();
    for f in more_nulls {
        first.insert(format!("more__{f}"), json!("NULL_VALUE"));
    }
    assert_eq!(st[0], Json::Object(first));
    let mut second = serde_json::Map::new();
    for f in ["profile__score", "txn__count"]
        .into_iter()
        .map(String::from)
        .chain(
            more_nulls
                .iter()
                .chain(&["emb"])
                .map(|f| format!("more__{f}")),
        )
    {
        second.insert(f, json!("NULL_VALUE"));
    }
    assert_eq!(st[1], Json::Object(second));
    let third = st[2].as_object().expect("an object");
    assert_eq!(third.len(), 9, "every feature of the missing entity: {st}");
    assert!(third.values().all(|s| s == "NOT_FOUND"), "{st}");
    assert_summary(&s, 3, 1, 0, "partial");
    assert_clean(&host);
}

#[test]
fn v2_embeddings_of_different_lengths_in_one_batch_are_a_bad_vector() {
    // Never forwarded, even when reader failures fail open: the vector is wrong, not the reader.
    let host = host_with(&typed_snapshot(|r| {
        v2_route(r);
        r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32;
    }));
    let s = send(&host, &json!({"inputs": [ids_tensor(&["u1", "u2"])]}));
    let emb = |e: Vec<f32>| More {
        emb: Some(e),
        ..More::nulls()
    };
    answer(
        &host,
        &s,
        vec![
            typed_vector(1, emb(vec![1.0, 2.0])),
            typed_vector(2, emb(vec![1.0, 2.0, 3.0])),
        ],
    );
    let err = assert_error(&s, 502, "bad_vector", "fraud");
    assert_says(&err, "more__emb");
    assert_clean(&host);
}

#[test]
fn v2_packed_is_one_fp32_tensor_n_by_f() {
    let mut snap = snapshot_with(|r| {
        packed_v2_route(r);
        r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
    });
    snap.services[0].views.push(pb::ServiceView {
        name: "flags".into(),
        ttl_seconds: 0,
        features: vec![pb::Feature {
            name: "active".into(),
            r#type: pb::ValueType::Bool as i32,
            default_value: None,
        }],
    });
    let host = host_with(&snap);
    let body = json!({"inputs": [
        ids_tensor(&["u1", "u2", "ghost"]),
        {"name": "ferry_features", "shape": [3, 4], "datatype": "FP32", "data": vec![9; 12]},
        {"name": "profile__age", "shape": [3], "datatype": "INT64", "data": [99, 99, 99]},
    ]});
    let s = send(&host, &body);
    let row = |age: Option<i64>, score: Option<f32>, active: bool| {
        vector(
            FP,
            vec![
                (
                    NOW_US,
                    vec![
                        age.map(pb::value::Kind::Int64Val),
                        score.map(pb::value::Kind::FloatVal),
                    ],
                ),
                (NOW_US, vec![Some(pb::value::Kind::Int64Val(9))]),
                (NOW_US, vec![Some(pb::value::Kind::BoolVal(active))]),
            ],
        )
    };
    answer(
        &host,
        &s,
        vec![
            row(Some(30), Some(0.5), true),
            row(None, Some(1.5), false),
            vec![],
        ],
    );
    assert!(s.resumed(), "log:\n{}", host.log_text());
    let v = body_json(&s);
    assert_eq!(
        names(&v),
        ["user_id", "ferry_features"],
        "the client's tensors under Ferry's names are dropped; no per-feature tensors"
    );
    let t = tensor(&v, "ferry_features");
    assert_eq!(
        (&t["datatype"], &t["shape"]),
        (&json!("FP32"), &json!([3, 4]))
    );
    assert_eq!(
        floats(&t["data"]),
        [30.0, 0.5, 9.0, 1.0, 0.0, 1.5, 9.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        "row-major; bools as 1/0, nulls as 0"
    );
    let st = statuses(&v);
    assert_eq!(st[0], json!({}));
    assert_eq!(st[1], json!({"profile__age": "NULL_VALUE"}));
    assert_eq!(st[2].as_object().map(|m| m.len()), Some(4), "{st}");
    assert_summary(&s, 3, 1, 0, "partial");
    assert_clean(&host);
}

#[test]
fn v2_packed_route_with_non_numeric_features_is_refused_at_configure() {
    let host = Host::load_filter();
    let snap = typed_snapshot(packed_v2_route);
    assert!(!host.configure(&snap.encode_to_vec()));
    assert!(
        host.log_text().contains("is string, not numeric"),
        "{}",
        host.log_text()
    );
    // Not configured: nothing is enriched.
    let s = host.stream();
    let body = json!({"inputs": [ids_tensor(&["u1"])]}).to_string();
    assert_eq!(post(&s, V2_PATH, body.as_bytes()).0, Action::Continue);
    assert!(host.dispatched_calls().is_empty());
    assert_clean(&host);
}

#[test]
fn v2_forged_tensors_and_parameters_are_replaced() {
    let host = host_with(&snapshot_with(v2_route));
    let body = json!({
        "inputs": [
            {"name": "profile__score", "shape": [1], "datatype": "FP32", "data": [9.5]},
            ids_tensor(&["u1"]),
            {"name": "ferry_features", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]},
            {"name": "txn__count", "shape": [1], "datatype": "INT64", "data": [1000]},
        ],
        "parameters": "not an object",
    });
    let s = send(&host, &body);
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    let v = body_json(&s);
    assert_eq!(
        names(&v),
        ["user_id", "profile__age", "profile__score", "txn__count"]
    );
    assert_eq!(floats(&tensor(&v, "profile__score")["data"]), [0.25]);
    assert_eq!(ints(&tensor(&v, "txn__count")["data"]), [9]);
    assert_eq!(v["parameters"]["ferry_fingerprint"], FP_HEX);
    assert_eq!(statuses(&v), json!([{}]));

    // A client's own ferry_* parameters are overwritten too.
    let body = json!({
        "inputs": [ids_tensor(&["u1"])],
        "parameters": {
            "ferry_statuses": "[]",
            "ferry_fingerprint": "0000000000000000",
            "ferry_service": "other",
            "priority": 3,
        },
    });
    let s = send(&host, &body);
    answer(&host, &s, vec![vector_of(Some(1), None, Some(2))]);
    let v = body_json(&s);
    assert_eq!(v["parameters"]["ferry_service"], "scoring");
    assert_eq!(v["parameters"]["ferry_fingerprint"], FP_HEX);
    assert_eq!(v["parameters"]["priority"], 3);
    assert_eq!(statuses(&v), json!([{"profile__score": "NULL_VALUE"}]));
    assert_clean(&host);
}

#[test]
fn v2_bad_requests_are_answered_without_a_reader_call() {
    let host = host_with(&snapshot_with(v2_route));
    let t = |shape: Json, datatype: &str, data: Json| {
        json!({"inputs": [{"name": "user_id", "shape": shape, "datatype": datatype, "data": data}]})
            .to_string()
    };
    let ids11: Vec<String> = (0..11).map(|i| format!("u{i}")).collect();
    let cases: Vec<(String, u32, &str)> = vec![
        ("{\"inputs\": [".into(), 400, "malformed_json"),
        ("[1, 2]".into(), 400, "bad_request_shape"),
        (
            r#"{"instances": [{"user_id": "u1"}]}"#.into(),
            400,
            "bad_request_shape",
        ),
        (
            r#"{"inputs": {"user_id": "u1"}}"#.into(),
            400,
            "bad_request_shape",
        ),
        (
            json!({"inputs": [{"name": "uid", "shape": [1], "datatype": "BYTES", "data": ["u1"]}]})
                .to_string(),
            400,
            "missing_entity_id",
        ),
        (t(json!([1]), "INT64", json!([1])), 400, "bad_request_shape"),
        (
            t(json!([2, 2]), "BYTES", json!(["a", "b", "c", "d"])),
            400,
            "bad_request_shape",
        ),
        (
            t(json!([3]), "BYTES", json!(["a"])),
            400,
            "bad_request_shape",
        ),
        (
            t(json!([-1]), "BYTES", json!(["a"])),
            400,
            "bad_request_shape",
        ),
        (
            json!({"inputs": [{"name": "user_id", "datatype": "BYTES", "data": ["a"]}]})
                .to_string(),
            400,
            "bad_request_shape",
        ),
        (t(json!([1]), "BYTES", json!("a")), 400, "bad_request_shape"),
        (t(json!([0]), "BYTES", json!([])), 400, "no_entities"),
        (
            t(json!([1]), "BYTES", json!([""])),
            400,
            "invalid_entity_id",
        ),
        (t(json!([1]), "BYTES", json!([7])), 400, "invalid_entity_id"),
        (
            t(json!([1]), "BYTES", json!(["a\u{1}b"])),
            400,
            "invalid_entity_id",
        ),
        (
            t(json!([1]), "BYTES", json!(["x".repeat(257)])),
            400,
            "invalid_entity_id",
        ),
        (
            t(json!([11]), "BYTES", json!(ids11)),
            413,
            "too_many_entities",
        ),
        (
            t(json!([1_000_000]), "BYTES", json!([])),
            413,
            "too_many_entities",
        ),
    ];
    for (body, status, code) in cases {
        let s = host.stream();
        host.note(format!("body: {body}"));
        assert_eq!(
            post(&s, V2_PATH, body.as_bytes()),
            (Action::Pause, Action::Pause),
            "{body}"
        );
        let err = assert_error(&s, status, code, "fraud");
        if code == "missing_entity_id" {
            assert_says(&err, "'user_id'");
        }
    }
    assert!(host.dispatched_calls().is_empty());
    assert_clean(&host);
}
