//! The native module's in-process reader (`FERRY_NATIVE_READER`): lookups go from Envoy
//! straight to Redis, through the reader's own lookup code running inside Envoy. Shown here:
//! the reader process is not on the path (killed, nothing changes), the composite-key route
//! reads the same values, and an unusable setting stops Envoy from loading the module rather
//! than running without it. The rest of the enrichment behaviour runs in enrich.rs
//! (`in_process::*`).

use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::http::post;
use ferry_integration_tests::{envoy_validate_with, Options, Runtime, Stack};
use serde_json::{json, Value as Json};

fn stack() -> Stack {
    Stack::start(Options {
        runtime: Runtime::NativeInProcess,
        extra_routes: "",
        entities: Some(300),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookups_do_not_go_through_the_reader_process() {
    let mut stack = stack();
    stack.reader.kill();
    let store = Store::load(&stack);
    let users: Vec<String> = (1..=40).map(|i| format!("u{i:06}")).collect();
    let body = json!({
        "instances": users.iter().map(|u| json!({"user_id": u, "amount": 3.5})).collect::<Vec<_>>()
    });
    let resp = post(
        stack.listen_port,
        "/v1/models/fraud-lenient:predict",
        body.to_string(),
    )
    .await;
    assert_eq!(resp.status, 200, "{:?}", resp.body);
    let entities: Vec<Entity> = users.iter().cloned().map(Entity::User).collect();
    let counts = store.check_instances(Service::RealtimeScoring, &resp.json(), &entities);
    assert!(
        counts.get("PRESENT").copied().unwrap_or(0) > 0,
        "some features present: {counts:?}"
    );
    // Read from Redis, not degraded for want of a reader ("partial": some users lack a view).
    let up = resp.upstream_headers();
    let status = up["x-ferry-status"].as_str();
    assert!(matches!(status, Some("ok" | "partial")), "{up}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_keys_are_read_in_process() {
    let stack = stack();
    let store = Store::load(&stack);
    let pairs: Vec<Entity> = store.fresh_pairs().into_iter().take(10).collect();
    assert_eq!(
        pairs.len(),
        10,
        "ten fresh (merchant, user) pairs in the data"
    );
    let instances: Vec<Json> = pairs
        .iter()
        .map(|e| match e {
            Entity::Pair { merchant, user } => json!({"merchant_id": merchant, "user_id": user}),
            Entity::User(u) => panic!("not a pair: {u}"),
        })
        .collect();
    let resp = post(
        stack.listen_port,
        "/v1/models/merchant-fraud:predict",
        json!({ "instances": instances }).to_string(),
    )
    .await;
    assert_eq!(resp.status, 200, "{:?}", resp.body);
    let counts = store.check_instances(Service::UserMerchantScoring, &resp.json(), &pairs);
    // Fresh pairs: every feature is read and present (check_instances compared each value).
    assert!(
        counts.get("PRESENT").copied().unwrap_or(0) >= 10,
        "{counts:?}"
    );
    assert_eq!(counts.get("NOT_FOUND"), None, "{counts:?}");
}

#[test]
fn an_unusable_setting_stops_envoy_from_loading_the_module() {
    let stack = Stack::start(Options {
        runtime: Runtime::Native,
        extra_routes: "",
        entities: Some(10),
    });
    // `--mode validate` loads the module and builds its filter config, as a real start does.
    for (setting, named) in [
        ("--redis not-a-url", "not-a-url"),
        ("--no-such-flag", "--no-such-flag"),
    ] {
        let (ok, text) =
            envoy_validate_with(&stack.envoy_config, &[("FERRY_NATIVE_READER", setting)]);
        assert!(!ok, "{setting}: Envoy accepted it:\n{text}");
        assert!(
            text.contains("FERRY_NATIVE_READER") && text.contains(named),
            "{setting}: the reason is not in Envoy's output:\n{text}"
        );
    }
}
