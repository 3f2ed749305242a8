//! Issue #31's matrix through real Envoy, on both builds (`each_runtime!`): requests an
//! attacker without a credential can send to routes `ferry apply` accepts — keyless KServe v2
//! JSON and gRPC routes (request fields only, no entity key) whose tensors claim 2^32-1, 2^35
//! or 2^62 rows with no data, a negative gRPC dimension, a request field sent twice, a member
//! given twice on a JSON route. Each answers its 4xx with Ferry's error (on gRPC a gRPC status),
//! never a 503 of a crashed VM or an Envoy that is gone; after each, Envoy is still running and
//! the next request is enriched with the values worked out here from the request. One line per
//! case (`ok <case>: <outcome>`) is printed for `docs/security.md`'s list.

use ferry_integration_tests::http::{post, Conn, Response};
use ferry_integration_tests::{each_runtime, Options, Runtime, Stack};
use ferry_test_support::hostile::{shape_without_contents, HUGE_ROWS};
use serde_json::{json, Value as Json};

/// The example's keyless `basket_scoring` (the view `basket` over the request fields `amount`
/// and `items`) as KServe v2 JSON and gRPC, and `txn_scoring` (user + basket) on a JSON route.
const ROUTES: &str = r#"
  - name: basket-v2
    match: {path_prefix: /t/basket-v2}
    service: basket_scoring
    format: kserve_v2
  - name: basket-grpc
    match: {path_prefix: /inference.GRPCInferenceService/ModelInfer}
    service: basket_scoring
    format: kserve_v2_grpc
  - name: basket-user-v2
    match: {path_prefix: /t/basket-user-v2}
    service: basket_scoring
    format: kserve_v2
    on_missing_entity: "null"
    extra_services:
      - {service: realtime_scoring, entity: {field: user_id}}
  - name: txn-json
    match: {path_prefix: /t/txn-json}
    service: txn_scoring
    format: json
    entity: {field: user_id}
    on_missing_entity: "null"
"#;

const GRPC_PATH: &str = "/inference.GRPCInferenceService/ModelInfer";

/// A KServe v2 body of the basket route: `amount` with `shape` and `data`, and `items` [N].
fn basket_v2(shape: Json, data: Json) -> String {
    json!({"inputs": [{"name": "amount", "datatype": "FP64", "shape": shape, "data": data}]})
        .to_string()
}

/// A framed `ModelInferRequest` whose `amount` tensor has `shape` and no contents.
fn basket_grpc(shape: Vec<i64>) -> Vec<u8> {
    ferry_core::format::kserve_v2_grpc::frame(&shape_without_contents("basket", "amount", shape))
}

enum Body {
    Http(&'static str, String),
    Grpc(Vec<u8>),
}

struct Case {
    name: &'static str,
    body: Body,
    /// The HTTP status and Ferry's error code (on gRPC: the gRPC status and the code).
    want: (u16, &'static str),
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (label, rows) in HUGE_ROWS {
        for (dims, shape) in [("[N]", json!([rows])), ("[N, 1]", json!([rows, 1]))] {
            out.push(Case {
                name: Box::leak(format!("v2 keyless shape {dims} N={label}, no data").into()),
                body: Body::Http("/t/basket-v2", basket_v2(shape, json!([]))),
                want: (413, "too_many_entities"),
            });
        }
        out.push(Case {
            name: Box::leak(format!("gRPC keyless shape [{label}], no contents").into()),
            body: Body::Grpc(basket_grpc(vec![rows])),
            want: (8, "too_many_entities"),
        });
    }
    out.push(Case {
        name: "gRPC keyless shape [-1], no contents",
        body: Body::Grpc(basket_grpc(vec![-1])),
        want: (3, "bad_request_shape"),
    });
    out.push(Case {
        name: "v2 request field sent twice (amount 1 and 5000)",
        body: Body::Http(
            "/t/basket-v2",
            json!({"inputs": [
                {"name": "amount", "datatype": "FP64", "shape": [1], "data": [1]},
                {"name": "amount", "datatype": "FP64", "shape": [1], "data": [5000]}
            ]})
            .to_string(),
        ),
        want: (400, "duplicate_field"),
    });
    out.push(Case {
        name: "JSON route member given twice (amount 1 and 5000)",
        body: Body::Http(
            "/t/txn-json",
            r#"{"user_id":"u000001","amount":1,"items":1,"amount":5000}"#.into(),
        ),
        want: (400, "duplicate_field"),
    });
    out
}

async fn send(stack: &Stack, body: &Body) -> Response {
    match body {
        Body::Http(path, b) => post(stack.listen_port, path, b.clone()).await,
        Body::Grpc(b) => {
            let mut conn = Conn::open_h2c(stack.listen_port).await;
            let headers = [("content-type", "application/grpc"), ("te", "trailers")];
            conn.send("POST", GRPC_PATH, &headers, b.clone()).await
        }
    }
}

/// The status a case was answered with: HTTP's, or on gRPC the `grpc-status` (a local
/// answer carries it in its headers, a trailers-only response).
fn outcome(resp: &Response, grpc: bool) -> (u16, String) {
    let code = resp.header("x-ferry-error").unwrap_or("").to_string();
    if !grpc {
        return (resp.status, code);
    }
    let status = resp
        .header("grpc-status")
        .or_else(|| {
            resp.trailers
                .as_ref()
                .and_then(|t| t.get("grpc-status"))
                .and_then(|v| v.to_str().ok())
        })
        .and_then(|s| s.parse().ok())
        .unwrap_or(u16::MAX);
    (status, code)
}

/// A request that must be enriched: basket's features from the request alone, so the expected
/// values are worked out here (avg = amount / items, large = items >= 10 || amount > 1000).
async fn enriched_after(stack: &Stack, case: &str) {
    let body = json!({"inputs": [
        {"name": "amount", "datatype": "FP64", "shape": [2], "data": [120.0, 1500.0]},
        {"name": "items", "datatype": "INT64", "shape": [2], "data": [4, 3]}
    ]});
    let resp = post(stack.listen_port, "/t/basket-v2", body.to_string()).await;
    assert_eq!(
        resp.status,
        200,
        "after {case}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    let got = resp.json();
    let tensor = |name: &str| -> Json {
        got["inputs"]
            .as_array()
            .and_then(|a| a.iter().find(|t| t["name"] == name))
            .map(|t| t["data"].clone())
            .unwrap_or_else(|| panic!("after {case}: no tensor {name} in {got}"))
    };
    assert_eq!(
        tensor("basket__avg_item_price"),
        json!([30.0, 500.0]),
        "after {case}"
    );
    assert_eq!(
        tensor("basket__large_basket"),
        json!([false, true]),
        "after {case}"
    );
}

async fn hostile_requests_are_4xx_and_envoy_stays_up(runtime: Runtime) {
    let mut stack = Stack::start(Options {
        extra_routes: ROUTES,
        entities: Some(200),
        runtime,
    });
    enriched_after(&stack, "nothing").await;
    for case in cases() {
        let grpc = matches!(case.body, Body::Grpc(_));
        let resp = send(&stack, &case.body).await;
        let (status, code) = outcome(&resp, grpc);
        assert_eq!(
            (status, code.as_str()),
            case.want,
            "{}: {} {}",
            case.name,
            resp.status,
            String::from_utf8_lossy(&resp.body)
        );
        assert!(stack.envoy.is_running(), "{}: Envoy is gone", case.name);
        enriched_after(&stack, case.name).await;
        println!("ok {}: {} {code}", case.name, status);
    }
    // A keyless main service beside a keyed extra one (found by the config-space fuzz target:
    // an index out of bounds, a VM crash in the Wasm build): enriched, the stored features
    // under the user's id.
    let body = json!({"inputs": [
        {"name": "user_id", "datatype": "BYTES", "shape": [2], "data": ["u000001", "u000002"]},
        {"name": "amount", "datatype": "FP64", "shape": [2], "data": [120.0, 1500.0]},
        {"name": "items", "datatype": "INT64", "shape": [2], "data": [4, 3]}
    ]});
    let resp = post(stack.listen_port, "/t/basket-user-v2", body.to_string()).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let got = resp.json();
    let names: Vec<&str> = got["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"basket__avg_item_price"), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("user_profile__")),
        "{names:?}"
    );
    assert!(stack.envoy.is_running());
    println!("ok keyless main service with a keyed extra one: 200 enriched");
}

each_runtime!(hostile_requests_are_4xx_and_envoy_stays_up);
