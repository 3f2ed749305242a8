//! ABI tests of route selection (host and header conditions, a route named by the Envoy route's
//! metadata through the `xds.route_metadata` property), of a route enriching from two services
//! in one reader call, and of header mode's base64-protobuf encoding.

use base64::Engine;
use ferry_protos::v1::{self as pb, value::Kind};
use ferry_test_support::snapshot::with_merchant;
use ferry_test_support::{reader, vector};
use ferry_wasm_host::Action;
use prost::Message;

use super::support::*;

const METADATA_ROUTE: [&str; 5] = ["xds", "route_metadata", "filter_metadata", "ferry", "route"];

fn headers(path: &str, body_len: usize, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = post_headers(path, body_len)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    for (k, v) in extra {
        h.retain(|(n, _)| n != k);
        h.push((k.to_string(), v.to_string()));
    }
    h
}

/// The route that took a malformed body (named in the JSON error), or None if it passed.
fn route_taking(
    host: &ferry_wasm_host::Host,
    path: &str,
    extra: &[(&str, &str)],
) -> Option<String> {
    let s = host.stream();
    let body = b"{oops";
    s.request_headers(&headers(path, body.len(), extra), false);
    s.request_body(body, true);
    s.local_reply()?;
    let (status, json) = reply_json(&s);
    assert_eq!(status, 400, "{json}");
    Some(json["route"].as_str().unwrap().to_string())
}

fn routed_snapshot() -> pb::Snapshot {
    ferry_test_support::snapshot::routes_by_match(vec![
        (
            "by-host",
            pb::RouteMatch {
                path_prefix: "/m/".into(),
                host: "*.models.test".into(),
                ..Default::default()
            },
        ),
        (
            "by-header",
            pb::RouteMatch {
                path_prefix: "/m/".into(),
                headers: vec![pb::HeaderMatch {
                    name: "x-model".into(),
                    exact: "fraud".into(),
                }],
                ..Default::default()
            },
        ),
        ("by-name", pb::RouteMatch::default()),
    ])
}

#[test]
fn routes_are_chosen_by_host_header_and_route_metadata() {
    let host = host_with(&routed_snapshot());
    let by = |path: &str, extra: &[(&str, &str)]| route_taking(&host, path, extra);
    assert_eq!(
        by("/m/x", &[(":authority", "a.models.test:443")]).as_deref(),
        Some("by-host")
    );
    assert_eq!(
        by("/m/x", &[("x-model", "fraud")]).as_deref(),
        Some("by-header")
    );
    assert_eq!(
        by("/m/x", &[("x-model", "other")]),
        None,
        "no condition holds"
    );
    assert_eq!(by("/other", &[]), None);
    host.set_property(&METADATA_ROUTE, b"by-name");
    assert_eq!(
        by("/anything", &[]).as_deref(),
        Some("by-name"),
        "metadata wins"
    );
    host.set_property(&METADATA_ROUTE, b"gone");
    let s = host.stream();
    assert_eq!(
        s.request_headers(&headers("/m/x", 2, &[]), false),
        Action::Pause
    );
    assert_error(&s, 500, "unknown_route", "gone");
    assert_clean(&host);
}

#[test]
fn one_reader_call_serves_two_services() {
    let snap = with_merchant(pb::ValueType::Int64);
    let host = host_with(&snap);
    let s = host.stream();
    let body =
        br#"{"instances":[{"user_id":"u1","merchant_id":7},{"user_id":"u2","merchant_id":8}]}"#;
    assert_eq!(post(&s, PATH, body), (Action::Pause, Action::Pause));
    let call = the_call(&host);
    let req = pb::VectorRequest::decode(call.body.as_slice()).unwrap();
    let lookups: Vec<(String, Vec<String>)> = req
        .lookups
        .iter()
        .map(|l| (l.service.clone(), l.entity_keys.clone()))
        .collect();
    assert_eq!(
        lookups,
        [
            (
                "scoring".to_string(),
                vec!["u1".to_string(), "u2".to_string()]
            ),
            (
                "merchant".to_string(),
                vec!["7".to_string(), "8".to_string()]
            ),
        ]
    );
    let answer = reader::responses(vec![
        vec![good_vector(30, NOW_US), Vec::new()],
        vec![vector::merchant(NOW_US, 0.5), Vec::new()],
    ]);
    s.call_response(call.token, &[(":status", "200")], &answer);
    assert!(s.resumed(), "log:\n{}", host.log_text());
    let out = body_json(&s);
    let i = &out["instances"];
    assert_eq!(i[0]["profile__age"], 30);
    assert_eq!(i[0]["mprofile__risk"], 0.5);
    assert!(i[1]["profile__age"].is_null() && i[1]["mprofile__risk"].is_null());
    assert_eq!(out["ferry"]["service"], "scoring,merchant");
    assert_eq!(s.request_header("x-ferry-entities").as_deref(), Some("4"));
    assert_eq!(s.request_header("x-ferry-missing").as_deref(), Some("2"));
    assert_clean(&host);
}

#[test]
fn header_mode_can_send_a_base64_protobuf() {
    let host = host_with(&snapshot_with(|r| {
        super::header_mode::header_route(r);
        r.features_encoding = pb::FeaturesEncoding::ProtobufBase64 as i32;
    }));
    let s = host.stream();
    let h = super::header_mode::get_headers(&[("x-user-id", b"u1")]);
    assert_eq!(s.request_headers(&h, true), Action::Pause);
    super::support::answer(&host, &s, vec![good_vector(30, NOW_US)]);
    assert!(s.resumed());
    let value = s.request_header("x-ferry-features").unwrap();
    let raw = base64::engine::general_purpose::STANDARD
        .decode(&value)
        .unwrap();
    let m = pb::HeaderFeatures::decode(raw.as_slice()).unwrap();
    assert_eq!(m.names, ["profile__age", "profile__score", "txn__count"]);
    assert_eq!(m.values[0].kind, Some(Kind::Int64Val(30)));
    assert_eq!(m.fingerprint, FP_HEX);
    assert!(m
        .statuses
        .iter()
        .all(|s| *s == pb::FeatureStatus::Present as i32));
    assert_eq!(s.request_header("x-ferry-feature-status"), None);
    assert_clean(&host);
}
