//! Validation: a good repo resolves; bad repos report every problem with file, path and reason.

use super::*;
use crate::test_support::{file_of, issues, load_repo, ORDER_FILES, ORDER_YAML};

const FILES: [(&str, &str); 2] = [
    ("data/profile.csv", "user_id,event_timestamp,age,score\n"),
    ("data/txn.csv", "user_id,event_timestamp,count,amount\n"),
];

const GOOD: &str = r#"
project: banking
entities:
  - {name: user, join_key: user_id, type: string}
feature_views:
  - name: user_profile
    entities: [user]
    ttl: 30d
    source: {path: data/profile.csv, timestamp_field: event_timestamp}
    features:
      - {name: age, type: int64}
      - {name: score, type: float32, default: 600.0}
  - name: transactions
    entities: [user]
    source: {path: data/txn.csv, timestamp_field: event_timestamp}
    features:
      - {name: count, type: int64}
      - {name: amount, type: float64}
feature_services:
  - name: scoring
    features: [user_profile, "transactions:count"]
routes:
  - match: {path_prefix: /v1/models/fraud}
    service: scoring
    format: kserve_v1
    entity: {field: user_id}
"#;

#[test]
fn a_good_repo_resolves_with_defaults() {
    let (_dir, reg) = load_repo(GOOD, &FILES);
    let reg = reg.unwrap();
    assert_eq!(reg.project, "banking");
    let s = &reg.services[0];
    let views: Vec<&str> = s
        .views
        .iter()
        .map(|v| reg.views[v.view].name.as_str())
        .collect();
    assert_eq!(views, ["transactions", "user_profile"]);
    assert_eq!(s.views[0].features, [0]);
    assert_eq!(reg.views[0].ttl_seconds, 30 * 86_400);
    assert_eq!(reg.views[1].ttl_seconds, 0);
    let r = &reg.routes[0];
    assert_eq!(r.name, "route-0");
    assert_eq!(r.feature_names, FeatureNames::Full);
    assert_eq!(r.on_missing_entity, MissingEntityPolicy::MissingReject);
    assert_eq!(r.on_stale, StalePolicy::StaleNull);
    assert_eq!(r.on_reader_error, ReaderErrorPolicy::ReaderErrorReject);
    assert_eq!(
        (r.max_body_bytes, r.max_entities, r.reader_timeout_ms),
        (1 << 20, 1000, 200)
    );
    assert_eq!(
        (reg.reader.cluster.as_str(), reg.reader.authority.as_str()),
        ("ferry_reader", "ferry-reader")
    );
}

#[test]
fn unquoted_null_policies_mean_the_null_policy() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let r = &reg.unwrap().routes[0];
    assert_eq!(r.on_missing_entity, MissingEntityPolicy::MissingNull);
    assert_eq!(r.on_stale, StalePolicy::StaleReject);
    assert_eq!(r.on_reader_error, ReaderErrorPolicy::ReaderErrorForward);
}

#[test]
fn the_issue_line_names_file_path_and_reason() {
    let yaml = GOOD.replace(
        "{name: amount, type: float64}",
        "{name: amount, type: floaty}",
    );
    let (dir, reg) = load_repo(&yaml, &FILES);
    let err = reg.unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "{}: feature_views[1] 'transactions': feature 'amount': unknown type 'floaty' \
             (expected one of int32, int64, float32, float64, bool, string, bytes, float32_list)",
            file_of(dir.path())
        )
    );
}

/// Applies `(from, to)` replacements to GOOD and returns its issues.
fn issues_of(edits: &[(&str, &str)], files: &[(&str, &str)]) -> Vec<String> {
    let mut yaml = GOOD.to_owned();
    for (from, to) in edits {
        assert!(yaml.contains(from), "edit target {from:?} not in GOOD");
        yaml = yaml.replacen(from, to, 1);
    }
    let (_dir, reg) = load_repo(&yaml, files);
    issues(reg)
}

#[test]
fn every_problem_is_reported_at_once() {
    let got = issues_of(
        &[
            ("project: banking", "project: bank:ing"),
            ("ttl: 30d", "ttl: 30"),
            (
                "{name: age, type: int64}",
                "{name: age, type: int64, default: old}",
            ),
            (
                "entities: [user]\n    source: {path: data/txn",
                "entities: [user, merchant]\n    source: {path: data/txn",
            ),
            (
                "features: [user_profile, \"transactions:count\"]",
                "features: [user_profile, \"transactions:nope\", clicks]",
            ),
            ("format: kserve_v1", "format: kserve_v3"),
        ],
        &FILES,
    );
    assert_eq!(
        got,
        [
            "project: invalid project name 'bank:ing' (use 1-128 of A-Z a-z 0-9 _ -, not starting with '-')",
            "feature_views[0] 'user_profile': ttl '30': expected a number with unit s, m, h or d (e.g. 30d)",
            "feature_views[0] 'user_profile': feature 'age': default 'old' is not a valid int64",
            "feature_views[1] 'transactions': unknown entity 'merchant'",
            "feature_services[0] 'scoring': feature ref 'transactions:nope': feature view 'transactions' has no feature 'nope'",
            "feature_services[0] 'scoring': feature ref 'clicks': unknown feature view 'clicks'",
            "routes[0] 'route-0': unknown format 'kserve_v3' (expected one of kserve_v1, kserve_v2, kserve_v2_grpc, json, header, feast_rest)",
        ]
    );
}

#[test]
fn views_of_one_service_must_share_their_entities() {
    let yaml = GOOD
        .replace(
            "type: string}\n",
            "type: string}\n  - {name: merchant, join_key: merchant_id, type: int64}\n",
        )
        .replace(
            "entities: [user]\n    source: {path: data/txn",
            "entities: [user, merchant]\n    source: {path: data/txn",
        );
    let files = [
        FILES[0],
        (
            "data/txn.csv",
            "user_id,merchant_id,event_timestamp,count,amount\n",
        ),
    ];
    let (_dir, reg) = load_repo(&yaml, &files);
    assert_eq!(
        issues(reg),
        [
            "feature_services[0] 'scoring': views 'transactions' (entities: merchant, user) and \
             'user_profile' (entities: user) differ; all views of a feature service must have the \
             same entities",
            "routes[0] 'route-0': entity names 1 field(s) but feature service 'scoring' has 2 entity \
             key(s) (merchant_id, user_id), given in this order",
        ]
    );
}

#[test]
fn sources_are_checked_cheaply() {
    let files = [("data/profile.csv", "user_id,event_timestamp,age\n")];
    let got = issues_of(&[("data/txn.csv", "data/txn.parquet")], &files);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        got[0],
        "feature_views[0] 'user_profile': source 'data/profile.csv': missing column(s) score"
    );
    assert!(
        got[1].starts_with(
            "feature_views[1] 'transactions': source 'data/txn.parquet': file not found"
        ),
        "{got:?}"
    );
    let (dir, reg) = load_repo(GOOD, &FILES[..1]);
    let missing = dir.path().join("data/txn.csv");
    assert_eq!(
        issues(reg),
        [format!(
            "feature_views[1] 'transactions': source 'data/txn.csv': file not found ({})",
            missing.display()
        )]
    );
    let got = issues_of(&[("data/txn.csv", "data/txn.json")], &FILES);
    assert_eq!(
        got,
        ["feature_views[1] 'transactions': source 'data/txn.json': unsupported source extension (expected .csv or .parquet)"]
    );
}

#[test]
fn a_source_may_declare_its_timestamp_unit() {
    let yaml = GOOD.replacen(
        "source: {path: data/profile.csv, timestamp_field: event_timestamp}",
        "source: {path: data/profile.csv, timestamp_field: event_timestamp, timestamp_unit: ms}",
        1,
    );
    let (_dir, reg) = load_repo(&yaml, &FILES);
    let reg = reg.unwrap();
    let unit = |name: &str| {
        reg.views
            .iter()
            .find(|v| v.name == name)
            .map(|v| v.source.as_ref().unwrap().timestamp_unit)
    };
    assert_eq!(
        unit("user_profile"),
        Some(Some(crate::sources::TimeUnit::Millis))
    );
    assert_eq!(unit("transactions"), Some(None), "absent: detected");
    let got = issues_of(
        &[(
            "source: {path: data/txn.csv, timestamp_field: event_timestamp}",
            "source: {path: data/txn.csv, timestamp_field: event_timestamp, timestamp_unit: sec}",
        )],
        &FILES,
    );
    assert_eq!(
        got,
        [
            "feature_views[1] 'transactions': source 'data/txn.csv': unknown timestamp_unit 'sec' \
          (expected s, ms, us or ns)"
        ]
    );
}

#[test]
fn names_must_be_valid_and_unique() {
    let got = issues_of(
        &[
            ("- name: transactions", "- name: user_profile"),
            (
                "{name: amount, type: float64}",
                "{name: count, type: float64}",
            ),
            (
                "- {name: user, join_key: user_id",
                "- {name: \"user x\", join_key: user_id",
            ),
        ],
        &FILES,
    );
    assert_eq!(
        got,
        [
            "entities[0] 'user x': invalid name 'user x' (use 1-128 of A-Z a-z 0-9 _ -, not starting with '-')",
            "feature_views[0] 'user_profile': unknown entity 'user'",
            "feature_views[1] 'user_profile': duplicate feature view name 'user_profile' (first at feature_views[0])",
            "feature_views[1] 'user_profile': unknown entity 'user'",
            "feature_views[1] 'user_profile': feature 'count': duplicate feature name",
            "feature_services[0] 'scoring': feature ref 'transactions:count': unknown feature view 'transactions'",
        ]
    );
}

#[test]
fn route_checks() {
    let route2 = "\n  - name: fraud2\n    match: {path_prefix: /v1/models/fraud-x, path_exact: /a}\n    \
                  service: nope\n    format: kserve_v3\n    entity: {field: user_id}\n    \
                  max_body_bytes: 100\n    max_entities: 0\n    reader_timeout_ms: 0\n    \
                  feature_names: medium\n    on_missing_entity: default\n    on_reader_error: open\n";
    let mut yaml = GOOD.to_owned();
    yaml.push_str(route2);
    let (_dir, reg) = load_repo(&yaml, &FILES);
    assert_eq!(
        issues(reg),
        [
            "routes[1] 'fraud2': match takes at most one of path_prefix, path_exact",
            "routes[1] 'fraud2': unknown feature service 'nope'",
            "routes[1] 'fraud2': unknown format 'kserve_v3' (expected one of kserve_v1, kserve_v2, kserve_v2_grpc, json, header, feast_rest)",
            "routes[1] 'fraud2': feature_names: unknown value 'medium' (expected one of full, short)",
            "routes[1] 'fraud2': on_reader_error: unknown value 'open' (expected one of reject, forward)",
            "routes[1] 'fraud2': max_body_bytes 100 is outside 1024..=8388608",
            "routes[1] 'fraud2': max_entities 0 is outside 1..=10000",
            "routes[1] 'fraud2': reader_timeout_ms 0 is outside 1..=60000",
        ]
    );
}

#[test]
fn shadowed_routes_and_short_name_clashes_are_refused() {
    let yaml = GOOD.replace("transactions:count", "transactions").replace("{name: amount, type: float64}", "{name: age, type: float64}")
        + "\n  - name: later\n    match: {path_prefix: /v1/models/fraud-lenient}\n    service: scoring\n    \
           format: kserve_v1\n    entity: {field: user_id}\n    feature_names: short\n";
    let files = [
        FILES[0],
        ("data/txn.csv", "user_id,event_timestamp,count,age\n"),
    ];
    let (_dir, reg) = load_repo(&yaml, &files);
    assert_eq!(
        issues(reg),
        [
            "routes[1] 'later': feature name 'age' is given by views 'transactions' and 'user_profile'; use feature_names: full",
            "routes[1] 'later': never matched: routes[0] matches its requests first (routes are tried in order)",
        ]
    );
}

#[test]
fn structure_errors_stop_at_parse_with_a_location() {
    let yaml = GOOD.replace("ttl: 30d", "ttl: 30d\n    tll: 5d");
    let (dir, reg) = load_repo(&yaml, &FILES);
    let err = reg.unwrap_err();
    assert!(matches!(err, RepoError::Parse { .. }));
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{}: ", file_of(dir.path()))),
        "{msg}"
    );
    assert!(msg.contains("unknown field `tll`"), "{msg}");
    assert!(msg.contains("line 9"), "{msg}");
}

#[test]
fn routes_match_on_host_and_headers_or_are_selected_by_name() {
    let route = |name: &str, matcher: &str| {
        format!(
            "\n  - name: {name}\n{matcher}    service: scoring\n    format: kserve_v1\n    entity: {{field: user_id}}\n"
        )
    };
    let yaml = GOOD.to_string()
        + &route(
            "by-host",
            "    match:\n      path_prefix: /v1/models/other\n      host: Models.Example.com\n",
        )
        + &route(
            "by-header",
            "    match:\n      headers:\n        - {name: X-Model, exact: fraud}\n        - {name: x-tenant}\n",
        )
        + &route("by-name-1", "")
        + &route("by-name-2", "    match: {}\n");
    let (_dir, reg) = load_repo(&yaml, &FILES);
    let reg = reg.unwrap();
    let m: Vec<String> = reg.routes.iter().map(|r| r.matcher.to_string()).collect();
    assert_eq!(
        m,
        [
            "prefix /v1/models/fraud",
            "prefix /v1/models/other host models.example.com",
            "header x-model=fraud header x-tenant",
            "by name (Envoy route metadata)",
            "by name (Envoy route metadata)",
        ]
    );
    let snap = crate::snapshot::build(&reg);
    let h = snap.routes[2].r#match.as_ref().unwrap();
    assert_eq!(h.headers.len(), 2);
    assert_eq!(
        (h.headers[0].name.as_str(), h.headers[0].exact.as_str()),
        ("x-model", "fraud")
    );
    assert_eq!(
        (h.headers[1].name.as_str(), h.headers[1].exact.as_str()),
        ("x-tenant", "")
    );
    assert_eq!(
        snap.routes[1].r#match.as_ref().unwrap().host,
        "models.example.com"
    );
    assert_eq!(
        snap.routes[3].r#match.as_ref().unwrap(),
        &Default::default()
    );
    // The snapshot is one the filter accepts.
    ferry_core::config::Config::from_snapshot(snap).unwrap();
}

#[test]
fn host_and_header_routes_behind_a_broader_route_are_never_matched() {
    let yaml = GOOD.to_string()
        + "\n  - name: narrower\n    match: {path_prefix: /v1/models/fraud/x, host: a.example.com, \
           headers: [{name: x-model}]}\n    service: scoring\n    format: kserve_v1\n    \
           entity: {field: user_id}\n"
        + "\n  - name: bad\n    match: {host: \"a.example.com:80\", headers: [{name: \"x model\"}, \
           {name: x-a, exact: \"\"}]}\n    service: scoring\n    format: kserve_v1\n    \
           entity: {field: user_id}\n";
    let (_dir, reg) = load_repo(&yaml, &FILES);
    assert_eq!(
        issues(reg),
        [
            "routes[1] 'narrower': never matched: routes[0] matches its requests first (routes are tried in order)",
            "routes[2] 'bad': match host 'a.example.com:80' must be a host name or *.domain, without a port",
            "routes[2] 'bad': match header name 'x model' is not a header name",
            "routes[2] 'bad': match header 'x-a': exact is empty (leave it out to only require the header)",
        ]
    );
}

/// GOOD plus a merchant entity, view and service, and `route` appended to its routes.
fn with_merchants(route: &str) -> String {
    GOOD.replace(
        "  - {name: user, join_key: user_id, type: string}\n",
        "  - {name: user, join_key: user_id, type: string}\n  - {name: merchant, join_key: merchant_id, type: int64}\n",
    )
    .replace(
        "feature_services:\n",
        "  - name: merchant_profile\n    entities: [merchant]\n    source: {path: data/merchant.csv, timestamp_field: event_timestamp}\n    \
         features:\n      - {name: risk, type: float32}\n      - {name: age, type: int64}\nfeature_services:\n  - name: merchant_risk\n    features: [merchant_profile]\n",
    ) + route
}

const MERCHANT_FILES: [(&str, &str); 3] = [
    FILES[0],
    FILES[1],
    (
        "data/merchant.csv",
        "merchant_id,event_timestamp,risk,age\n",
    ),
];

#[test]
fn a_route_can_enrich_from_extra_services() {
    let yaml = with_merchants(
        "  - name: pair\n    match: {path_prefix: /v1/models/pair}\n    service: scoring\n    format: kserve_v1\n    \
         entity: {field: user_id}\n    extra_services:\n      - service: merchant_risk\n        entity: {field: merchant_id}\n",
    );
    let (_dir, reg) = load_repo(&yaml, &MERCHANT_FILES);
    let reg = reg.unwrap();
    let r = &reg.routes[1];
    assert_eq!(r.extra_services.len(), 1);
    assert_eq!(
        reg.services[r.extra_services[0].service].name,
        "merchant_risk"
    );
    let snap = crate::snapshot::build(&reg);
    let e = &snap.routes[1].extra_services;
    assert_eq!(e.len(), 1);
    assert_eq!(
        (e[0].service.as_str(), e[0].entity_fields.as_slice()),
        ("merchant_risk", &["merchant_id".to_string()][..])
    );
    let c = ferry_core::config::Config::from_snapshot(snap).unwrap();
    assert_eq!(c.routes[1].services_label, "scoring,merchant_risk");
    assert_eq!(c.routes[1].output_names.len(), 5);
}

#[test]
fn extra_services_are_checked_like_the_main_one() {
    let yaml = with_merchants(
        "  - name: pair\n    match: {path_prefix: /v1/models/pair}\n    service: scoring\n    format: kserve_v1\n    \
         feature_names: short\n    entity: {field: user_id}\n    extra_services:\n      - service: merchant_risk\n        \
         entity: {fields: [merchant_id, user_id]}\n      - service: nope\n        entity: {field: x}\n      \
         - service: scoring\n        entity: {field: user_id}\n",
    );
    let (_dir, reg) = load_repo(&yaml, &MERCHANT_FILES);
    assert_eq!(
        issues(reg),
        [
            "routes[1] 'pair': extra_services[1]: unknown feature service 'nope'",
            "routes[1] 'pair': extra_services[2]: feature service 'scoring' is used twice",
            "routes[1] 'pair': entity names 2 field(s) but feature service 'merchant_risk' has 1 entity key(s) (merchant_id), given in this order",
            "routes[1] 'pair': feature name 'age' is given by views 'user_profile' and 'merchant_profile'; use feature_names: full",
        ]
    );
}

#[test]
fn header_routes_can_encode_features_as_protobuf() {
    let route = |name: &str, format: &str, encoding: &str| {
        format!(
            "\n  - name: {name}\n    match: {{path_prefix: /{name}}}\n    service: scoring\n    format: {format}\n    \
             entity: {{field: x-user-id}}\n    features_encoding: {encoding}\n"
        )
    };
    let yaml = GOOD.to_string() + &route("pb", "header", "protobuf");
    let (_dir, reg) = load_repo(&yaml, &FILES);
    let snap = crate::snapshot::build(&reg.unwrap());
    assert_eq!(
        snap.routes[1].features_encoding,
        ferry_protos::v1::FeaturesEncoding::ProtobufBase64 as i32
    );
    let yaml = GOOD.to_string()
        + &route("body", "kserve_v1", "protobuf")
        + &route("odd", "header", "yaml");
    let (_dir, reg) = load_repo(&yaml, &FILES);
    assert_eq!(
        issues(reg),
        [
            "routes[1] 'body': features_header, features_encoding and max_header_bytes apply to format header only",
            "routes[2] 'odd': features_encoding: unknown value 'yaml' (expected one of json, protobuf)",
        ]
    );
}

#[test]
fn a_route_s_lookups_must_fit_one_reader_call() {
    let yaml = with_merchants(
        "  - name: pair\n    match: {path_prefix: /v1/models/pair}\n    service: scoring\n    format: kserve_v1\n    \
         entity: {field: user_id}\n    max_entities: 6000\n    extra_services:\n      - service: merchant_risk\n        \
         entity: {field: merchant_id}\n",
    );
    let (_dir, reg) = load_repo(&yaml, &MERCHANT_FILES);
    assert_eq!(
        issues(reg),
        ["routes[1] 'pair': max_entities 6000 × 2 services = 12000 keys in one reader call, over the reader's 10000"]
    );
}

#[test]
fn protected_paths_reach_the_snapshot_normalised_and_lowercase() {
    let yaml = GOOD.replacen(
        "routes:",
        "protected_paths: [/v1/models/, /V2/Models/]\nroutes:",
        1,
    );
    let (_dir, reg) = load_repo(&yaml, &FILES);
    let reg = reg.unwrap();
    assert_eq!(reg.protected_paths, ["/v1/models/", "/v2/models/"]);
    let snap = crate::snapshot::build(&reg);
    assert_eq!(snap.protected_paths, ["/v1/models/", "/v2/models/"]);
    // The filter takes what apply produced.
    ferry_core::config::Config::from_snapshot(snap).unwrap();

    let got = issues_of(
        &[
            (
                "routes:",
                "protected_paths: [v1, /v1//models/, /a/%61, /x, /x]\nroutes:",
            ),
            (
                "{path_prefix: /v1/models/fraud}",
                "{path_prefix: /v1/models/./fraud}",
            ),
        ],
        &FILES,
    );
    assert_eq!(
        got,
        [
            "routes[0] 'route-0': match path '/v1/models/./fraud' is not normalised (requests are matched on '/v1/models/fraud')",
            "protected_paths[0]: 'v1' must be a normalised path starting with / (e.g. /v1/models/), not '/v1'",
            "protected_paths[1]: '/v1//models/' must be a normalised path starting with / (e.g. /v1/models/), not '/v1/models/'",
            "protected_paths[2]: '/a/%61' must be a normalised path starting with / (e.g. /v1/models/), not '/a/a'",
            "protected_paths[4]: '/x' listed twice",
        ]
    );
}

#[test]
fn an_entity_key_has_at_most_four_join_keys() {
    let yaml = GOOD
        .replacen(
            "entities:\n  - {name: user, join_key: user_id, type: string}",
            "entities:\n  - {name: user, join_key: user_id, type: string}\n  - {name: a, join_key: a_id, type: string}\n  - {name: b, join_key: b_id, type: string}\n  - {name: c, join_key: c_id, type: string}\n  - {name: d, join_key: d_id, type: string}",
            1,
        )
        .replacen("entities: [user]\n    ttl: 30d", "entities: [user, a, b, c, d]\n    ttl: 30d", 1);
    let (_dir, reg) = load_repo(&yaml, &FILES);
    let got = issues(reg);
    assert!(
        got.iter()
            .any(|i| i.contains("has 5 entities; an entity key has at most 4 join keys")),
        "{got:?}"
    );
}

#[test]
fn grpc_routes_take_the_packed_choice_of_kserve_v2() {
    let route = |name: &str, format: &str| {
        format!(
            "\n  - name: {name}\n    match: {{path_prefix: /{name}}}\n    service: scoring\n    format: {format}\n    \
             entity: {{field: user_id}}\n    packed: true\n"
        )
    };
    let yaml = GOOD.to_string() + &route("grpc", "kserve_v2_grpc");
    let (_dir, reg) = load_repo(&yaml, &FILES);
    let snap = crate::snapshot::build(&reg.unwrap());
    let r = &snap.routes[1];
    assert_eq!(r.format, ferry_protos::v1::Format::KserveV2Grpc as i32);
    assert!(r.packed);
    let (_dir, reg) = load_repo(&(GOOD.to_string() + &route("v1", "kserve_v1")), &FILES);
    assert_eq!(
        issues(reg),
        ["routes[1] 'v1': packed applies to formats kserve_v2 and kserve_v2_grpc only"]
    );
}

#[test]
fn a_feast_rest_route_is_accepted_without_other_formats_options() {
    let yaml = GOOD.replace("format: kserve_v1", "format: feast_rest");
    let (_dir, reg) = load_repo(&yaml, &FILES);
    assert_eq!(
        reg.unwrap().routes[0].format,
        ferry_core::config::Format::FeastRest
    );
    assert_eq!(
        issues_of(
            &[("format: kserve_v1", "format: feast_rest\n    packed: true")],
            &FILES
        ),
        ["routes[0] 'route-0': packed applies to formats kserve_v2 and kserve_v2_grpc only"]
    );
}

#[test]
fn a_feast_rest_route_lists_the_services_it_reads() {
    let yaml = with_merchants(
        "  - name: feast\n    match: {path_exact: /get-online-features}\n    service: scoring\n    format: feast_rest\n    \
         entity: {field: user_id}\n    feast_services: [merchant_risk]\n",
    );
    let (_dir, reg) = load_repo(&yaml, &MERCHANT_FILES);
    let reg = reg.unwrap();
    let snap = crate::snapshot::build(&reg);
    assert_eq!(snap.routes[1].feast_services, ["merchant_risk"]);
    let c = ferry_core::config::Config::from_snapshot(snap).unwrap();
    let readable: Vec<&str> = c.routes[1]
        .feast_services
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(readable, ["scoring", "merchant_risk"]);
}

#[test]
fn feast_services_are_checked() {
    let yaml = with_merchants(
        "  - name: feast\n    match: {path_exact: /get-online-features}\n    service: scoring\n    format: feast_rest\n    \
         entity: {field: user_id}\n    feast_services: [nope, scoring, merchant_risk, merchant_risk]\n  \
         - name: v1\n    match: {path_prefix: /v1/models/other}\n    service: scoring\n    format: kserve_v1\n    \
         entity: {field: user_id}\n    feast_services: [merchant_risk]\n",
    );
    let (_dir, reg) = load_repo(&yaml, &MERCHANT_FILES);
    assert_eq!(
        issues(reg),
        [
            "routes[1] 'feast': feast_services[0]: unknown feature service 'nope'",
            "routes[1] 'feast': feast_services[1]: feature service 'scoring' is listed twice",
            "routes[1] 'feast': feast_services[3]: feature service 'merchant_risk' is listed twice",
            "routes[2] 'v1': feast_services is only for a feast_rest route",
        ]
    );
}

#[test]
fn a_route_logs_served_features_at_its_rates_and_bad_rates_are_refused() {
    let (_dir, reg) = load_repo(
        &format!("{GOOD}    log: {{sample: 0.1, statuses: {{partial: 1.0, degraded: 1}}}}\n"),
        &FILES,
    );
    let reg = reg.unwrap();
    let log = reg.routes[0].log.clone().unwrap();
    assert_eq!(log.sample, 0.1);
    assert_eq!(log.statuses["partial"], 1.0);
    assert_eq!(log.statuses["degraded"], 1.0);
    let snap = crate::snapshot::build(&reg);
    assert_eq!(snap.routes[0].log, Some(log), "in the snapshot");
    let bad = format!("{GOOD}    log: {{sample: 2, statuses: {{stale: 1.0}}}}\n");
    let (_dir, reg) = load_repo(&bad, &FILES);
    assert_eq!(
        issues(reg),
        ["routes[0] 'route-0': log sample must be a number in 0..1, not 2"]
    );
    let bad = format!("{GOOD}    log: {{sample: 0.5, statuses: {{stale: 1.0}}}}\n");
    let (_dir, reg) = load_repo(&bad, &FILES);
    assert_eq!(
        issues(reg),
        ["routes[0] 'route-0': log statuses: unknown status 'stale' (expected ok, partial or degraded)"]
    );
}
