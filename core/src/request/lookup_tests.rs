//! Lookup: the near cache, the one reader call (over several services), the reader's answer,
//! and the route's policy when the reader fails.

use std::collections::HashMap;
use std::rc::Rc;

use super::testing::*;
use super::{Action, HttpFilter};
use crate::config::fixture::{config, route_with, FP};
use crate::config::Config;
use crate::host::testing::FakeHost;
use crate::host::Host;
use crate::metrics::{Metric, Metrics};
use ferry_protos::v1::{self as pb};
use ferry_test_support::snapshot::{with_merchant, MERCHANT_FP};
use ferry_test_support::vector::NOW_US as NOW;
use ferry_test_support::{reader, vector as vectors};
use prost::Message;

/// A request on a route that fails open, its reader call out.
fn failing_open(body: &str) -> HttpFilter<FakeHost> {
    let c = route_with(|r| r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32);
    posted(c, body)
}

#[test]
fn reader_failure_fails_closed_by_default() {
    let mut f = posted(config(), BODY);
    f.on_call_response(7, 0, 0);
    let (status, body) = sent(&f);
    assert_eq!(
        (status, body["error"].as_str()),
        (503, Some("reader_unavailable"))
    );
    assert!(!*f.host().resumed.borrow());
}

#[test]
fn reader_failure_can_fail_open() {
    let mut f = failing_open(BODY);
    reader_answers(
        &f,
        503,
        br#"{"error":"redis_unavailable","message":"down"}"#,
    );
    f.on_call_response(7, 2, 46);
    assert!(*f.host().resumed.borrow());
    assert!(f.host().sent.borrow().is_none());
    assert_eq!(
        f.host().request_header("x-ferry-status"),
        Some("degraded".into())
    );
    assert_eq!(
        f.host().request_header("x-ferry-error"),
        Some("redis_unavailable".into())
    );
    // Forwarded with every feature null: a client's value under a feature's name or
    // `ferry` never goes on, even unenriched.
    let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
    assert_eq!(
        f.host().request_header("content-length"),
        Some(f.host().body.borrow().len().to_string())
    );
    assert_eq!(body["instances"][0]["user_id"], "u1");
    assert!(body["instances"][0]["profile__age"].is_null());
    assert_eq!(body["ferry"]["statuses"][0]["profile__age"], "NOT_FOUND");
    f.on_response_headers();
    let told = f.host().response_headers.borrow().clone();
    assert!(
        told.contains(&("x-ferry-status".into(), "degraded".into())),
        "{told:?}"
    );

    let c = route_with(|r| r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32);
    let mut f = filter(c, "POST", "/v1/models/fraud", BODY);
    *f.host().dispatch_error.borrow_mut() = Some("unknown cluster".into());
    f.on_request_headers(false);
    assert_eq!(f.on_request_body(BODY.len(), true), Action::Continue);
    assert!(
        !*f.host().resumed.borrow(),
        "a body callback resumes by returning Continue"
    );
}

#[test]
fn a_degraded_forward_carries_no_forged_feature() {
    let forged = r#"{"instances":[{"user_id":"u1","profile__age":99}],"ferry":{"forged":1}}"#;
    let mut f = failing_open(forged);
    f.on_call_response(7, 0, 0); // the reader never answered
    assert!(*f.host().resumed.borrow());
    let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
    assert!(body["instances"][0]["profile__age"].is_null(), "{body}");
    assert_eq!(body["ferry"]["service"], "scoring");
    assert_eq!(
        f.host().request_header("x-ferry-status").as_deref(),
        Some("degraded")
    );
}

#[test]
fn a_reader_refusal_is_never_failed_open() {
    let mut f = failing_open(BODY);
    reader_answers(
        &f,
        400,
        br#"{"error":"bad_request","message":"key too long"}"#,
    );
    f.on_call_response(7, 2, 49);
    assert!(!*f.host().resumed.borrow(), "not forwarded");
    assert_eq!(sent(&f).0, 502);
    assert_eq!(sent(&f).1["error"], "reader_rejected");

    // A 4xx that is not the reader's JSON (another server at its address) neither.
    let mut f = failing_open(BODY);
    reader_answers(&f, 404, b"not here");
    f.on_call_response(7, 2, 8);
    assert!(!*f.host().resumed.borrow(), "not forwarded");
    assert_eq!(sent(&f).1["error"], "reader_rejected");
}

#[test]
fn responses_to_other_tokens_are_ignored() {
    let mut f = posted(config(), BODY);
    f.on_call_response(99, 0, 0);
    assert!(f.host().sent.borrow().is_none());
    assert!(!*f.host().resumed.borrow());
    f.on_call_response(7, 0, 0);
    assert_eq!(sent(&f).0, 503);
}

fn cached_route() -> Config {
    route_with(|r| r.cache_max_age_ms = 1000)
}

/// A new stream at `now_us` on the same shared data (the near cache) as `prev`'s.
fn next_stream(
    prev: &HttpFilter<FakeHost>,
    c: &Rc<Config>,
    metrics: &Rc<Metrics>,
    now_us: i64,
) -> HttpFilter<FakeHost> {
    stream(c, metrics, now_us, prev.host().shared.borrow().clone())
}

/// Runs one request through `f`'s host and returns the decoded reader request, if any.
fn run_cached(
    f: &mut HttpFilter<FakeHost>,
    body: &str,
    reader: Vec<Vec<u8>>,
) -> Option<Vec<String>> {
    *f.host().body.borrow_mut() = body.as_bytes().to_vec();
    f.host()
        .set_request_header("content-length", Some(&body.len().to_string()));
    assert_eq!(f.on_request_headers(false), Action::Pause);
    let action = f.on_request_body(body.len(), true);
    let call = f.host().dispatched.borrow_mut().pop();
    match call {
        None => {
            assert_eq!(
                action,
                Action::Continue,
                "all hits: resumed by returning Continue"
            );
            None
        }
        Some(c) => {
            assert_eq!(action, Action::Pause);
            reader_ok(f, reader);
            f.on_call_response(7, 3, 100);
            let req = ferry_protos::v1::VectorRequest::decode(c.2.as_slice()).unwrap();
            Some(req.lookups[0].entity_keys.clone())
        }
    }
}

#[test]
fn near_cache_serves_repeat_entities_without_a_reader_call() {
    let c = Rc::new(cached_route());
    let metrics = Rc::new(Metrics::define(|kind, name| {
        Some(
            crate::metrics::ALL
                .iter()
                .position(|(_, k, n)| *k == kind && *n == name)
                .unwrap() as u32,
        )
    }));
    let mut f = stream(&c, &metrics, NOW, HashMap::new());
    let sent = run_cached(
        &mut f,
        r#"{"instances":[{"user_id":"u1"}]}"#,
        vec![good_vector(30)],
    );
    assert_eq!(sent, Some(vec!["u1".to_string()]));

    // Same host (same shared data), new stream: u1 is cached, only u2 is fetched.
    let mut f = next_stream(&f, &c, &metrics, NOW + 500_000);
    let sent = run_cached(
        &mut f,
        r#"{"instances":[{"user_id":"u1"},{"user_id":"u2"}]}"#,
        vec![good_vector(40)],
    );
    assert_eq!(sent, Some(vec!["u2".to_string()]));
    let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
    assert_eq!(
        (
            body["instances"][0]["profile__age"].as_i64(),
            body["instances"][1]["profile__age"].as_i64()
        ),
        (Some(30), Some(40))
    );
    let id = |m| metrics.id(m).unwrap();
    assert_eq!(
        f.host().metrics.borrow().get(&id(Metric::CacheHits)),
        Some(&1)
    );
    assert_eq!(
        f.host().metrics.borrow().get(&id(Metric::CacheMisses)),
        Some(&1)
    );

    // Both cached now: no reader call at all.
    let mut f = next_stream(&f, &c, &metrics, NOW + 900_000);
    assert_eq!(
        run_cached(
            &mut f,
            r#"{"instances":[{"user_id":"u2"},{"user_id":"u1"}]}"#,
            vec![]
        ),
        None
    );
    assert_eq!(f.host().request_header("x-ferry-status"), Some("ok".into()));
    let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
    assert_eq!(body["instances"][0]["profile__age"], 40);

    // Past the route's max age (1 s after insertion): fetched again.
    let mut f = next_stream(&f, &c, &metrics, NOW + 1_600_000);
    let sent = run_cached(
        &mut f,
        r#"{"instances":[{"user_id":"u1"}]}"#,
        vec![good_vector(31)],
    );
    assert_eq!(sent, Some(vec!["u1".to_string()]));
}

#[test]
fn cache_is_off_unless_the_route_asks() {
    let mut f = posted(config(), BODY);
    reader_ok(&f, vec![good_vector(1)]);
    f.on_call_response(7, 3, 100);
    assert!(f.host().shared.borrow().is_empty());
    assert!(*f.host().resumed.borrow());
}

/// The fixture route, also enriching from a merchant-keyed service.
fn two_services(cache_max_age_ms: u32) -> Config {
    let mut s = with_merchant(pb::ValueType::String);
    s.routes[0].cache_max_age_ms = cache_max_age_ms;
    Config::from_snapshot(s).unwrap()
}

const PAIR_BODY: &str =
    r#"{"instances":[{"user_id":"u1","merchant_id":"m1"},{"user_id":"u2","merchant_id":"m2"}]}"#;

fn merchant_vector(risk: f32) -> Vec<u8> {
    vectors::merchant(NOW, risk)
}

#[test]
fn a_route_enriches_from_several_services_in_one_reader_call() {
    let mut f = filter(two_services(0), "POST", "/v1/models/fraud", PAIR_BODY);
    f.on_request_headers(false);
    assert_eq!(f.on_request_body(PAIR_BODY.len(), true), Action::Pause);
    let calls = f.host().dispatched.borrow().clone();
    assert_eq!(calls.len(), 1, "one reader call for both services");
    let req = pb::VectorRequest::decode(calls[0].2.as_slice()).unwrap();
    let lookups: Vec<(&str, u64, Vec<String>)> = req
        .lookups
        .iter()
        .map(|l| (l.service.as_str(), l.fingerprint, l.entity_keys.clone()))
        .collect();
    assert_eq!(
        lookups,
        [
            ("scoring", FP, vec!["u1".to_string(), "u2".to_string()]),
            (
                "merchant",
                MERCHANT_FP,
                vec!["m1".to_string(), "m2".to_string()]
            ),
        ]
    );
    *f.host().call_status.borrow_mut() = Some(200);
    *f.host().call_body.borrow_mut() = reader::responses(vec![
        vec![good_vector(30), good_vector(40)],
        vec![merchant_vector(0.25), Vec::new()],
    ]);
    let n = f.host().call_body.borrow().len();
    f.on_call_response(7, 3, n);
    assert!(*f.host().resumed.borrow(), "{:?}", f.host().sent.borrow());
    let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
    let i = &body["instances"];
    assert_eq!(
        (&i[0]["profile__age"], &i[0]["mprofile__risk"]),
        (&30.into(), &0.25.into())
    );
    assert_eq!(i[1]["profile__age"], 40);
    assert!(i[1]["mprofile__risk"].is_null());
    assert_eq!(body["ferry"]["service"], "scoring,merchant");
    assert_eq!(
        body["ferry"]["fingerprint"],
        "123456789abcdef0,0fedcba987654321"
    );
    assert_eq!(
        body["ferry"]["statuses"],
        serde_json::json!([{}, {"mprofile__risk": "NOT_FOUND"}])
    );
    let h = |n: &str| f.host().request_header(n);
    assert_eq!(h("x-ferry-entities").as_deref(), Some("4"));
    assert_eq!(h("x-ferry-missing").as_deref(), Some("1"));
    assert_eq!(h("x-ferry-status").as_deref(), Some("partial"));
}

#[test]
fn several_services_share_the_near_cache_per_service() {
    let c = Rc::new(two_services(60_000));
    let metrics = Rc::new(Metrics::define(|_, _| Some(1)));
    let with_body = |shared: HashMap<String, (Vec<u8>, u32)>, body: &str| {
        let f = stream(&c, &metrics, NOW, shared);
        *f.host().body.borrow_mut() = body.as_bytes().to_vec();
        f
    };
    let mut f = with_body(HashMap::new(), PAIR_BODY);
    f.on_request_headers(false);
    f.on_request_body(PAIR_BODY.len(), true);
    *f.host().call_status.borrow_mut() = Some(200);
    *f.host().call_body.borrow_mut() = reader::responses(vec![
        vec![good_vector(30), good_vector(40)],
        vec![merchant_vector(0.25), merchant_vector(0.5)],
    ]);
    let n = f.host().call_body.borrow().len();
    f.on_call_response(7, 3, n);
    // Same users, one new merchant: only that merchant is asked for.
    let body = r#"{"instances":[{"user_id":"u1","merchant_id":"m1"},{"user_id":"u2","merchant_id":"m9"}]}"#;
    let mut g = with_body(f.host().shared.borrow().clone(), body);
    g.on_request_headers(false);
    assert_eq!(g.on_request_body(body.len(), true), Action::Pause);
    let calls = g.host().dispatched.borrow().clone();
    let req = pb::VectorRequest::decode(calls[0].2.as_slice()).unwrap();
    assert_eq!(req.lookups.len(), 1);
    assert_eq!(req.lookups[0].service, "merchant");
    assert_eq!(req.lookups[0].entity_keys, ["m9"]);
    *g.host().call_status.borrow_mut() = Some(200);
    *g.host().call_body.borrow_mut() = reader::response(vec![merchant_vector(0.75)]);
    let n = g.host().call_body.borrow().len();
    g.on_call_response(7, 3, n);
    let out: serde_json::Value = serde_json::from_slice(&g.host().body.borrow()).unwrap();
    let i = &out["instances"];
    assert_eq!(
        (&i[0]["profile__age"], &i[0]["mprofile__risk"]),
        (&30.into(), &0.25.into())
    );
    assert_eq!(
        (&i[1]["profile__age"], &i[1]["mprofile__risk"]),
        (&40.into(), &0.75.into())
    );
}
