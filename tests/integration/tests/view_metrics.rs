//! The filter's per (service, view) metrics through real Envoy on both builds: after known
//! requests, `/stats/prometheus` counts each view's values by status (present, null, missing,
//! stale) and puts each served row's age in the right buckets of `ferry_view_age_seconds`.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferry_integration_tests::data::VIEWS;
use ferry_integration_tests::http::{post, raw};
use ferry_integration_tests::{each_runtime, Options, Runtime, Stack};
use serde_json::{json, Value as Json};

const SERVICE: &str = "realtime_scoring";
/// Fresh (u000001), a stale transactions row (u000007), no transactions row (u000042), and an
/// entity Redis does not hold at all.
const USERS: [&str; 4] = ["u000001", "u000007", "u000042", "u999999"];

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Every sample of `name` in Prometheus text: (labels, value).
fn samples(prom: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in prom.lines() {
        let Some(rest) = line.strip_prefix(name).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let (labels, value) = rest.rsplit_once("} ").unwrap();
        let labels = labels
            .split(',')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_owned(), v.trim_matches('"').to_owned())
            })
            .collect();
        out.push((labels, value.trim().parse().unwrap()));
    }
    out
}

fn sample(all: &[(BTreeMap<String, String>, f64)], want: &[(&str, &str)]) -> Option<f64> {
    all.iter()
        .find(|(l, _)| {
            want.iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| *v)
}

fn prometheus(stack: &Stack) -> String {
    let req = "GET /stats/prometheus HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
    raw(stack.admin_port, req.as_bytes()).unwrap()
}

/// Expected (present, null, missing, stale) of one view over `USERS`, from the source data.
fn expected(stack: &Stack, view: &str, features: &[&str]) -> [f64; 4] {
    let source = stack.source();
    let n = features.len() as f64;
    let mut c = [0.0; 4];
    for user in USERS {
        match source.event_time(view, user) {
            None => c[2] += n,
            Some(_) if user == "u000007" && view == "transactions" => c[3] += n,
            Some(_) => {
                for f in features {
                    let null = source.value(view, f, user) == Some(Json::Null);
                    c[usize::from(null)] += 1.0;
                }
            }
        }
    }
    c
}

async fn views_are_counted_by_status_and_age(runtime: Runtime) {
    let stack = Stack::start(Options {
        runtime,
        extra_routes: "",
        entities: Some(100),
    });
    let instances: Vec<Json> = USERS.iter().map(|u| json!({ "user_id": u })).collect();
    let body = json!({ "instances": instances }).to_string();
    let before = now_s();
    let resp = post(stack.listen_port, "/v1/models/fraud-lenient:predict", body).await;
    let after = now_s();
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    assert_eq!(resp.upstream_headers()["x-ferry-stale"], "1");

    let values = runtime.prometheus_name("ferry_view_values");
    let age = runtime.prometheus_name("ferry_view_age_seconds");
    // Envoy merges histograms into /stats/prometheus at its stats flush (every 5 s).
    let mut prom = prometheus(&stack);
    for _ in 0..100 {
        if sample(
            &samples(&prom, &format!("{age}_count")),
            &[("service", SERVICE), ("view", "transactions")],
        ) == Some(2.0)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
        prom = prometheus(&stack);
    }
    let counts = samples(&prom, &values);
    let buckets = samples(&prom, &format!("{age}_bucket"));
    let source = stack.source();
    for (view, features) in VIEWS {
        let names: Vec<&str> = features.iter().map(|(f, _)| *f).collect();
        let want = expected(&stack, view, &names);
        for (status, want) in ["present", "null", "missing", "stale"].iter().zip(want) {
            let labels = [("service", SERVICE), ("view", view), ("status", status)];
            assert_eq!(
                sample(&counts, &labels).unwrap_or(0.0),
                want,
                "{view} {status}:\n{prom}"
            );
        }
        // Each row found (stale ones too) once, in the buckets its age allows (Envoy's
        // histograms are approximate: a 10 % margin around each bound).
        let ages: Vec<(f64, f64)> = USERS
            .iter()
            .filter_map(|u| source.event_time(view, u))
            .map(|t| (before - t, after - t))
            .collect();
        let count = sample(
            &samples(&prom, &format!("{age}_count")),
            &[("service", SERVICE), ("view", view)],
        );
        assert_eq!(count, Some(ages.len() as f64), "{view}:\n{prom}");
        let mut seen = 0;
        for (labels, n) in buckets
            .iter()
            .filter(|(l, _)| l.get("view").map(String::as_str) == Some(*view))
            .filter(|(l, _)| l.get("service").map(String::as_str) == Some(SERVICE))
        {
            let le: f64 = match labels["le"].as_str() {
                "+Inf" => f64::INFINITY,
                le => le.parse().unwrap(),
            };
            let surely = ages.iter().filter(|(_, hi)| hi * 1.1 + 1.0 < le).count() as f64;
            let maybe = ages.iter().filter(|(lo, _)| lo * 0.9 - 1.0 <= le).count() as f64;
            assert!(
                (surely..=maybe).contains(n),
                "{view} le={le}: {n} not in {surely}..={maybe} (ages {ages:?})"
            );
            seen += 1;
        }
        assert_eq!(seen, 17, "16 bounds and +Inf for {view}:\n{prom}");
    }
    // The stale transactions row is about 2 days old: above 1 day, below 4.
    let stale = [
        ("service", SERVICE),
        ("view", "transactions"),
        ("le", "86400"),
    ];
    let two_days = [
        ("service", SERVICE),
        ("view", "transactions"),
        ("le", "345600"),
    ];
    assert_eq!(
        sample(&buckets, &stale),
        Some(1.0),
        "only the fresh row under 1 day"
    );
    assert_eq!(sample(&buckets, &two_days), Some(2.0));
}

each_runtime!(views_are_counted_by_status_and_age,);
