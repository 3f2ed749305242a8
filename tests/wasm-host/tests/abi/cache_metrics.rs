//! The filter's Envoy stats (proxy-wasm metrics) and its near cache (proxy-wasm shared data),
//! seen through the ABI.

use std::time::Duration;

use ferry_wasm_host::{Action, MetricKind};
use prost::Message;

use super::support::*;

fn counter(host: &ferry_wasm_host::Host, name: &str) -> i64 {
    let m = host
        .metric(name)
        .unwrap_or_else(|| panic!("metric {name} is not defined: {:?}", host.metrics()));
    assert_eq!(m.kind, MetricKind::Counter, "{name}");
    m.value
}

#[test]
fn outcomes_are_counted_and_reader_latency_recorded_in_host_time() {
    let host = host();
    let s = host.stream();
    post(&s, PATH, kserve_body(&["u1", "ghost"]).as_bytes());
    host.advance_time(Duration::from_micros(1500));
    s.call_response(
        the_call(&host).token,
        &[(":status", "200")],
        &reader_response(vec![good_vector(1, NOW_US), vec![]]),
    );
    // Strict route: the missing entity rejects the request.
    assert_eq!(s.local_reply().map(|r| r.status), Some(404));
    let latency = host.metric("ferry_reader_latency_us").expect("histogram");
    assert_eq!(latency.kind, MetricKind::Histogram);
    assert_eq!(latency.recorded, vec![1500]);
    assert_eq!(counter(&host, "ferry_requests_rejected"), 1);
    assert_eq!(counter(&host, "ferry_requests_enriched"), 0);

    let s = host.stream();
    post(&s, PATH, kserve_body(&["u1", "u2"]).as_bytes());
    let token = host.dispatched_calls().pop().unwrap().token;
    s.call_response(
        token,
        &[(":status", "200")],
        &reader_response(vec![good_vector(1, NOW_US), good_vector(2, NOW_US)]),
    );
    assert!(s.resumed());
    assert_eq!(counter(&host, "ferry_requests_enriched"), 1);
    assert!(counter(&host, "ferry_entities_found") >= 2);

    let s = host.stream();
    post(&s, PATH, kserve_body(&["u1"]).as_bytes());
    s.call_failure(host.dispatched_calls().pop().unwrap().token);
    assert_eq!(counter(&host, "ferry_reader_errors"), 1);
    assert_eq!(counter(&host, "ferry_requests_rejected"), 2);
    assert!(host.abi_errors().is_empty(), "{:?}", host.abi_errors());
}

#[test]
fn near_cache_serves_fresh_vectors_from_shared_data_without_a_reader_call() {
    let snap = snapshot_with(|r| r.cache_max_age_ms = 60_000);
    let mut snap = snap;
    snap.near_cache_max_bytes = 1 << 20;
    let host = host_with(&snap);
    let body = kserve_body(&["u1"]);

    let s = host.stream();
    post(&s, PATH, body.as_bytes());
    s.call_response(
        the_call(&host).token,
        &[(":status", "200")],
        &reader_response(vec![good_vector(7, NOW_US)]),
    );
    assert!(s.resumed());

    // Second request: served from the cache inside the body callback, which goes on by itself.
    host.advance_time(Duration::from_secs(30));
    let s = host.stream();
    assert_eq!(
        post(&s, PATH, body.as_bytes()),
        (Action::Pause, Action::Continue)
    );
    assert_eq!(host.dispatched_calls().len(), 1, "no second reader call");
    assert!(!s.resumed() && s.forwarded());
    let v: serde_json::Value = serde_json::from_slice(&s.request_body_bytes()).unwrap();
    assert_eq!(v["instances"][0]["profile__age"], 7);
    assert_eq!(
        s.request_header("content-length"),
        Some(s.request_body_bytes().len().to_string())
    );
    assert_eq!(counter(&host, "ferry_cache_hits"), 1);

    // Past cache_max_age_ms: fetched again.
    host.advance_time(Duration::from_secs(31));
    let s = host.stream();
    assert_eq!(
        post(&s, PATH, body.as_bytes()),
        (Action::Pause, Action::Pause)
    );
    assert_eq!(host.dispatched_calls().len(), 2);
    let _ = s;

    // A cached vector of another fingerprint (an older snapshot) is never served: a new
    // snapshot with another fingerprint misses.
    let mut other = snap.clone();
    other.services[0].fingerprint = FP ^ 0xff;
    assert!(host.configure(&other.encode_to_vec()));
    let s = host.stream();
    assert_eq!(post(&s, PATH, body.as_bytes()).1, Action::Pause);
    assert_eq!(host.dispatched_calls().len(), 3);
    assert!(host.abi_errors().is_empty(), "{:?}", host.abi_errors());
}

#[test]
fn near_cache_lives_in_bounded_shared_data_keys() {
    let mut snap = snapshot_with(|r| r.cache_max_age_ms = 60_000);
    snap.near_cache_max_bytes = 4 * 2048; // a few sets only
    let host = host_with(&snap);
    for i in 0..40 {
        let id = format!("u{i}");
        let s = host.stream();
        post(&s, PATH, kserve_body(&[&id]).as_bytes());
        let token = host.dispatched_calls().pop().unwrap().token;
        s.call_response(
            token,
            &[(":status", "200")],
            &reader_response(vec![good_vector(i, NOW_US)]),
        );
        assert!(s.resumed());
    }
    let keys: Vec<String> = (0..64)
        .map(|i| format!("ferry.nc.{i}"))
        .filter(|k| host.shared_data(k).is_some())
        .collect();
    assert!(!keys.is_empty() && keys.len() <= 4, "{keys:?}");
    for k in &keys {
        let (v, _) = host.shared_data(k).unwrap();
        assert!(v.len() <= 2048, "{k}: {} bytes", v.len());
    }
    assert!(host.abi_errors().is_empty(), "{:?}", host.abi_errors());
}
