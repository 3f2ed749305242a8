//! Issue #2 end to end: real Envoy running the built filter, real Redis, the reader and the
//! demo model, each test on its own stack and ports, once per build of the filter (`NAME::wasm`,
//! `NAME::native`: `each_runtime!` at the end), and most also on the native module with its
//! in-process reader (`in_process::NAME`).

use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::http::{post, raw, Conn, Response};
use ferry_integration_tests::user_route;
use ferry_integration_tests::{
    each_runtime, each_runtime_blocking, envoy_validate, run, Options, Runtime, Stack,
};
use serde_json::{json, Value as Json};

const STRICT: &str = "/v1/models/fraud:predict";
const LENIENT: &str = "/v1/models/fraud-lenient:predict";

/// Routes the tests add to the example repo (they come after the example's own, so their paths
/// must not start with /v1/models/fraud).
const TEST_ROUTES: &str = concat!(
    user_route!("defaults", "on_missing_entity: default"),
    user_route!("stale-reject", "on_stale: reject"),
    user_route!("small", "max_body_bytes: 2048", "max_entities: 5"),
    user_route!("fail-open", "on_reader_error: forward"),
);

fn stack(runtime: Runtime, entities: usize) -> Stack {
    Stack::start(Options {
        runtime,
        extra_routes: TEST_ROUTES,
        entities: Some(entities),
    })
}

fn instances(users: &[String]) -> String {
    let v: Vec<Json> = users
        .iter()
        .map(|u| json!({"user_id": u, "amount": 10.5}))
        .collect();
    json!({ "instances": v }).to_string()
}

fn user(i: usize) -> String {
    format!("u{i:06}")
}

/// Checks every feature of every instance the model received against the source data: value
/// and status (PRESENT / NULL_VALUE / NOT_FOUND / OUTSIDE_MAX_AGE). Returns the status counts.
fn check_against_source(
    stack: &Stack,
    resp: &Response,
    users: &[String],
) -> std::collections::BTreeMap<&'static str, usize> {
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let body = resp.json();
    for inst in body["instances"].as_array().expect("instances") {
        assert_eq!(inst["amount"], json!(10.5), "client fields are kept");
    }
    let users: Vec<Entity> = users.iter().cloned().map(Entity::User).collect();
    Store::load(stack).check_instances(Service::RealtimeScoring, &body, &users)
}

async fn enriches_one_and_fifty_instances_with_the_source_values(runtime: Runtime) {
    let stack = stack(runtime, 10_000);
    let one = vec![user(1)];
    let resp = post(stack.listen_port, STRICT, instances(&one)).await;
    check_against_source(&stack, &resp, &one);
    let up = resp.upstream_headers();
    assert_eq!(up["x-ferry-status"], "ok");
    // The client is told too, on the response.
    assert_eq!(resp.header("x-ferry-status"), Some("ok"));
    assert_eq!(
        resp.header("x-ferry-fingerprint"),
        up["x-ferry-fingerprint"].as_str()
    );
    assert_eq!(up["x-ferry-entities"], "1");
    assert_eq!(
        up["content-length"],
        json!(resp.body.len().to_string()),
        "content-length fixed"
    );

    let fifty: Vec<String> = (1..=50).map(user).collect();
    let resp = post(stack.listen_port, STRICT, instances(&fifty)).await;
    let counts = check_against_source(&stack, &resp, &fifty);
    // The batch holds each kind of case: u000007 is stale, u000042 has no transactions row,
    // u000005 has a null credit score.
    assert_eq!(counts.get("OUTSIDE_MAX_AGE"), Some(&4), "{counts:?}");
    assert_eq!(counts.get("NOT_FOUND"), Some(&4), "{counts:?}");
    assert!(
        counts.get("NULL_VALUE").copied().unwrap_or(0) >= 1,
        "{counts:?}"
    );
    let up = resp.upstream_headers();
    assert_eq!(
        (
            up["x-ferry-entities"].as_str(),
            up["x-ferry-stale"].as_str()
        ),
        (Some("50"), Some("1"))
    );
    assert_eq!(up["x-ferry-status"], "partial");

    // The filter made one reader call per request, whatever the batch size (none reached the
    // reader process when the module reads Redis in process).
    let in_process = runtime == Runtime::NativeInProcess;
    let metrics = ferry_integration_tests::http::raw(
        stack.reader_port,
        b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .unwrap();
    let ok_requests: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("ferry_reader_requests_total{route=\"vectors\",status=\"200\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    let (calls, keys) = if in_process { (0.0, 0) } else { (2.0, 51) };
    assert_eq!(ok_requests, calls, "reader metrics:\n{metrics}");
    assert!(
        metrics.contains(&format!("\nferry_reader_keys_requested_total {keys}\n")),
        "reader metrics:\n{metrics}"
    );
}

async fn unknown_entity_follows_each_policy(runtime: Runtime) {
    let stack = stack(runtime, 300);
    let users = vec![user(4), "nobody".to_string()];

    let (status, code, message) = post(stack.listen_port, STRICT, instances(&users))
        .await
        .ferry_error();
    assert_eq!((status, code.as_str()), (404, "entity_not_found"));
    assert!(message.contains("'nobody'"), "{message}");

    let resp = post(stack.listen_port, LENIENT, instances(&users)).await;
    check_against_source(&stack, &resp, &users);
    assert_eq!(resp.json()["instances"][1]["user_profile__age"], Json::Null);
    assert_eq!(resp.upstream_headers()["x-ferry-missing"], "1");

    let resp = post(stack.listen_port, "/t/defaults", instances(&users)).await;
    assert_eq!(resp.status, 200);
    let ghost = &resp.json()["instances"][1];
    assert_eq!(ghost["user_profile__credit_score"], json!(600.0));
    assert_eq!(ghost["user_profile__account_tier"], "standard");
    assert_eq!(ghost["transactions__txn_count_7d"], json!(0));
    assert_eq!(
        ghost["user_profile__age"],
        Json::Null,
        "no default in the repo: null"
    );
    assert_eq!(
        resp.json()["ferry"]["statuses"][1]["user_profile__age"],
        "NOT_FOUND"
    );
}

async fn stale_view_is_null_by_default_and_rejected_when_asked(runtime: Runtime) {
    let stack = stack(runtime, 300);
    let stale = vec![user(7)];
    let resp = post(stack.listen_port, STRICT, instances(&stale)).await;
    let counts = check_against_source(&stack, &resp, &stale);
    assert_eq!(counts.get("OUTSIDE_MAX_AGE"), Some(&4));
    assert!(
        resp.json()["instances"][0]["user_profile__age"].is_i64(),
        "other views stay"
    );

    let (status, code, message) = post(stack.listen_port, "/t/stale-reject", instances(&stale))
        .await
        .ferry_error();
    assert_eq!((status, code.as_str()), (422, "stale_features"));
    assert!(message.contains("'u000007'"), "{message}");
}

async fn bad_requests_get_clear_json_errors(runtime: Runtime) {
    let stack = stack(runtime, 100);
    let p = stack.listen_port;
    let (s, code, msg) = post(p, STRICT, r#"{"instances": [{"user_id": "#)
        .await
        .ferry_error();
    assert_eq!((s, code.as_str()), (400, "malformed_json"));
    assert!(msg.starts_with("request body is not valid JSON"), "{msg}");
    let (s, code, msg) = post(p, STRICT, r#"{"instances": [{"uid": "u000001"}]}"#)
        .await
        .ferry_error();
    assert_eq!(
        (s, code.as_str(), msg.as_str()),
        (
            400,
            "missing_entity_id",
            "instances[0] has no entity id field 'user_id'"
        )
    );
    let (s, code, _) = post(p, STRICT, r#"{"inputs": [1]}"#).await.ferry_error();
    assert_eq!((s, code.as_str()), (400, "bad_request_shape"));
    let (s, code, _) = post(p, STRICT, r#"{"instances": [{"user_id": "a\u0000b"}]}"#)
        .await
        .ferry_error();
    assert_eq!((s, code.as_str()), (400, "invalid_entity_id"));

    // Over the route's body limit: declared by content-length, and streamed in chunks.
    let big = instances(&(0..100).map(user).collect::<Vec<_>>());
    assert!(big.len() > 2048);
    let (s, code, msg) = post(p, "/t/small", big.clone()).await.ferry_error();
    assert_eq!((s, code.as_str()), (413, "body_too_large"));
    assert!(msg.contains("limit of 2048 bytes"), "{msg}");
    let chunk = &big[..1500];
    let req = format!(
        "POST /t/small HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{:x}\r\n{chunk}\r\n{:x}\r\n{chunk}\r\n0\r\n\r\n",
        chunk.len(),
        chunk.len()
    );
    let answer = raw(p, req.as_bytes()).unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"error\":\"body_too_large\""), "{answer}");

    let six = instances(&(1..=6).map(user).collect::<Vec<_>>());
    let (s, code, msg) = post(p, "/t/small", six).await.ferry_error();
    assert_eq!(
        (s, code.as_str(), msg.as_str()),
        (
            413,
            "too_many_entities",
            "request has 6 entities, over this route's limit of 5"
        )
    );
}

async fn forged_features_and_headers_are_replaced(runtime: Runtime) {
    let stack = stack(runtime, 100);
    let mut conn = Conn::open(stack.listen_port).await;
    let body = json!({
        "instances": [{"user_id": user(3), "amount": 10.5, "user_profile__credit_score": 850.0, "transactions__txn_count_7d": 0}],
        "ferry": {"statuses": [{}], "fingerprint": "forged"}
    })
    .to_string();
    let resp = conn
        .send(
            "POST",
            STRICT,
            &[("x-ferry-status", "ok"), ("x-ferry-fingerprint", "forged")],
            body,
        )
        .await;
    let users = vec![user(3)];
    check_against_source(&stack, &resp, &users);
    let src = stack.source();
    assert_ne!(
        src.value("user_profile", "credit_score", &user(3)),
        Some(json!(850.0))
    );
    let v = resp.json();
    assert_ne!(v["ferry"]["fingerprint"], "forged");
    let up = resp.upstream_headers();
    assert_eq!(up["x-ferry-fingerprint"], v["ferry"]["fingerprint"]);
}

async fn reader_down_fails_closed_or_open_and_recovers(runtime: Runtime) {
    let mut stack = stack(runtime, 100);
    let users = vec![user(1)];
    stack.reader.kill();

    let (s, code, msg) = post(stack.listen_port, STRICT, instances(&users))
        .await
        .ferry_error();
    assert_eq!((s, code.as_str()), (503, "reader_unavailable"));
    assert!(msg.starts_with("feature reader unavailable"), "{msg}");

    // Fail open: the model gets the request with every feature null, told so by a header.
    let resp = post(stack.listen_port, "/t/fail-open", instances(&users)).await;
    assert_eq!(resp.status, 200);
    let got = resp.json();
    let sent = serde_json::from_str::<Json>(&instances(&users)).unwrap();
    let instance = got["instances"][0].as_object().unwrap();
    for (name, value) in instance {
        match sent["instances"][0].get(name) {
            Some(v) => assert_eq!(value, v, "{name}: the client's field as sent"),
            None => assert!(value.is_null(), "{name}: a feature, null when degraded"),
        }
    }
    assert!(instance.len() > sent["instances"][0].as_object().unwrap().len());
    let up = resp.upstream_headers();
    assert_eq!(
        (up["x-ferry-status"].as_str(), up["x-ferry-error"].as_str()),
        (Some("degraded"), Some("reader_unavailable"))
    );

    stack.restart_reader();
    let resp = post(stack.listen_port, STRICT, instances(&users)).await;
    check_against_source(&stack, &resp, &users);
}

async fn redis_down_is_a_503_and_recovery_needs_no_restart(runtime: Runtime) {
    let mut stack = stack(runtime, 100);
    let users = vec![user(2)];
    stack.redis.stop();
    let (s, code, _) = post(stack.listen_port, STRICT, instances(&users))
        .await
        .ferry_error();
    assert_eq!((s, code.as_str()), (503, "redis_unavailable"));

    stack.restart_redis();
    run(
        std::process::Command::new(ferry_integration_tests::bin("ferry"))
            .arg("materialize")
            .arg(&stack.repo)
            .args(["--redis", &stack.redis.url()]),
    );
    let mut last = 0;
    for _ in 0..50 {
        let resp = post(stack.listen_port, STRICT, instances(&users)).await;
        last = resp.status;
        if last == 200 {
            check_against_source(&stack, &resp, &users);
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("still {last} after Redis came back");
}

async fn keep_alive_connection_survives_rewritten_bodies_and_passthrough(runtime: Runtime) {
    let stack = stack(runtime, 100);
    let mut conn = Conn::open(stack.listen_port).await;
    for n in [1, 7, 2, 20] {
        let users: Vec<String> = (1..=n).map(user).collect();
        let resp = conn.post(STRICT, instances(&users)).await;
        check_against_source(&stack, &resp, &users);
        assert_eq!(
            resp.upstream_headers()["content-length"],
            json!(resp.body.len().to_string())
        );
    }
    // Unmatched paths outside the protected prefixes pass through with the body untouched and
    // without the client's x-ferry-* headers.
    let body = r#"{"instances": [{"user_id": "u000001"}]}"#;
    let resp = conn
        .send(
            "POST",
            "/other:predict",
            &[("x-ferry-status", "client")],
            body,
        )
        .await;
    assert_eq!(resp.status, 200);
    assert_eq!(&resp.body[..], body.as_bytes());
    assert!(resp.upstream_headers().get("x-ferry-status").is_none());
    // A bodiless GET on an enriched path (KServe readiness) passes through too.
    let resp = conn.send("GET", "/v1/models/fraud", &[], "").await;
    assert_eq!(
        (resp.status, resp.header("x-echo-method")),
        (200, Some("GET"))
    );
    // Under the protected /v1/models/ an unmatched path is refused (Envoy then closes the
    // connection, so this comes last).
    let resp = conn
        .send("POST", "/v1/models/other:predict", &[], body)
        .await;
    assert_eq!(resp.status, 404);
    assert_eq!(resp.json()["error"], "no_route");
    assert!(resp.header("x-echo-headers").is_none(), "model not called");
}

fn rendered_bootstrap_validates_with_envoy(runtime: Runtime) {
    let stack = stack(runtime, 10);
    if let Err(out) = envoy_validate(&stack.envoy_config) {
        panic!("{out}");
    }
}

each_runtime!(
    enriches_one_and_fifty_instances_with_the_source_values,
    unknown_entity_follows_each_policy,
    stale_view_is_null_by_default_and_rejected_when_asked,
    bad_requests_get_clear_json_errors,
    forged_features_and_headers_are_replaced,
    reader_down_fails_closed_or_open_and_recovers,
    redis_down_is_a_503_and_recovery_needs_no_restart,
    keep_alive_connection_survives_rewritten_bodies_and_passthrough,
);

// The native module with its in-process reader: the same bodies, but for the reader being
// down, which it does not depend on (native_in_process.rs shows that).
ferry_integration_tests::also_in_process!(
    enriches_one_and_fifty_instances_with_the_source_values,
    unknown_entity_follows_each_policy,
    stale_view_is_null_by_default_and_rejected_when_asked,
    bad_requests_get_clear_json_errors,
    forged_features_and_headers_are_replaced,
    redis_down_is_a_503_and_recovery_needs_no_restart,
    keep_alive_connection_survives_rewritten_bodies_and_passthrough,
);

each_runtime_blocking!(rendered_bootstrap_validates_with_envoy,);
