//! A Feast repo served by Ferry without re-materializing: Feast applies and materializes its
//! own repo into Redis; Ferry reads Feast's registry and Feast's Redis layout in place. Ferry's
//! answers are compared with Feast's own `get_online_features` on the same Redis.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use ferry_integration_tests::feast::{feature_names, FeastStack};
use ferry_integration_tests::http::post;
use serde_json::{json, Value as Json};

const ROUTES: &str = "  - match: {path_prefix: /v1/models/scoring}
    service: scoring
    format: kserve_v1
    entity: {field: user_id}
    on_missing_entity: null
  - match: {path_prefix: /v1/models/merchant}
    service: merchant_risk
    format: kserve_v1
    entity: {field: merchant_id}
    on_missing_entity: null
  - match: {path_prefix: /v1/models/pair}
    service: pair
    format: kserve_v1
    entity: {fields: [merchant_id, user_id]}
    on_missing_entity: null
  - match: {path_exact: /get-online-features}
    service: scoring
    feast_services: [pair]
    format: feast_rest
    entity: {field: user_id}
    on_missing_entity: null
";

/// The fixture's view ttls (features.py), in seconds.
fn ttl_seconds(view: &str) -> i64 {
    match view {
        "user_recent" => 3600,
        _ => 3650 * 86_400,
    }
}

fn now_seconds() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    i64::try_from(since.as_secs()).expect("seconds")
}

/// The status Ferry must report for one feature, judged from what Feast holds (Feast 0.67
/// itself reports PRESENT for an unknown entity and for a row past its view's ttl, so its
/// statuses are not the reference; its values and event times are).
fn expected_status(view: &str, value: &Json, event_seconds: i64) -> &'static str {
    if event_seconds == 0 {
        "NOT_FOUND"
    } else if now_seconds() - event_seconds > ttl_seconds(view) {
        "OUTSIDE_MAX_AGE"
    } else if value.is_null() {
        "NULL_VALUE"
    } else {
        "PRESENT"
    }
}

fn same_value(a: &Json, b: &Json) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-6 * x.abs().max(1.0),
        _ => a == b,
    }
}

/// Ferry's value and status of feature `name` for the `i`-th entity, from one answer.
type FerryAnswer<'a> = Box<dyn Fn(&str, usize) -> (Json, &'a str) + 'a>;

/// Asks Feast for `service`'s features of `rows` and compares every feature of every entity
/// with what `ferry` answered, counting the statuses compared.
fn judge(
    stack: &FeastStack,
    service: &str,
    rows: &Json,
    ferry: FerryAnswer<'_>,
    counts: &mut BTreeMap<&'static str, usize>,
) {
    let feast = stack.feast_online(service, rows);
    let names = feast["names"].as_array().expect("names");
    let n = rows.as_array().expect("rows").len();
    for (f, name) in names.iter().enumerate() {
        let name = name.as_str().expect("name");
        let Some((view, _)) = name.split_once("__") else {
            continue; // a join key column
        };
        for i in 0..n {
            let feast_value = &feast["values"][f][i];
            let event = feast["event_seconds"][f][i].as_i64().expect("seconds");
            let expected = expected_status(view, feast_value, event);
            let (ferry_value, ferry_status) = ferry(name, i);
            let at = format!("{service} entity {} feature {name}", rows[i]);
            assert_eq!(
                ferry_status, expected,
                "{at}: Feast has {feast_value} at {event}"
            );
            if expected == "OUTSIDE_MAX_AGE" {
                assert!(ferry_value.is_null(), "{at}: a stale value is sent as null");
                assert!(
                    !feast_value.is_null(),
                    "{at}: the fixture's stale row has a value"
                );
            } else {
                assert!(
                    same_value(&ferry_value, feast_value),
                    "{at}: Ferry {ferry_value} vs Feast {feast_value}"
                );
            }
            *counts.entry(expected).or_default() += 1;
        }
    }
}

/// Posts `rows` to `path` through Envoy (KServe v1) and judges the enriched instances.
async fn compare(
    stack: &FeastStack,
    path: &str,
    service: &str,
    rows: Json,
    counts: &mut BTreeMap<&'static str, usize>,
) {
    let body = json!({ "instances": rows });
    let resp = post(stack.listen_port, path, body.to_string()).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let got = resp.json();
    let ferry: FerryAnswer<'_> = Box::new(|name, i| {
        let status = got["ferry"]["statuses"][i]
            .get(name)
            .and_then(Json::as_str)
            .unwrap_or("PRESENT");
        (got["instances"][i][name].clone(), status)
    });
    judge(stack, service, &rows, ferry, counts);
}

/// Asks Envoy's `feast_rest` route for `service` over `rows` as a Feast REST client does
/// (`POST /get-online-features`, full feature names) and judges Feast's column-major answer:
/// Feast's registry and Feast's Redis data, answered at the edge.
async fn compare_rest(
    stack: &FeastStack,
    service: &str,
    rows: Json,
    counts: &mut BTreeMap<&'static str, usize>,
) {
    let got = stack.rest(service, &rows).await;
    let names = feature_names(&got);
    let ferry: FerryAnswer<'_> = Box::new(|name, i| {
        let col = names.iter().position(|n| *n == name);
        let col = col.unwrap_or_else(|| panic!("{name} not in the answer's {names:?}"));
        let status = got["results"][col]["statuses"][i].as_str().expect("status");
        (got["results"][col]["values"][i].clone(), status)
    });
    judge(stack, service, &rows, ferry, counts);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferry_and_feast_answer_the_same_features_for_the_same_entities() {
    let stack = FeastStack::start(ROUTES);
    let mut counts = BTreeMap::new();
    let users = json!([
        {"user_id": "u1"}, {"user_id": "u2"}, {"user_id": "u3"}, {"user_id": "nobody"}
    ]);
    compare(
        &stack,
        "/v1/models/scoring:predict",
        "scoring",
        users,
        &mut counts,
    )
    .await;
    let merchants = json!([{"merchant_id": 7}, {"merchant_id": 9}, {"merchant_id": 12345}]);
    compare(
        &stack,
        "/v1/models/merchant:predict",
        "merchant_risk",
        merchants,
        &mut counts,
    )
    .await;
    let pairs = json!([
        {"merchant_id": 7, "user_id": "u1"},
        {"merchant_id": 9, "user_id": "u2"},
        {"merchant_id": 7, "user_id": "u2"}
    ]);
    compare(
        &stack,
        "/v1/models/pair:predict",
        "pair",
        pairs,
        &mut counts,
    )
    .await;
    let users = json!([{"user_id": "u1"}, {"user_id": "nobody"}, {"user_id": "u3"}]);
    compare_rest(&stack, "scoring", users, &mut counts).await;
    let pairs = json!([{"merchant_id": 9, "user_id": "u2"}, {"merchant_id": 1, "user_id": "u1"}]);
    compare_rest(&stack, "pair", pairs, &mut counts).await;
    let total: usize = counts.values().sum();
    println!("compared {total} feature values with Feast's get_online_features: {counts:?}");
    for status in ["PRESENT", "NULL_VALUE", "NOT_FOUND", "OUTSIDE_MAX_AGE"] {
        assert!(
            counts.get(status).copied().unwrap_or(0) > 0,
            "no {status} compared: {counts:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feast_apply_that_adds_a_feature_reaches_envoy_through_ferry_serve() {
    let stack = FeastStack::start(ROUTES);
    stack
        .a_feast_apply_adding_a_feature_reaches_envoy("/v1/models/scoring:predict")
        .await;
}
