//! The integration harness: starts a whole Ferry stack (Redis, reader, demo model, Envoy with
//! the built filter) as real processes on free loopback ports, in a temp dir, and stops it on
//! drop. Binaries come from `target/debug` (override: FERRY_BIN_DIR), Envoy from `.venv`
//! (override: FERRY_ENVOY), the filter from `target/wasm32-wasip1/release` (Wasm) or
//! `target/native/libferry_native.so` (native, [`Runtime`]).

pub mod book;
pub mod client_script;
pub mod control_plane;
pub mod data;
pub mod expected;
pub mod feast;
pub mod feast_registry;
pub mod http;
pub mod mitm;
pub mod pollers;
pub mod postgres;
pub mod process;
pub mod resp;
pub mod runtime;
pub mod secure;
pub mod tls;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

pub use control_plane::ControlPlane;
pub use ferry_test_support::redis::{RedisCluster, RedisServer, TlsFiles};
pub use process::{free_port, Graceful, Proc};
pub use runtime::Runtime;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

/// `path`, which a test needs built or installed; panics naming it and `how` to make it if it
/// is missing.
pub fn built(path: PathBuf, how: &str) -> PathBuf {
    assert!(path.exists(), "{} is missing: {how}", path.display());
    path
}

/// The path in environment variable `var`, else `default` under the workspace root.
fn overridable(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| root().join(default), PathBuf::from)
}

pub fn bin(name: &str) -> PathBuf {
    built(
        overridable("FERRY_BIN_DIR", "target/debug").join(name),
        "run `make test` (it builds the binaries first)",
    )
}

pub fn envoy_bin() -> PathBuf {
    built(
        overridable("FERRY_ENVOY", ".venv/bin/envoy"),
        "run `make test` (scripts/setup.sh installs Envoy)",
    )
}

/// The Python with Triton's clients (`tritonclient[http,grpc]`): .venv's, or FERRY_PYTHON.
pub fn python() -> PathBuf {
    built(
        overridable("FERRY_PYTHON", ".venv/bin/python3"),
        "run scripts/setup.sh (it installs tritonclient into .venv)",
    )
}

pub fn wasm() -> PathBuf {
    built(
        root().join("target/wasm32-wasip1/release/ferry_filter.wasm"),
        "run `make test` (it builds the filter)",
    )
}

/// Runs a command to completion, panicking with its output if it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

/// `us` microseconds since the Unix epoch as RFC 3339 UTC (`2026-01-02T03:04:05Z`, with a
/// six-digit fraction when `us` is not a whole second).
pub fn rfc3339(us: i64) -> String {
    ferry_core::civil::rfc3339(us, false)
}

/// The current time as RFC 3339, second precision (the data generator's anchor).
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    rfc3339(i64::try_from(secs).expect("seconds since 1970") * 1_000_000)
}

/// A test route as a YAML list item for [`Options::extra_routes`]: `/t/NAME` on the example's
/// `realtime_scoring`, KServe v1, keyed by `user_id`, with the route's own `key: value` lines.
/// Routes concatenate: `concat!(user_route!("a"), user_route!("b", "on_stale: reject"))`.
#[macro_export]
macro_rules! user_route {
    ($name:literal $(, $line:literal)* $(,)?) => {
        concat!(
            "\n  - name: ", $name,
            "\n    match: {path_prefix: /t/", $name, "}",
            "\n    service: realtime_scoring",
            "\n    format: kserve_v1",
            "\n    entity: {field: user_id}",
            $("\n    ", $line,)*
            "\n"
        )
    };
}

/// The test route `feast`: Feast's REST path on `realtime_scoring`, nulls for unknown users.
#[macro_export]
macro_rules! feast_route {
    () => {
        r#"  - name: feast
    match: {path_exact: /get-online-features}
    service: realtime_scoring
    format: feast_rest
    entity: {field: user_id}
    on_missing_entity: "null"
"#
    };
}

/// The test route `fraud-grpc`: Triton's gRPC `ModelInfer` on `realtime_scoring`, nulls for
/// unknown users.
#[macro_export]
macro_rules! fraud_grpc_route {
    () => {
        r#"  - name: fraud-grpc
    match: {path_prefix: /inference.GRPCInferenceService/ModelInfer}
    service: realtime_scoring
    format: kserve_v2_grpc
    entity: {field: user_id}
    on_missing_entity: "null"
"#
    };
}

/// What to change in the example repo for one test.
#[derive(Default)]
pub struct Options {
    /// YAML list items appended to the repo's `routes:` (the last section of ferry.yaml).
    pub extra_routes: &'static str,
    /// Entities to generate (default 10,000, the example's size).
    pub entities: Option<usize>,
    /// The filter's build Envoy runs (default Wasm).
    pub runtime: Runtime,
}

pub struct Stack {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    /// The stack's Redis; left empty when `redis_cluster` is used instead.
    pub redis: RedisServer,
    /// With [`Stack::start_on_redis_cluster`]: the Cluster `ferry materialize` and the reader use.
    pub redis_cluster: Option<RedisCluster>,
    /// With [`Stack::start_on_tls_redis`]: `redis` speaks TLS only, signed by this test CA.
    pub redis_tls: Option<TlsFiles>,
    pub reader: Proc,
    pub reader_port: u16,
    pub model: Proc,
    pub model_port: u16,
    pub envoy: Proc,
    pub listen_port: u16,
    pub admin_port: u16,
    pub envoy_config: PathBuf,
    /// The filter's build this stack's Envoy runs.
    pub runtime: Runtime,
    /// In xDS mode ([`Stack::start_xds`]): the control plane Envoy takes the filter config from.
    pub control_plane: Option<ControlPlane>,
}

/// An Envoy of an xDS stack.
pub struct Envoy {
    pub proc: Proc,
    pub listen_port: u16,
    pub admin_port: u16,
    pub config: PathBuf,
}

impl Stack {
    pub fn start(opts: Options) -> Stack {
        Stack::start_with(opts, |y| y, false, Backend::Single)
    }

    /// The same stack, with the repo's ferry.yaml rewritten by `edit` before anything reads it.
    pub fn start_edited(opts: Options, edit: impl FnOnce(String) -> String) -> Stack {
        Stack::start_with(opts, edit, false, Backend::Single)
    }

    /// The same stack on a three-master Redis Cluster: `ferry materialize` writes into it and
    /// the reader reads from it (`--redis-cluster`).
    pub fn start_on_redis_cluster(opts: Options) -> Stack {
        Stack::start_with(opts, |y| y, false, Backend::Cluster)
    }

    /// [`Stack::start_on_redis_cluster`] with the repo's ferry.yaml rewritten by `edit`.
    pub fn start_on_redis_cluster_edited(
        opts: Options,
        edit: impl FnOnce(String) -> String,
    ) -> Stack {
        Stack::start_with(opts, edit, false, Backend::Cluster)
    }

    /// The same stack on a TLS-only Redis (`rediss://` and `--redis-ca-file` for materialize and
    /// the reader).
    pub fn start_on_tls_redis(opts: Options) -> Stack {
        Stack::start_with(opts, |y| y, false, Backend::Tls)
    }

    /// The same stack, but Envoy takes the filter config from a `ferry serve` process (ECDS over
    /// ADS). `edit` rewrites the repo's ferry.yaml before anything reads it.
    pub fn start_xds(opts: Options, edit: impl FnOnce(String) -> String) -> Stack {
        Stack::start_with(opts, edit, true, Backend::Single)
    }

    fn start_with(
        opts: Options,
        edit: impl FnOnce(String) -> String,
        xds: bool,
        backend: Backend,
    ) -> Stack {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = example_repo(dir.path(), &opts, edit);

        let (redis, redis_tls) = match backend {
            Backend::Tls => {
                let (redis, files) = RedisServer::start_tls();
                (redis, Some(files))
            }
            _ => (RedisServer::start(), None),
        };
        let redis_cluster = (backend == Backend::Cluster).then(RedisCluster::start);
        let redis_flags = redis_flags(&redis, redis_cluster.as_ref(), redis_tls.as_ref());
        run(Command::new(bin("ferry"))
            .arg("materialize")
            .arg(&repo)
            .args(&redis_flags));

        let reader_port = free_port();
        let reader = start_reader(dir.path(), reader_port, &redis_flags);
        let model_port = free_port();
        let model = start_model(dir.path(), model_port);

        let control_plane = xds.then(|| ControlPlane::start_for(dir.path(), &repo, opts.runtime));
        let (listen_port, admin_port) = (free_port(), free_port());
        let envoy_config = dir.path().join("envoy.yaml");
        let ports = [listen_port, admin_port, reader_port, model_port];
        render_envoy_config(
            &repo,
            &envoy_config,
            ports,
            control_plane.as_ref(),
            opts.runtime,
        );
        let env = opts.runtime.envoy_env(&redis_flags);
        let envoy = start_envoy_with(dir.path(), &envoy_config, "envoy", &env);
        let mut stack = Stack {
            dir,
            repo,
            redis,
            redis_cluster,
            redis_tls,
            reader,
            reader_port,
            model,
            model_port,
            envoy,
            listen_port,
            admin_port,
            envoy_config,
            runtime: opts.runtime,
            control_plane,
        };
        let (admin, reader) = (stack.admin_port, stack.reader_port);
        stack
            .envoy
            .wait_ready(|| http::get_ok(admin, "/ready"), "envoy /ready");
        stack
            .reader
            .wait_ready(|| http::get_ok(reader, "/healthz"), "reader /healthz");
        stack
            .model
            .wait_ready(|| process::tcp_open(model_port), "demo model");
        stack
    }

    /// The control plane of an xDS stack.
    pub fn cp(&self) -> &ControlPlane {
        self.control_plane
            .as_ref()
            .expect("an xDS stack (Stack::start_xds)")
    }

    /// Another Envoy on the same control plane, reader and model (xDS stacks), once ready.
    pub fn another_envoy(&self, node_id: &str) -> Envoy {
        let xds_address = format!("127.0.0.1:{}", self.cp().xds_port);
        let mode = ["--xds", "--xds-address", &xds_address, "--node-id", node_id];
        let file = format!("{node_id}.yaml");
        self.extra_envoy("envoy-b", "second envoy", &file, &mode, |yaml| yaml)
    }

    /// A second Envoy in static mode on this stack's reader and model, its bootstrap from
    /// `ferry envoy-config` rewritten by `edit` (e.g. to add Envoy routes with metadata).
    pub fn static_envoy_edited(&self, edit: impl FnOnce(String) -> String) -> Envoy {
        self.extra_envoy(
            "envoy-edited",
            "edited envoy",
            "envoy-edited.yaml",
            &[],
            edit,
        )
    }

    /// One more Envoy on this stack's reader and model, started as `name` and ready (`what`
    /// names it if it is not): `ferry envoy-config` with the `mode` flags into `file` in the
    /// stack's dir, rewritten by `edit`.
    fn extra_envoy(
        &self,
        name: &'static str,
        what: &str,
        file: &str,
        mode: &[&str],
        edit: impl FnOnce(String) -> String,
    ) -> Envoy {
        let (listen_port, admin_port) = (free_port(), free_port());
        let config = self.dir.path().join(file);
        run(Command::new(bin("ferry"))
            .arg("envoy-config")
            .arg(&self.repo)
            .args(mode)
            .args(self.runtime.flags())
            .args(["--listen-port", &listen_port.to_string()])
            .args(["--admin-port", &admin_port.to_string()])
            .args(["--reader-port", &self.reader_port.to_string()])
            .args(["--model-port", &self.model_port.to_string()])
            .arg("-o")
            .arg(&config));
        let yaml = std::fs::read_to_string(&config).expect("read envoy config");
        std::fs::write(&config, edit(yaml)).expect("write envoy config");
        let mut proc = start_envoy(self.dir.path(), &config, name);
        proc.wait_ready(
            || http::get_ok(admin_port, "/ready"),
            &format!("{what} /ready"),
        );
        Envoy {
            proc,
            listen_port,
            admin_port,
            config,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.listen_port)
    }

    pub fn restart_reader(&mut self) {
        let flags = redis_flags(
            &self.redis,
            self.redis_cluster.as_ref(),
            self.redis_tls.as_ref(),
        );
        self.reader = start_reader(self.dir.path(), self.reader_port, &flags);
        let port = self.reader_port;
        self.reader
            .wait_ready(|| http::get_ok(port, "/healthz"), "reader /healthz");
    }

    pub fn restart_redis(&mut self) {
        self.redis.restart();
    }

    /// The example data as written by the generator: latest row per user per view.
    pub fn source(&self) -> data::Source {
        data::Source::load(&self.repo.join("data"))
    }
}

/// The example repo in `dir/repo`: its ferry.yaml plus `opts.extra_routes`, rewritten by `edit`,
/// and generated data anchored now.
pub fn example_repo(dir: &Path, opts: &Options, edit: impl FnOnce(String) -> String) -> PathBuf {
    let repo = dir.join("repo");
    let entities = opts.entities.unwrap_or(10_000);
    ferry_test_support::example::banking_repo(&repo, entities, &now_rfc3339(), |mut yaml| {
        yaml.push_str(opts.extra_routes);
        edit(yaml)
    });
    repo
}

/// The example repo, unedited, with `entities` users, in `dir/repo`.
pub fn example_repo_with(dir: &Path, entities: usize) -> PathBuf {
    let opts = Options {
        entities: Some(entities),
        ..Options::default()
    };
    example_repo(dir, &opts, |y| y)
}

/// The example repo with `entities` users in `dir`, materialized into a Redis of its own.
pub fn materialized_example(dir: &Path, entities: usize) -> (PathBuf, RedisServer) {
    let repo = example_repo_with(dir, entities);
    let redis = RedisServer::start();
    run(Command::new(bin("ferry"))
        .arg("materialize")
        .arg(&repo)
        .args(["--redis", &redis.url()]));
    (repo, redis)
}

/// Adds a test's on-demand views and services to the example's ferry.yaml: `block` is an
/// `on_demand_views:` list then a `feature_services:` list; each goes first in the example's own
/// list of that name (the example has both).
pub fn with_on_demand(yaml: String, block: &str) -> String {
    let (views, services) = block
        .split_once("\nfeature_services:\n")
        .expect("the block has a feature_services: list");
    let views = views
        .strip_prefix("on_demand_views:\n")
        .expect("the block starts with on_demand_views:");
    for list in ["\non_demand_views:\n", "\nfeature_services:\n"] {
        assert!(
            yaml.contains(list),
            "the example's ferry.yaml has no {list:?}"
        );
    }
    yaml.replacen(
        "\non_demand_views:\n",
        &format!("\non_demand_views:\n{views}"),
        1,
    )
    .replacen(
        "\nfeature_services:\n",
        &format!("\nfeature_services:\n{services}"),
        1,
    )
}

/// `ferry envoy-config REPO` into `out`, with `ports` = listener, admin, reader, model; static
/// with the built filter, or (`cp`) taking the filter's config from that control plane.
pub(crate) fn render_envoy_config(
    repo: &Path,
    out: &Path,
    ports: [u16; 4],
    cp: Option<&ControlPlane>,
    runtime: Runtime,
) {
    let mut cmd = Command::new(bin("ferry"));
    cmd.arg("envoy-config").arg(repo);
    for (flag, port) in [
        "--listen-port",
        "--admin-port",
        "--reader-port",
        "--model-port",
    ]
    .into_iter()
    .zip(ports)
    {
        cmd.args([flag, &port.to_string()]);
    }
    cmd.arg("-o").arg(out);
    match cp {
        Some(cp) => cmd
            .arg("--xds")
            .args(["--xds-address", &format!("127.0.0.1:{}", cp.xds_port)])
            .args(["--node-id", "envoy-a"])
            .args(runtime.flags()),
        None => cmd.args(runtime.flags()),
    };
    run(&mut cmd);
}

/// Envoy on the bootstrap `config`, its log in `dir`.
pub fn start_envoy(dir: &Path, config: &Path, name: &'static str) -> Proc {
    start_envoy_with(dir, config, name, &[])
}

/// `envoy --mode validate -c config`: what Envoy printed, an `Err` unless it accepted the
/// config (exit 0 and `OK`).
pub fn envoy_validate(config: &Path) -> Result<String, String> {
    let (ok, text) = envoy_validate_with(config, &[]);
    if ok && text.contains("OK") {
        Ok(text)
    } else {
        Err(text)
    }
}

/// `envoy --mode validate -c config` with `env` in Envoy's environment: whether it exited 0,
/// and what it printed.
pub fn envoy_validate_with(config: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(envoy_bin())
        .args(["--mode", "validate", "-c"])
        .arg(config)
        .envs(env.iter().copied())
        .output()
        .expect("run envoy --mode validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// [`start_envoy`] with these variables in Envoy's environment.
pub fn start_envoy_with(
    dir: &Path,
    config: &Path,
    name: &'static str,
    env: &[(&str, String)],
) -> Proc {
    let mut cmd = Command::new(envoy_bin());
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.arg("-c")
        .arg(config)
        .args(["--disable-hot-restart", "--log-level", "warn"]);
    Proc::start(name, cmd, dir)
}

/// The Redis flags of `ferry materialize` and the reader: the Cluster's seeds if there is one.
/// Which Redis a stack runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Single,
    Cluster,
    Tls,
}

fn redis_flags(
    redis: &RedisServer,
    cluster: Option<&RedisCluster>,
    tls: Option<&TlsFiles>,
) -> Vec<String> {
    match (cluster, tls) {
        (Some(c), _) => vec!["--redis".into(), c.urls(), "--redis-cluster".into()],
        (None, Some(t)) => vec![
            "--redis".into(),
            format!("rediss://127.0.0.1:{}", redis.port),
            "--redis-ca-file".into(),
            t.ca_cert.display().to_string(),
        ],
        (None, None) => vec!["--redis".into(), redis.url()],
    }
}

/// The reader on 127.0.0.1:`port` over the Redis of `redis_flags`, its log in `dir`.
/// The demo model (`ferry-demo-model`) on 127.0.0.1:`port`.
pub fn start_model(dir: &Path, port: u16) -> Proc {
    let mut cmd = Command::new(bin("ferry-demo-model"));
    cmd.args(["--listen", &format!("127.0.0.1:{port}")]);
    Proc::start("model", cmd, dir)
}

pub fn start_reader(dir: &Path, port: u16, redis_flags: &[String]) -> Proc {
    let mut cmd = Command::new(bin("ferry-reader"));
    cmd.args(["--listen", &format!("127.0.0.1:{port}")])
        .args(redis_flags);
    Proc::start("reader", cmd, dir)
}
