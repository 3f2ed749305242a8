//! The native module (the Envoy dynamic module, as Envoy Gateway's `dynamicModule` policy loads
//! it) pulling its snapshot from `ferry serve --signing-key` (`snapshot_url` in its JSON
//! config), through real Envoy 1.40: a JSON 503 until the control plane answers, then enriched
//! requests with the store's values; a repo change pushed to `ferry serve` reaches the module
//! by re-pull, without an Envoy restart. The refusals (replay, bad signature, unknown key, size
//! cap, failed GET) are unit-tested through the fake Envoy (native/src/pull/pull_tests.rs).

use ferry_integration_tests::expected::{Service, Store};
use ferry_integration_tests::{Options, Runtime, Stack};

use super::pull::{add_new_route, enriched, post_until, users, with_cp_cluster, Puller};
use super::support::{instances, post};

/// `ferry envoy-config --runtime native`'s bootstrap with the module's config the JSON plugin
/// config (a StringValue, as Envoy Gateway passes it) instead of the inline snapshot.
fn with_json_config(yaml: String, plugin_config: &str) -> String {
    let start = "                \"@type\": type.googleapis.com/google.protobuf.BytesValue\n                value: \"";
    let at = yaml
        .find(start)
        .expect("the native snapshot as a BytesValue");
    let end = at + start.len() + yaml[at + start.len()..].find('"').expect("its end");
    assert!(
        !plugin_config.contains('\''),
        "fits a YAML single-quoted string"
    );
    format!(
        "{}                \"@type\": type.googleapis.com/google.protobuf.StringValue\n                value: '{}'{}",
        &yaml[..at],
        plugin_config.trim(),
        &yaml[end + 1..]
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_native_module_pulls_its_signed_snapshot_and_follows_a_push() {
    let stack = Stack::start(Options {
        runtime: Runtime::Native,
        extra_routes: "",
        entities: Some(50),
    });
    let mut pull = Puller::down(&stack, &[]);
    // As dynamic-module-policy.yaml: the module may hold the headers while it reads the body.
    let mut json: serde_json::Value = serde_json::from_str(&pull.plugin_config).unwrap();
    json["allow_on_headers_stop_iteration"] = true.into();
    let plugin_config = json.to_string();
    let cp_port = pull.cp.http_port;
    let envoy = stack
        .static_envoy_edited(|y| with_cp_cluster(with_json_config(y, &plugin_config), cp_port));
    let p = envoy.listen_port;

    // The control plane comes up: the next poll loads the signed snapshot.
    let store = Store::load(&stack);
    let resp = pull.first_pull(p, &store).await;
    // The module holds the headers while it reads the body: the model sees x-ferry-status.
    assert_eq!(resp.upstream_headers()["x-ferry-status"], "ok");
    let before = post(p, "/t/added-later", instances(&["u000001"])).await;
    assert!(
        before.status == 200 && before.header("x-ferry-status").is_none(),
        "no such route yet"
    );

    // A repo change pushed to ferry serve reaches the module by re-pull, same Envoy process.
    add_new_route(&stack);
    pull.cp.apply_push(&stack.repo, &stack.redis.url(), false);
    let resp = post_until(p, "/t/added-later", "the pushed route", enriched).await;
    store.check_instances(Service::RealtimeScoring, &resp.json(), &users());

    // Envoy logs warnings here: the pull's failures while `ferry serve` was down, said once
    // (not at every poll), and no refusal or panic.
    let log = envoy.proc.log_text();
    assert_eq!(log.matches("answered 503").count(), 1, "{log}");
    assert!(!log.contains("refused"), "{log}");
    assert!(!log.contains("a panic in the filter"), "{log}");
}
