//! The Envoy configs `ferry envoy-config` renders for production (issue #11): every variant
//! (host names, IPv6, xDS, the Redis proxy) passes the real Envoy's `--mode validate`; a reader
//! named by a host name serves a request; the active health check marks a stopped reader
//! `/failed_active_hc` and a restarted one healthy again; the filter's failed calls feed outlier
//! detection; and (`envoy_deploy/redis_proxy.rs`) the reader reaches Redis, one server or a
//! 3-master Redis Cluster, through Envoy's redis_proxy listener, with values equal to the source.

#[path = "envoy_deploy/redis_proxy.rs"]
mod redis_proxy;
#[path = "envoy_deploy/support.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use ferry_integration_tests::http::{post, raw};
use ferry_integration_tests::process::tcp_open;
use ferry_integration_tests::{
    bin, envoy_validate, free_port, run, start_model, wasm, Proc, RedisServer,
};
use serde_json::json;
use support::{
    assert_enriched_like_the_source, envoy_config, small_repo, start_envoy, start_reader, stat,
};

/// Waits for the health check to change a host's flags: generous (checks every 2 s, 3 failures
/// to turn unhealthy), a bound, not a measurement.
const HEALTH_WAIT: Duration = Duration::from_secs(60);

#[test]
fn envoy_validates_every_rendered_variant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = small_repo(dir.path());
    let wasm = wasm().display().to_string();
    let variants: &[&[&str]] = &[
        &["--wasm", &wasm],
        &[
            "--wasm",
            &wasm,
            "--reader-address",
            "ferry-reader.ml.svc.cluster.local:8090",
            "--model-address",
            "model:8080",
            "--reader-protocol",
            "http2",
        ],
        &["--wasm", &wasm, "--reader-address", "[::1]:8090"],
        &[
            "--xds",
            "--xds-address",
            "control-plane:18000",
            "--reader-address",
            "reader:8090",
            "--model-address",
            "10.1.2.3:80",
        ],
        &["--wasm", &wasm, "--redis-proxy-port", "6380"],
        &[
            "--xds",
            "--redis-proxy-port",
            "6380",
            "--redis-upstream",
            "redis-a:6379",
            "--redis-upstream",
            "10.0.0.2:6379",
        ],
        &[
            "--wasm",
            &wasm,
            "--redis-proxy-port",
            "6380",
            "--redis-cluster",
            "--redis-upstream",
            "redis-0.redis:6379",
            "--redis-upstream",
            "redis-1.redis:6379",
        ],
    ];
    for (i, args) in variants.iter().enumerate() {
        let out = dir.path().join(format!("variant-{i}.yaml"));
        envoy_config(&repo, &out, args);
        if let Err(log) = envoy_validate(&out) {
            panic!("envoy --mode validate refused {args:?}:\n{log}");
        }
    }
    assert_eq!(variants.len(), 7);
}

#[test]
fn garbage_addresses_are_refused_by_the_cli() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = small_repo(dir.path());
    for (args, want) in [
        (
            ["--reader-address", "reader"],
            "'reader' is not HOST:PORT (e.g. reader:8090, 10.0.0.5:8090, [::1]:8090)",
        ),
        (
            ["--model-address", "model_1:8080"],
            "'model_1' is neither an IPv4 address nor a host name",
        ),
        (
            ["--xds-address", "cp:99999"],
            "port '99999' is not a number from 1 to 65535",
        ),
        (
            ["--reader-address", "10.0.0.300:8090"],
            "'10.0.0.300' is neither an IPv4 address nor a host name",
        ),
    ] {
        let out = Command::new(bin("ferry"))
            .arg("envoy-config")
            .arg(&repo)
            .arg("--xds")
            .args(args)
            .output()
            .expect("run ferry");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: no config on stdout");
    }
}

/// Redis with the repo materialized, the reader, the model and an Envoy whose reader cluster is
/// `localhost:PORT` (a host name: STRICT_DNS).
struct Deployment {
    dir: tempfile::TempDir,
    repo: std::path::PathBuf,
    redis: RedisServer,
    reader: Proc,
    reader_port: u16,
    _model: Proc,
    envoy: Proc,
    listen_port: u16,
    admin_port: u16,
}

fn deploy_with_reader_host_name() -> Deployment {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = small_repo(dir.path());
    let redis = RedisServer::start();
    run(Command::new(bin("ferry"))
        .arg("materialize")
        .arg(&repo)
        .args(["--redis", &redis.url()]));
    let (reader_port, model_port) = (free_port(), free_port());
    let reader = start_reader(dir.path(), reader_port, &redis.url());
    let mut model = start_model(dir.path(), model_port);
    model.wait_ready(|| tcp_open(model_port), "demo model");

    let (listen_port, admin_port) = (free_port(), free_port());
    let config = dir.path().join("envoy.yaml");
    envoy_config(
        &repo,
        &config,
        &[
            "--wasm",
            &wasm().display().to_string(),
            "--listen-port",
            &listen_port.to_string(),
            "--admin-port",
            &admin_port.to_string(),
            "--reader-address",
            &format!("localhost:{reader_port}"),
            "--model-address",
            &format!("localhost:{model_port}"),
        ],
    );
    let envoy = start_envoy(dir.path(), &config, admin_port);
    Deployment {
        dir,
        repo,
        redis,
        reader,
        reader_port,
        _model: model,
        envoy,
        listen_port,
        admin_port,
    }
}

/// Envoy's admin `/clusters` text.
fn clusters(admin_port: u16) -> String {
    raw(
        admin_port,
        b"GET /clusters HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
    )
    .expect("admin /clusters")
}

/// The reader host's `health_flags` line value, e.g. `healthy` or `/failed_active_hc`.
fn reader_health(admin_port: u16, reader_port: u16) -> Option<String> {
    let prefix = format!("ferry_reader::127.0.0.1:{reader_port}::health_flags::");
    clusters(admin_port)
        .lines()
        .find_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
}

/// Waits (bounded) until the reader host's flags are `want`; the last flags seen otherwise.
fn wait_health(envoy: &mut Proc, d: (u16, u16), want: &str) -> Result<(), Option<String>> {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < HEALTH_WAIT {
        last = reader_health(d.0, d.1);
        if last.as_deref() == Some(want) {
            return Ok(());
        }
        assert!(envoy.is_running(), "envoy exited:\n{}", envoy.log_text());
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_named_by_host_name_enriches_a_request() {
    let mut d = deploy_with_reader_host_name();
    // STRICT_DNS resolved `localhost` to the loopback address the reader listens on.
    wait_health(&mut d.envoy, (d.admin_port, d.reader_port), "healthy").unwrap_or_else(|last| {
        panic!(
            "the reader never turned healthy (last flags {last:?}):\n{}",
            clusters(d.admin_port)
        )
    });
    let list = clusters(d.admin_port);
    assert!(
        list.contains(&format!(
            "ferry_reader::127.0.0.1:{}::hostname::localhost",
            d.reader_port
        )),
        "{list}"
    );
    assert_enriched_like_the_source(d.listen_port, &d.repo).await;
}

#[test]
fn the_health_check_marks_a_stopped_reader_unhealthy_and_a_restarted_one_healthy() {
    let mut d = deploy_with_reader_host_name();
    let ports = (d.admin_port, d.reader_port);
    wait_health(&mut d.envoy, ports, "healthy")
        .unwrap_or_else(|last| panic!("never healthy (last flags {last:?})"));
    d.reader.kill();
    wait_health(&mut d.envoy, ports, "/failed_active_hc").unwrap_or_else(|last| {
        panic!(
            "the stopped reader was not marked /failed_active_hc (last flags {last:?}):\n{}",
            clusters(d.admin_port)
        )
    });
    d.reader = start_reader(d.dir.path(), d.reader_port, &d.redis.url());
    wait_health(&mut d.envoy, ports, "healthy").unwrap_or_else(|last| {
        panic!("the restarted reader did not turn healthy again (last flags {last:?})")
    });
}

/// The filter's dispatched calls feed outlier detection: with Redis gone the reader answers 503
/// and Envoy detects consecutive gateway failures; a lone reader is never ejected (max 50%).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filters_reader_errors_feed_outlier_detection() {
    let mut d = deploy_with_reader_host_name();
    let detected =
        "cluster.ferry_reader.outlier_detection.ejections_detected_consecutive_gateway_failure";
    assert_eq!(stat(d.admin_port, detected), 0);
    d.redis.stop();
    let body = json!({"instances": [{"user_id": "u000001", "amount": 1.0}]}).to_string();
    for _ in 0..6 {
        let resp = post(d.listen_port, "/v1/models/fraud:predict", body.clone()).await;
        assert_eq!(resp.status, 503, "{}", String::from_utf8_lossy(&resp.body));
    }
    assert!(stat(d.admin_port, "cluster.ferry_reader.upstream_rq_503") >= 6);
    assert!(
        stat(d.admin_port, detected) >= 1,
        "no gateway failure detected"
    );
    assert!(
        stat(
            d.admin_port,
            "cluster.ferry_reader.outlier_detection.ejections_overflow"
        ) >= 1
    );
    assert_eq!(
        stat(
            d.admin_port,
            "cluster.ferry_reader.outlier_detection.ejections_enforced_total"
        ),
        0,
        "a lone reader is never ejected"
    );
    assert!(d.envoy.is_running());
}
