//! Ferry at a real Envoy Gateway: Envoy Gateway v1.9.1, built from its Go module
//! (scripts/envoy-gateway-build.sh), runs in standalone mode (file resource provider, host
//! infrastructure: the project's Envoy 1.40 as its child process) on the project's
//! deploy/envoy-gateway files, with only addresses, paths, secrets and the EnvoyProxy's
//! provider changed, plus what standalone mode needs (the GatewayClass, a patch of Envoy
//! Gateway's own `wasm_cluster`; gateway/files.rs says which and why). Redis, the reader,
//! `ferry serve` (TLS, signed snapshots) and the demo model run beside it, all inside
//! namespaces of the test's own (gateway/netns.rs): the Kubernetes names the files use resolve
//! to loopback there.
//!
//! 1. Wasm: Envoy Gateway pulls the filter's OCI image from a registry on loopback
//!    (go-containerregistry's, the image pushed by skopeo from `ferry oci-image`'s layout),
//!    serves it to its Envoy through its Wasm cache (mTLS, port 18002), and the filter pulls its
//!    snapshot from `ferry serve` over TLS through the patched `ferry_control_plane` cluster: a
//!    KServe v1 request through the Gateway reaches the model enriched with the store's values.
//! 2. A snapshot pushed to `ferry serve` (`ferry apply --push`) reaches that Envoy by the pull,
//!    without a restart (same Envoy process).
//! 3. Native: the Wasm EnvoyExtensionPolicy replaced by dynamic-module-policy.yaml (the module
//!    from the EnvoyProxy's allowlist, pulling its signed snapshot from `ferry serve` over TLS
//!    through the same patched cluster); Envoy Gateway hands Envoy the new filter over xDS, same
//!    process, and requests come out enriched by the native module.
//! 4. Push reached both: a snapshot pushed to `ferry serve` reaches the native module by its
//!    pull too, same policy, same Envoy process (the Wasm filter's in step 2).
//!
//! Not run by `make test` (ignored there): `make test-gateway` builds Envoy Gateway (cached) and
//! runs it. Needs root (namespaces).

use std::process::Command;
use std::time::{Duration, Instant};

use ferry_integration_tests::control_plane::{READ_TOKEN, TOKEN};
use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::http::Response;
use ferry_integration_tests::{bin, free_port, root, run, wasm, Proc};
use serde_json::Value as Json;

#[path = "gateway/eg.rs"]
mod eg;
#[path = "gateway/files.rs"]
mod files;
#[path = "gateway/netns.rs"]
mod netns;
#[path = "gateway/stack.rs"]
mod stack;
#[path = "istio/support.rs"]
#[allow(dead_code)]
mod support;

use stack::{CP_NAME, CP_PORT};
use support::{check_unheld, error_of, instances, post};

/// The names the files use, resolved to loopback inside the test's namespaces.
const HOSTS: &str = "127.0.0.1 ferry-reader.ferry.svc.cluster.local \
ferry-control-plane.ferry.svc.cluster.local fraud-predictor.models.svc.cluster.local \
envoy-gateway.envoy-gateway-system.svc.cluster.local\n";
/// The Gateway's listener (host mode keeps the port as written).
const GATEWAY_PORT: u16 = 80;
const PREDICT: &str = "/v1/models/fraud:predict";
/// Each wait's bound: Envoy Gateway starts Envoy, fetches and serves the Wasm module, and
/// Envoy compiles it, on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "make test-gateway: builds Envoy Gateway (cached) and runs it as root in namespaces"]
async fn a_real_envoy_gateway_loads_ferry_and_requests_come_out_enriched() {
    // Built (make test-gateway) before anything starts.
    eg::binary();
    eg::sibling("registry");
    if netns::rerun_inside("a_real_envoy_gateway_loads_ferry_and_requests_come_out_enriched") {
        return;
    }
    let started = Instant::now();
    let dir = KeptOnFailure(Some(tempfile::tempdir().expect("tempdir")));
    let path = dir.path();
    let d = path.as_path();
    netns::set_up(d, HOSTS);

    // Redis, the example repo materialized, the reader, the model, ferry serve.
    let stack = stack::Stack::start(d);
    let (repo, redis) = (&stack.repo, &stack.redis);

    // The filter's image on a registry on loopback.
    let (image, _registry) = push_image(d);

    // Envoy Gateway on the project's files.
    let gw = eg::Gateway::start(d);
    let module = root().join("target/native/libferry_native.so");
    gw.apply(
        "standalone.yaml",
        &files::standalone(&gw.envoy_certs.display().to_string()),
    );
    gw.apply(
        "gateway.yaml",
        &files::gateway(
            stack.model_port,
            &module.display().to_string(),
            eg::ENVOY_VERSION,
        ),
    );
    let tls_dir = stack.tls_dir.display().to_string();
    let secrets = files::Wasm {
        image: &image,
        read_token: READ_TOKEN,
        key: &stack.key_entry,
        tls_dir: &tls_dir,
    };
    let (wasm_policy, patch) = files::extension_policy(&secrets);
    gw.apply(
        "extension-policy.yaml",
        &format!("{wasm_policy}---\n{patch}"),
    );

    // 1. Wasm: enriched with the store's values.
    let store = Store::load_repo(repo);
    let users = [
        Entity::User("u000001".into()),
        Entity::User("u000002".into()),
    ];
    let resp = until(&gw, "the Wasm filter enriches through the Gateway", |r| {
        r.status == 200 && r.header("x-ferry-status") == Some("ok")
    })
    .await;
    check_unheld(&resp, Some("ok"));
    store.check_instances(Service::RealtimeScoring, &resp.json(), &users);
    let envoy = gw.envoy_pid().expect("Envoy Gateway's Envoy runs");
    let unknown = post(GATEWAY_PORT, PREDICT, instances(&["nobody"])).await;
    assert_eq!(error_of(&unknown), (404, "entity_not_found".into()));
    println!(
        "gateway: Wasm enriched (OCI image through Envoy Gateway's cache, snapshot pulled over TLS, signed) at {:?}",
        started.elapsed()
    );

    // 2. A push reaches the Gateway's Envoy by the pull, no restart.
    let yaml = repo.join("ferry.yaml");
    let text = std::fs::read_to_string(&yaml).expect("ferry.yaml");
    let text = files::replace_once(
        &text,
        "    on_missing_entity: reject      # an unknown user is answered with a JSON error\n",
        "    on_missing_entity: \"null\"\n",
    );
    std::fs::write(&yaml, text).expect("ferry.yaml");
    push(repo, &stack, &redis.url());
    let resp = until_body(
        &gw,
        &["nobody"],
        "the pushed snapshot reaches the Wasm filter",
        |r| r.status == 200 && r.header("x-ferry-status") == Some("partial"),
    )
    .await;
    assert_eq!(resp.json()["instances"][0]["user_profile__age"], Json::Null);
    assert_eq!(gw.envoy_pid(), Some(envoy), "the same Envoy process");
    println!(
        "gateway: push reached the Wasm filter at {:?}",
        started.elapsed()
    );

    // 3. Native: the dynamic module's policy in place of the Wasm one; the module pulls the
    // snapshot the Wasm filter was last given.
    gw.apply("extension-policy.yaml", &patch);
    gw.apply(
        "dynamic-module-policy.yaml",
        &files::dynamic_module_policy(&secrets),
    );
    let resp = until(&gw, "the native module enriches through the Gateway", |r| {
        r.status == 200 && r.header("x-ferry-status") == Some("ok") && native(r)
    })
    .await;
    store.check_instances(Service::RealtimeScoring, &resp.json(), &users);
    assert_eq!(gw.envoy_pid(), Some(envoy), "the same Envoy process");
    println!(
        "gateway: native enriched (the module's snapshot pulled over TLS, signed) at {:?}",
        started.elapsed()
    );

    // 4. A push reaches the native module by its pull too, same policy, same Envoy process (the
    // repo back to rejecting an unknown user).
    let text = std::fs::read_to_string(&yaml).expect("ferry.yaml");
    let text = files::replace_once(
        &text,
        "    on_missing_entity: \"null\"\n    on_stale:",
        "    on_missing_entity: reject\n    on_stale:",
    );
    std::fs::write(&yaml, text).expect("ferry.yaml");
    push(repo, &stack, &redis.url());
    let resp = until_body(
        &gw,
        &["nobody"],
        "the pushed snapshot reaches the module",
        |r| r.status == 404,
    )
    .await;
    assert_eq!(error_of(&resp), (404, "entity_not_found".into()));
    assert_eq!(gw.envoy_pid(), Some(envoy), "the same Envoy process");
    println!(
        "gateway: push reached both (the Wasm filter in step 2, the native module now) at {:?}",
        started.elapsed()
    );
    drop(stack);
}

/// The test's directory (logs, configs, Envoy Gateway's files): removed when the test passes,
/// kept and named when it fails, or always with FERRY_GATEWAY_KEEP=1. Dropped last: every
/// process has stopped by then.
struct KeptOnFailure(Option<tempfile::TempDir>);

impl KeptOnFailure {
    fn path(&self) -> std::path::PathBuf {
        self.0
            .as_ref()
            .map(|d| d.path().to_owned())
            .unwrap_or_default()
    }
}

impl Drop for KeptOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("FERRY_GATEWAY_KEEP").is_some() {
            if let Some(d) = self.0.take() {
                eprintln!("gateway: logs and files kept in {}", d.keep().display());
            }
        }
    }
}

/// `ferry apply --push` of the repo to `ferry serve` over TLS, as an operator runs it.
fn push(repo: &std::path::Path, stack: &stack::Stack, redis_url: &str) {
    run(Command::new(bin("ferry"))
        .arg("apply")
        .arg(repo)
        .args(["--push", &format!("https://{CP_NAME}:{CP_PORT}")])
        .arg("--ca")
        .arg(&stack.ca_file)
        .args(["--token", TOKEN, "--redis", redis_url])
        .env_remove("FERRY_PUSH_TOKEN"));
}

/// Whether the answer went through the native module rather than the Wasm filter: the module
/// holds the request's headers while it reads the body (its policy says it may), so the model
/// got the `x-ferry-status` request header (the Wasm filter, which Envoy Gateway cannot give
/// `allow_on_headers_stop_iteration`, has sent the headers on before it reads the body).
fn native(resp: &Response) -> bool {
    resp.header("x-echo-headers").is_some()
        && resp.upstream_headers().get("x-ferry-status") == Some(&Json::from("ok"))
}

/// Posts two known users until `done` holds, up to [`WAIT`].
async fn until(gw: &eg::Gateway, what: &str, done: impl Fn(&Response) -> bool) -> Response {
    until_body(gw, &["u000001", "u000002"], what, done).await
}

async fn until_body(
    gw: &eg::Gateway,
    users: &[&str],
    what: &str,
    done: impl Fn(&Response) -> bool,
) -> Response {
    let start = Instant::now();
    let mut last = String::from("no answer");
    loop {
        if let Some(resp) = try_post(users).await {
            if done(&resp) {
                return resp;
            }
            last = format!("{} {}", resp.status, String::from_utf8_lossy(&resp.body));
        }
        if start.elapsed() > WAIT {
            panic!(
                "{what}: not within {WAIT:?}; last answer: {last}\nEnvoy Gateway's log (tail):\n{}",
                tail(&gw.proc.log_text(), 60)
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One POST through the Gateway, or None while nothing listens yet.
async fn try_post(users: &[&str]) -> Option<Response> {
    if !ferry_integration_tests::process::tcp_open(GATEWAY_PORT) {
        return None;
    }
    let body = instances(users);
    let task = tokio::spawn(async move { post(GATEWAY_PORT, PREDICT, body).await });
    match tokio::time::timeout(Duration::from_secs(10), task).await {
        Ok(done) => done.ok(),
        Err(_) => panic!("a request through the Gateway got no answer within 10 s"),
    }
}

/// The last `n` lines of a log, without Envoy's access log lines.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("{\":authority\""))
        .collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `ferry oci-image`'s layout pushed with skopeo to go-containerregistry's registry on
/// loopback (plain HTTP: go-containerregistry speaks HTTP to a 127.0.0.1 registry, as Envoy
/// Gateway's fetcher does): the image's reference, and the registry (Envoy Gateway pulls when
/// it reads the policy).
fn push_image(d: &std::path::Path) -> (String, Proc) {
    let layout = d.join("oci");
    run(Command::new(bin("ferry"))
        .arg("oci-image")
        .arg("--wasm")
        .arg(wasm())
        .arg("-o")
        .arg(&layout)
        .args(["--tag", "0.1.0"]));
    let port = free_port();
    let mut cmd = Command::new(eg::sibling("registry"));
    cmd.args(["-port", &port.to_string()]);
    let mut registry = Proc::start("registry", cmd, d);
    registry.wait_ready(
        || ferry_integration_tests::process::tcp_open(port),
        "the OCI registry",
    );
    let image = format!("127.0.0.1:{port}/ferry/ferry-filter:0.1.0");
    run(Command::new("skopeo")
        .args(["copy", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:0.1.0", layout.display()))
        .arg(format!("docker://{image}")));
    (image, registry)
}
