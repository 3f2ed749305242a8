//! ABI tests of the ways around the filter that issue #9 closed, on the built .wasm: a body
//! that ends with trailers instead of a last data frame, a path under a protected prefix that
//! no route matches, and Ferry-owned headers a client sends on a request no route takes.

use ferry_protos::v1 as pb;
use ferry_wasm_host::{Action, Host, Stream};

use super::support::*;

/// A POST whose headers and data frames all leave the stream open: trailers will end it.
fn post_open(host: &Host, path: &str, chunks: &[&[u8]], extra: &[(&str, &str)]) -> Stream {
    let s = host.stream();
    let len = chunks.iter().map(|c| c.len()).sum();
    let mut h = post_headers(path, len);
    h.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    assert_eq!(s.request_headers(&h, false), Action::Pause);
    for c in chunks {
        assert_eq!(s.request_body(c, false), Action::Pause);
    }
    s
}

#[test]
fn a_body_ending_with_trailers_is_enriched_through_one_reader_call() {
    let host = host();
    let body =
        r#"{"instances":[{"user_id":"u1","profile__age":999},{"user_id":"u2"}],"ferry":"forged"}"#;
    let (a, b) = body.as_bytes().split_at(30);
    let s = post_open(&host, PATH, &[a, b], &[("x-ferry-status", "forged")]);
    assert!(
        host.dispatched_calls().is_empty(),
        "no end of stream yet: the body may go on"
    );
    assert_eq!(
        s.request_trailers(&[("x-checksum", "abc")]),
        Action::Pause,
        "the trailers wait for the reader"
    );
    the_call(&host);
    assert_eq!(asked_keys(&host, &s), ["u1", "u2"]);
    assert!(s.paused() && !s.resumed() && !s.forwarded());

    answer(
        &host,
        &s,
        vec![good_vector(30, NOW_US), good_vector(41, NOW_US)],
    );
    assert!(s.resumed() && s.forwarded(), "log:\n{}", host.log_text());
    assert!(s.local_reply().is_none());
    let out = body_json(&s);
    assert_eq!(out["instances"][0]["profile__age"], 30, "{out}");
    assert_eq!(out["instances"][1]["profile__age"], 41);
    assert_eq!(out["instances"][0]["txn__count"], 9);
    assert_eq!(
        out["ferry"]["service"], "scoring",
        "the client's ferry replaced"
    );
    assert_summary(&s, 2, 0, 0, "ok");
    assert_eq!(
        s.request_trailer_map(),
        [("x-checksum".to_string(), "abc".to_string())],
        "the trailers go on untouched"
    );
    assert_eq!(host.dispatched_calls().len(), 1);
    assert_clean(&host);
}

#[test]
fn a_malformed_body_ending_with_trailers_is_answered_and_never_resumed() {
    let host = host();
    let s = post_open(&host, PATH, &[b"{\"instances\":", b"[oops"], &[]);
    assert_eq!(s.request_trailers(&[("x-checksum", "abc")]), Action::Pause);
    assert_error(&s, 400, "malformed_json", "fraud");
    assert!(host.dispatched_calls().is_empty(), "no reader call");
    assert!(!s.resumed() && !s.forwarded());
    assert_clean(&host);

    // Trailers right after the headers: a body route got no body.
    let s = post_open(&host, PATH, &[], &[]);
    assert_eq!(s.request_trailers(&[("x-checksum", "abc")]), Action::Pause);
    assert_error(&s, 400, "no_body", "fraud");
    assert!(!s.forwarded());
    assert_clean(&host);
}

#[test]
fn header_mode_holds_the_trailers_while_its_reader_call_is_out() {
    let host = host_with(&snapshot_with(super::header_mode::header_route));
    let s = host.stream();
    let mut h = super::header_mode::get_headers(&[("x-user-id", b"u1")]);
    h[0].1 = b"POST".to_vec();
    assert_eq!(s.request_headers(&h, false), Action::Pause);
    assert_eq!(s.request_body(b"\0\0\0\0\x01x", false), Action::Pause);
    assert_eq!(s.request_trailers(&[("grpc-timeout", "1S")]), Action::Pause);
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    assert!(s.resumed() && s.forwarded());
    assert!(s.request_header("x-ferry-features").is_some());
    assert_eq!(s.request_body_bytes(), b"\0\0\0\0\x01x", "body untouched");
    assert_clean(&host);
}

fn protected() -> pb::Snapshot {
    let mut snap = snapshot();
    snap.protected_paths = vec!["/v1/models/".into()];
    snap
}

#[test]
fn an_unmatched_path_under_a_protected_prefix_is_refused_404_no_route() {
    let host = host_with(&protected());
    for path in [
        "/v1/models/other:predict",
        // Protected prefixes are compared without case; route paths exactly.
        "/V1/Models/fraud:predict",
        // Not the route's path to the filter (an escaped slash is not a `/`).
        "/v1/models%2Ffraud:predict",
        "/v1/models/x/../other",
    ] {
        let protected_path = !path.contains("%2F");
        let s = host.stream();
        let body = kserve_body(&["u1"]);
        let action = s.request_headers(&post_headers(path, body.len()), false);
        if !protected_path {
            // Outside the prefix once normalised (`/v1/models%2Ffraud:predict`): passes.
            assert_eq!(action, Action::Continue, "{path}");
            assert!(s.local_reply().is_none());
            continue;
        }
        assert_eq!(action, Action::Pause, "{path}");
        let json = assert_error(&s, 404, "no_route", "");
        assert_says(&json, "/v1/models/");
        // Envoy delivers nothing more after a local reply.
        assert_eq!(s.request_body(body.as_bytes(), true), Action::Pause);
        assert!(!s.forwarded(), "{path}");
    }
    assert!(host.dispatched_calls().is_empty());

    // Spellings of the route's own path are the route's: enriched, not refused.
    for path in ["/v1/models/fr%61ud:predict", "/v1//models/./fraud:predict"] {
        let s = host.stream();
        let body = kserve_body(&["u1"]);
        assert_eq!(
            post(&s, path, body.as_bytes()),
            (Action::Pause, Action::Pause)
        );
        assert!(s.local_reply().is_none(), "{path}");
        answer(&host, &s, vec![good_vector(30, NOW_US)]);
        assert!(s.resumed(), "{path}");
        assert_eq!(body_json(&s)["instances"][0]["profile__age"], 30);
    }
    assert_clean(&host);
}

#[test]
fn forged_ferry_headers_on_an_unmatched_path_are_removed() {
    let mut snap = protected();
    // A header route's custom features header is Ferry's too, on every request.
    let mut header = snap.routes[0].clone();
    super::header_mode::header_route(&mut header);
    header.name = "by-header".into();
    header.features_header = "model-features".into();
    snap.routes.push(header);
    let host = host_with(&snap);
    let s = host.stream();
    let h = [
        (":method", "GET"),
        (":path", "/healthz"),
        (":authority", "models.example"),
        ("x-ferry-status", "ok"),
        ("x-ferry-features", r#"{"profile__age":999}"#),
        ("model-features", r#"{"profile__age":999}"#),
        ("x-request-id", "r1"),
    ];
    assert_eq!(s.request_headers(&h, true), Action::Continue);
    assert!(s.forwarded() && s.local_reply().is_none());
    assert_eq!(s.request_header("x-ferry-status"), None);
    assert_eq!(s.request_header("x-ferry-features"), None);
    assert_eq!(s.request_header("model-features"), None);
    assert_eq!(s.request_header("x-request-id").as_deref(), Some("r1"));
    assert_eq!(s.request_header(":path").as_deref(), Some("/healthz"));
    assert!(host.dispatched_calls().is_empty());
    assert_clean(&host);
}
