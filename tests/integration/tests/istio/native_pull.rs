//! The native module (the Envoy dynamic module, as Envoy Gateway's `dynamicModule` policy loads
//! it) pulling its snapshot from `ferry serve --signing-key` (`snapshot_url` in its JSON
//! config), through real Envoy 1.40: a JSON 503 until the control plane answers, then enriched
//! requests with the store's values; a repo change pushed to `ferry serve` reaches the module
//! by re-pull, without an Envoy restart. The refusals (replay, bad signature, unknown key, size
//! cap, failed GET) are unit-tested through the fake Envoy (native/src/pull/pull_tests.rs).

use std::process::Command;

use ferry_integration_tests::control_plane::{ControlPlane, READ_TOKEN};
use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::{bin, run, Options, Runtime, Stack};

use super::pull::{enriched, keygen, post_until, with_cp_cluster, CP_CLUSTER, NEW_ROUTE};
use super::support::{error_of, instances, post};

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
    // Down when Envoy starts: its ports are known, nothing listens on them.
    let key = keygen(stack.dir.path());
    let mut cp = ControlPlane::start_with_args(
        stack.dir.path(),
        &stack.repo,
        &["--signing-key", &key.display().to_string()],
    );
    cp.proc.kill();
    let url = format!("{}/v1/snapshot", cp.url());
    let plugin_config = run(Command::new(bin("ferry"))
        .arg("plugin-config")
        .arg(&stack.repo)
        .args(["--snapshot-url", &url, "--snapshot-cluster", CP_CLUSTER])
        .args(["--snapshot-poll-ms", "200"])
        .args(["--snapshot-token", READ_TOKEN])
        .arg("--snapshot-key")
        .arg(&key)
        .arg("--insecure"));
    // As dynamic-module-policy.yaml: the module may hold the headers while it reads the body.
    let mut json: serde_json::Value = serde_json::from_str(&plugin_config).unwrap();
    json["allow_on_headers_stop_iteration"] = true.into();
    let plugin_config = json.to_string();
    let cp_port = cp.http_port;
    let envoy = stack
        .static_envoy_edited(|y| with_cp_cluster(with_json_config(y, &plugin_config), cp_port));
    let p = envoy.listen_port;

    // No snapshot yet: every request, on a Ferry route or not, gets the JSON 503.
    for path in ["/v1/models/fraud:predict", "/elsewhere"] {
        let resp = post(p, path, instances(&["u000001"])).await;
        assert_eq!(error_of(&resp), (503, "snapshot_not_loaded".into()));
        let message = resp.json()["message"].as_str().unwrap_or("").to_owned();
        assert!(message.contains(&url), "{message}");
    }

    // The control plane comes up: the next poll loads the signed snapshot.
    cp.restart();
    let resp = post_until(p, "/v1/models/fraud:predict", "first pull", enriched).await;
    let users = [
        Entity::User("u000001".into()),
        Entity::User("u000002".into()),
    ];
    let store = Store::load(&stack);
    store.check_instances(Service::RealtimeScoring, &resp.json(), &users);
    // The module holds the headers while it reads the body: the model sees x-ferry-status.
    assert_eq!(resp.upstream_headers()["x-ferry-status"], "ok");
    let before = post(p, "/t/added-later", instances(&["u000001"])).await;
    assert!(
        before.status == 200 && before.header("x-ferry-status").is_none(),
        "no such route yet"
    );

    // A repo change pushed to ferry serve reaches the module by re-pull, same Envoy process.
    let yaml = stack.repo.join("ferry.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap() + NEW_ROUTE;
    std::fs::write(&yaml, text).unwrap();
    cp.apply_push(&stack.repo, &stack.redis.url(), false);
    let resp = post_until(p, "/t/added-later", "the pushed route", enriched).await;
    store.check_instances(Service::RealtimeScoring, &resp.json(), &users);

    // Envoy logs warnings here: the pull's failures while `ferry serve` was down, said once
    // (not at every poll), and no refusal or panic.
    let log = envoy.proc.log_text();
    assert_eq!(log.matches("answered 503").count(), 1, "{log}");
    assert!(!log.contains("refused"), "{log}");
    assert!(!log.contains("a panic in the filter"), "{log}");
}
