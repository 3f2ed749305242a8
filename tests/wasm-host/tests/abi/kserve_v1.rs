//! ABI tests of today's filter (KServe v1): the built .wasm in the wasmtime host, driven the way
//! Envoy drives it. Each test checks what the filter did through the ABI only: the call it
//! dispatched, the body and headers it left, its local reply, whether it resumed.

use super::support::*;
use ferry_protos::v1::{self as pb, value::Kind, VectorRequest};
use ferry_wasm_host::{Action, Host};
use prost::Message;
use serde_json::{json, Value as Json};

fn assert_clean(host: &Host) {
    assert!(host.abi_errors().is_empty(), "{:?}", host.abi_errors());
    assert!(host.dead().is_none());
}

/// Sends a KServe body, then answers the reader call with `vectors`.
fn enrich_with(host: &Host, body: &str, vectors: Vec<Vec<u8>>) -> ferry_wasm_host::Stream {
    let s = host.stream();
    assert_eq!(
        post(&s, PATH, body.as_bytes()),
        (Action::Pause, Action::Pause)
    );
    let call = host.dispatched_calls().pop().expect("a reader call");
    s.call_response(call.token, &[(":status", "200")], &reader_response(vectors));
    s
}

fn body_json(s: &ferry_wasm_host::Stream) -> Json {
    serde_json::from_slice(&s.request_body_bytes()).expect("the forwarded body is JSON")
}

#[test]
fn request_is_enriched_through_one_dispatched_call() {
    let host = host();
    let s = host.stream();
    let body = r#"{"instances":[{"user_id":"u1","amount":12.5,"profile__age":999},{"user_id":"u2"}],"ferry":"forged"}"#;
    let mut headers = post_headers(PATH, body.len());
    headers.push(("x-ferry-status", "forged".into()));
    headers.push(("x-ferry-fingerprint", "forged".into()));
    assert_eq!(s.request_headers(&headers, false), Action::Pause);
    // Streamed in two chunks: the filter waits for the whole body.
    let (a, b) = body.as_bytes().split_at(20);
    assert_eq!(s.request_body(a, false), Action::Pause);
    assert!(host.dispatched_calls().is_empty());
    assert_eq!(s.request_body(b, true), Action::Pause);

    let call = the_call(&host);
    assert_eq!(call.cluster, "ferry_reader");
    assert_eq!(call.header(":method"), Some("POST"));
    assert_eq!(call.header(":path"), Some("/v1/vectors"));
    assert_eq!(call.header(":authority"), Some("ferry-reader"));
    assert_eq!(call.header("content-type"), Some("application/x-protobuf"));
    assert_eq!(call.timeout_ms, 100);
    let req = VectorRequest::decode(call.body.as_slice()).expect("a VectorRequest");
    assert_eq!(
        req,
        VectorRequest {
            project: "banking".into(),
            lookups: vec![pb::Lookup {
                feast: None,
                service: "scoring".into(),
                fingerprint: FP,
                entity_keys: vec!["u1".into(), "u2".into()],
            }],
        }
    );
    assert!(s.paused() && !s.resumed());

    s.call_response(
        call.token,
        &[
            (":status", "200"),
            ("content-type", "application/x-protobuf"),
        ],
        &reader_response(vec![good_vector(30, NOW_US), good_vector(41, NOW_US)]),
    );
    assert!(s.resumed(), "log:\n{}", host.log_text());
    assert!(s.local_reply().is_none());
    let out = s.request_body_bytes();
    assert_eq!(
        s.request_header("content-length"),
        Some(out.len().to_string())
    );
    let v = body_json(&s);
    assert_eq!(
        v["instances"][0],
        json!({"user_id": "u1", "amount": 12.5, "profile__age": 30, "profile__score": 0.25, "txn__count": 9}),
        "the client's forged feature is overwritten, its own fields kept"
    );
    assert_eq!(v["instances"][1]["profile__age"], 41);
    assert_eq!(
        v["ferry"],
        json!({"service": "scoring", "fingerprint": FP_HEX, "statuses": [{}, {}]})
    );
    for (name, want) in [
        ("x-ferry-service", "scoring"),
        ("x-ferry-fingerprint", FP_HEX),
        ("x-ferry-entities", "2"),
        ("x-ferry-missing", "0"),
        ("x-ferry-stale", "0"),
        ("x-ferry-status", "ok"),
    ] {
        assert_eq!(s.request_header(name).as_deref(), Some(want), "{name}");
    }
    let forged = s
        .request_header_map()
        .into_iter()
        .filter(|(_, v)| v == "forged")
        .count();
    assert_eq!(forged, 0, "client x-ferry-* headers are removed");
    assert!(host.pending_calls().is_empty());
    assert_clean(&host);
    s.finish();
}

#[test]
fn one_reader_call_per_request_and_streams_do_not_mix() {
    let host = host();
    let (s1, s2) = (host.stream(), host.stream());
    post(&s1, PATH, kserve_body(&["a"]).as_bytes());
    post(&s2, PATH, kserve_body(&["b", "c"]).as_bytes());
    let calls = host.dispatched_calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (calls[0].context_id, calls[1].context_id),
        (s1.id(), s2.id())
    );
    // Answered out of order: each answer reaches the stream that asked.
    s2.call_response(
        calls[1].token,
        &[(":status", "200")],
        &reader_response(vec![good_vector(2, NOW_US), good_vector(3, NOW_US)]),
    );
    s1.call_response(
        calls[0].token,
        &[(":status", "200")],
        &reader_response(vec![good_vector(1, NOW_US)]),
    );
    assert_eq!(body_json(&s1)["instances"][0]["profile__age"], 1);
    assert_eq!(body_json(&s2)["instances"][1]["profile__age"], 3);
    assert_clean(&host);
}

#[test]
fn malformed_json_is_answered_400_without_a_reader_call() {
    let host = host();
    let s = host.stream();
    assert_eq!(
        post(&s, PATH, b"{\"instances\": [{\"user_id\": "),
        (Action::Pause, Action::Pause)
    );
    assert_error(&s, 400, "malformed_json", "fraud");
    assert!(host.dispatched_calls().is_empty());
    for (body, code) in [
        (&b"[1,2]"[..], "bad_request_shape"),
        (br#"{"instances": []}"#, "no_entities"),
        (br#"{"instances": [{"id": "x"}]}"#, "missing_entity_id"),
        (br#"{"instances": [{"user_id": 7}]}"#, "invalid_entity_id"),
    ] {
        let s = host.stream();
        post(&s, PATH, body);
        assert_error(&s, 400, code, "fraud");
    }
    let s = host.stream();
    assert_eq!(
        s.request_headers(&post_headers(PATH, 0), true),
        Action::Pause
    );
    assert_error(&s, 400, "no_body", "fraud");
    assert_clean(&host);
}

#[test]
fn body_over_the_limit_by_content_length_is_413_before_any_body() {
    let host = host();
    let s = host.stream();
    let headers = post_headers(PATH, MAX_BODY + 1);
    assert_eq!(s.request_headers(&headers, false), Action::Pause);
    let json = assert_error(&s, 413, "body_too_large", "fraud");
    assert_says(&json, "4097");
    // Envoy delivers nothing more on an answered stream.
    assert_eq!(s.request_body(b"{}", true), Action::Pause);
    assert!(host.dispatched_calls().is_empty());
    assert_clean(&host);
}

#[test]
fn body_over_the_limit_while_streaming_is_413() {
    let host = host();
    let s = host.stream();
    let mut headers = post_headers(PATH, 0);
    headers.retain(|(n, _)| *n != "content-length"); // chunked
    assert_eq!(s.request_headers(&headers, false), Action::Pause);
    let chunk = vec![b' '; 2000];
    assert_eq!(s.request_body(&chunk, false), Action::Pause);
    assert_eq!(s.request_body(&chunk, false), Action::Pause);
    assert!(s.local_reply().is_none(), "4000 bytes are within the limit");
    s.request_body(&chunk, false);
    assert_error(&s, 413, "body_too_large", "fraud");
    assert!(host.dispatched_calls().is_empty());
    assert_clean(&host);
}

#[test]
fn too_many_entities_is_413() {
    let host = host();
    let s = host.stream();
    let ids: Vec<String> = (0..11).map(|i| format!("u{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    post(&s, PATH, kserve_body(&ids).as_bytes());
    assert_error(&s, 413, "too_many_entities", "fraud");
}

#[test]
fn missing_entity_under_reject_is_404() {
    let host = host();
    let s = enrich_with(
        &host,
        &kserve_body(&["u1", "ghost"]),
        vec![good_vector(1, NOW_US), vec![]],
    );
    let json = assert_error(&s, 404, "entity_not_found", "fraud");
    assert_says(&json, "'ghost'");
    assert_clean(&host);
}

#[test]
fn missing_entity_under_null_is_forwarded_partial() {
    let host = host_with(&snapshot_with(|r| {
        r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32
    }));
    let s = enrich_with(
        &host,
        &kserve_body(&["u1", "ghost"]),
        vec![good_vector(1, NOW_US), vec![]],
    );
    assert!(s.resumed());
    let v = body_json(&s);
    assert_eq!(v["instances"][1]["profile__age"], Json::Null);
    assert_eq!(v["ferry"]["statuses"][1]["txn__count"], "NOT_FOUND");
    assert_eq!(s.request_header("x-ferry-missing").as_deref(), Some("1"));
    assert_eq!(
        s.request_header("x-ferry-status").as_deref(),
        Some("partial")
    );
    assert_clean(&host);
}

#[test]
fn reader_failure_fails_closed_with_503() {
    let host = host();
    let s = host.stream();
    post(&s, PATH, kserve_body(&["u1"]).as_bytes());
    // A reset, a timeout or an unreachable cluster: no headers, no body.
    s.call_failure(the_call(&host).token);
    assert_error(&s, 503, "reader_unavailable", "fraud");

    // The reader's own error, and Envoy's own 504 for the reader cluster.
    for (status, body, want_status, want_code) in READER_ERRORS {
        let s = host.stream();
        post(&s, PATH, kserve_body(&["u1"]).as_bytes());
        let token = host.dispatched_calls().pop().unwrap().token;
        s.call_response(token, &[(":status", status)], body);
        assert_error(&s, want_status, want_code, "fraud");
    }
    assert_clean(&host);
}

#[test]
fn reader_failure_forwards_null_features_when_failing_open() {
    let host = host_with(&snapshot_with(|r| {
        r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32
    }));
    let s = host.stream();
    let body = r#"{"instances":[{"user_id":"u1","profile__age":99}],"ferry":"forged"}"#;
    post(&s, PATH, body.as_bytes());
    s.call_failure(the_call(&host).token);
    assert!(s.resumed(), "log:\n{}", host.log_text());
    assert!(s.local_reply().is_none());
    // Forwarded with every feature null: the client's forged values do not go on.
    let sent: serde_json::Value = serde_json::from_slice(&s.request_body_bytes()).unwrap();
    assert_eq!(sent["instances"][0]["user_id"], "u1");
    assert!(sent["instances"][0]["profile__age"].is_null(), "{sent}");
    assert_eq!(sent["ferry"]["statuses"][0]["profile__age"], "NOT_FOUND");
    assert_eq!(
        s.request_header("content-length"),
        Some(s.request_body_bytes().len().to_string())
    );
    assert_degraded_by(&s, "reader_unavailable");
    assert!(host
        .logs()
        .iter()
        .any(|l| l.level == 3 && l.message.contains("feature reader unavailable")));
    assert_clean(&host);
}

#[test]
fn fingerprint_mismatch_is_502() {
    let host = host();
    let other = vector(
        FP ^ 1,
        vec![(NOW_US, vec![None, None]), (NOW_US, vec![None])],
    );
    let s = enrich_with(&host, &kserve_body(&["u1"]), vec![other]);
    let json = assert_error(&s, 502, "fingerprint_mismatch", "fraud");
    assert_says(&json, FP_HEX);

    let s = enrich_with(&host, &kserve_body(&["u1"]), vec![b"\xff\xff".to_vec()]);
    assert_error(&s, 502, "bad_vector", "fraud");
    let s = enrich_with(
        &host,
        &kserve_body(&["u1", "u2"]),
        vec![good_vector(1, NOW_US)],
    );
    assert_error(&s, 502, "bad_vector", "fraud");
    assert_clean(&host);
}

#[test]
fn unmatched_paths_and_bodiless_methods_pass_through_without_ferry_headers() {
    let host = host();
    let s = host.stream();
    let body = kserve_body(&["u1"]);
    let mut headers = post_headers("/healthz", body.len());
    headers.push(("x-ferry-status", "client".into()));
    assert_eq!(s.request_headers(&headers, false), Action::Continue);
    assert_eq!(s.request_body(body.as_bytes(), true), Action::Continue);
    assert!(s.forwarded());
    assert_eq!(
        s.request_header("x-ferry-status"),
        None,
        "a client's x-ferry-* is removed, matched or not"
    );
    assert_eq!(
        s.request_header("content-length"),
        Some(body.len().to_string())
    );
    assert_eq!(s.request_body_bytes(), body.as_bytes());

    // KServe's model metadata / readiness GET on an enriched path.
    let s = host.stream();
    let get = [
        (":method", "GET"),
        (":path", "/v1/models/fraud"),
        (":authority", "m"),
    ];
    assert_eq!(s.request_headers(&get, true), Action::Continue);
    assert!(s.forwarded() && s.local_reply().is_none());
    assert!(host.dispatched_calls().is_empty());
    assert_clean(&host);
}

#[test]
fn on_configure_refuses_garbage_and_invalid_snapshots_and_keeps_the_last_good_one() {
    let host = Host::load_filter();
    // No snapshot yet: everything passes through.
    let s = host.stream();
    assert_eq!(
        post(&s, PATH, kserve_body(&["u1"]).as_bytes()).0,
        Action::Continue
    );

    assert!(!host.configure(b"\xff\xff\xff garbage"));
    assert!(!host.configure(b""), "an empty snapshot has no project");
    let mut bad = snapshot();
    bad.services[0].fingerprint = 0;
    assert!(!host.configure(&bad.encode_to_vec()));
    let unknown_format = snapshot_with(|r| r.format = 99);
    assert!(!host.configure(&unknown_format.encode_to_vec()));
    let unknown_service = snapshot_with(|r| r.service = "nope".into());
    assert!(!host.configure(&unknown_service.encode_to_vec()));
    assert!(
        host.log_text().contains("unknown service 'nope'"),
        "{}",
        host.log_text()
    );

    assert!(host.configure(&snapshot().encode_to_vec()));
    assert!(!host.configure(b"garbage"));
    // Still the good snapshot.
    let s = enrich_with(&host, &kserve_body(&["u1"]), vec![good_vector(5, NOW_US)]);
    assert_eq!(body_json(&s)["instances"][0]["profile__age"], 5);
    assert_clean(&host);
}

#[test]
fn ttl_is_judged_against_host_time() {
    let written = NOW_US;
    let body = kserve_body(&["u1"]);
    let host = host();

    // Half a day later: txn (ttl 1 day) is fresh.
    host.set_time_us(written + DAY_US / 2);
    let s = enrich_with(&host, &body, vec![good_vector(1, written)]);
    assert_eq!(body_json(&s)["instances"][0]["txn__count"], 9);
    assert_eq!(s.request_header("x-ferry-stale").as_deref(), Some("0"));

    // Two days later: txn is stale (null, OUTSIDE_MAX_AGE); profile (no ttl) never is.
    host.set_time_us(written + 2 * DAY_US);
    let s = enrich_with(&host, &body, vec![good_vector(1, written)]);
    let v = body_json(&s);
    assert_eq!(v["instances"][0]["txn__count"], Json::Null);
    assert_eq!(v["instances"][0]["profile__age"], 1);
    assert_eq!(
        v["ferry"]["statuses"][0],
        json!({"txn__count": "OUTSIDE_MAX_AGE"})
    );
    assert_eq!(s.request_header("x-ferry-stale").as_deref(), Some("1"));
    assert_eq!(
        s.request_header("x-ferry-status").as_deref(),
        Some("partial")
    );

    let strict = host_with(&snapshot_with(|r| {
        r.on_stale = pb::StalePolicy::StaleReject as i32
    }));
    strict.set_time_us(written + 2 * DAY_US);
    let s = enrich_with(&strict, &body, vec![good_vector(1, written)]);
    assert_error(&s, 422, "stale_features", "fraud");
    assert_clean(&host);
}

#[test]
fn null_values_and_defaults() {
    let host = host_with(&snapshot_with(|r| {
        r.on_missing_entity = pb::MissingEntityPolicy::MissingDefault as i32;
        r.feature_names = pb::FeatureNames::Short as i32;
    }));
    let nulls = vector(
        FP,
        vec![
            (NOW_US, vec![Some(Kind::Int64Val(3)), None]),
            (NOW_US, vec![]),
        ],
    );
    let s = enrich_with(&host, &kserve_body(&["u1", "ghost"]), vec![nulls, vec![]]);
    let v = body_json(&s);
    assert_eq!(v["instances"][0]["score"], Json::Null);
    assert_eq!(
        v["ferry"]["statuses"][0],
        json!({"score": "NULL_VALUE", "count": "NOT_FOUND"})
    );
    assert_eq!(v["instances"][1]["age"], -1, "the repo's default");
    assert_clean(&host);
}

/// A request header value that is not UTF-8 (HTTP/1 obs-text such as Latin-1, or any octet in
/// HTTP/2) must not kill the VM: proxy-wasm 0.2.5's string getters unwrap `from_utf8`, so the
/// filter reads header maps as bytes. Found by this host; the request is enriched as usual.
#[test]
fn non_utf8_header_value_does_not_kill_the_vm() {
    let host = host();
    let s = host.stream();
    let body = kserve_body(&["u1"]);
    let mut headers: Vec<(&str, Vec<u8>)> = post_headers(PATH, body.len())
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    headers.push(("x-client-city", b"Z\xfcrich".to_vec()));
    assert_eq!(s.request_headers(&headers, false), Action::Pause);
    assert_eq!(s.request_body(body.as_bytes(), true), Action::Pause);
    assert_eq!(host.dispatched_calls().len(), 1, "enriched as usual");
    assert_clean(&host);
}

#[test]
fn the_client_sees_the_summary_headers_on_the_response() {
    let host = host();
    let s = enrich_with(&host, &kserve_body(&["u1"]), vec![good_vector(1, NOW_US)]);
    let response = [(":status", "200"), ("content-type", "application/json")];
    assert_eq!(s.response_headers(&response, false), Action::Continue);
    assert_eq!(s.response_header("x-ferry-status").as_deref(), Some("ok"));
    assert_eq!(
        s.response_header("x-ferry-fingerprint").as_deref(),
        Some(FP_HEX)
    );
    assert_eq!(s.response_body(b"{}", true), Action::Continue);
    assert_clean(&host);
}
