//! `on_demand_views` in a repo: a good one in the snapshot (accepted by the filter's own
//! compiler), a service of request fields only, the fingerprint and the derived version, and
//! one test per refusal of `ferry apply`, asserting its message.

use crate::snapshot;
use crate::test_support::{issues, load_repo};

const YAML: &str = r#"
project: bank
entities:
  - {name: user, join_key: user_id, type: string}
feature_views:
  - name: transactions
    entities: [user]
    source: {path: t.csv, timestamp_field: ts}
    features:
      - {name: txn_amount_avg_7d, type: float64}
      - {name: txn_count_7d, type: int64}
  - name: user_profile
    entities: [user]
    source: {path: p.csv, timestamp_field: ts}
    features:
      - {name: country, type: string}
      - {name: emb, type: float32_list}
on_demand_views:
  - name: txn_risk
    request: [{name: amount, type: float64}, {name: country, type: string, field: cc}, {name: q, type: float32_list}]
    sources: [transactions, user_profile]
    features:
      - {name: amount_over_avg_7d, type: float64, expr: "request.amount / transactions.txn_amount_avg_7d"}
      - {name: big_spender, type: bool, expr: "request.amount > 1000.0"}
      - {name: abroad, type: bool, expr: "request.country != user_profile.country"}
      - {name: similarity, type: float32, expr: "cosine(request.q, user_profile.emb)"}
  - name: req_only
    request: [{name: amount, type: float64}]
    features:
      - {name: amount_k, type: float64, expr: "request.amount / 1000.0"}
      - {name: hour, type: int64, expr: "request.time / 3600 % 24"}
feature_services:
  - name: scoring
    features: [transactions, user_profile, txn_risk]
  - name: plain
    features: [req_only]
routes:
  - match: {path_prefix: /v1/models/fraud}
    service: scoring
    format: kserve_v1
    entity: {field: user_id}
"#;

const FILES: [(&str, &str); 2] = [
    (
        "t.csv",
        "user_id,ts,txn_amount_avg_7d,txn_count_7d\nu1,1767225600,12.5,3\n",
    ),
    (
        "p.csv",
        "user_id,ts,country,emb\nu1,1767225600,DE,\"[1, 0]\"\n",
    ),
];

fn problems(from: &str, to: &str) -> Vec<String> {
    assert!(YAML.contains(from), "{from}");
    let (_dir, reg) = load_repo(&YAML.replacen(from, to, 1), &FILES);
    issues(reg)
}

/// The one problem an edit causes.
fn problem(from: &str, to: &str) -> String {
    let ps = problems(from, to);
    assert_eq!(ps.len(), 1, "{ps:?}");
    ps[0].clone()
}

#[test]
fn a_repo_with_on_demand_views_makes_a_snapshot_the_filter_accepts() {
    let (_dir, reg) = load_repo(YAML, &FILES);
    let reg = reg.unwrap();
    let snap = snapshot::build(&reg);
    let names: Vec<&str> = snap
        .on_demand_views
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(names, ["req_only", "txn_risk"]);
    let risk = &snap.on_demand_views[1];
    assert_eq!(risk.request[1].field, "cc");
    let stored: Vec<(&str, &str)> = risk
        .stored
        .iter()
        .map(|s| (s.view.as_str(), s.feature.as_str()))
        .collect();
    assert_eq!(
        stored,
        [
            ("transactions", "txn_amount_avg_7d"),
            ("user_profile", "country"),
            ("user_profile", "emb")
        ]
    );
    let scoring = &snap.services[0];
    assert_eq!(scoring.derived[0].view, "txn_risk");
    assert_eq!(
        scoring.derived[0].features,
        ["abroad", "amount_over_avg_7d", "big_spender", "similarity"]
    );
    assert_eq!(scoring.derived_version.len(), 16);
    // A service of request fields only: no key, no stored view.
    let plain = &snap.services[1];
    assert!(plain.entity_keys.is_empty() && plain.views.is_empty());
    let c = ferry_core::config::Config::from_snapshot(snap.clone()).unwrap();
    assert_eq!(c.services[0].derived_count, 4);
    assert_eq!(c.services[0].derived[0].stored_index, [0, 2, 3]);
    assert_eq!(c.services[1].derived_count, 2);
    let text = crate::report::report(&reg, &snap.version);
    assert!(
        text.contains("feature service plain  fingerprint "),
        "{text}"
    );
    assert!(
        text.contains("  on-demand view txn_risk        4 feature(s)  derived version "),
        "{text}"
    );
    // Nothing of a service of request fields only is stored.
    let tables = crate::tables::load_tables(&reg).unwrap();
    assert!(crate::tables::service_entities(&reg.services[1], &tables).is_empty());
    assert_eq!(
        crate::tables::service_entities(&reg.services[0], &tables),
        ["u1"]
    );
}

#[test]
fn an_expression_change_keeps_the_fingerprint_and_changes_the_derived_version() {
    let build = |yaml: &str| {
        let (_dir, reg) = load_repo(yaml, &FILES);
        snapshot::build(&reg.unwrap())
    };
    let before = build(YAML);
    let after = build(&YAML.replace("request.amount > 1000.0", "request.amount > 2000.0"));
    assert_eq!(
        after.services[0].fingerprint,
        before.services[0].fingerprint
    );
    assert_ne!(
        after.services[0].derived_version,
        before.services[0].derived_version
    );
    assert_eq!(
        after.services[1].derived_version,
        before.services[1].derived_version
    );
    assert_ne!(after.version, before.version);
    // Without its on-demand view the service has the same fingerprint.
    let stored_only = build(&YAML.replace(
        "[transactions, user_profile, txn_risk]",
        "[transactions, user_profile]",
    ));
    assert_eq!(
        stored_only.services[0].fingerprint,
        before.services[0].fingerprint
    );
    assert!(stored_only.services[0].derived_version.is_empty());
}

const EXPR: &str = "on_demand_views[0] 'txn_risk': features[1] 'big_spender': expr";

#[test]
fn unknown_names_are_refused_with_their_position() {
    assert_eq!(
        problem("request.amount > 1000.0", "request.amt > 1000.0"),
        format!("{EXPR}: 1:9: request has no field 'amt' (declared: amount, country, q; and time)")
    );
    assert_eq!(
        problem("request.amount > 1000.0", "transactions.nope > 1000.0"),
        format!("{EXPR}: 1:14: view 'transactions' has no feature 'nope'")
    );
    assert_eq!(
        problem("request.amount > 1000.0", "request.amount > limit"),
        format!("{EXPR}: 1:18: unknown name 'limit' (names are request.<field>, request.time and <source>.<feature>; sources: transactions, user_profile)")
    );
}

#[test]
fn wrong_types_are_refused() {
    assert_eq!(
        problem("request.amount > 1000.0", "request.country > transactions.txn_count_7d"),
        format!("{EXPR}: 1:17: '>' does not take string, int (it takes int, int -> bool; double, double -> bool; string, string -> bool)")
    );
    assert_eq!(
        problem("request.amount > 1000.0", "request.amount > 1000"),
        format!("{EXPR}: 1:16: '>' of double and int: CEL does not mix int and double; convert one with double() or int()")
    );
}

#[test]
fn a_result_other_than_the_declared_type_is_refused() {
    assert_eq!(
        problem(
            "{name: big_spender, type: bool,",
            "{name: big_spender, type: float64,"
        ),
        format!("{EXPR}: 1:16: the expression is bool, the feature is declared float64 (double)")
    );
    assert_eq!(
        problem(
            "{name: big_spender, type: bool,",
            "{name: big_spender, type: bytes,"
        ),
        "on_demand_views[0] 'txn_risk': features[1] 'big_spender': type bytes cannot be computed"
    );
}

#[test]
fn functions_outside_the_allowed_set_are_refused() {
    let p = problem("request.amount > 1000.0", "request.country.matches('^D')");
    assert!(
        p.starts_with(&format!("{EXPR}: 1:24: matches() is not allowed")),
        "{p}"
    );
    let p = problem("request.amount > 1000.0", "pow(request.amount, 2.0) > 1.0");
    assert!(
        p.starts_with(&format!(
            "{EXPR}: 1:4: function 'pow' is not allowed (allowed: "
        )),
        "{p}"
    );
}

#[test]
fn expressions_over_the_size_or_cost_limit_are_refused() {
    let long = format!("request.amount{} > 1000.0", " + 1.0".repeat(400));
    assert_eq!(
        problem("request.amount > 1000.0", &long),
        format!("{EXPR}: 1:1: the expression is 2423 bytes, over the limit of 2048")
    );
    let p = problem(
        "request.amount > 1000.0",
        "request.q.exists(x, user_profile.emb.exists(y, x > y))",
    );
    assert!(p.starts_with(&format!("{EXPR}: 1:17: cost bound ")), "{p}");
    assert!(p.ends_with("is over the limit of 50000 (each list counted at 4096 elements; a macro costs its body once per element)"), "{p}");
}

#[test]
fn sources_must_be_stored_views_of_every_service_listing_the_view() {
    assert_eq!(
        problem("[transactions, user_profile, txn_risk]", "[transactions, txn_risk]"),
        "feature_services[0] 'scoring': on-demand view 'txn_risk' reads view 'user_profile', which is not a stored view of this feature service; list it (or the features read) too"
    );
    assert_eq!(
        problem("[transactions, user_profile, txn_risk]", "[transactions, \"user_profile:emb\", txn_risk]"),
        "feature_services[0] 'scoring': on-demand view 'txn_risk' reads 'user_profile:country', which this feature service does not select"
    );
    assert_eq!(
        problem("sources: [transactions, user_profile]", "sources: [transactions, user_profile, req_only]"),
        "on_demand_views[0] 'txn_risk': source 'req_only' is an on-demand view; sources are stored feature views"
    );
    assert_eq!(
        problem(
            "sources: [transactions, user_profile]",
            "sources: [transactions, user_profile, nope]"
        ),
        "on_demand_views[0] 'txn_risk': unknown source 'nope' (not a feature view)"
    );
}

#[test]
fn duplicate_names_are_refused() {
    assert_eq!(
        problems("  - name: req_only\n", "  - name: txn_risk\n")[0],
        "on_demand_views[1] 'txn_risk': duplicate on-demand view name 'txn_risk' (first at on_demand_views[0])"
    );
    assert_eq!(
        problem("{name: big_spender,", "{name: abroad,"),
        "on_demand_views[0] 'txn_risk': features[2] 'abroad': duplicate feature name 'abroad' (first at features[1])"
    );
    assert_eq!(
        problems("  - name: req_only\n", "  - name: transactions\n")[0],
        "on_demand_views[1] 'transactions': 'transactions' is also the name of a feature view"
    );
    let p = problems(
        "{name: country, type: string, field: cc}",
        "{name: amount, type: string}",
    );
    assert!(
        p.iter()
            .any(|p| p.contains("duplicate request field 'amount'")),
        "{p:?}"
    );
    assert_eq!(
        problems("{name: country, type: string, field: cc}", "{name: time, type: int64}")[0],
        "on_demand_views[0] 'txn_risk': request[1] 'time': 'time' is request.time, the request's time; name the field otherwise"
    );
}

#[test]
fn a_derived_name_colliding_with_a_stored_one_is_refused() {
    let short = YAML.replace(
        "    entity: {field: user_id}\n",
        "    entity: {field: user_id}\n    feature_names: short\n",
    );
    let (_dir, reg) = load_repo(&short.replace("{name: abroad,", "{name: country,"), &FILES);
    assert_eq!(
        issues(reg),
        ["routes[0] 'route-0': feature name 'country' is given by views 'user_profile' and 'txn_risk'; use feature_names: full"]
    );
    // Under full names, txn_risk__country and user_profile__country differ.
    let (_dir, reg) = load_repo(&YAML.replace("{name: abroad,", "{name: country,"), &FILES);
    assert!(reg.is_ok());
}
