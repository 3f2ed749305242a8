//! Enrichment: policies, the rendered KServe v1 body against the typed one, served-value metrics,
//! and a reader answer that does not hold what was asked.

use super::*;
use crate::config::fixture::{config, route_with, FP};
use crate::config::Config;
use crate::request::reader::reader_vectors;
use ferry_protos::v1::{self as pb, value::Kind};
use ferry_test_support::reader::response;
use ferry_test_support::vector::{scoring, vector, NOW_US as NOW};
use serde_json::json;
use serde_json::Value as Json;
use std::collections::HashMap;

fn good(age: i64) -> Vec<u8> {
    scoring(NOW, Some(age), Some(0.25), Some(9))
}

type Headers = Vec<(&'static str, String)>;

fn run(c: &Config, body: &str, vectors: Vec<Vec<u8>>) -> Result<(Json, Headers), FerryError> {
    let r = &c.routes[0];
    let req: ParsedRequest = crate::format::kserve_v1::parse(body.as_bytes(), r)
        .unwrap()
        .into();
    let n = req.keys().len();
    let e = enrich(r, req, &reader_vectors(&response(vectors), &[n])?, NOW)?;
    Ok((
        serde_json::from_slice(&e.rewritten.body.unwrap()).unwrap(),
        e.headers,
    ))
}

fn header<'a>(h: &'a [(&'static str, String)], name: &str) -> &'a str {
    h.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_str())
        .unwrap()
}

#[test]
fn enriches_every_instance() {
    let c = config();
    let (v, h) = run(
        &c,
        r#"{"instances":[{"user_id":"a"},{"user_id":"b"}]}"#,
        vec![good(1), good(2)],
    )
    .unwrap();
    assert_eq!(v["instances"][1]["profile__age"], json!(2));
    assert_eq!(v["instances"][0]["txn__count"], json!(9));
    assert_eq!(header(&h, "x-ferry-status"), "ok");
    assert_eq!(header(&h, "x-ferry-entities"), "2");
}

#[test]
fn missing_entity_policies() {
    let body = r#"{"instances":[{"user_id":"a"},{"user_id":"ghost"}]}"#;
    let e = run(&config(), body, vec![good(1), vec![]]).unwrap_err();
    assert_eq!(
        e,
        FerryError::EntitiesNotFound {
            ids: vec!["ghost".into()]
        }
    );

    let c = route_with(|r| r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32);
    let (v, h) = run(&c, body, vec![good(1), vec![]]).unwrap();
    assert_eq!(v["instances"][1]["profile__age"], Json::Null);
    assert_eq!(v["ferry"]["statuses"][1]["profile__age"], "NOT_FOUND");
    assert_eq!(header(&h, "x-ferry-missing"), "1");
    assert_eq!(header(&h, "x-ferry-status"), "partial");

    let c = route_with(|r| r.on_missing_entity = pb::MissingEntityPolicy::MissingDefault as i32);
    let (v, _) = run(&c, body, vec![good(1), vec![]]).unwrap();
    assert_eq!(v["instances"][1]["profile__age"], json!(-1), "repo default");
    assert_eq!(
        v["instances"][1]["profile__score"],
        Json::Null,
        "no default: null"
    );
    assert_eq!(v["instances"][0]["profile__age"], json!(1));
}

#[test]
fn stale_policies() {
    let day = 86_400_000_000;
    let stale = vector(
        FP,
        vec![
            (NOW, vec![Some(Kind::Int64Val(1)), None]),
            (NOW - 2 * day, vec![Some(Kind::Int64Val(9))]),
        ],
    );
    let body = r#"{"instances":[{"user_id":"a"}]}"#;
    let (v, h) = run(&config(), body, vec![stale.clone()]).unwrap();
    assert_eq!(v["instances"][0]["txn__count"], Json::Null);
    assert_eq!(v["ferry"]["statuses"][0]["txn__count"], "OUTSIDE_MAX_AGE");
    assert_eq!(header(&h, "x-ferry-stale"), "1");
    let c = route_with(|r| r.on_stale = pb::StalePolicy::StaleReject as i32);
    let e = run(&c, body, vec![stale]).unwrap_err();
    assert_eq!((e.status(), e.code()), (422, "stale_features"));
}

/// A reader answer that does not hold what was asked is refused before any vector is used.
#[test]
fn unusable_reader_answers_are_refused() {
    let c = config();
    let e = run(&c, r#"{"instances":[{"user_id":"a"}]}"#, vec![]).unwrap_err();
    assert_eq!(
        e.message(),
        "unusable feature vector: reader answered 0 vectors for 1 entities"
    );
    let e = run(
        &c,
        r#"{"instances":[{"user_id":"a"}]}"#,
        vec![vector(FP + 1, vec![])],
    )
    .unwrap_err();
    assert_eq!(e.code(), "fingerprint_mismatch");
}

/// The body written as the vectors are decoded (`rendered`) is, byte for byte, the body of
/// the typed path (`format::rewrite` of the typed features after the same policies), over
/// every policy, missing and stale entities, nulls, non-finite floats and two services.
#[test]
fn rendered_body_is_the_typed_body() {
    use ferry_test_support::snapshot::{with_merchant, DAY_US};
    use ferry_test_support::vector::merchant;
    let stale = scoring(NOW - 2 * DAY_US, Some(5), Some(1.5), Some(6));
    let odd = vector(
        FP,
        vec![
            (NOW, vec![None, Some(Kind::FloatVal(f32::NAN))]),
            (0, vec![]),
        ],
    );
    let cases: Vec<(Config, &str, Vec<Vec<u8>>)> = vec![
        (
            route_with(|r| r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32),
            r#"{"x":1,"instances":[{"user_id":"a","n":"\u00e9"},{"user_id":"b"},{"user_id":"c","profile__age":3}],"ferry":2}"#,
            vec![good(1), vec![], stale.clone()],
        ),
        (
            route_with(|r| r.on_missing_entity = pb::MissingEntityPolicy::MissingDefault as i32),
            r#"{"instances":[{"user_id":"a"},{"user_id":"b"},{"user_id":"c"}]}"#,
            vec![odd.clone(), vec![], stale],
        ),
        (
            Config::from_snapshot(with_merchant(pb::ValueType::String)).unwrap(),
            r#"{"instances":[{"user_id":"a","merchant_id":"m"},{"merchant_id":"n","user_id":"b"}]}"#,
            vec![good(1), merchant(NOW, 0.1), odd, vec![]],
        ),
    ];
    for (c, body, vectors) in cases {
        let r = &c.routes[0];
        let parse = || -> ParsedRequest {
            crate::format::kserve_v1::parse(body.as_bytes(), r)
                .unwrap()
                .into()
        };
        let keep_all = |_: ServedStatus| true;
        let e = enrich_at(r, parse(), &vectors, NOW, NOW, &keep_all).unwrap();
        let req = parse();
        let mut features = typed(r, req.keys(), &vectors, NOW).unwrap();
        if r.on_missing == OnMissing::Default {
            apply_defaults(r, &mut features);
        }
        let logged = e.logged.unwrap();
        assert_eq!(logged.features, features, "{body}");
        let want = format::rewrite(req, r, features).unwrap().body.unwrap();
        let got = e.rewritten.body.unwrap();
        assert_eq!(
            String::from_utf8(got).unwrap(),
            String::from_utf8(want).unwrap()
        );
    }
}

/// Every (service, view) metric name defined, by host id, for `served_values_are_counted`.
fn view_metrics(c: &Config) -> (crate::metrics::Metrics, HashMap<u32, String>) {
    use crate::metrics::{Metrics, ViewMetrics};
    let mut names = HashMap::new();
    let mut next = 100;
    let base = Metrics::define(|_, _| None);
    let views = ViewMetrics::define(c, &ViewMetrics::default(), |_, name| {
        next += 1;
        names.insert(next, name.to_owned());
        Some(next)
    });
    (base.with_views(views), names)
}

#[test]
fn served_values_are_counted_by_view_status_and_age() {
    use crate::host::testing::FakeHost;
    use ferry_test_support::snapshot::DAY_US;
    let c = route_with(|r| r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32);
    let r = &c.routes[0];
    let body = r#"{"instances": [{"user_id": "a"}, {"user_id": "b"}, {"user_id": "c"}]}"#;
    let req: ParsedRequest = crate::format::kserve_v1::parse(body.as_bytes(), r)
        .unwrap()
        .into();
    // a: fresh, 10 s old, score null; b: 2 days old (txn stale under its 1-day TTL);
    // c: not found.
    let fresh = scoring(NOW - 10_000_000, Some(1), None, Some(3));
    let old = scoring(NOW - 2 * DAY_US, Some(2), Some(0.5), Some(4));
    let e = enrich(r, req, &[fresh, old, vec![]], NOW).unwrap();
    let (m, names) = view_metrics(&c);
    let host = FakeHost::default();
    m.count_served(&host, r, &e.served);
    let count = |name: &str| {
        let id = names.iter().find(|(_, n)| n.as_str() == name).unwrap().0;
        host.metrics.borrow().get(id).copied().unwrap_or(0)
    };
    let p = "ferry_view_values.service.scoring.view";
    assert_eq!(count(&format!("{p}.profile.status.present")), 3);
    assert_eq!(count(&format!("{p}.profile.status.null")), 1);
    assert_eq!(count(&format!("{p}.profile.status.missing")), 2);
    assert_eq!(count(&format!("{p}.profile.status.stale")), 0);
    assert_eq!(count(&format!("{p}.txn.status.present")), 1);
    assert_eq!(count(&format!("{p}.txn.status.stale")), 1);
    assert_eq!(count(&format!("{p}.txn.status.missing")), 1);
    let mut ages: Vec<(String, u64)> = host
        .recorded
        .borrow()
        .iter()
        .map(|(id, v)| (names[id].clone(), *v))
        .collect();
    ages.sort();
    let age = |v: &str| format!("ferry_view_age_seconds.service.scoring.view.{v}");
    assert_eq!(
        ages,
        [
            (age("profile"), 10),
            (age("profile"), 172_800),
            (age("txn"), 10),
            (age("txn"), 172_800)
        ],
        "one age per row found, stale ones included"
    );
}

#[test]
fn view_series_are_bounded_and_kept_across_snapshots() {
    use crate::metrics::{views::MAX_VIEW_SERIES, ViewMetrics};
    let c = config();
    let mut defined = 0;
    let all = ViewMetrics::define(&c, &ViewMetrics::default(), |_, _| {
        defined += 1;
        Some(defined)
    });
    let pairs: usize = c.services.iter().map(|s| s.views.len()).sum();
    assert!((2..=MAX_VIEW_SERIES).contains(&pairs));
    assert_eq!((all.pairs(), defined), (pairs, pairs as u32 * 5));
    let one = ViewMetrics::define_at_most(&c, &ViewMetrics::default(), 1, |_, _| Some(1));
    assert_eq!(one.pairs(), 1, "past the bound: no series");
    let again = ViewMetrics::define(&c, &all, |_, _| panic!("already defined"));
    assert_eq!(again.ids("scoring"), all.ids("scoring"));
}
