//! ABI tests of the JSON plugin configuration (Istio's WasmPlugin, Envoy Gateway's
//! EnvoyExtensionPolicy) and of the filter without `allow_on_headers_stop_iteration`: a body
//! route lets the headers go on from the headers callback and holds the body; no request
//! header is written after that (this host refuses it, as Envoy does).

use base64::Engine;
use ferry_wasm_host::{Action, Host, Stream};
use prost::Message;

use super::header_mode::{get_headers, header_route};
use super::support::*;

pub const ISTIO_CLUSTER: &str = "outbound|8090||ferry-reader.ferry.svc.cluster.local";

pub fn json_config(snapshot: &ferry_protos::v1::Snapshot) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(snapshot.encode_to_vec());
    format!(r#"{{"snapshot_base64": "{b64}", "reader_cluster": "{ISTIO_CLUSTER}"}}"#)
}

fn json_host(snapshot: &ferry_protos::v1::Snapshot) -> Host {
    let host = Host::load_filter();
    assert!(
        host.configure(json_config(snapshot).as_bytes()),
        "the filter refused the JSON configuration:\n{}",
        host.log_text()
    );
    host
}

#[test]
fn a_json_configured_body_route_holds_the_body_not_the_headers() {
    let host = json_host(&snapshot());
    let s: Stream = host.stream();
    let body = kserve_body(&["u1"]);
    let h = s.request_headers(&post_headers(PATH, body.len()), false);
    assert_eq!(
        h,
        Action::Continue,
        "the headers go on: no flag to hold them"
    );
    assert_eq!(
        s.request_header("content-length"),
        None,
        "the body changes size"
    );
    assert_eq!(s.request_body(body.as_bytes(), true), Action::Pause);
    let call = the_call(&host);
    assert_eq!(
        call.cluster, ISTIO_CLUSTER,
        "the JSON's cluster, not the snapshot's"
    );
    // A model answering on the headers: its response waits for the request.
    assert_eq!(
        s.response_headers(&[(":status", "200")], false),
        Action::Pause
    );
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    assert!(
        s.resumed() && s.response_resumed(),
        "log:\n{}",
        host.log_text()
    );
    let out: serde_json::Value = serde_json::from_slice(&s.request_body_bytes()).unwrap();
    assert_eq!(out["instances"][0]["profile__age"], 30);
    assert_eq!(
        s.request_header("x-ferry-status"),
        None,
        "headers already sent"
    );
    assert_eq!(s.response_header("x-ferry-status").as_deref(), Some("ok"));
    assert_clean(&host);
}

#[test]
fn a_json_configured_header_route_still_holds_the_request() {
    let host = json_host(&snapshot_with(header_route));
    let s = host.stream();
    let a = s.request_headers(&get_headers(&[("x-user-id", b"u1")]), true);
    assert_eq!(a, Action::Pause);
    assert_eq!(the_call(&host).cluster, ISTIO_CLUSTER);
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    assert!(s.resumed(), "log:\n{}", host.log_text());
    assert!(s.request_header("x-ferry-features").is_some());
    assert_clean(&host);
}

#[test]
fn a_bad_json_configuration_is_refused_with_its_reason() {
    let host = Host::load_filter();
    assert!(!host.configure(br#"{"snapshot_base64": "AAA", "snapshot_uri": "x"}"#));
    assert!(
        host.log_text().contains("unknown key 'snapshot_uri'"),
        "{}",
        host.log_text()
    );
    // The binary form still loads in the same VM.
    assert!(
        host.configure(&snapshot().encode_to_vec()),
        "{}",
        host.log_text()
    );
}
