//! Tests of the KServe v2 format, JSON and binary.

use super::*;
use crate::config::fixture::snapshot;
use crate::config::Config;
use ferry_protos::v1 as pb;
use serde_json::json;

fn v2(packed: bool) -> Config {
    let mut s = snapshot();
    s.routes[0].format = pb::Format::KserveV2 as i32;
    s.routes[0].packed = packed;
    Config::from_snapshot(s).unwrap()
}

fn feats(age: Json, score: Json, count: Json) -> EntityFeatures {
    EntityFeatures::of_json(&[age, score, count])
}

#[test]
fn ids_from_flat_or_nested_tensors() {
    let c = v2(false);
    let r = &c.routes[0];
    let flat = br#"{"inputs":[{"name":"amount","shape":[2],"datatype":"FP32","data":[1.0,2.0]},
        {"name":"user_id","shape":[2],"datatype":"BYTES","data":["u1","u2"]}]}"#;
    assert_eq!(parse(flat, r, None).unwrap().keys, ["u1", "u2"]);
    let nested = br#"{"inputs":[{"name":"user_id","shape":[2,1],"datatype":"BYTES","data":[["u1"],["u2"]]}]}"#;
    assert_eq!(parse(nested, r, None).unwrap().keys, ["u1", "u2"]);
}

#[test]
fn bad_tensors_are_named() {
    let c = v2(false);
    let r = &c.routes[0];
    let msg = |b: &[u8]| parse(b, r, None).unwrap_err().message();
    assert_eq!(
        msg(br#"{"inputs":[]}"#),
        "no input tensor named 'user_id' (it must hold the entity ids)"
    );
    assert_eq!(
        msg(br#"{"inputs":[{"name":"user_id","shape":[1],"datatype":"INT64","data":[1]}]}"#),
        "input tensor 'user_id': datatype must be BYTES, got 'INT64'"
    );
    assert_eq!(
        msg(br#"{"inputs":[{"name":"user_id","shape":[3],"datatype":"BYTES","data":["a"]}]}"#),
        "input tensor 'user_id': shape says 3 ids, data has 1"
    );
    assert_eq!(
        msg(br#"{"inputs":[{"name":"user_id","shape":[1],"datatype":"BYTES","data":[""]}]}"#),
        "input tensor 'user_id'[0]: id must be 1 to 256 bytes, got 0"
    );
    assert!(msg(br#"{"instances":[]}"#).contains("no \"inputs\" array"));
    let twice = parse(
        br#"{"inputs":[{"name":"user_id","shape":[1],"datatype":"BYTES","data":["u1"]},
            {"name":"user_id","shape":[1],"datatype":"BYTES","data":["u2"]}]}"#,
        r,
        None,
    )
    .unwrap_err();
    assert_eq!((twice.status(), twice.code()), (400, "duplicate_entity_id"));
    let e = parse(
        br#"{"inputs":[{"name":"user_id","shape":[11],"datatype":"BYTES","data":[]}]}"#,
        r,
        None,
    )
    .unwrap_err();
    assert_eq!(e.code(), "too_many_entities");
    // The declared count as sent, in 32 bits as in 64 (the Wasm build once named u32::MAX).
    let huge = br#"{"inputs":[{"name":"user_id","shape":[4294967296],"datatype":"BYTES"}]}"#;
    assert_eq!(
        msg(huge),
        "request has 4294967296 entities, over this route's limit of 10"
    );
}

/// The body `req` is rewritten to on route `r` (packed or not, as the route says).
fn rewritten(req: ParsedRequest, r: &Route, features: Vec<EntityFeatures>) -> Vec<u8> {
    let packed = matches!(r.format, crate::config::Format::KserveV2 { packed: true });
    rewrite(req, r, packed, features).unwrap().body
}

#[test]
fn one_typed_tensor_per_feature_with_zero_for_null_and_forged_tensors_dropped() {
    let c = v2(false);
    let r = &c.routes[0];
    let body = br#"{"id":"r1","inputs":[{"name":"user_id","shape":[2],"datatype":"BYTES","data":["u1","u2"]},
        {"name":"profile__age","shape":[2],"datatype":"INT64","data":[99,99]}]}"#;
    let req = parse(body, r, None).unwrap();
    let out = rewritten(
        req,
        r,
        vec![
            feats(json!(30), json!(0.5), json!(2)),
            feats(Json::Null, Json::Null, json!(7)),
        ],
    );
    let v: Json = serde_json::from_slice(&out).unwrap();
    let inputs = v["inputs"].as_array().unwrap();
    assert_eq!(
        inputs.len(),
        4,
        "user_id + 3 features; the forged profile__age is gone"
    );
    assert_eq!(
        inputs[1],
        json!({"name": "profile__age", "shape": [2], "datatype": "INT64", "data": [30, 0]})
    );
    assert_eq!(
        inputs[2],
        json!({"name": "profile__score", "shape": [2], "datatype": "FP32", "data": [0.5, 0.0]})
    );
    assert_eq!(inputs[3]["data"], json!([2, 7]));
    assert_eq!(v["id"], "r1");
    assert_eq!(v["parameters"]["ferry_fingerprint"], "123456789abcdef0");
    let statuses: Json =
        serde_json::from_str(v["parameters"]["ferry_statuses"].as_str().unwrap()).unwrap();
    assert_eq!(
        statuses,
        json!([{}, {"profile__age": "NOT_FOUND", "profile__score": "NOT_FOUND"}])
    );
}

#[test]
fn packed_tensor_is_fp32_n_by_f() {
    let c = v2(true);
    let r = &c.routes[0];
    let req = parse(
        br#"{"inputs":[{"name":"user_id","shape":[2],"datatype":"BYTES","data":["u1","u2"]}]}"#,
        r,
        None,
    )
    .unwrap();
    let out = rewritten(
        req,
        r,
        vec![
            feats(json!(30), json!(0.5), json!(2)),
            feats(Json::Null, json!(1.5), json!(7)),
        ],
    );
    let v: Json = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["inputs"][1],
        json!({"name": "ferry_features", "shape": [2, 3], "datatype": "FP32", "data": [30, 0.5, 2, 0, 1.5, 7]})
    );
}

#[test]
fn packed_refuses_non_numeric_features() {
    let mut s = snapshot();
    s.routes[0].format = pb::Format::KserveV2 as i32;
    s.routes[0].packed = true;
    s.services[0].views[1].features[0].r#type = pb::ValueType::String as i32;
    let e = Config::from_snapshot(s).unwrap_err();
    assert!(e.to_string().contains("is string, not numeric"), "{e}");
}

// The binary tensor data extension.

/// A BYTES tensor's binary data: each element as a 4-byte little-endian length and its bytes.
fn bytes_data(elements: &[&[u8]]) -> Vec<u8> {
    elements
        .iter()
        .flat_map(|e| {
            let mut v = (e.len() as u32).to_le_bytes().to_vec();
            v.extend_from_slice(e);
            v
        })
        .collect()
}

/// A framed body: the JSON header, then `binary`; and the header length as the client sends it.
fn framed(header: &Json, binary: &[u8]) -> (Vec<u8>, String) {
    let mut body = serde_json::to_vec(header).unwrap();
    let len = body.len().to_string();
    body.extend_from_slice(binary);
    (body, len)
}

/// Splits a rewritten body at its new header length: the JSON header and the binary part.
fn unframe(out: &Rewritten) -> (Json, Vec<u8>) {
    let n = out.header_length.expect("a framed body stays framed");
    let (h, b) = out.body.split_at(n);
    (serde_json::from_slice(h).unwrap(), b.to_vec())
}

fn binary_input(name: &str, datatype: &str, shape: &[usize], size: usize) -> Json {
    json!({"name": name, "datatype": datatype, "shape": shape,
           "parameters": {"binary_data_size": size}})
}

fn two_entities() -> Vec<EntityFeatures> {
    vec![
        feats(json!(30), json!(0.5), json!(2)),
        feats(Json::Null, json!(1.5), json!(7)),
    ]
}

#[test]
fn binary_bytes_ids_and_the_clients_binary_inputs_go_on_byte_for_byte() {
    let c = v2(false);
    let r = &c.routes[0];
    let amount: Vec<u8> = [12.5f32, -0.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    let ids = bytes_data(&[b"u1", b"u2"]);
    let note = bytes_data(&[b"\x00\xff raw", b""]);
    let header = json!({
        "id": "r1",
        "inputs": [
            binary_input("amount", "FP32", &[2], amount.len()),
            {"name": "json_in", "datatype": "INT64", "shape": [1], "data": [5]},
            binary_input("user_id", "BYTES", &[2, 1], ids.len()),
            binary_input("note", "BYTES", &[2], note.len()),
        ],
        "outputs": [{"name": "p", "parameters": {"binary_data": true}}],
        "parameters": {"binary_data_output": true},
    });
    let binary = [amount.as_slice(), &ids, &note].concat();
    let (body, len) = framed(&header, &binary);
    let req = parse(&body, r, Some(&len)).unwrap();
    assert_eq!(req.keys, ["u1", "u2"]);
    let out = rewrite(req, r, false, two_entities()).unwrap();
    let (v, rest) = unframe(&out);
    assert_eq!(
        rest, binary,
        "the client's binary data, unchanged and in order"
    );
    let inputs = v["inputs"].as_array().unwrap();
    assert_eq!(
        &inputs[..4],
        header["inputs"].as_array().unwrap().as_slice()
    );
    assert_eq!(
        inputs[4],
        json!({"name": "profile__age", "shape": [2], "datatype": "INT64", "data": [30, 0]}),
        "features are JSON tensors in the header"
    );
    assert_eq!(inputs.len(), 7);
    assert_eq!(v["outputs"], header["outputs"]);
    assert_eq!(
        v["parameters"]["binary_data_output"], true,
        "passed through"
    );
    assert_eq!(v["parameters"]["ferry_fingerprint"], "123456789abcdef0");
    assert_eq!(v["id"], "r1");
}

#[test]
fn binary_int64_and_int32_ids() {
    let c = crate::config::fixture::int64_ids(pb::Format::KserveV2);
    let r = &c.routes[0];
    let longs: Vec<u8> = [7i64, -2, 9_007_199_254_740_993]
        .iter()
        .flat_map(|i| i.to_le_bytes())
        .collect();
    let (body, len) = framed(
        &json!({"inputs": [binary_input("user_id", "INT64", &[3], 24)]}),
        &longs,
    );
    let req = parse(&body, r, Some(&len)).unwrap();
    assert_eq!(req.keys, ["7", "-2", "9007199254740993"]);
    let ints: Vec<u8> = [12i32, 13].iter().flat_map(|i| i.to_le_bytes()).collect();
    let (body, len) = framed(
        &json!({"inputs": [binary_input("user_id", "INT32", &[2, 1], 8)]}),
        &ints,
    );
    assert_eq!(parse(&body, r, Some(&len)).unwrap().keys, ["12", "13"]);
    let (body, len) = framed(
        &json!({"inputs": [binary_input("user_id", "INT64", &[4], 24)]}),
        &longs,
    );
    let e = parse(&body, r, Some(&len)).unwrap_err();
    assert_eq!(e.code(), "bad_binary_framing");
    assert_eq!(
        e.message(),
        "input tensor 'user_id': shape says 4 INT64 ids (32 bytes), binary_data_size is 24"
    );
}

#[test]
fn forged_tensors_are_dropped_in_json_and_binary_form() {
    for packed in [false, true] {
        let c = v2(packed);
        let r = &c.routes[0];
        let ids = bytes_data(&[b"u1", b"u2"]);
        let forged_score: Vec<u8> = [9.0f32, 9.0].iter().flat_map(|f| f.to_le_bytes()).collect();
        let forged_packed = vec![0xAB; 24];
        let tail = vec![1, 2, 3, 4, 5, 6, 7, 8];
        let header = json!({"inputs": [
            binary_input("user_id", "BYTES", &[2], ids.len()),
            binary_input("profile__score", "FP32", &[2], forged_score.len()),
            {"name": "profile__age", "datatype": "INT64", "shape": [2], "data": [99, 99]},
            binary_input("ferry_features", "FP32", &[2, 3], forged_packed.len()),
            binary_input("tail", "INT64", &[1], tail.len()),
        ]});
        let binary = [ids.as_slice(), &forged_score, &forged_packed, &tail].concat();
        let (body, len) = framed(&header, &binary);
        let req = parse(&body, r, Some(&len)).unwrap();
        let out = rewrite(req, r, packed, two_entities()).unwrap();
        let (v, rest) = unframe(&out);
        assert_eq!(rest, [ids.as_slice(), &tail].concat(), "packed={packed}");
        let names: Vec<&str> = v["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        let want: &[&str] = if packed {
            &["user_id", "tail", "ferry_features"]
        } else {
            &[
                "user_id",
                "tail",
                "profile__age",
                "profile__score",
                "txn__count",
            ]
        };
        assert_eq!(names, want, "packed={packed}");
        let last = v["inputs"].as_array().unwrap().last().unwrap();
        assert!(
            last.get("parameters").is_none(),
            "Ferry's tensors are JSON: {last}"
        );
        // What the model gets parses again, to the same entities.
        let again = parse(&out.body, r, Some(&out.header_length.unwrap().to_string()));
        assert_eq!(again.unwrap().keys, ["u1", "u2"]);
    }
}

#[test]
fn a_framed_body_without_binary_inputs_and_an_unframed_one_stay_so() {
    let c = v2(false);
    let r = &c.routes[0];
    let header =
        json!({"inputs": [{"name": "user_id", "shape": [1], "datatype": "BYTES", "data": ["u1"]}]});
    let (body, len) = framed(&header, b"");
    let out = rewrite(
        parse(&body, r, Some(&len)).unwrap(),
        r,
        false,
        vec![feats(json!(1), json!(2.0), json!(3))],
    )
    .unwrap();
    assert_eq!(out.header_length, Some(out.body.len()));
    let out = rewrite(
        parse(&body, r, None).unwrap(),
        r,
        false,
        vec![feats(json!(1), json!(2.0), json!(3))],
    )
    .unwrap();
    assert_eq!(out.header_length, None);
}

#[test]
fn bad_framing_is_a_400_naming_the_problem() {
    let c = v2(false);
    let r = &c.routes[0];
    let ids = bytes_data(&[b"u1", b"u2"]);
    let header = json!({"inputs": [binary_input("user_id", "BYTES", &[2], ids.len())]});
    let (body, len) = framed(&header, &ids);
    let err = |body: &[u8], len: Option<&str>| parse(body, r, len).unwrap_err();
    let framing = |body: &[u8], len: Option<&str>| {
        let e = err(body, len);
        assert_eq!((e.status(), e.code()), (400, "bad_binary_framing"), "{e}");
        e.message()
    };
    let over = (body.len() + 1).to_string();
    assert!(framing(&body, Some(&over)).contains("but the body has only"));
    assert!(framing(&body, Some("twelve")).contains("must be a byte count, got 'twelve'"));
    // One byte more or less than the sizes say.
    assert!(framing(&body[..body.len() - 1], Some(&len)).contains("runs past the end"));
    let mut longer = body.clone();
    longer.push(0);
    assert!(framing(&longer, Some(&len)).contains("add up to 12 bytes, but 13"));
    // A BYTES element longer than its tensor.
    let mut past = body.clone();
    let at = len.parse::<usize>().unwrap() + 6;
    past[at] = 200; // the second element's length
    assert!(framing(&past, Some(&len)).contains("BYTES element 1 of 200 bytes runs past"));
    // Binary ids without the header that frames them: the body is then all JSON, and is not.
    assert_eq!(err(&body, None).code(), "malformed_json");
    let unframed = serde_json::to_vec(&header).unwrap();
    assert!(framing(&unframed, None).contains("no Inference-Header-Content-Length"));
    // Count and UTF-8 of binary BYTES ids.
    let three = json!({"inputs": [binary_input("user_id", "BYTES", &[3], ids.len())]});
    let (b, l) = framed(&three, &ids);
    assert_eq!(
        framing(&b, Some(&l)),
        "input tensor 'user_id': shape says 3 ids, data has 2"
    );
    let bad_utf8 = bytes_data(&[b"u\xff"]);
    let (b, l) = framed(
        &json!({"inputs": [binary_input("user_id", "BYTES", &[1], bad_utf8.len())]}),
        &bad_utf8,
    );
    let e = err(&b, Some(&l));
    assert_eq!(e.code(), "invalid_entity_id");
    assert_eq!(
        e.message(),
        "input tensor 'user_id'[0]: id is not valid UTF-8"
    );
    // The JSON header must be JSON.
    assert_eq!(err(&body, Some("3")).code(), "malformed_json");
}
