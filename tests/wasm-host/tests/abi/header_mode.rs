//! ABI tests of header mode: one entity whose ids are request headers, its features written to
//! one request header as compact ASCII JSON; the body is never touched; a features header over
//! the route's bound is an error, never cut; a client's own features header never reaches the
//! model. Policies: `format_policies`.

use ferry_protos::v1 as pb;
use ferry_test_support::snapshot::{header_format, key, prefix};
use ferry_wasm_host::{Action, Host, Stream};
use serde_json::{json, Value as Json};

use super::support::*;

pub const HEADER_PATH: &str = "/grpc/fraud.Scorer/Score";

/// The fixture's route in header mode on `/grpc/fraud`, id in `x-user-id`.
pub fn header_route(r: &mut pb::Route) {
    header_format(r);
    r.r#match = prefix("/grpc/fraud");
}

pub fn get_headers(extra: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
    let mut h: Vec<(String, Vec<u8>)> = vec![
        (":method".into(), b"GET".to_vec()),
        (":path".into(), HEADER_PATH.as_bytes().to_vec()),
        (":authority".into(), b"models.example".to_vec()),
    ];
    h.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_vec())));
    h
}

/// A GET (no body) with these extra headers; returns the stream and the headers' action.
fn get(host: &Host, extra: &[(&str, &[u8])]) -> (Stream, Action) {
    let s = host.stream();
    let a = s.request_headers(&get_headers(extra), true);
    (s, a)
}

/// A header value that is printable ASCII (no CR, LF or other control byte), parsed as JSON.
fn ascii_json(s: &Stream, name: &str) -> Json {
    let raw = s
        .request_header_map()
        .into_iter()
        .filter(|(n, _)| n == name)
        .map(|(_, v)| v)
        .collect::<Vec<_>>();
    assert_eq!(raw.len(), 1, "exactly one {name} header: {raw:?}");
    let v = &raw[0];
    assert!(
        v.bytes().all(|b| (0x20..0x7f).contains(&b)),
        "{name} is printable ASCII: {v:?}"
    );
    serde_json::from_str(v).unwrap_or_else(|e| panic!("{name} is not JSON ({e}): {v}"))
}

#[test]
fn header_mode_writes_features_to_a_header_as_compact_json() {
    let host = host_with(&snapshot_with(header_route));
    let (s, a) = get(
        &host,
        &[
            ("x-user-id", b"u1"),
            ("x-ferry-features", br#"{"profile__age":999}"#),
            ("x-ferry-feature-status", b"{}"),
            ("x-ferry-status", b"ok"),
        ],
    );
    assert_eq!(a, Action::Pause);
    assert_eq!(
        s.request_header("x-ferry-features"),
        None,
        "the client's features header is removed before anything else"
    );
    assert_eq!(asked_keys(&host, &s), ["u1"]);
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    assert!(s.resumed(), "log:\n{}", host.log_text());
    assert!(s.forwarded() && s.local_reply().is_none());
    assert_eq!(
        ascii_json(&s, "x-ferry-features"),
        json!({"profile__age": 30, "profile__score": 0.25, "txn__count": 9})
    );
    assert_eq!(
        s.request_header("x-ferry-feature-status"),
        None,
        "every feature PRESENT: no status header (the client's is gone)"
    );
    assert_summary(&s, 1, 0, 0, "ok");
    assert_eq!(
        s.request_header("content-length"),
        None,
        "no body, none added"
    );
    assert!(s.request_body_bytes().is_empty());
    assert_eq!(s.request_header("x-user-id").as_deref(), Some("u1"));
    assert_clean(&host);
}

#[test]
fn header_mode_custom_features_header_replaces_the_clients() {
    let host = host_with(&snapshot_with(|r| {
        header_route(r);
        r.features_header = "X-Model-Features".into();
    }));
    let (s, _) = get(
        &host,
        &[
            ("x-user-id", b"u1"),
            ("x-model-features", br#"{"profile__age":999}"#),
            ("x-model-features", b"second"),
        ],
    );
    assert_eq!(
        s.request_header("x-model-features"),
        None,
        "all copies removed"
    );
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    assert_eq!(ascii_json(&s, "x-model-features")["profile__age"], 30);
    assert_eq!(s.request_header("x-ferry-features"), None);
    assert_clean(&host);
}

#[test]
fn header_mode_enriches_any_method_and_leaves_the_body_alone() {
    let host = host_with(&snapshot_with(header_route));
    let body = b"\x00\x00\x00\x00\x05hello"; // a gRPC frame: not JSON, never read
    let s = host.stream();
    let mut headers = get_headers(&[
        ("x-user-id", b"u1"),
        ("content-type", b"application/grpc"),
        ("content-length", b"10"),
    ]);
    headers[0].1 = b"POST".to_vec();
    assert_eq!(s.request_headers(&headers, false), Action::Pause);
    assert_eq!(asked_keys(&host, &s), ["u1"]);
    // The reader answers before the body arrives.
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    assert!(s.resumed());
    assert_eq!(s.request_body(body, true), Action::Continue);
    assert_eq!(s.request_body_bytes(), body);
    assert_eq!(s.request_header("content-length").as_deref(), Some("10"));
    assert_eq!(ascii_json(&s, "x-ferry-features")["txn__count"], 9);
    assert_clean(&host);
}

#[test]
fn header_mode_int64_and_composite_ids_from_headers() {
    let mut snap = snapshot_with(header_route);
    snap.services[0]
        .entity_keys
        .push(key("merchant_id", pb::ValueType::Int64));
    snap.routes[0].entity_fields = vec!["x-user-id".into(), "x-merchant".into()];
    let host = host_with(&snap);
    let sep = ferry_protos::ENTITY_KEY_SEPARATOR;
    for (merchant, key) in [(&b"42"[..], "42"), (b" -7 ", "-7")] {
        let (s, a) = get(&host, &[("x-user-id", b"u1"), ("x-merchant", merchant)]);
        assert_eq!(a, Action::Pause);
        assert_eq!(asked_keys(&host, &s), [format!("u1{sep}{key}")]);
        answer(&host, &s, vec![good_vector(1, NOW_US)]);
        assert!(s.resumed());
    }
    let calls = host.dispatched_calls().len();
    for (extra, code) in [
        (vec![("x-user-id", &b"u1"[..])], "missing_entity_id"),
        (
            vec![("x-user-id", &b"u1"[..]), ("x-merchant", b"4x")],
            "invalid_entity_id",
        ),
        (
            vec![("x-user-id", &b"u1"[..]), ("x-merchant", b"1.5")],
            "invalid_entity_id",
        ),
    ] {
        let (s, a) = get(&host, &extra);
        assert_eq!(a, Action::Pause);
        let err = assert_error(&s, 400, code, "fraud");
        assert_says(&err, "x-merchant");
    }
    assert_eq!(host.dispatched_calls().len(), calls, "no reader call");
    assert_clean(&host);
}

#[test]
fn header_mode_bad_ids_are_400_without_a_reader_call() {
    let host = host_with(&snapshot_with(header_route));
    let long = vec![b'x'; 257];
    type Headers<'a> = Vec<(&'a str, &'a [u8])>;
    let cases: Vec<(Headers, &str)> = vec![
        (vec![], "missing_entity_id"),
        (vec![("x-user", b"u1")], "missing_entity_id"),
        (vec![("x-user-id", b"")], "invalid_entity_id"),
        (vec![("x-user-id", b"Z\xfcrich")], "invalid_entity_id"),
        (vec![("x-user-id", b"a\tb")], "invalid_entity_id"),
        (vec![("x-user-id", &long)], "invalid_entity_id"),
    ];
    for (extra, code) in cases {
        let (s, a) = get(&host, &extra);
        assert_eq!(a, Action::Pause);
        assert_error(&s, 400, code, "fraud");
    }
    assert!(host.dispatched_calls().is_empty());
    assert_clean(&host);
}

#[test]
fn header_mode_values_are_ascii_json_and_never_carry_cr_or_lf() {
    let host = host_with(&typed_snapshot(header_route));
    let (s, _) = get(&host, &[("x-user-id", b"u1")]);
    let city = "Zürich\r\nx-injected: 1\u{0}\u{1b}😀";
    let more = More {
        active: Some(true),
        city: Some(city.into()),
        ratio: Some(-0.5),
        rank: Some(3),
        emb: Some(vec![0.5, -1.25]),
        blob: Some(b"\r\n".to_vec()),
    };
    answer(&host, &s, vec![typed_vector(30, more)]);
    assert!(s.resumed(), "log:\n{}", host.log_text());
    let v = ascii_json(&s, "x-ferry-features");
    assert_eq!(v["more__city"], city, "the value survives, escaped");
    assert_eq!(v["more__blob"], "DQo=", "bytes as base64");
    assert_eq!(v["more__active"], true);
    assert_eq!(v["more__rank"], 3);
    assert_eq!(floats(&v["more__emb"]), [0.5, -1.25]);
    assert_eq!(v["more__ratio"].as_f64(), Some(-0.5));
    assert_eq!(v.as_object().unwrap().len(), 9);
    assert_eq!(s.request_header("x-injected"), None);
    for (name, value) in s.request_header_map() {
        assert!(
            !value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0),
            "{name}: {value:?}"
        );
    }
    assert_clean(&host);
}

#[test]
fn header_mode_features_over_the_header_bound_are_an_error_never_cut() {
    let host = host_with(&snapshot_with(|r| {
        header_route(r);
        r.max_header_bytes = 40;
    }));
    let (s, _) = get(&host, &[("x-user-id", b"u1")]);
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    let err = assert_error(&s, 502, "features_too_large", "fraud");
    assert_says(&err, "40");
    assert_eq!(s.request_header("x-ferry-features"), None);

    // The default bound (8 KiB).
    let host = host_with(&typed_snapshot(header_route));
    let big = More {
        city: Some("x".repeat(9000)),
        ..More::nulls()
    };
    let (s, _) = get(&host, &[("x-user-id", b"u1")]);
    answer(&host, &s, vec![typed_vector(1, big)]);
    let err = assert_error(&s, 502, "features_too_large", "fraud");
    assert_says(&err, "8192");
    let fits = More {
        city: Some("x".repeat(7000)),
        ..More::nulls()
    };
    let (s, _) = get(&host, &[("x-user-id", b"u1")]);
    answer(&host, &s, vec![typed_vector(1, fits)]);
    assert!(s.resumed());
    assert_eq!(
        ascii_json(&s, "x-ferry-features")["more__city"]
            .as_str()
            .map(str::len),
        Some(7000),
        "under the bound: whole"
    );
    assert_clean(&host);
}

#[test]
fn header_mode_on_other_paths_removes_the_clients_ferry_headers() {
    let host = host_with(&snapshot_with(header_route));
    let s = host.stream();
    let headers = [
        (":method", "GET"),
        (":path", "/healthz"),
        (":authority", "m"),
        ("x-user-id", "u1"),
        ("x-ferry-features", "client"),
    ];
    assert_eq!(s.request_headers(&headers, true), Action::Continue);
    // Matched or not, a client's value never goes on under a header Ferry writes.
    assert_eq!(s.request_header("x-ferry-features"), None);
    assert_eq!(s.request_header("x-user-id").as_deref(), Some("u1"));
    assert!(host.dispatched_calls().is_empty());
    assert_clean(&host);
}

/// A string feature holding U+007F (DEL): JSON does not escape it, and DEL is not allowed in
/// an HTTP field value (RFC 9110 field-vchar = VCHAR / obs-text; VCHAR is 0x21-0x7E).
#[test]
fn del_is_escaped_in_the_features_header() {
    let host = host_with(&typed_snapshot(header_route));
    let s = host.stream();
    s.request_headers(&get_headers(&[("x-user-id", b"u1")]), true);
    let more = More {
        city: Some("a\u{7f}b".into()),
        ..More::nulls()
    };
    answer(&host, &s, vec![typed_vector(30, more)]);
    assert!(s.resumed());
    let v = s.request_header("x-ferry-features").unwrap();
    assert!(
        !v.bytes().any(|b| b == 0x7f),
        "raw DEL in the header value: {v:?}"
    );
    let j: Json = serde_json::from_str(&v).unwrap();
    assert_eq!(j["more__city"], "a\u{7f}b");
}

/// Header mode with a request body (gRPC, POST): the body arrives while the reader call is in
/// flight. Envoy continues the headers when a body callback returns Continue, so the filter
/// must keep the stream paused until it has written the features header.
#[test]
fn a_body_arriving_before_the_reader_answers_waits() {
    let host = host_with(&snapshot_with(header_route));
    let s = host.stream();
    let mut headers = get_headers(&[("x-user-id", b"u1"), ("content-type", b"application/grpc")]);
    headers[0].1 = b"POST".to_vec();
    assert_eq!(s.request_headers(&headers, false), Action::Pause);
    let body = b"\x00\x00\x00\x00\x05hello";
    let a = s.request_body(body, true);
    assert_eq!(a, Action::Pause, "the request must wait for the features");
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    assert!(s.resumed());
    assert!(s.request_header("x-ferry-features").is_some());
    assert_eq!(s.request_body_bytes(), body);
    assert_clean(&host);
}
