//! The sampling rule and the record, through the request executor on a fake host.

use std::collections::HashMap;

use super::*;
use crate::config::fixture::{route_with, FP};
use crate::config::log_policy::{request_hash, LogPolicy, ServedStatus};
use crate::request::testing::*;
use ferry_protos::v1::{self as pb, value::Kind, ServedLog};
use prost::Message;

fn policy(sample: f64, statuses: &[(&str, f64)]) -> Result<LogPolicy, String> {
    LogPolicy::from_proto(&pb::RouteLog {
        sample,
        statuses: statuses
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect::<HashMap<_, _>>(),
    })
}

#[test]
fn a_policy_takes_rates_in_0_to_1_and_known_statuses_only() {
    let p = policy(0.1, &[("partial", 1.0), ("degraded", 0.5)]).unwrap();
    assert_eq!(p.rate(ServedStatus::Ok), 0.1);
    assert_eq!(p.rate(ServedStatus::Partial), 1.0);
    assert_eq!(p.rate(ServedStatus::Degraded), 0.5);
    assert!(p.is_on());
    assert!(!policy(0.0, &[]).unwrap().is_on());
    let e = policy(1.5, &[]).unwrap_err();
    assert!(e.contains("log sample must be a number in 0..1"), "{e}");
    let e = policy(0.1, &[("stale", 1.0)]).unwrap_err();
    assert!(e.contains("unknown status 'stale'"), "{e}");
    let e = policy(0.1, &[("ok", -0.1)]).unwrap_err();
    assert!(e.contains("statuses.ok"), "{e}");
    assert!(policy(f64::NAN, &[]).is_err(), "NaN is no rate");
}

#[test]
fn the_same_id_always_gets_the_same_decision_and_rates_hold() {
    let p = policy(0.1, &[("partial", 1.0)]).unwrap();
    let ids: Vec<String> = (0..20_000)
        .map(|i| format!("1f0e{i:04x}-5a3b-4c2d-9e8f-{i:012x}"))
        .collect();
    let picked = ids
        .iter()
        .filter(|id| p.picks(id, ServedStatus::Ok))
        .count();
    // Binomial(20000, 0.1): sd ~42; 5 sd either side.
    assert!((1790..=2210).contains(&picked), "{picked}");
    for id in ids.iter().take(100) {
        assert_eq!(p.picks(id, ServedStatus::Ok), p.picks(id, ServedStatus::Ok));
        assert!(p.picks(id, ServedStatus::Partial), "rate 1 logs every id");
    }
    let off = policy(0.0, &[]).unwrap();
    assert!(ids.iter().all(|id| !off.picks(id, ServedStatus::Ok)));
    // A request picked at a low rate is picked at any higher one (one hash, one threshold).
    let low = policy(0.05, &[]).unwrap();
    assert!(ids
        .iter()
        .filter(|id| low.picks(id, ServedStatus::Ok))
        .all(|id| p.picks(id, ServedStatus::Ok)));
    // Fixed across builds: this value is what every Envoy computes for this id.
    assert_eq!(request_hash(""), request_hash(""));
    assert_ne!(request_hash("a"), request_hash("b"));
}

fn logging(sample: f64) -> crate::config::Config {
    route_with(|r| {
        r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
        r.log = Some(pb::RouteLog {
            sample,
            statuses: HashMap::from([("partial".to_string(), 1.0)]),
        })
    })
}

fn with_id(f: &crate::request::HttpFilter<crate::host::testing::FakeHost>, id: &str) {
    f.host()
        .headers
        .borrow_mut()
        .push(("x-request-id".into(), id.into()));
}

#[test]
fn a_picked_request_hands_out_what_the_model_received() {
    let body = r#"{"instances":[{"user_id":"u1"},{"user_id":"u2"}]}"#;
    let mut f = filter(logging(1.0), "POST", "/v1/models/fraud", body);
    with_id(&f, "req-1");
    f.on_request_headers(false);
    f.on_request_body(body.len(), true);
    reader_ok(&f, vec![good_vector(41), Vec::new()]);
    f.on_call_response(7, 3, 100);
    assert!(*f.host().resumed.borrow());
    let records = f.host().log_records.borrow().clone();
    assert_eq!(records.len(), 1);
    let log = ServedLog::decode(records[0].as_slice()).unwrap();
    assert_eq!(log.request_id, "req-1");
    assert_eq!(log.status, "partial", "u2 has no vector");
    assert_eq!(log.services.len(), 1);
    let s = &log.services[0];
    assert_eq!(s.fingerprint, FP);
    assert_eq!(s.join_keys, vec!["user_id"]);
    assert_eq!(s.feature_names.len(), s.feature_types.len());
    assert_eq!(s.instances.len(), 2);
    assert_eq!(s.instances[0].entity_values, vec!["u1"]);
    // What the model got: the rewritten body's values, feature by feature.
    let sent: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
    for (i, inst) in s.instances.iter().enumerate() {
        for (j, name) in s.feature_names.iter().enumerate() {
            let v = crate::values::to_json(&inst.values[j].kind);
            assert_eq!(sent["instances"][i][name], v, "{name} of instance {i}");
        }
    }
    assert_eq!(s.instances[0].values[0].kind, Some(Kind::Int64Val(41)));
    assert_eq!(
        s.instances[1].statuses[0],
        pb::FeatureStatus::NotFound as i32
    );
    assert!(s.instances[0].event_times_us[0] > 0);
    assert_eq!(s.instances[1].event_times_us[0], 0);
}

#[test]
fn no_id_no_route_log_or_a_miss_of_the_sample_hands_out_nothing() {
    // Rate 0 for ok: an ok request is not logged, whatever its id.
    let mut f = posted_with(logging(0.0), Some("req-2"));
    reader_ok(&f, vec![good_vector(41)]);
    f.on_call_response(7, 3, 100);
    assert!(f.host().log_records.borrow().is_empty());
    assert!(*f.host().resumed.borrow());
    // No request id: nothing to sample on.
    let mut f = posted_with(logging(1.0), None);
    reader_ok(&f, vec![good_vector(41)]);
    f.on_call_response(7, 3, 100);
    assert!(f.host().log_records.borrow().is_empty());
    // A degraded request (reader down, forwarded) under statuses {degraded: 1}.
    let c = route_with(|r| {
        r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32;
        r.log = Some(pb::RouteLog {
            sample: 0.0,
            statuses: HashMap::from([("degraded".to_string(), 1.0)]),
        })
    });
    let mut f = posted_with(c, Some("req-3"));
    reader_answers(&f, 503, b"");
    f.on_call_response(7, 0, 0);
    assert!(*f.host().resumed.borrow());
    let records = f.host().log_records.borrow().clone();
    let log = ServedLog::decode(records[0].as_slice()).unwrap();
    assert_eq!(log.status, "degraded");
    assert_eq!(
        log.services[0].instances[0].statuses[0],
        pb::FeatureStatus::NotFound as i32
    );
}

fn posted_with(
    c: crate::config::Config,
    id: Option<&str>,
) -> crate::request::HttpFilter<crate::host::testing::FakeHost> {
    let mut f = filter(c, "POST", "/v1/models/fraud", BODY);
    if let Some(id) = id {
        with_id(&f, id);
    }
    f.on_request_headers(false);
    f.on_request_body(BODY.len(), true);
    f
}

#[test]
fn a_record_over_the_bound_is_dropped_and_counted_not_sent() {
    use crate::host::testing::FakeHost;
    use crate::metrics::Metrics;
    use crate::vector::{EntityFeatures, FeatureStatus};
    let c = logging(1.0);
    let route = &c.routes[0];
    let n = route.feature_count;
    let big = Some(Kind::StringVal("x".repeat(1000)));
    let served = |entities: usize| record::Served {
        status: ServedStatus::Ok,
        keys: (0..entities).map(|i| format!("u{i}")).collect(),
        features: (0..entities)
            .map(|_| EntityFeatures {
                values: vec![big.clone(); n],
                statuses: vec![FeatureStatus::Present; n],
            })
            .collect(),
        vectors: Vec::new(),
    };
    let stamp = record::Stamp {
        request_id: "big",
        now_us: 1,
        received_us: 1,
    };
    assert!(record::encode(route, stamp, &served(2)).is_ok());
    let err = record::encode(route, stamp, &served(200)).unwrap_err();
    assert!(matches!(err, record::Dropped::TooLarge { bytes } if bytes > MAX_RECORD_BYTES));

    let host = FakeHost::default();
    let metrics = Metrics::define(|_, name| match name {
        "ferry_logs_handed" => Some(1),
        "ferry_logs_dropped" => Some(2),
        _ => None,
    });
    crate::request::log::hand_out(&host, &metrics, route, stamp, &served(200));
    crate::request::log::hand_out(&host, &metrics, route, stamp, &served(2));
    assert_eq!(host.log_records.borrow().len(), 1, "only the small one");
    let counted = host.metrics.borrow().clone();
    assert_eq!((counted.get(&1), counted.get(&2)), (Some(&1), Some(&1)));
}
