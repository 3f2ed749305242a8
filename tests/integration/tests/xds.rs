//! Issue #3 end to end: Envoy takes the filter config from a real `ferry serve` process (ECDS
//! over ADS); real Redis, reader and model. Snapshots change hot, without an Envoy restart.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ferry::serve::api::{ApiError, ErrorCode, Pushed, Status, SNAPSHOT_PATH, UNCHECKED_HEADER};
use ferry_integration_tests::control_plane::TOKEN;
use ferry_integration_tests::http::{post, Response};
use ferry_integration_tests::{
    bin, each_runtime, envoy_validate, example_repo_with, run, ControlPlane, Options, Runtime,
    Stack,
};
use serde_json::{json, Value as Json};

const STRICT: &str = "/v1/models/fraud:predict";
const ALL_VIEWS: &str = "features: [user_profile, transactions, user_embedding]";
const NO_EMBEDDING: &str = "features: [user_profile, transactions]";

/// v1 of the repo: the service without the embedding view (the example is v2).
fn v1(yaml: String) -> String {
    assert!(yaml.contains(ALL_VIEWS));
    yaml.replace(ALL_VIEWS, NO_EMBEDDING)
}

fn set_repo(stack: &Stack, edit: impl FnOnce(String) -> String) {
    let path = stack.repo.join("ferry.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, edit(yaml)).unwrap();
}

fn ferry(args: &[&str], repo: &std::path::Path) -> std::process::Output {
    Command::new(bin("ferry"))
        .arg(args[0])
        .arg(repo)
        .args(&args[1..])
        .env_remove("FERRY_PUSH_TOKEN")
        .output()
        .unwrap()
}

fn xds_stack(runtime: Runtime, entities: usize) -> Stack {
    Stack::start_xds(
        Options {
            extra_routes: "",
            entities: Some(entities),
            runtime,
        },
        v1,
    )
}

fn body(users: &[&str]) -> String {
    let v: Vec<Json> = users.iter().map(|u| json!({"user_id": u})).collect();
    json!({ "instances": v }).to_string()
}

/// The features the model received for the first instance, sorted, and the fingerprint.
fn schema(resp: &Response) -> (Vec<String>, String) {
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let v = resp.json();
    let mut names: Vec<String> = v["instances"][0]
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.contains("__"))
        .cloned()
        .collect();
    names.sort();
    (
        names,
        v["ferry"]["fingerprint"].as_str().unwrap().to_owned(),
    )
}

fn has_embedding(resp: &Response) -> bool {
    schema(resp)
        .0
        .iter()
        .any(|n| n == "user_embedding__embedding")
}

/// Pushes the repo as it is now; returns the new version.
fn push(stack: &Stack, materialize: bool) -> String {
    stack
        .cp()
        .apply_push(&stack.repo, &stack.redis.url(), materialize)
}

async fn hot_update_reaches_two_envoys_without_a_restart(runtime: Runtime) {
    let mut stack = xds_stack(runtime, 200);
    let mut second = stack.another_envoy("envoy-b");
    let cp = stack.cp();
    let v1_version = cp.version();
    cp.wait_converged(&v1_version, 2, Duration::from_secs(15));
    for port in [stack.listen_port, second.listen_port] {
        assert!(!has_embedding(
            &post(port, STRICT, body(&["u000001"])).await
        ));
    }

    // v2 adds a feature: a new fingerprint, materialized first, then pushed.
    set_repo(&stack, |y| y.replace(NO_EMBEDDING, ALL_VIEWS));
    run(Command::new(bin("ferry"))
        .arg("materialize")
        .arg(&stack.repo)
        .args(["--redis", &stack.redis.url()]));
    let started = Instant::now();
    let v2_version = push(&stack, false);
    let pushed = started.elapsed();
    let mut served = None;
    while started.elapsed() < Duration::from_secs(10) {
        if has_embedding(&post(stack.listen_port, STRICT, body(&["u000001"])).await) {
            served = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let served = served.expect("the new feature within 10 s of the push");
    println!(
        "MEASURED: `ferry apply --push` returned after {:.1} ms; first request served with the new \
         snapshot {:.1} ms after the command started",
        pushed.as_secs_f64() * 1e3,
        served.as_secs_f64() * 1e3
    );
    let status = cp.wait_converged(&v2_version, 2, Duration::from_secs(15));
    let nodes: Vec<&str> = status.nodes.iter().map(|n| n.node.as_str()).collect();
    assert!(
        nodes.contains(&"envoy-a") && nodes.contains(&"envoy-b"),
        "{status:?}"
    );
    assert_eq!(
        status.snapshot.as_ref().unwrap().services[0].name,
        "realtime_scoring"
    );
    for port in [stack.listen_port, second.listen_port] {
        let resp = post(port, STRICT, body(&["u000001", "u000002"])).await;
        assert!(has_embedding(&resp));
        assert_eq!(schema(&resp).0.len(), 10);
    }
    // Same Envoy processes all along: nothing restarted.
    for admin in [stack.admin_port, second.admin_port] {
        let info = ferry_integration_tests::http::raw(
            admin,
            b"GET /server_info HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .unwrap();
        assert!(info.contains("\"state\": \"LIVE\""), "{info}");
    }
    let metrics = cp.metrics();
    assert!(metrics.contains("ferry_xds_nacks_total 0"), "{metrics}");
    assert!(second.proc.is_running());
    assert!(stack.envoy.is_running());
}

#[test]
fn pushes_are_authenticated_validated_and_bad_repos_refused() {
    let dir = tempfile::tempdir().unwrap();
    let repo = example_repo_with(dir.path(), 20);
    let cp = ControlPlane::start(dir.path(), &repo);
    let good = cp.version();
    let snapshot_file = dir.path().join("snap.pb");
    let out = ferry(
        &["apply", "--output", snapshot_file.to_str().unwrap()],
        &repo,
    );
    assert!(out.status.success());
    let bytes = std::fs::read(&snapshot_file).unwrap();

    // Token missing or wrong: 401 JSON, nothing changes.
    for headers in [vec![], vec![("authorization", "Bearer nope")]] {
        let (code, text) = cp.request("POST", SNAPSHOT_PATH, &headers, &bytes);
        assert_eq!(code, 401, "{text}");
        assert_eq!(api_error(&text).error, ErrorCode::Unauthorized);
    }
    let auth = format!("Bearer {TOKEN}");
    let ok = [("authorization", auth.as_str())];
    let (code, text) = cp.request("POST", SNAPSHOT_PATH, &ok, &bytes);
    assert_eq!(code, 200, "{text}");
    let v: Pushed = serde_json::from_str(&text).unwrap();
    assert_eq!((v.version.as_str(), v.changed), (good.as_str(), false));

    // Not a snapshot: 400. A snapshot the filter would refuse: 422 naming the problem.
    let (code, text) = cp.request("POST", SNAPSHOT_PATH, &ok, b"\xff\xff\xff");
    assert_eq!(code, 400, "{text}");
    assert_eq!(api_error(&text).error, ErrorCode::BadSnapshot);
    let invalid = invalid_snapshot();
    let (code, text) = cp.request("POST", SNAPSHOT_PATH, &ok, &invalid);
    assert_eq!(code, 422, "{text}");
    let v = api_error(&text);
    assert_eq!(v.error, ErrorCode::InvalidSnapshot);
    assert!(v.message.contains("unknown service 'nope'"), "{v:?}");
    assert_eq!(cp.version(), good, "the last good snapshot stays");
    assert!(last_refused(&cp.status()).contains("unknown service"));

    bad_repos_are_refused_and_new_fingerprints_held_back(&cp, &repo);

    // The xDS bootstrap is a valid Envoy config.
    let config = dir.path().join("xds.yaml");
    run(Command::new(bin("ferry"))
        .args(["envoy-config"])
        .arg(&repo)
        .args(["--xds", "-o"])
        .arg(&config));
    if let Err(out) = envoy_validate(&config) {
        panic!("{out}");
    }
}

/// The repo's changes, by the CLI and by the control plane's watcher.
fn bad_repos_are_refused_and_new_fingerprints_held_back(cp: &ControlPlane, repo: &Path) {
    let good = cp.version();
    // An invalid repo is refused by the CLI before anything is pushed.
    let path = repo.join("ferry.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        yaml.replace("service: realtime_scoring", "service: nope"),
    )
    .unwrap();
    let url = cp.url();
    let out = ferry(&["apply", "--push", &url, "--token", TOKEN], repo);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nope"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("pushed"));
    // The watcher read the same broken file: refused, last good kept.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(cp.version(), good);
    // A change that keeps every fingerprint (a TTL) goes out from the file by itself; one
    // that changes a fingerprint is held back until materialized and pushed.
    std::fs::write(&path, yaml.replace("ttl: 30d", "ttl: 31d")).unwrap();
    let start = Instant::now();
    while cp.version() == good && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let ttl_version = cp.version();
    assert_ne!(ttl_version, good, "TTL change applied from the file");
    std::fs::write(&path, v1(yaml.replace("ttl: 30d", "ttl: 31d"))).unwrap();
    // The watcher reads the file at its own pace (a busy machine delays it): wait for its
    // refusal, bounded, rather than for a fixed time.
    let start = Instant::now();
    let mut refused = last_refused(&cp.status());
    while !refused.contains("materialized") && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
        refused = last_refused(&cp.status());
    }
    assert!(refused.contains("materialized"), "{refused}");
    assert_eq!(cp.version(), ttl_version);
}

fn api_error(text: &str) -> ApiError {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not an API error ({e}): {text}"))
}

fn last_refused(status: &Status) -> String {
    let refused = status.last_refused.as_ref();
    refused.expect("a refusal").error.clone()
}

/// A decodable ferry.v1.Snapshot that the filter refuses: a route naming an unknown service.
fn invalid_snapshot() -> Vec<u8> {
    fn field(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
        out.push(tag << 3 | 2);
        assert!(bytes.len() < 128);
        out.push(bytes.len() as u8);
        out.extend_from_slice(bytes);
    }
    let mut m = Vec::new();
    field(&mut m, 1, b"/nope");
    let mut route = Vec::new();
    field(&mut route, 1, b"r");
    field(&mut route, 2, &m);
    field(&mut route, 3, b"nope");
    let mut snap = Vec::new();
    field(&mut snap, 1, b"banking");
    field(&mut snap, 4, &route);
    field(&mut snap, 5, b"ferry_reader");
    snap
}

async fn refused_snapshot_is_nacked_reported_and_not_resent(runtime: Runtime) {
    let stack = xds_stack(runtime, 100);
    let cp = stack.cp();
    let good = cp.version();
    cp.wait_converged(&good, 1, Duration::from_secs(15));

    // Forced through the test-only unchecked path: the filter's on_configure refuses it.
    let auth = format!("Bearer {TOKEN}");
    let (code, text) = cp.request(
        "POST",
        SNAPSHOT_PATH,
        &[("authorization", &auth), (UNCHECKED_HEADER, "1")],
        &invalid_snapshot(),
    );
    assert_eq!(code, 200, "{text}");
    let bad = serde_json::from_str::<Pushed>(&text).unwrap().version;
    let start = Instant::now();
    let (node, nack) = loop {
        let s = cp.status();
        let node = s.nodes[0].clone();
        match &node.last_nack {
            Some(nack) if nack.version == bad => break (node.clone(), nack.clone()),
            _ => {}
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no NACK: {s:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        node.acked_version.as_deref(),
        Some(good.as_str()),
        "Envoy keeps the last good one"
    );
    assert!(!nack.error.is_empty(), "{node:?}");
    assert!(!node.converged);

    // Not re-sent in a loop: the response count stays put.
    let sent = |s: &Status| {
        let types = &s.nodes[0].types;
        types.values().next().unwrap().responses_sent
    };
    let before = sent(&cp.status());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(sent(&cp.status()), before);
    assert!(
        cp.metrics().contains("ferry_xds_nacks_total 1\n"),
        "{}",
        cp.metrics()
    );

    // Envoy still enriches with the last good snapshot.
    let resp = post(stack.listen_port, STRICT, body(&["u000001"])).await;
    assert_eq!(schema(&resp).0.len(), 9);

    // A good snapshot afterwards converges again.
    push(&stack, false);
    cp.wait_converged(&good, 1, Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_keeps_serving_without_the_control_plane_and_a_restart_holds_back_a_new_fingerprint()
{
    let mut stack = xds_stack(Runtime::Wasm, 100);
    let good = stack.cp().version();
    stack.cp().wait_converged(&good, 1, Duration::from_secs(15));
    stack.control_plane.as_mut().unwrap().proc.kill();

    for _ in 0..10 {
        let resp = post(stack.listen_port, STRICT, body(&["u000001", "u000002"])).await;
        assert_eq!(schema(&resp).0.len(), 9);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // While it is away the repo moves to v2, a new fingerprint whose vectors are not written
    // yet. The restarted control plane restores v1 (saved in its state directory) and holds
    // v2 back, as its file watcher would have: Envoy, reconnecting by itself, stays on v1.
    set_repo(&stack, |y| y.replace(NO_EMBEDDING, ALL_VIEWS));
    let resp = post(stack.listen_port, STRICT, body(&["u000003"])).await;
    assert!(!has_embedding(&resp), "still v1 while away");
    stack.control_plane.as_mut().unwrap().restart();
    let status = stack.cp().wait_converged(&good, 1, Duration::from_secs(15));
    let snapshot = status.snapshot.as_ref().unwrap();
    assert!(snapshot.restored_from.is_some(), "{status:?}");
    let refused = last_refused(&status);
    assert!(refused.contains("materialized"), "held back: {refused}");
    let resp = post(stack.listen_port, STRICT, body(&["u000003"])).await;
    assert!(
        !has_embedding(&resp),
        "v2 not served before its vectors exist"
    );

    // Its vectors written and pushed (the one command), Envoy catches up.
    let v2 = push(&stack, true);
    assert_ne!(v2, good);
    stack.cp().wait_converged(&v2, 1, Duration::from_secs(15));
    let resp = post(stack.listen_port, STRICT, body(&["u000003"])).await;
    assert!(has_embedding(&resp));
}

/// The first service's fingerprint in the current snapshot.
fn fingerprint(status: &Status) -> String {
    let snapshot = status.snapshot.as_ref().expect("a current snapshot");
    snapshot.services[0].fingerprint.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_change_under_steady_load_has_no_error_and_no_mix() {
    let stack = xds_stack(Runtime::Wasm, 300);
    let cp = stack.cp();
    let v1_version = cp.version();
    cp.wait_converged(&v1_version, 1, Duration::from_secs(15));
    let fp_v1 = fingerprint(&cp.status());

    // The load: one request every 20 ms for 20 s, each of 3 users, over keep-alive connections.
    let port = stack.listen_port;
    let load = tokio::spawn(async move {
        let mut seen = Vec::new();
        let mut conn = ferry_integration_tests::http::Conn::open(port).await;
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        let start = Instant::now();
        let mut i = 0usize;
        while start.elapsed() < Duration::from_secs(20) {
            tick.tick().await;
            i += 1;
            let users = [
                format!("u{:06}", i % 300),
                format!("u{:06}", (i * 7) % 300),
                format!("u{:06}", (i * 13) % 300),
            ];
            let b = json!({"instances": users.iter().map(|u| json!({"user_id": u})).collect::<Vec<_>>()}).to_string();
            let resp = conn.post("/v1/models/fraud-lenient:predict", b).await;
            seen.push((resp.status, resp.body.clone()));
        }
        seen
    });

    // Switch v1 → v2 (new fingerprint) at ~5 s and back at ~12 s, the one-command way.
    tokio::time::sleep(Duration::from_secs(5)).await;
    set_repo(&stack, |y| y.replace(NO_EMBEDDING, ALL_VIEWS));
    let v2_version = tokio::task::block_in_place(|| push(&stack, true));
    let fp_v2 = fingerprint(&cp.status());
    assert_ne!(fp_v1, fp_v2);
    tokio::time::sleep(Duration::from_secs(7)).await;
    set_repo(&stack, |y| y.replace(ALL_VIEWS, NO_EMBEDDING));
    assert_eq!(
        tokio::task::block_in_place(|| push(&stack, true)),
        v1_version
    );

    let seen = load.await.unwrap();
    assert!(seen.len() > 500, "steady rate: {}", seen.len());
    let (mut n1, mut n2) = (0, 0);
    for (status, raw) in &seen {
        assert_eq!(*status, 200, "{}", String::from_utf8_lossy(raw));
        let v: Json = serde_json::from_slice(raw).unwrap();
        let fp = v["ferry"]["fingerprint"].as_str().unwrap();
        let want = if fp == fp_v1 {
            9
        } else {
            assert_eq!(fp, fp_v2);
            10
        };
        if want == 9 {
            n1 += 1
        } else {
            n2 += 1
        }
        for inst in v["instances"].as_array().unwrap() {
            let names = inst
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| k.contains("__"))
                .count();
            let embedding = inst.get("user_embedding__embedding").is_some();
            assert_eq!((names, embedding), (want, want == 10), "mixed schema: {v}");
        }
    }
    assert!(n1 > 0 && n2 > 0, "both schemas served: {n1} v1, {n2} v2");
    println!(
        "schema change under load: {} requests, 0 errors, {n1} v1 / {n2} v2",
        seen.len()
    );
    cp.wait_converged(&v1_version, 1, Duration::from_secs(5));
    drop(v2_version);
}

// The ECDS path for both builds of the filter: a hot update, and a snapshot the filter refuses.
each_runtime!(
    hot_update_reaches_two_envoys_without_a_restart,
    refused_snapshot_is_nacked_reported_and_not_resent,
);
