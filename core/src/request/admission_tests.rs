//! Admission: which requests Ferry takes (route by path, host, headers or Envoy route
//! metadata), the headers it owns, and a body route's method, size and binary framing.

use super::testing::*;
use super::{Action, HttpFilter};
use crate::config::fixture::{config, route_with};
use crate::config::Config;
use crate::format::kserve_v2::binary;
use crate::host::testing::FakeHost;
use crate::host::Host;
use ferry_protos::v1::{self as pb};
use ferry_test_support::snapshot::header_format;

#[test]
fn unmatched_paths_and_bodiless_methods_pass_through() {
    let mut f = filter(config(), "POST", "/healthz", BODY);
    assert_eq!(f.on_request_headers(false), Action::Continue);
    assert_eq!(f.on_request_body(BODY.len(), true), Action::Continue);
    assert_eq!(f.host().body.borrow().as_slice(), BODY.as_bytes());
    assert_eq!(
        f.host().request_header("x-ferry-status"),
        None,
        "a client's x-ferry-* never goes on, matched or not"
    );
    let mut f = filter(config(), "GET", "/v1/models/fraud", "");
    assert_eq!(f.on_request_headers(true), Action::Continue);
    assert!(f.host().sent.borrow().is_none());
}

#[test]
fn routes_match_the_normalised_path_and_protected_prefixes_refuse_the_rest() {
    for path in [
        "/v1/models/fr%61ud:predict",
        "//v1/models/fraud:predict",
        "/v1/./models/x/../fraud:predict",
    ] {
        let mut f = filter(config(), "POST", path, BODY);
        assert_eq!(f.on_request_headers(false), Action::Pause, "{path}");
        f.on_request_body(BODY.len(), true);
        assert_eq!(f.host().dispatched.borrow().len(), 1, "{path} enriched");
    }
    for path in [
        "/V1/Models/fraud:predict",
        "/v1/models/other:predict",
        "/v1/models/",
    ] {
        let mut f = filter(config(), "GET", path, "");
        assert_eq!(f.on_request_headers(true), Action::Pause, "{path}");
        let (status, body) = sent(&f);
        assert_eq!((status, body["error"].as_str()), (404, Some("no_route")));
        assert!(body["message"].as_str().unwrap().contains("/v1/models/"));
    }
    // Outside the protected prefixes an unmatched request goes on.
    let mut f = filter(config(), "POST", "/V2/whatever", BODY);
    assert_eq!(f.on_request_headers(false), Action::Continue);
}

/// The fixture route, selected by name only (no conditions).
fn by_name_only() -> Config {
    route_with(|r| {
        r.name = "by-name".into();
        r.r#match = Some(pb::RouteMatch::default());
    })
}

/// The matched Envoy route names a Ferry route in its metadata.
fn envoy_route_names(f: &HttpFilter<FakeHost>, route: &str) {
    f.host()
        .route_metadata
        .borrow_mut()
        .insert("route".into(), route.into());
}

#[test]
fn envoy_route_metadata_selects_a_route_by_name() {
    let c = by_name_only();
    // Without metadata a by-name route never matches: passthrough (outside the protected
    // prefix).
    let mut f = filter(c, "POST", "/other/fraud:predict", BODY);
    assert_eq!(f.on_request_headers(false), Action::Continue);
    assert!(f.host().sent.borrow().is_none());

    let c = by_name_only();
    let mut f = filter(c, "POST", "/anything", BODY);
    envoy_route_names(&f, "by-name");
    assert_eq!(f.on_request_headers(false), Action::Pause);
    assert_eq!(f.on_request_body(BODY.len(), true), Action::Pause);
    assert_eq!(f.host().dispatched.borrow().len(), 1, "enriched");

    let mut s = crate::config::fixture::snapshot();
    let mut by_name = s.routes[0].clone();
    by_name.name = "by-name".into();
    by_name.r#match = None;
    s.routes.push(by_name);
    let c = Config::from_snapshot(s).unwrap();
    assert!(c.reads_route_metadata);
    let mut f = filter(c, "POST", "/v1/models/fraud:predict", BODY);
    envoy_route_names(&f, "gone");
    assert_eq!(f.on_request_headers(false), Action::Pause);
    let (status, body) = sent(&f);
    assert_eq!(status, 500);
    assert_eq!(body["error"], "unknown_route");
    assert_eq!(body["route"], "gone");
    assert!(f.host().dispatched.borrow().is_empty());

    // Without a by-name route the metadata is not even read: the path decides.
    let c = config();
    assert!(!c.reads_route_metadata);
    let mut f = filter(c, "POST", "/v1/models/fraud:predict", BODY);
    envoy_route_names(&f, "gone");
    assert_eq!(f.on_request_headers(false), Action::Pause);
    assert!(
        f.host().sent.borrow().is_none(),
        "enriched by the path's route"
    );
}

#[test]
fn custom_features_headers_are_removed_from_every_request() {
    let mut s = crate::config::fixture::snapshot();
    let mut h = s.routes[0].clone();
    h.name = "hdr".into();
    h.r#match = Some(pb::RouteMatch {
        path_prefix: "/hdr".into(),
        ..Default::default()
    });
    header_format(&mut h);
    h.features_header = "x-features".into();
    s.routes.push(h);
    let c = Config::from_snapshot(s).unwrap();
    assert_eq!(c.owned_headers, ["x-features"]);
    let mut f = filter(c, "POST", "/unrouted", BODY);
    f.host()
        .set_request_header("x-features", Some(r#"{"forged":1}"#));
    assert_eq!(f.on_request_headers(false), Action::Continue);
    assert_eq!(f.host().request_header("x-features"), None);
    assert_eq!(f.host().request_header("x-ferry-status"), None);
}

#[test]
fn a_body_on_a_bodiless_method_is_refused() {
    let mut f = filter(config(), "GET", "/v1/models/fraud:predict", BODY);
    assert_eq!(f.on_request_headers(false), Action::Pause);
    assert_eq!(
        (sent(&f).0, sent(&f).1["error"].as_str()),
        (405, Some("unexpected_body"))
    );
}

#[test]
fn oversize_bodies_are_refused_by_header_or_while_streaming() {
    let mut f = filter(config(), "POST", "/v1/models/fraud", &"x".repeat(5000));
    assert_eq!(f.on_request_headers(false), Action::Pause);
    let (status, body) = sent(&f);
    assert_eq!(
        (status, body["error"].as_str()),
        (413, Some("body_too_large"))
    );

    let mut f = filter(config(), "POST", "/v1/models/fraud", BODY);
    f.host().set_request_header("content-length", None); // chunked
    f.on_request_headers(false);
    f.on_request_body(4097, false);
    assert_eq!(sent(&f).0, 413);
}

/// A framed KServe v2 request (BYTES ids in the binary part, then 4 bytes of another
/// binary input) on a `format` route: (filter, the client's header length, the body).
fn framed(format: pb::Format) -> (HttpFilter<FakeHost>, usize, Vec<u8>) {
    let c = route_with(|r| r.format = format as i32);
    let header = br#"{"inputs":[{"name":"user_id","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":6}},{"name":"x","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}"#;
    let mut body = header.to_vec();
    body.extend([2, 0, 0, 0, b'u', b'1', 0, 0, 0xc0, 0x3f]);
    let f = filter(c, "POST", "/v1/models/fraud", "");
    f.host()
        .set_request_header("content-length", Some(&body.len().to_string()));
    f.host()
        .set_request_header(binary::HEADER, Some(&header.len().to_string()));
    *f.host().body.borrow_mut() = body.clone();
    (f, header.len(), body)
}

#[test]
fn a_framed_v2_body_goes_on_with_its_header_length_and_binary_data_updated() {
    let (mut f, _, body) = framed(pb::Format::KserveV2);
    assert_eq!(f.on_request_headers(false), Action::Pause);
    assert_eq!(f.host().request_header(binary::HEADER), None);
    assert_eq!(f.on_request_body(body.len(), true), Action::Pause);
    reader_ok(&f, vec![good_vector(30)]);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow());
    let out = f.host().body.borrow().clone();
    let n: usize = f
        .host()
        .request_header(binary::HEADER)
        .expect("the new header length")
        .parse()
        .unwrap();
    assert_eq!(
        f.host().request_header("content-length"),
        Some(out.len().to_string())
    );
    let v: serde_json::Value = serde_json::from_slice(&out[..n]).unwrap();
    assert_eq!(v["inputs"][2]["name"], "profile__age");
    assert_eq!(v["inputs"][2]["data"], serde_json::json!([30]));
    assert_eq!(&out[n..], &body[body.len() - 10..], "binary data unchanged");
}

#[test]
fn the_framing_header_reads_nothing_on_other_formats_and_counts_once() {
    // On a kserve_v1 route the binary body is the route's format, wrongly: malformed JSON.
    let (mut f, _, body) = framed(pb::Format::KserveV1);
    f.on_request_headers(false);
    f.on_request_body(body.len(), true);
    assert_eq!(sent(&f).1["error"], "malformed_json");
    // A JSON body there goes on without the header, which no longer describes it.
    let mut f = filter(config(), "POST", "/v1/models/fraud", BODY);
    f.host().set_request_header(binary::HEADER, Some("5"));
    f.on_request_headers(false);
    f.on_request_body(BODY.len(), true);
    reader_ok(&f, vec![good_vector(1)]);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow());
    assert_eq!(f.host().request_header(binary::HEADER), None);
    // Sent twice on a kserve_v2 route: the model might read the other one.
    let (mut f, n, _) = framed(pb::Format::KserveV2);
    f.host()
        .headers
        .borrow_mut()
        .push((binary::HEADER.into(), n.to_string()));
    assert_eq!(f.on_request_headers(false), Action::Pause);
    let (status, err) = sent(&f);
    assert_eq!(
        (status, err["error"].as_str()),
        (400, Some("bad_binary_framing"))
    );
}
