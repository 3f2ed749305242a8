//! What the production-config tests share: a small example repo, rendering with `ferry
//! envoy-config`, starting Envoy and the reader, Envoy's stats, and the check that a request is
//! enriched with the source's values.

use std::path::Path;
use std::process::Command;

use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::http::{get_ok, post, raw};
use ferry_integration_tests::{bin, envoy_bin, example_repo_with, run, Proc};
use serde_json::json;

pub fn small_repo(dir: &Path) -> std::path::PathBuf {
    example_repo_with(dir, 100)
}

pub fn envoy_config(repo: &Path, out: &Path, args: &[&str]) {
    run(Command::new(bin("ferry"))
        .arg("envoy-config")
        .arg(repo)
        .args(args)
        .arg("-o")
        .arg(out));
}

pub fn start_reader(dir: &Path, port: u16, redis_url: &str) -> Proc {
    let mut cmd = Command::new(bin("ferry-reader"));
    cmd.args([
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--redis",
        redis_url,
    ]);
    let mut reader = Proc::start("reader", cmd, dir);
    reader.wait_ready(|| get_ok(port, "/healthz"), "reader /healthz");
    reader
}

pub fn start_envoy(dir: &Path, config: &Path, admin_port: u16) -> Proc {
    let mut cmd = Command::new(envoy_bin());
    cmd.arg("-c")
        .arg(config)
        .args(["--disable-hot-restart", "--log-level", "warn"]);
    let mut envoy = Proc::start("envoy", cmd, dir);
    envoy.wait_ready(|| get_ok(admin_port, "/ready"), "envoy /ready");
    envoy
}

pub async fn assert_enriched_like_the_source(listen_port: u16, repo: &Path) {
    let body = json!({"instances": [{"user_id": "u000001", "amount": 120.5}]}).to_string();
    let resp = post(listen_port, "/v1/models/fraud:predict", body).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    assert_eq!(resp.upstream_headers()["x-ferry-status"], "ok");
    let counts = Store::load_repo(repo).check_instances(
        Service::RealtimeScoring,
        &resp.json(),
        &[Entity::User("u000001".into())],
    );
    assert_eq!(counts.get("PRESENT"), Some(&10), "{counts:?}");
}

/// A counter of Envoy's admin `/stats`, 0 when absent.
pub fn stat(admin_port: u16, name: &str) -> u64 {
    let text = raw(
        admin_port,
        format!(
            "GET /stats?filter=^{name}$ HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .expect("admin /stats");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
