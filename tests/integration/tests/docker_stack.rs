//! The compose stack of docker/ running in a real Docker engine. `make test-docker`
//! (scripts/docker-test.sh) builds the images, brings the stack up on free ports, copies the
//! sources the `init` container generated out of its volume and runs this file with
//! FERRY_DOCKER_* naming them; it then tears everything down. Ignored in plain `cargo test`:
//! without that stack there is nothing to talk to.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferry::serve::api::Status;
use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::http::post;
use ferry_integration_tests::{bin, run};
use serde_json::{json, Value as Json};

/// The node id of the compose Envoy (docker/envoy-config.sh).
const NODE_ID: &str = "ferry-docker";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run `make test-docker`"))
}

fn port(name: &str) -> u16 {
    env(name)
        .parse()
        .unwrap_or_else(|_| panic!("{name}: not a port"))
}

/// The control plane's `/status`, over HTTPS through its published port (its certificate names
/// 127.0.0.1; the stack's CA copied out of the container), with the stack's push token
/// (scripts/docker-lib.sh exports it; `ferry apply --push` below reads it too), given to curl
/// on its standard input, not in its arguments.
fn status(cp_port: u16) -> Status {
    let token = env("FERRY_PUSH_TOKEN");
    let mut curl = Command::new("curl")
        .args(["-fsS", "-K", "-", "--cacert", &env("FERRY_DOCKER_CA")])
        .arg(format!("https://127.0.0.1:{cp_port}/status"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl");
    let header = format!("header = \"authorization: Bearer {token}\"\n");
    curl.stdin
        .take()
        .expect("stdin")
        .write_all(header.as_bytes())
        .expect("write");
    let out = curl.wait_with_output().expect("curl");
    assert!(out.status.success(), "GET /status over HTTPS: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("/status: {e}: {out:?}"))
}

/// A copy of `repo` whose lenient route uses short feature names: no fingerprint changes, so
/// the vectors in the stack's Redis stay valid and a plain push (no materialize) is enough.
fn hot_repo(repo: &Path, dir: &Path) -> PathBuf {
    let hot = dir.join("hot");
    std::fs::create_dir_all(&hot).expect("mkdir");
    let yaml = std::fs::read_to_string(repo.join("ferry.yaml")).expect("ferry.yaml");
    // The lenient route's two lines (txn-risk has the same two, without this comment).
    let old = "    feature_names: full\n    on_missing_entity: \"null\"      # an unknown user";
    assert_eq!(
        yaml.matches(old).count(),
        1,
        "the example's lenient route changed"
    );
    let new = old.replace("full", "short");
    std::fs::write(hot.join("ferry.yaml"), yaml.replacen(old, &new, 1)).expect("write");
    std::os::unix::fs::symlink(repo.join("data"), hot.join("data")).expect("symlink data");
    hot
}

async fn predict(port: u16, path: &str, body: Json) -> Json {
    let resp = post(port, path, body.to_string()).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    resp.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the compose stack in Docker: make test-docker"]
async fn the_compose_stack_enriches_from_the_sources_and_takes_a_hot_push() {
    let repo = PathBuf::from(env("FERRY_DOCKER_REPO"));
    let (listen, cp_port) = (
        port("FERRY_DOCKER_LISTEN_PORT"),
        port("FERRY_DOCKER_CP_PORT"),
    );
    let store = Store::load_repo(&repo);

    // Every feature the model receives is the source's value with the source's status.
    let users = [
        Entity::User("u000001".into()),
        Entity::User("u000002".into()),
    ];
    let body =
        json!({"instances": [{"user_id": "u000001", "amount": 120.5}, {"user_id": "u000002"}]});
    let received = predict(listen, "/v1/models/fraud:predict", body).await;
    assert_eq!(received["instances"][0]["amount"], 120.5);
    let counts = store.check_instances(Service::RealtimeScoring, &received, &users);
    assert_eq!(counts.values().sum::<usize>(), 20, "{counts:?}");
    assert!(counts.get("PRESENT").is_some_and(|&n| n > 0), "{counts:?}");
    let before = status(cp_port);
    assert!(before.converged, "{before:?}");
    assert_eq!(before.nodes.len(), 1, "{before:?}");
    assert_eq!(before.nodes[0].node, NODE_ID);

    // A hot push from the host to the container control plane, reaching the container Envoy.
    let dir = tempfile::tempdir().expect("tempdir");
    let hot = hot_repo(&repo, dir.path());
    run(Command::new(bin("ferry"))
        .arg("apply")
        .arg(&hot)
        .arg("--push")
        .arg(format!("https://127.0.0.1:{cp_port}"))
        .arg("--ca")
        .arg(env("FERRY_DOCKER_CA")));
    let age = store
        .features(Service::RealtimeScoring, &users[0])
        .into_iter()
        .find(|f| f.name == "user_profile__age")
        .expect("user_profile__age")
        .value;
    let lenient = "/v1/models/fraud-lenient:predict";
    let start = Instant::now();
    let instance = loop {
        let got = predict(
            listen,
            lenient,
            json!({"instances": [{"user_id": "u000001"}]}),
        )
        .await;
        if got["instances"][0].get("age").is_some() {
            break got["instances"][0].clone();
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the pushed snapshot did not reach the compose Envoy in 20 s: {got}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(instance["age"], age, "{instance}");
    assert!(instance.get("user_profile__age").is_none(), "{instance}");
    let after = status(cp_port);
    let version = |s: &Status| s.snapshot.as_ref().map(|s| s.version.clone());
    assert_ne!(version(&after), version(&before), "{after:?}");
    assert!(after.nodes.iter().all(|n| n.node == NODE_ID), "{after:?}");
}
