//! The near cache and the filter's Envoy stats, through real Envoy: repeat entities are served
//! from the proxy without a reader call (even with the reader down), and the counters show it.

use ferry_integration_tests::http::{get, post, reader_keys_requested};
use ferry_integration_tests::user_route;
use ferry_integration_tests::{each_runtime, Options, Runtime, Stack};
use serde_json::{json, Value as Json};

const ROUTES: &str = user_route!("cached", "cache_max_age_ms: 60000");

/// The value of one of the filter's Envoy stats (`/stats` text format: `name: value`).
fn stat(stack: &Stack, name: &str) -> i64 {
    let all = get(stack.admin_port, "/stats?filter=ferry");
    let full = format!("{}.{name}", stack.runtime.stats_namespace());
    all.lines()
        .filter_map(|l| l.split_once(": "))
        .find(|(n, _)| *n == full)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no stat {name} in:\n{all}"))
}

fn body(users: &[&str]) -> String {
    let v: Vec<Json> = users.iter().map(|u| json!({ "user_id": u })).collect();
    json!({ "instances": v }).to_string()
}

async fn repeat_entities_come_from_the_near_cache(runtime: Runtime) {
    let mut stack = Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(100),
    });
    let p = stack.listen_port;

    let first = post(p, "/t/cached", body(&["u000001", "u000002"])).await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    assert_eq!(reader_keys_requested(stack.reader_port), 2);

    let again = post(p, "/t/cached", body(&["u000002", "u000001"])).await;
    assert_eq!(again.status, 200);
    assert_eq!(
        reader_keys_requested(stack.reader_port),
        2,
        "served from the near cache: no reader call"
    );
    let (a, b) = (first.json(), again.json());
    assert_eq!(
        a["instances"][0], b["instances"][1],
        "same features from cache as from Redis"
    );
    assert_eq!(a["instances"][1], b["instances"][0]);

    // One new entity among cached ones: only it is fetched.
    let mixed = post(p, "/t/cached", body(&["u000001", "u000003"])).await;
    assert_eq!(mixed.status, 200);
    assert_eq!(reader_keys_requested(stack.reader_port), 3);

    // The uncached route still reads Redis every time.
    post(p, "/v1/models/fraud:predict", body(&["u000001"])).await;
    assert_eq!(reader_keys_requested(stack.reader_port), 4);

    // With the reader down, cached entities are still served; others fail closed.
    stack.reader.kill();
    let cached = post(p, "/t/cached", body(&["u000003", "u000002"])).await;
    assert_eq!(
        cached.status,
        200,
        "{}",
        String::from_utf8_lossy(&cached.body)
    );
    let uncached = post(p, "/t/cached", body(&["u000004"])).await;
    assert_eq!(uncached.status, 503);

    assert_eq!(stat(&stack, "ferry_cache_hits"), 5);
    assert_eq!(stat(&stack, "ferry_cache_misses"), 4);
    assert_eq!(stat(&stack, "ferry_requests_enriched"), 5);
    assert_eq!(stat(&stack, "ferry_requests_rejected"), 1);
    assert_eq!(stat(&stack, "ferry_reader_errors"), 1);
    assert_eq!(stat(&stack, "ferry_entities_found"), 9);
    let prom = get(stack.admin_port, "/stats/prometheus");
    let line = format!(
        "\n{}{{}} 5",
        stack.runtime.prometheus_name("ferry_cache_hits")
    );
    assert!(
        prom.contains(&line),
        "Prometheus text lists the filter's stats:\n{prom}"
    );
}

each_runtime!(repeat_entities_come_from_the_near_cache,);
