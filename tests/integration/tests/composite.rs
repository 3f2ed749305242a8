//! The example repo's composite-key service through real Envoy: `user_merchant_scoring` is keyed
//! by (merchant_id int64, user_id string), served on the `merchant-fraud` route; values and
//! statuses are checked against the generated source (data/user_merchant.csv).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use ferry_integration_tests::data::{same, KeyedView, Kind};
use ferry_integration_tests::expected::{judge_keyed, Entity, Service, Store};
use ferry_integration_tests::http::{post, Conn, Response};
use ferry_integration_tests::{each_runtime, Options, Runtime, Stack};
use serde_json::{json, Value as Json};

/// The example's composite-key route (examples/banking/ferry.yaml, on_missing_entity: "null").
const PAIR: &str = "/v1/models/merchant-fraud:predict";
/// user_merchant's TTL in the example repo (14d).
const PAIR_TTL: f64 = 14.0 * 86_400.0;

/// Test routes over the example's merchant-keyed services.
const ROUTES: &str = r#"
  - name: pair-strict
    match: {path_prefix: /t/pair-strict}
    service: user_merchant_scoring
    format: kserve_v1
    entity: {fields: [merchant_id, user_id]}
    on_missing_entity: reject
  - name: pair-v2
    match: {path_prefix: /t/pair-v2/}
    service: user_merchant_scoring
    format: kserve_v2
    entity: {fields: [merchant_id, user_id]}
    on_missing_entity: "null"
  - name: pair-header
    match: {path_prefix: /t/pair-hdr}
    service: user_merchant_scoring
    format: header
    entity: {fields: [x-merchant-id, x-user-id]}
  - name: merchant-risk
    match: {path_prefix: /t/merchant-risk}
    service: merchant_risk
    format: kserve_v1
    entity: {field: merchant_id}
    on_missing_entity: "null"
"#;

fn stack(runtime: Runtime) -> Stack {
    Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(300),
    })
}

fn pairs_view(stack: &Stack) -> KeyedView {
    KeyedView::load(&stack.repo.join("data"), "user_merchant")
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// A (merchant_id, user_id) pair, in the service's key order.
type Pair = (i64, String);

fn pair(merchant: i64, user: &str) -> Pair {
    (merchant, user.to_string())
}

fn instances(pairs: &[Pair]) -> String {
    let v: Vec<Json> = pairs
        .iter()
        .map(|(m, u)| json!({"user_id": u, "merchant_id": m, "amount": 10.5}))
        .collect();
    json!({ "instances": v }).to_string()
}

/// Checks every feature of every instance the model received on a kserve_v1 route of
/// user_merchant_scoring against the source; returns the status counts.
fn check_pairs(stack: &Stack, resp: &Response, pairs: &[Pair]) -> BTreeMap<&'static str, usize> {
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let body = resp.json();
    assert_eq!(body["ferry"]["service"], "user_merchant_scoring");
    for inst in body["instances"].as_array().expect("instances") {
        assert_eq!(inst["amount"], json!(10.5), "the client's fields are kept");
    }
    let entities: Vec<Entity> = pairs
        .iter()
        .map(|(merchant, user)| Entity::Pair {
            merchant: *merchant,
            user: user.clone(),
        })
        .collect();
    Store::load(stack).check_instances(Service::UserMerchantScoring, &body, &entities)
}

/// Every pair of users u000001..=u000010 in the source (u000007's first pair is stale by
/// design), as (merchant, user).
fn present_pairs(src: &KeyedView) -> Vec<Pair> {
    let pairs: Vec<Pair> = src
        .keys()
        .into_iter()
        .filter(|k| k[1].as_str() <= "u000010")
        .map(|k| (k[0].parse().unwrap(), k[1].clone()))
        .collect();
    // Users 1..=10 have 1 to 3 merchants each (generate_data.py: 1 + i % 3).
    assert_eq!(pairs.len(), 20, "{pairs:?}");
    pairs
}

async fn composite_route_enriches_present_pairs_and_nulls_absent_ones(runtime: Runtime) {
    let stack = stack(runtime);
    let src = pairs_view(&stack);
    let mut pairs = present_pairs(&src);
    let stale = pairs
        .iter()
        .filter(|(m, u)| now() - src.event_time(&[&m.to_string(), u]).unwrap() > PAIR_TTL)
        .count();
    assert_eq!(stale, 1, "u000007's first pair is the one stale pair");
    // Absent: a user at a merchant they never used, and u000042, who has no pair at all.
    let absent = [pair(1001, "u000001"), pair(1042, "u000042")];
    for (m, u) in &absent {
        assert_eq!(src.event_time(&[&m.to_string(), u]), None, "({m}, {u})");
    }
    pairs.insert(3, absent[0].clone());
    pairs.push(absent[1].clone());

    let resp = post(stack.listen_port, PAIR, instances(&pairs)).await;
    let counts = check_pairs(&stack, &resp, &pairs);
    assert_eq!(
        counts,
        BTreeMap::from([("NOT_FOUND", 6), ("OUTSIDE_MAX_AGE", 3), ("PRESENT", 57)])
    );
    let up = resp.upstream_headers();
    assert_eq!(
        (
            up["x-ferry-entities"].as_str(),
            up["x-ferry-missing"].as_str(),
            up["x-ferry-stale"].as_str(),
            up["x-ferry-status"].as_str(),
        ),
        (Some("22"), Some("2"), Some("1"), Some("partial"))
    );
    assert_eq!(
        resp.json()["instances"][3]["user_merchant__txn_count_30d"],
        Json::Null,
        "an absent pair is forwarded with null features"
    );

    // Only fresh pairs: ok; a feature the client forged is overwritten.
    let fresh: Vec<Pair> = present_pairs(&src)
        .into_iter()
        .filter(|(_, u)| u != "u000007")
        .collect();
    let mut body: Json = serde_json::from_str(&instances(&fresh)).unwrap();
    body["instances"][0]["user_merchant__txn_count_30d"] = json!(999_999);
    let resp = post(stack.listen_port, PAIR, body.to_string()).await;
    let counts = check_pairs(&stack, &resp, &fresh);
    assert_eq!(counts, BTreeMap::from([("PRESENT", 3 * fresh.len())]));
    assert_eq!(resp.upstream_headers()["x-ferry-status"], "ok");
}

async fn composite_ids_follow_the_key_types_and_the_strict_policy(runtime: Runtime) {
    let stack = stack(runtime);
    let src = pairs_view(&stack);
    let known = present_pairs(&src)
        .into_iter()
        .find(|(_, u)| u == "u000001")
        .unwrap();
    let p = stack.listen_port;

    let resp = post(p, "/t/pair-strict", instances(std::slice::from_ref(&known))).await;
    check_pairs(&stack, &resp, std::slice::from_ref(&known));

    // The same ids as the wrong JSON types: merchant_id is int64, user_id a string.
    let cases = [
        (
            json!({"merchant_id": known.0.to_string(), "user_id": known.1}),
            "invalid_entity_id",
            "instances[0].merchant_id",
        ),
        (
            json!({"merchant_id": known.0, "user_id": 1}),
            "invalid_entity_id",
            "instances[0].user_id",
        ),
        (
            json!({"merchant_id": 1.5, "user_id": known.1}),
            "invalid_entity_id",
            "instances[0].merchant_id",
        ),
        (
            json!({"user_id": known.1}),
            "missing_entity_id",
            "merchant_id",
        ),
    ];
    for (inst, code, place) in cases {
        let body = json!({ "instances": [inst] }).to_string();
        for path in [PAIR, "/t/pair-strict"] {
            let (status, got, message) = post(p, path, body.clone()).await.ferry_error();
            assert_eq!(
                (status, got.as_str()),
                (400, code),
                "{path} {inst}: {message}"
            );
            assert!(message.contains(place), "{path} {inst}: {message}");
        }
    }

    // An absent pair on the strict route: 404 naming both ids; the model is not called.
    let body = instances(&[known.clone(), pair(1001, "u000001")]);
    let (status, code, message) = post(p, "/t/pair-strict", body).await.ferry_error();
    assert_eq!((status, code.as_str()), (404, "entity_not_found"));
    assert!(
        message.contains("1001") && message.contains("u000001") && message.contains("1 entity"),
        "{message}"
    );
}

async fn composite_keys_in_kserve_v2_and_header_mode_and_the_merchant_service(runtime: Runtime) {
    let stack = stack(runtime);
    let src = pairs_view(&stack);
    let p = stack.listen_port;
    // Fresh, stale (u000007's first pair), absent.
    let stale = present_pairs(&src)
        .into_iter()
        .find(|(m, u)| now() - src.event_time(&[&m.to_string(), u]).unwrap() > PAIR_TTL)
        .unwrap();
    let pairs = [
        present_pairs(&src).into_iter().next().unwrap(),
        stale,
        pair(1001, "u000001"),
    ];

    // KServe v2: one id tensor per join key, INT64 for merchant_id and BYTES for user_id.
    let body = json!({"inputs": [
        {"name": "user_id", "shape": [3], "datatype": "BYTES",
         "data": pairs.iter().map(|(_, u)| u.clone()).collect::<Vec<_>>()},
        {"name": "merchant_id", "shape": [3, 1], "datatype": "INT64",
         "data": pairs.iter().map(|(m, _)| json!([m])).collect::<Vec<_>>()},
    ]});
    let resp = post(p, "/t/pair-v2/models/fraud/infer", body.to_string()).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let v = resp.json();
    let inputs = v["inputs"].as_array().unwrap();
    assert_eq!(
        inputs.len(),
        2 + 3,
        "the two id tensors and one per feature"
    );
    let statuses: Json =
        serde_json::from_str(v["parameters"]["ferry_statuses"].as_str().unwrap()).unwrap();
    for (feature, kind) in src.features {
        let name = format!("user_merchant__{feature}");
        let t = inputs
            .iter()
            .find(|t| t["name"] == name.as_str())
            .unwrap_or_else(|| panic!("no tensor {name}"));
        let datatype = if *kind == Kind::F64 { "FP64" } else { "INT64" };
        assert_eq!(
            (&t["datatype"], &t["shape"]),
            (&json!(datatype), &json!([3]))
        );
        for (i, (m, u)) in pairs.iter().enumerate() {
            let (want, want_status) = judge_keyed(&src, feature, &[&m.to_string(), u], PAIR_TTL);
            let status = statuses[i]
                .get(&name)
                .and_then(Json::as_str)
                .unwrap_or("PRESENT");
            assert_eq!(status, want_status, "({m}, {u}) {name}");
            // Tensors cannot hold null: a feature that is not PRESENT is its type's zero.
            let want = match (&want, kind) {
                (Json::Null, Kind::F64) => json!(0.0),
                (Json::Null, _) => json!(0),
                _ => want,
            };
            assert!(
                same(&t["data"][i], &want, *kind),
                "({m}, {u}) {name}: got {}, want {want}",
                t["data"][i]
            );
        }
    }
    assert_eq!(
        (
            statuses[1].as_object().unwrap().len(),
            statuses[2].as_object().unwrap().len()
        ),
        (3, 3)
    );
    // merchant_id as a BYTES tensor is not the schema's type.
    let bad = json!({"inputs": [
        {"name": "user_id", "shape": [1], "datatype": "BYTES", "data": ["u000001"]},
        {"name": "merchant_id", "shape": [1], "datatype": "BYTES", "data": ["1038"]},
    ]});
    let bad = post(p, "/t/pair-v2/models/fraud/infer", bad.to_string()).await;
    let (status, code, message) = bad.ferry_error();
    assert_eq!(
        (status, code.as_str()),
        (400, "bad_request_shape"),
        "{message}"
    );
    assert!(message.contains("INT64"), "{message}");

    // Header mode: one header per join key.
    let (m, u) = (pairs[0].0.to_string(), pairs[0].1.as_str());
    let mut conn = Conn::open(p).await;
    let resp = conn
        .send(
            "GET",
            "/t/pair-hdr/models/fraud",
            &[("x-merchant-id", m.as_str()), ("x-user-id", u)],
            "",
        )
        .await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let up = resp.upstream_headers();
    let features: Json = serde_json::from_str(up["x-ferry-features"].as_str().unwrap()).unwrap();
    assert_eq!(features.as_object().unwrap().len(), 3, "{features}");
    for (feature, kind) in src.features {
        let (want, _) = judge_keyed(&src, feature, &[&m, u], PAIR_TTL);
        let got = &features[&format!("user_merchant__{feature}")];
        assert!(same(got, &want, *kind), "{feature}: {got} vs {want}");
    }
    let resp = conn
        .send(
            "GET",
            "/t/pair-hdr/models/fraud",
            &[("x-merchant-id", "not-a-number"), ("x-user-id", u)],
            "",
        )
        .await;
    let (status, code, message) = resp.ferry_error();
    assert_eq!((status, code.as_str()), (400, "invalid_entity_id"));
    assert!(message.contains("x-merchant-id"), "{message}");

    // merchant_risk, keyed by merchant_id alone (int64): a merchant with a profile row and one
    // without (index % 50 == 13 has none).
    let profiles = KeyedView::load(&stack.repo.join("data"), "merchant_profile");
    let merchants = [1001_i64, 1013, 1500];
    assert!(profiles.event_time(&["1013"]).is_none());
    let body = json!({"instances": merchants.iter().map(|m| json!({"merchant_id": m})).collect::<Vec<_>>()});
    let resp = post(p, "/t/merchant-risk", body.to_string()).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let v = resp.json();
    assert_eq!(v["ferry"]["service"], "merchant_risk");
    let mut found = 0;
    for (i, m) in merchants.iter().enumerate() {
        let key = m.to_string();
        for (feature, kind) in profiles.features {
            let name = format!("merchant_profile__{feature}");
            let (want, want_status) = judge_keyed(&profiles, feature, &[&key], 90.0 * 86_400.0);
            let status = v["ferry"]["statuses"][i]
                .get(&name)
                .and_then(Json::as_str)
                .unwrap_or("PRESENT");
            assert_eq!(status, want_status, "{m} {name}");
            let got = &v["instances"][i][&name];
            assert!(same(got, &want, *kind), "{m} {name}: {got} vs {want}");
            found += usize::from(want_status == "PRESENT");
        }
    }
    assert_eq!(found, 6, "merchants 1001 and 1500 have a profile");
}

/// merchant_profile's TTL in the example repo (90d).
const MERCHANT_TTL: f64 = 90.0 * 86_400.0;

async fn one_route_enriches_from_three_services_in_one_call(runtime: Runtime) {
    use ferry_integration_tests::data::VIEWS;
    let stack = stack(runtime);
    let pairs = pairs_view(&stack);
    let merchants = KeyedView::load(&stack.repo.join("data"), "merchant_profile");
    let users = stack.source();
    // u000001 at one of its merchants; u000042 (no transactions, no pairs) at 1013 (no profile).
    let first = pairs
        .keys()
        .into_iter()
        .find(|k| k[1] == "u000001")
        .expect("u000001 has a merchant");
    let m1: i64 = first[0].parse().unwrap();
    let body = json!({"instances": [
        {"merchant_id": m1, "user_id": "u000001"},
        {"merchant_id": 1013, "user_id": "u000042"},
    ]});
    let resp = post(
        stack.listen_port,
        "/v1/models/full-fraud:predict",
        body.to_string(),
    )
    .await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let out = resp.json();
    assert_eq!(
        out["ferry"]["service"],
        "realtime_scoring,user_merchant_scoring,merchant_risk"
    );
    assert_eq!(
        resp.header("x-ferry-entities"),
        Some("6"),
        "3 lookups per instance"
    );
    let status_of = |i: usize, name: &str| {
        out["ferry"]["statuses"][i]
            .get(name)
            .and_then(Json::as_str)
            .unwrap_or("PRESENT")
            .to_string()
    };
    for (i, (m, u)) in [(m1.to_string(), "u000001"), ("1013".to_string(), "u000042")]
        .iter()
        .enumerate()
    {
        let inst = &out["instances"][i];
        // realtime_scoring: u000042 has a profile but no transactions.
        for (view, fs) in VIEWS {
            for (feature, kind) in *fs {
                let name = format!("{view}__{feature}");
                let want = users.value(view, feature, u).unwrap_or(Json::Null);
                assert!(
                    same(&inst[&name], &want, *kind),
                    "{u} {name}: {} vs {want}",
                    inst[&name]
                );
                if *u == "u000042" && *view == "transactions" {
                    assert_eq!(status_of(i, &name), "NOT_FOUND", "{name}");
                }
            }
        }
        for (view, src, key, ttl) in [
            ("user_merchant", &pairs, vec![m.as_str(), *u], PAIR_TTL),
            (
                "merchant_profile",
                &merchants,
                vec![m.as_str()],
                MERCHANT_TTL,
            ),
        ] {
            for (feature, kind) in src.features {
                let name = format!("{view}__{feature}");
                let (want, want_status) = judge_keyed(src, feature, &key, ttl);
                assert_eq!(status_of(i, &name), want_status, "{key:?} {name}");
                assert!(same(&inst[&name], &want, *kind), "{key:?} {name}");
            }
        }
    }
    // The second instance's pair and merchant are absent by construction.
    assert_eq!(status_of(1, "user_merchant__txn_count_30d"), "NOT_FOUND");
    assert_eq!(status_of(1, "merchant_profile__category"), "NOT_FOUND");
    assert_eq!(status_of(0, "merchant_profile__category"), "PRESENT");
}

each_runtime!(
    composite_route_enriches_present_pairs_and_nulls_absent_ones,
    composite_ids_follow_the_key_types_and_the_strict_policy,
    composite_keys_in_kserve_v2_and_header_mode_and_the_merchant_service,
    one_route_enriches_from_three_services_in_one_call,
);
