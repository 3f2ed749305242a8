//! Issue #21 end to end: on-demand features computed by the filter inside real Envoy, on both
//! builds (`each_runtime!`), over the example's data in a test copy of its repo served by a real
//! `ferry serve`. Every derived value is compared with a value computed here from the source
//! CSVs (never by calling the engine): nulls, stale and missing inputs, a `has()` default, a
//! double division by zero and an int overflow (`INVALID`), `request.time`, a cosine against
//! the stored embedding; a service of request fields only makes no reader call; a pushed
//! expression change reaches Envoy without a restart or a materialize.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use ferry_integration_tests::data::{KeyedView, Source};
use ferry_integration_tests::expected::ttl;
use ferry_integration_tests::http::{post, reader_keys_requested, Response};
use ferry_integration_tests::{each_runtime, Options, Runtime, Stack};
use serde_json::{json, Value as Json};

const OD: &str = "/t/od";
const REQ: &str = "/t/req";

/// What the test copy of the example repo gains: two on-demand views, two services listing
/// them, each inserted at the head of the example's list.
const VIEWS: &str = r#"on_demand_views:
  - name: od
    request:
      - {name: amount, type: float64}
      - {name: divisor, type: float64}
      - {name: n, type: int64}
      - {name: since, type: int64}
      - {name: emb, type: float32_list}
    sources: [user_profile, transactions, user_embedding]
    features:
      - {name: ratio, type: float64, expr: "request.amount / transactions.txn_amount_avg_7d"}
      - {name: big, type: bool, expr: "request.amount > 3.0 * transactions.txn_amount_avg_7d"}
      - {name: cos, type: float64, expr: "cosine(request.emb, user_embedding.embedding)"}
      - {name: since, type: int64, expr: "request.time - request.since"}
      - {name: score, type: float64, expr: "user_profile.credit_score * 1.0"}
      - {name: score_or, type: float64, expr: "has(user_profile.credit_score) ? user_profile.credit_score : -1.0"}
      - {name: per_unit, type: float64, expr: "request.amount / request.divisor"}
      - {name: twice, type: int64, expr: "request.n * 2"}
  - name: req
    request: [{name: amount, type: float64}]
    features:
      - {name: double_amount, type: float64, expr: "request.amount * 2.0"}

feature_services:
  - name: od_scoring
    features: [user_profile, transactions, user_embedding, od]
  - name: req_only
    features: [req]
"#;

const ROUTES: &str = r#"
  - name: od
    match: {path_prefix: /t/od}
    service: od_scoring
    format: kserve_v1
    entity: {field: user_id}
    on_missing_entity: "null"
  - name: req
    match: {path_prefix: /t/req}
    service: req_only
    format: kserve_v1
"#;

const PER_UNIT: &str = "request.amount / request.divisor";
const PER_UNIT_V2: &str = "request.amount / request.divisor + 1.0";

/// The example has on-demand views and services of its own: the test's go first in each list.
fn with_views(yaml: String) -> String {
    ferry_integration_tests::with_on_demand(yaml, VIEWS)
}

fn stack(runtime: Runtime) -> Stack {
    Stack::start_xds(
        Options {
            extra_routes: ROUTES,
            entities: Some(200),
            runtime,
        },
        with_views,
    )
}

fn user(i: usize) -> String {
    format!("u{i:06}")
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

const SINCE: i64 = 1_700_000_000;

/// The request of instance i: every 10th divisor is 0.0, every 10th n overflows when doubled.
fn instance(i: usize, dim: usize) -> Json {
    let emb: Vec<f64> = (0..dim).map(|j| ((j + i) % 7) as f64 / 7.0 - 0.3).collect();
    json!({
        "user_id": user(i),
        "amount": 10.0 + i as f64,
        "divisor": if i % 10 == 3 { 0.0 } else { 2.0 },
        "n": if i % 10 == 4 { 1_i64 << 62 } else { i as i64 },
        "since": SINCE,
        "emb": emb,
    })
}

/// A feature's expected value or status (a status other than PRESENT has a null value).
#[derive(Debug)]
enum Want {
    F(f64),
    I(i64),
    B(bool),
    /// Whole seconds within these bounds (`request.time` is when Envoy got the request).
    Between(i64, i64),
    Status(&'static str),
}

/// A stored input as a derived feature sees it: its value, or why it is absent.
fn stored(src: &Source, view: &str, feature: &str, u: &str) -> Result<Json, &'static str> {
    let Some(t) = src.event_time(view, u) else {
        return Err("NOT_FOUND");
    };
    if now_s() - t > ttl(view) {
        return Err("OUTSIDE_MAX_AGE");
    }
    match src.value(view, feature, u) {
        None => Err("NOT_FOUND"),
        Some(Json::Null) => Err("NULL_VALUE"),
        Some(v) => Ok(v),
    }
}

fn finite(x: f64) -> Want {
    if x.is_finite() {
        Want::F(x)
    } else {
        Want::Status("INVALID")
    }
}

/// Every derived feature of instance i, computed from the source data and the request.
fn expected(src: &Source, inst: &Json, t: (i64, i64), v2: bool) -> Vec<(&'static str, Want)> {
    let u = inst["user_id"].as_str().unwrap();
    let amount = inst["amount"].as_f64().unwrap();
    let num = |v: Json| v.as_f64().unwrap();
    // A float32 feature is stored as the f32 nearest its source text, read as its exact double.
    let f32_num = |v: &Json| f64::from(v.as_f64().unwrap() as f32);
    let avg = stored(src, "transactions", "txn_amount_avg_7d", u).map(num);
    let credit = stored(src, "user_profile", "credit_score", u).map(|v| f32_num(&v));
    let emb = stored(src, "user_embedding", "embedding", u);
    let or_status = |r: Result<Want, &'static str>| r.unwrap_or_else(Want::Status);
    let cos = emb.map(|e| cosine(&inst["emb"], &e));
    let per_unit = amount / inst["divisor"].as_f64().unwrap() + if v2 { 1.0 } else { 0.0 };
    let twice = inst["n"].as_i64().unwrap().checked_mul(2);
    vec![
        ("ratio", or_status(avg.map(|a| finite(amount / a)))),
        ("big", or_status(avg.map(|a| Want::B(amount > 3.0 * a)))),
        ("cos", or_status(cos)),
        ("since", Want::Between(t.0 - SINCE, t.1 - SINCE)),
        ("score", or_status(credit.map(Want::F))),
        ("score_or", Want::F(credit.unwrap_or(-1.0))),
        ("per_unit", finite(per_unit)),
        ("twice", twice.map_or(Want::Status("INVALID"), Want::I)),
    ]
}

/// `cosine(request, stored)`: the request's list as sent, the stored one as its f32 values.
fn cosine(request: &Json, stored: &Json) -> Want {
    let list = |v: &Json| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect()
    };
    let a = list(request);
    let b: Vec<f64> = list(stored)
        .into_iter()
        .map(|x| f64::from(x as f32))
        .collect();
    let dot: f64 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    finite(dot / (norm(&a) * norm(&b)))
}

fn close(got: f64, want: f64) -> bool {
    got == want || (got - want).abs() <= 1e-9 * want.abs().max(1e-300)
}

/// Checks every derived feature the model received; returns the count per status.
fn check(
    stack: &Stack,
    resp: &Response,
    sent: &[Json],
    t: (i64, i64),
    v2: bool,
) -> BTreeMap<&'static str, usize> {
    let src = stack.source();
    let wants = sent
        .iter()
        .map(|inst| {
            expected(&src, inst, t, v2)
                .into_iter()
                .map(|(name, want)| (format!("od__{name}"), want))
                .collect()
        })
        .collect();
    check_wants(resp, sent, wants)
}

/// Checks, per instance, each named feature against what is wanted; the count per status.
fn check_wants(
    resp: &Response,
    sent: &[Json],
    wants: Vec<Vec<(String, Want)>>,
) -> BTreeMap<&'static str, usize> {
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let body = resp.json();
    let mut counts = BTreeMap::new();
    for (i, (inst, wants)) in sent.iter().zip(wants).enumerate() {
        let got = &body["instances"][i];
        let statuses = &body["ferry"]["statuses"][i];
        for (key, want) in wants {
            let (value, status) = (&got[&key], statuses[&key].as_str().unwrap_or("PRESENT"));
            let ok = match &want {
                Want::F(x) => status == "PRESENT" && value.as_f64().is_some_and(|g| close(g, *x)),
                Want::I(x) => status == "PRESENT" && value.as_i64() == Some(*x),
                Want::B(x) => status == "PRESENT" && value.as_bool() == Some(*x),
                Want::Between(a, b) => value.as_i64().is_some_and(|g| (*a..=*b).contains(&g)),
                Want::Status(s) => status == *s && value.is_null(),
            };
            assert!(
                ok,
                "instance {i} ({inst}) {key}: got {value} ({status}), want {want:?}"
            );
            *counts
                .entry(if let Want::Status(s) = want {
                    s
                } else {
                    "PRESENT"
                })
                .or_insert(0) += 1;
        }
    }
    counts
}

fn dim(stack: &Stack) -> usize {
    let src = stack.source();
    (1..60)
        .find_map(|i| src.value("user_embedding", "embedding", &user(i)))
        .and_then(|v| v.as_array().map(Vec::len))
        .expect("an embedding")
}

async fn send(stack: &Stack, sent: &[Json]) -> (Response, (i64, i64)) {
    let before = now_s().floor() as i64;
    let resp = post(
        stack.listen_port,
        OD,
        json!({ "instances": sent }).to_string(),
    )
    .await;
    let after = now_s().ceil() as i64;
    (resp, (before, after))
}

async fn derived_values_match_the_source_data(runtime: Runtime) {
    let stack = stack(runtime);
    stack
        .cp()
        .wait_converged(&stack.cp().version(), 1, Duration::from_secs(15));
    let d = dim(&stack);
    let sent: Vec<Json> = (1..=50).map(|i| instance(i, d)).collect();
    let (resp, t) = send(&stack, &sent).await;
    let counts = check(&stack, &resp, &sent, t, false);
    // The batch holds each case: u000007 is stale (transactions), u000042 has no transactions
    // row, u000005 a null credit score; every 10th instance divides by zero and overflows.
    for s in ["OUTSIDE_MAX_AGE", "NOT_FOUND", "NULL_VALUE", "INVALID"] {
        assert!(counts.get(s).is_some_and(|n| *n > 0), "no {s}: {counts:?}");
    }
    let body = resp.json();
    let up = resp.upstream_headers();
    let version = up["x-ferry-derived-version"]
        .as_str()
        .expect("derived version")
        .to_owned();
    assert_eq!(body["ferry"]["derived_version"], json!(version));
    let fingerprint = body["ferry"]["fingerprint"].clone();

    // A client's value under a derived name is replaced.
    let mut forged = instance(1, d);
    forged["od__per_unit"] = json!(123456.0);
    forged["od__twice"] = json!("forged");
    let (resp, _) = send(&stack, &[forged]).await;
    let got = &resp.json()["instances"][0];
    assert_eq!(got["od__per_unit"], json!(5.5));
    assert_eq!(got["od__twice"], json!(2));

    // A request field of the wrong type is the client's 400, naming it and the instance.
    let mut bad = instance(2, d);
    bad["amount"] = json!("12.5");
    let (resp, _) = send(&stack, &[instance(1, d), bad]).await;
    assert_eq!(resp.status, 400);
    assert_eq!(resp.json()["error"], "invalid_request_field");
    assert_eq!(
        resp.json()["message"],
        "instances[1]: request field 'amount': expected a finite number (float64), got a string"
    );

    // A service of request fields only: no reader call.
    let before = reader_keys_requested(stack.reader_port);
    let body = json!({"instances": [{"amount": 2.5}, {"amount": null}, {}]}).to_string();
    let resp = post(stack.listen_port, REQ, body).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let v = resp.json();
    assert_eq!(v["instances"][0]["req__double_amount"], json!(5.0));
    assert_eq!(
        v["ferry"]["statuses"][1]["req__double_amount"],
        "NULL_VALUE"
    );
    assert_eq!(v["ferry"]["statuses"][2]["req__double_amount"], "NOT_FOUND");
    assert_eq!(
        reader_keys_requested(stack.reader_port),
        before,
        "no reader call"
    );

    // An expression change pushed to ferry serve, no materialize: Envoy computes the new
    // formula at once, under the same fingerprint and a new derived version.
    let path = stack.repo.join("ferry.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, yaml.replace(PER_UNIT, PER_UNIT_V2)).unwrap();
    let pushed = stack
        .cp()
        .apply_push(&stack.repo, &stack.redis.url(), false);
    stack
        .cp()
        .wait_converged(&pushed, 1, Duration::from_secs(15));
    let (resp, t) = send(&stack, &sent).await;
    check(&stack, &resp, &sent, t, true);
    let body = resp.json();
    assert_eq!(
        body["ferry"]["fingerprint"], fingerprint,
        "same stored vector"
    );
    assert_ne!(body["ferry"]["derived_version"], json!(version));
    assert_eq!(
        resp.upstream_headers()["x-ferry-derived-version"],
        body["ferry"]["derived_version"]
    );
}

each_runtime!(derived_values_match_the_source_data);

/// A request to the example's txn-risk route: every 10th asks for items 0 (a division by zero
/// in basket), every 10th leaves out its query embedding (when the user has a stored one).
fn example_instance(src: &Source, i: usize, dim: usize) -> Json {
    let amount = [5.0, 120.5, 2500.0, 80.0][i % 4] + i as f64;
    let country = ["DE", "FR", "NL"][i % 3];
    let mut inst = json!({
        "user_id": user(i),
        "amount": amount,
        "country": country,
        "items": if i % 10 == 3 { 0 } else { (i % 13) as i64 },
    });
    let has_embedding = src.event_time("user_embedding", &user(i)).is_some();
    if i % 10 != 7 || !has_embedding {
        let q: Vec<f64> = (0..dim)
            .map(|j| ((j * 3 + i) % 11) as f64 / 11.0 - 0.4)
            .collect();
        inst["query_embedding"] = json!(q);
    }
    inst
}

/// basket's two features over an instance's `amount` and `items` (a missing field: NOT_FOUND).
fn basket_expected(inst: &Json) -> Vec<(String, Want)> {
    let amount = inst["amount"].as_f64().unwrap();
    let (price, large) = match inst.get("items").and_then(Json::as_i64) {
        None => (Want::Status("NOT_FOUND"), Want::Status("NOT_FOUND")),
        Some(items) => (
            finite(amount / items as f64),
            Want::B(items >= 10 || amount > 1000.0),
        ),
    };
    vec![
        ("basket__avg_item_price".to_owned(), price),
        ("basket__large_basket".to_owned(), large),
    ]
}

/// Every feature of the example's txn_risk and basket for one instance, from the source data.
fn example_expected(
    src: &Source,
    sessions: &KeyedView,
    inst: &Json,
    t: (i64, i64),
) -> Vec<(String, Want)> {
    let u = inst["user_id"].as_str().unwrap();
    let amount = inst["amount"].as_f64().unwrap();
    let avg = stored(src, "transactions", "txn_amount_avg_7d", u).map(|v| v.as_f64().unwrap());
    let session = |f: &str| match sessions.event_time(&[u]) {
        None => Err("NOT_FOUND"),
        Some(t0) if now_s() - t0 > ttl("user_sessions") => Err("OUTSIDE_MAX_AGE"),
        Some(_) => match sessions.value(f, &[u]) {
            None => Err("NOT_FOUND"),
            Some(Json::Null) => Err("NULL_VALUE"),
            Some(v) => Ok(v),
        },
    };
    let login = session("last_login_at").map(|v| v.as_i64().unwrap());
    let abroad = session("login_country").map(|c| Want::B(inst["country"] != c));
    let cos = match inst.get("query_embedding") {
        None => Err("NOT_FOUND"),
        Some(q) => stored(src, "user_embedding", "embedding", u).map(|e| cosine(q, &e)),
    };
    let or_status = |r: Result<Want, &'static str>| r.unwrap_or_else(Want::Status);
    let mut wants: Vec<(String, Want)> = [
        (
            "amount_over_avg_7d",
            or_status(avg.map(|a| finite(amount / a))),
        ),
        (
            "unusual_amount",
            or_status(avg.map(|a| Want::B(amount > 3.0 * a))),
        ),
        ("abroad", or_status(abroad)),
        (
            "seconds_since_login",
            or_status(login.map(|l| Want::Between(t.0 - l, t.1 - l))),
        ),
        ("embedding_similarity", or_status(cos)),
    ]
    .into_iter()
    .map(|(name, want)| (format!("txn_risk__{name}"), want))
    .collect();
    wants.extend(basket_expected(inst));
    wants
}

/// The example's own on-demand views (examples/banking/ferry.yaml), as `make demo` shows them:
/// txn_risk and basket on the txn-risk route, basket alone (no entity, no reader call) on the
/// basket route; every value from the source CSVs and the request.
async fn the_examples_views_match_the_source_data(runtime: Runtime) {
    let stack = stack(runtime);
    let src = stack.source();
    let sessions = KeyedView::load(&stack.repo.join("data"), "user_sessions");
    let d = dim(&stack);
    let sent: Vec<Json> = (1..=60).map(|i| example_instance(&src, i, d)).collect();
    // Values are checked here, not latency: on a loaded machine the reader's 50 ms Redis budget
    // can run out (504 redis_timeout); such an answer is sent again, at most twice.
    let (mut resp, mut t);
    let mut tries = 0;
    loop {
        let before = now_s().floor() as i64;
        resp = post(
            stack.listen_port,
            "/v1/models/txn-risk:predict",
            json!({ "instances": sent }).to_string(),
        )
        .await;
        t = (before, now_s().ceil() as i64);
        tries += 1;
        let timed_out = resp.status == 504 && resp.json()["error"] == "redis_timeout";
        if !timed_out || tries == 3 {
            break;
        }
    }
    let wants = sent
        .iter()
        .map(|inst| example_expected(&src, &sessions, inst, t))
        .collect();
    let counts = check_wants(&resp, &sent, wants);
    // u000042: no transactions or sessions row; u000007: stale transactions; u000009: a null
    // last_login_at; items 0: a division by zero; no query embedding: a missing request field.
    for s in [
        "OUTSIDE_MAX_AGE",
        "NOT_FOUND",
        "NULL_VALUE",
        "INVALID",
        "PRESENT",
    ] {
        assert!(counts.get(s).is_some_and(|n| *n > 0), "no {s}: {counts:?}");
    }

    let before = reader_keys_requested(stack.reader_port);
    let sent = vec![
        json!({"amount": 120.0, "items": 4}),
        json!({"amount": 80.0, "items": 0}),
        json!({"amount": 1500.0}),
        json!({"amount": 30.0, "items": 12}),
    ];
    let body = json!({ "instances": sent }).to_string();
    let resp = post(stack.listen_port, "/v1/models/basket:predict", body).await;
    let counts = check_wants(&resp, &sent, sent.iter().map(basket_expected).collect());
    assert_eq!(counts.values().sum::<usize>(), 8, "{counts:?}");
    assert_eq!(
        reader_keys_requested(stack.reader_port),
        before,
        "no reader call"
    );
}

each_runtime!(the_examples_views_match_the_source_data);
