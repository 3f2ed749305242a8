//! Redis through Envoy's redis_proxy listener (`ferry envoy-config --redis-proxy-port`): the
//! vectors are written through the proxy (`ferry materialize --redis` at the listener), the
//! reader reads through it, and a request is enriched with the source's values; once with one
//! Redis behind the proxy, once with a 3-master Redis Cluster (`--redis-cluster`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ferry_integration_tests::http::{get_ok, raw};
use ferry_integration_tests::process::tcp_open;
use ferry_integration_tests::{bin, free_port, run, start_model, wasm, Proc, RedisServer};

use super::support::{
    assert_enriched_like_the_source, envoy_config, small_repo, start_envoy, start_reader, stat,
};

/// Redis behind Envoy's redis_proxy: the vectors are written through the proxy, the reader
/// reads through it, and the request is enriched with the source's values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_reaches_redis_through_envoys_redis_proxy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = small_repo(dir.path());
    let redis = RedisServer::start();
    let upstream = format!("127.0.0.1:{}", redis.port);
    let (mut envoy, ports) = proxy_envoy(dir.path(), &repo, &["--redis-upstream", &upstream]);
    let [_, admin_port, reader_port, _, proxy_port] = ports;
    let proxy_url = materialize_through(&repo, proxy_port);
    // Materialize writes each vector with SET NX GET (an existing one through a
    // compare-and-set script, EVALSHA): a fresh Redis takes SETs only.
    let written = stat(admin_port, "redis.ferry_redis.command.set.total");
    assert!(written > 0, "materialize did not write through the proxy");

    let _running = enriched_through(dir.path(), &repo, &proxy_url, ports).await;
    // Redis gone behind the proxy: Envoy still answers PING, but the reader's health check
    // reads a key, so it says Redis is down (within its one-second cache, and a little more).
    assert!(get_ok(reader_port, "/healthz"));
    let mut redis = redis;
    redis.stop();
    let start = Instant::now();
    while get_ok(reader_port, "/healthz") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the reader's /healthz still says ok with Redis down behind the proxy"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(envoy.is_running());
}

/// One Redis Cluster node: a cluster-enabled redis-server in its own folder, killed on drop.
fn cluster_node(dir: &Path, name: &'static str, port: u16) -> Proc {
    let home = dir.join(name);
    std::fs::create_dir_all(&home).expect("node dir");
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--cluster-enabled",
            "yes",
        ])
        // The bus port is given, as `RedisCluster` gives it: the default (port + 10000) lands
        // in the ephemeral range, where an outgoing connection may hold it (seen in CI).
        .args(["--cluster-port", &free_port().to_string()])
        .arg("--cluster-config-file")
        .arg(home.join("nodes.conf"))
        .current_dir(&home);
    let mut node = Proc::start(name, cmd, dir);
    node.wait_ready(|| tcp_open(port), "redis cluster node");
    node
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    run(Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args))
}

/// Waits (bounded) until `ready` holds, failing with `what`.
fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_reaches_a_redis_cluster_through_envoys_redis_proxy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = small_repo(dir.path());
    let ports = [free_port(), free_port(), free_port()];
    let _nodes: Vec<Proc> = ["redis-a", "redis-b", "redis-c"]
        .into_iter()
        .zip(ports)
        .map(|(name, port)| cluster_node(dir.path(), name, port))
        .collect();
    let mut create = vec!["--cluster".to_owned(), "create".to_owned()];
    create.extend(ports.iter().map(|p| format!("127.0.0.1:{p}")));
    create.extend(["--cluster-replicas", "0", "--cluster-yes"].map(str::to_owned));
    run(Command::new("redis-cli").args(&create));
    wait_for("cluster_state:ok on every node", || {
        ports
            .iter()
            .all(|&p| redis_cli(p, &["cluster", "info"]).contains("cluster_state:ok"))
    });

    // One seed: Envoy discovers the other masters from it.
    let seed = format!("127.0.0.1:{}", ports[0]);
    let upstream = ["--redis-cluster", "--redis-upstream", &seed];
    let (_envoy, proxy_ports) = proxy_envoy(dir.path(), &repo, &upstream);
    let [_, admin_port, _, _, proxy_port] = proxy_ports;
    wait_for("Envoy to discover the three masters", || {
        let list = raw(
            admin_port,
            b"GET /clusters HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n",
        )
        .unwrap_or_default();
        ports.iter().all(|p| {
            list.contains(&format!(
                "ferry_redis::127.0.0.1:{p}::health_flags::healthy"
            ))
        })
    });

    let proxy_url = materialize_through(&repo, proxy_port);
    // The vectors landed on every master (keys spread by slot), not on the seed alone.
    for p in ports {
        let keys: u64 = redis_cli(p, &["dbsize"]).trim().parse().expect("dbsize");
        assert!(keys > 0, "master 127.0.0.1:{p} holds no vector");
    }

    let _running = enriched_through(dir.path(), &repo, &proxy_url, proxy_ports).await;

    // Envoy answers SCAN over the shards with one [cursor, keys] pair per shard: `--prune`
    // refuses that shape and deletes nothing.
    let sizes = || ports.map(|p| redis_cli(p, &["dbsize"]));
    let before = sizes();
    let out = Command::new(bin("ferry"))
        .arg("materialize")
        .arg(&repo)
        .args(["--redis", &proxy_url, "--prune"])
        .output()
        .expect("run ferry");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("refusing to prune: SCAN answered in a shape other than [cursor, keys]"),
        "{stderr}"
    );
    assert_eq!(sizes(), before);
}

/// A static bootstrap with a redis_proxy listener: listener, admin, reader, model and proxy
/// ports, then how the proxy finds Redis.
/// `ferry materialize` of `repo` through the proxy at `proxy_port`: the proxy's URL.
fn materialize_through(repo: &Path, proxy_port: u16) -> String {
    let proxy_url = format!("redis://127.0.0.1:{proxy_port}");
    run(Command::new(bin("ferry"))
        .arg("materialize")
        .arg(repo)
        .args(["--redis", &proxy_url]));
    proxy_url
}

/// Starts the reader on `proxy_url` and the demo model, then checks that a request is enriched
/// like the source with one MGET through the proxy; `ports` as [`proxy_config`] takes them.
/// The reader and the model, to keep running.
async fn enriched_through(dir: &Path, repo: &Path, proxy_url: &str, ports: [u16; 5]) -> [Proc; 2] {
    let [listen_port, admin_port, reader_port, model_port, _] = ports;
    let reader = start_reader(dir, reader_port, proxy_url);
    let mut model = start_model(dir, model_port);
    model.wait_ready(|| tcp_open(model_port), "demo model");
    let before = stat(admin_port, "redis.ferry_redis.command.mget.total");
    assert_enriched_like_the_source(listen_port, repo).await;
    let after = stat(admin_port, "redis.ferry_redis.command.mget.total");
    assert_eq!(
        after,
        before + 1,
        "the reader's MGET went through the proxy"
    );
    [reader, model]
}

/// An Envoy with a redis_proxy listener in front of `upstream`, on free ports (listen, admin,
/// reader, model, proxy): the process and the ports.
fn proxy_envoy(dir: &Path, repo: &Path, upstream: &[&str]) -> (Proc, [u16; 5]) {
    let ports = [(); 5].map(|_| free_port());
    let config = dir.join("envoy.yaml");
    proxy_config(repo, &config, ports, upstream);
    (start_envoy(dir, &config, ports[1]), ports)
}

/// `ports`: listen, admin, reader, model, proxy.
fn proxy_config(repo: &Path, config: &Path, ports: [u16; 5], upstream: &[&str]) {
    let [listen, admin, reader, model, proxy] = ports.map(|p| p.to_string());
    let wasm = wasm().display().to_string();
    let mut args = vec![
        "--wasm",
        wasm.as_str(),
        "--listen-port",
        listen.as_str(),
        "--admin-port",
        admin.as_str(),
        "--reader-port",
        reader.as_str(),
        "--model-port",
        model.as_str(),
        "--redis-proxy-port",
        proxy.as_str(),
    ];
    args.extend_from_slice(upstream);
    envoy_config(repo, config, &args);
}
