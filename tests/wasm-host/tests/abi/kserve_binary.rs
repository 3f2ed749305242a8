//! ABI tests of KServe v2's binary tensor data extension (what Triton's clients send by
//! default): ids read from a binary input, features appended as JSON tensors to the JSON
//! header, `Inference-Header-Content-Length` and `content-length` set for the new body, the
//! client's binary data passed on byte for byte (less the tensors under Ferry's names), and
//! bad framing refused before any reader call.

use ferry_protos::v1 as pb;
use ferry_wasm_host::{Action, Stream};
use serde_json::{json, Value as Json};

use super::kserve_v2::{packed_v2_route, v2_route, V2_PATH};
use super::support::*;

/// A BYTES tensor's binary data: each element as a 4-byte little-endian length and its bytes.
fn bytes_data(elements: &[&str]) -> Vec<u8> {
    elements
        .iter()
        .flat_map(|e| {
            let mut v = (e.len() as u32).to_le_bytes().to_vec();
            v.extend_from_slice(e.as_bytes());
            v
        })
        .collect()
}

fn binary_input(name: &str, datatype: &str, shape: &[usize], size: usize) -> Json {
    json!({"name": name, "datatype": datatype, "shape": shape,
           "parameters": {"binary_data_size": size}})
}

/// The JSON header then the binary part; and the header's length.
fn framed(header: &Json, binary: &[u8]) -> (Vec<u8>, usize) {
    let mut body = serde_json::to_vec(header).unwrap();
    let n = body.len();
    body.extend_from_slice(binary);
    (body, n)
}

/// Posts `body` with `Inference-Header-Content-Length: length`, spelled as tritonclient does.
fn post_framed(s: &Stream, path: &str, body: &[u8], length: &str) -> (Action, Action) {
    let mut headers = post_headers(path, body.len());
    headers.push(("Inference-Header-Content-Length", length.to_string()));
    let h = s.request_headers(&headers, false);
    let b = s.request_body(body, true);
    (h, b)
}

/// What the model receives: the JSON header and the binary part, after checking that the
/// header length and `content-length` describe the forwarded body.
fn received(s: &Stream) -> (Json, Vec<u8>) {
    let body = s.request_body_bytes();
    assert_eq!(
        s.request_header("content-length"),
        Some(body.len().to_string())
    );
    let n: usize = s
        .request_header("inference-header-content-length")
        .expect("the header length goes on")
        .parse()
        .unwrap();
    let (h, b) = body.split_at(n);
    let header = serde_json::from_slice(h)
        .unwrap_or_else(|e| panic!("the JSON header is not JSON ({e}): {h:?}"));
    (header, b.to_vec())
}

fn names(v: &Json) -> Vec<&str> {
    v["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

#[test]
fn binary_bytes_ids_features_in_the_header_client_data_unchanged_forged_dropped() {
    let host = host_with(&snapshot_with(v2_route));
    let amount: Vec<u8> = [12.5f32, 3.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    let ids = bytes_data(&["u1", "u2"]);
    let forged: Vec<u8> = [99i64, 99].iter().flat_map(|i| i.to_le_bytes()).collect();
    let note = bytes_data(&["\u{0}x", ""]);
    let header = json!({
        "inputs": [
            binary_input("amount", "FP32", &[2], amount.len()),
            binary_input("user_id", "BYTES", &[2], ids.len()),
            binary_input("profile__age", "INT64", &[2], forged.len()),
            {"name": "txn__count", "datatype": "INT64", "shape": [2], "data": [5, 5]},
            binary_input("note", "BYTES", &[2], note.len()),
        ],
        "parameters": {"binary_data_output": true},
    });
    let (body, n) = framed(&header, &[&amount[..], &ids, &forged, &note].concat());
    let s = host.stream();
    assert_eq!(
        post_framed(&s, V2_PATH, &body, &n.to_string()),
        (Action::Pause, Action::Pause),
        "log:\n{}",
        host.log_text()
    );
    assert_eq!(asked_keys(&host, &s), ["u1", "u2"]);
    answer(
        &host,
        &s,
        vec![good_vector(30, NOW_US), good_vector(41, NOW_US)],
    );
    assert!(s.resumed(), "log:\n{}", host.log_text());
    let (v, binary) = received(&s);
    assert_eq!(
        binary,
        [&amount[..], &ids, &note].concat(),
        "the client's binary data, less the forged tensor's"
    );
    assert_eq!(
        names(&v),
        [
            "amount",
            "user_id",
            "note",
            "profile__age",
            "profile__score",
            "txn__count"
        ]
    );
    assert_eq!(v["inputs"][0], header["inputs"][0]);
    assert_eq!(v["inputs"][2], header["inputs"][4]);
    assert_eq!(ints(&v["inputs"][3]["data"]), [30, 41]);
    assert_eq!(ints(&v["inputs"][5]["data"]), [9, 9]);
    assert_eq!(v["parameters"]["binary_data_output"], true);
    assert_eq!(v["parameters"]["ferry_fingerprint"], FP_HEX);
    assert_summary(&s, 2, 0, 0, "ok");
    assert_clean(&host);
}

#[test]
fn binary_int64_ids_and_packed_features() {
    let host = int64_keyed_host(packed_v2_route);
    let ids: Vec<u8> = [7i64, -2].iter().flat_map(|i| i.to_le_bytes()).collect();
    let forged = vec![0u8; 24];
    let header = json!({"inputs": [
        binary_input("user_id", "INT64", &[2, 1], ids.len()),
        binary_input("ferry_features", "FP32", &[2, 3], forged.len()),
    ]});
    let (body, n) = framed(&header, &[&ids[..], &forged].concat());
    let s = host.stream();
    post_framed(&s, V2_PATH, &body, &n.to_string());
    assert_eq!(asked_keys(&host, &s), ["7", "-2"]);
    answer(
        &host,
        &s,
        vec![good_vector(30, NOW_US), good_vector(41, NOW_US)],
    );
    let (v, binary) = received(&s);
    assert_eq!(
        binary, ids,
        "the ids stay binary; the forged packed tensor is gone"
    );
    assert_eq!(names(&v), ["user_id", "ferry_features"]);
    assert_eq!(
        floats(&v["inputs"][1]["data"]),
        [30.0, 0.25, 9.0, 41.0, 0.25, 9.0]
    );
    assert_clean(&host);
}

#[test]
fn a_degraded_forward_keeps_the_framing_right() {
    let host = host_with(&snapshot_with(|r| {
        v2_route(r);
        r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32;
    }));
    let ids = bytes_data(&["u1"]);
    let header = json!({"inputs": [binary_input("user_id", "BYTES", &[1], ids.len())]});
    let (body, n) = framed(&header, &ids);
    let s = host.stream();
    post_framed(&s, V2_PATH, &body, &n.to_string());
    s.call_failure(the_call(&host).token);
    assert!(s.resumed(), "log:\n{}", host.log_text());
    let (v, binary) = received(&s);
    assert_eq!(binary, ids);
    assert_eq!(ints(&v["inputs"][1]["data"]), [0], "profile__age null: 0");
    assert_eq!(
        s.request_header("x-ferry-status").as_deref(),
        Some("degraded")
    );
    assert_clean(&host);
}

#[test]
fn bad_framing_is_refused_before_any_reader_call() {
    let host = host_with(&snapshot_with(v2_route));
    let ids = bytes_data(&["u1", "u2"]);
    let header = json!({"inputs": [binary_input("user_id", "BYTES", &[2], ids.len())]});
    let (body, n) = framed(&header, &ids);
    let mut long_element = body.clone();
    long_element[n + 6] = 9; // the second element's length, past the tensor's end
    let cases: Vec<(Vec<u8>, String, &str)> = vec![
        (
            body.clone(),
            (body.len() + 1).to_string(),
            "but the body has only",
        ),
        (body.clone(), "12abc".into(), "must be a byte count"),
        (
            body[..body.len() - 1].to_vec(),
            n.to_string(),
            "runs past the end",
        ),
        (
            [&body[..], b"!"].concat(),
            n.to_string(),
            "add up to 12 bytes",
        ),
        (long_element, n.to_string(), "BYTES element 1 of 9 bytes"),
    ];
    for (body, length, says) in cases {
        let s = host.stream();
        post_framed(&s, V2_PATH, &body, &length);
        let e = assert_error(&s, 400, "bad_binary_framing", "fraud");
        assert_says(&e, says);
    }
    // Twice: Ferry and the model could each read a different one.
    let s = host.stream();
    let mut headers = post_headers(V2_PATH, body.len());
    headers.push(("inference-header-content-length", n.to_string()));
    headers.push(("inference-header-content-length", "0".into()));
    s.request_headers(&headers, false);
    assert_error(&s, 400, "bad_binary_framing", "fraud");
    assert!(host.dispatched_calls().is_empty(), "no reader call");
    assert_clean(&host);
}

#[test]
fn on_a_kserve_v1_route_the_header_changes_nothing() {
    let host = host();
    // A framed body there is the route's format, wrongly: malformed JSON.
    let ids = bytes_data(&["u1"]);
    let (body, n) = framed(&json!({"instances": [{"user_id": "u1"}]}), &ids);
    let s = host.stream();
    post_framed(&s, PATH, &body, &n.to_string());
    assert_error(&s, 400, "malformed_json", "fraud");
    // A JSON body goes on enriched, without the header (it would misdescribe the new body).
    let body = kserve_body(&["u1"]);
    let s = host.stream();
    post_framed(&s, PATH, body.as_bytes(), "5");
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    assert!(s.resumed(), "log:\n{}", host.log_text());
    assert_eq!(s.request_header("inference-header-content-length"), None);
    assert_eq!(body_json(&s)["instances"][0]["profile__age"], 30);
    assert_clean(&host);
}
