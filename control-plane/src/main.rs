//! The `ferry` command line: thin clap wiring over the library; errors become one message on
//! stderr and exit code 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use ferry::envoy_config::{
    self, ReaderProtocol, RedisProxyOptions, Runtime, RuntimeKind, StaticOptions, Upstream,
};
use ferry::envoy_xds::{default_node_id, render_xds, XdsOptions};
use ferry::materialize::{self, WriteOptions};
use ferry::push;
use ferry::repo::{self, scalars::format_ttl, Registry};
use ferry::serve::resources::FilterOptions;
use ferry::serve::{self, ServeOptions};
use ferry::snapshot;
use ferry_redis::RedisArgs;

/// Ferry: feature vectors injected into ML inference requests by Envoy.
#[derive(Parser)]
#[command(name = "ferry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a feature repo and print its snapshot: services, fingerprints, views, routes.
    ///
    /// With --push, the snapshot is sent to a running control plane (`ferry serve`), which
    /// hands it to every Envoy. With --materialize too, the services whose fingerprint the
    /// control plane does not serve yet are materialized first: the zero-downtime schema change.
    Apply(ApplyArgs),
    /// Run the control plane: serve the repo's snapshot to Envoy over xDS (ADS and ECDS),
    /// follow repo changes and pushes, and answer /status, /metrics and pushes over HTTP.
    Serve(ServeArgs),
    /// Write one vector per entity per FeatureService from the views' sources into Redis.
    Materialize(MaterializeArgs),
    /// Render a static Envoy bootstrap with the ferry filter and this repo's snapshot.
    EnvoyConfig(EnvoyConfigArgs),
    /// Print the filter's configuration as JSON, for Istio's WasmPlugin or Envoy Gateway's
    /// EnvoyExtensionPolicy (`pluginConfig`); the filter then runs without
    /// allow_on_headers_stop_iteration (README, "Istio and Envoy Gateway").
    PluginConfig(PluginConfigArgs),
    /// Write the filter's .wasm as an OCI image layout (Wasm image spec, compat variant: one
    /// tar+gzip layer holding plugin.wasm), for Istio's WasmPlugin and Envoy Gateway to pull
    /// once copied to a registry (e.g. `skopeo copy oci:DIR:TAG docker://REGISTRY/NAME:TAG`).
    OciImage(OciImageArgs),
}

#[derive(clap::Args)]
struct OciImageArgs {
    /// The built filter.
    #[arg(long, default_value = "target/wasm32-wasip1/release/ferry_filter.wasm")]
    wasm: PathBuf,
    /// The image layout's directory.
    #[arg(short, long, default_value = "target/oci/ferry-filter")]
    output: PathBuf,
    /// The manifest's tag in index.json.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    tag: String,
}

#[derive(clap::Args)]
struct PluginConfigArgs {
    /// Feature repo folder (holding ferry.yaml).
    repo: PathBuf,
    /// The reader cluster's name in that Envoy (Istio: outbound|PORT||HOST), instead of the
    /// repo's.
    #[arg(long, value_name = "NAME")]
    reader_cluster: Option<String>,
    /// Have the filter pull the snapshot from this `ferry serve` URL
    /// (http://HOST:8091/v1/snapshot) instead of carrying it; needs --snapshot-cluster.
    #[arg(long, value_name = "URL", requires = "snapshot_cluster")]
    snapshot_url: Option<String>,
    /// The Envoy cluster that reaches --snapshot-url (Istio: outbound|8091||HOST).
    #[arg(long, value_name = "NAME", requires = "snapshot_url")]
    snapshot_cluster: Option<String>,
    /// How often the filter checks --snapshot-url for a new version (default 5000).
    #[arg(long, value_name = "MS", requires = "snapshot_url")]
    snapshot_poll_ms: Option<u64>,
}

#[derive(clap::Args)]
struct ApplyArgs {
    /// Feature repo folder (holding ferry.yaml).
    repo: PathBuf,
    /// Write the encoded snapshot (ferry.v1.Snapshot protobuf bytes) to this file.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Push the snapshot to this control plane (its HTTP address, e.g. http://127.0.0.1:8091).
    #[arg(long, value_name = "URL")]
    push: Option<String>,
    /// Bearer token for --push, if the control plane requires one.
    #[arg(long, env = "FERRY_PUSH_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Before pushing, write the vectors of every service whose fingerprint is new to the
    /// control plane (without --push: of every service).
    #[arg(long)]
    materialize: bool,
    /// Redis (for --materialize).
    #[command(flatten)]
    redis: RedisArgs,
    /// Expire materialized keys after this long (e.g. 7d); see `materialize --key-ttl`.
    #[arg(long)]
    key_ttl: Option<String>,
}

#[derive(clap::Args)]
struct MaterializeArgs {
    /// Feature repo folder (holding ferry.yaml).
    repo: PathBuf,
    #[command(flatten)]
    redis: RedisArgs,
    /// SETs per pipelined round trip.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    batch_size: u64,
    /// Expire written keys after this long (e.g. 7d), so vectors of an old fingerprint
    /// disappear by themselves; default: keys never expire.
    #[arg(long)]
    key_ttl: Option<String>,
    /// After writing each service, delete the vectors (at its current fingerprint) of entities
    /// no longer in its sources (SCAN, batched UNLINK), and report how many; without it
    /// nothing is deleted.
    #[arg(long)]
    prune: bool,
}

#[derive(clap::Args)]
struct EnvoyConfigArgs {
    /// Feature repo folder (holding ferry.yaml).
    repo: PathBuf,
    /// The ferry filter's .wasm file (static mode with --runtime wasm; with --xds the control
    /// plane names it).
    #[arg(long)]
    wasm: Option<PathBuf>,
    #[command(flatten)]
    runtime: RuntimeArgs,
    /// Take the filter's configuration from the control plane (ECDS over ADS) instead of
    /// inlining the snapshot.
    #[arg(long)]
    xds: bool,
    /// The control plane's xDS address (with --xds), HOST:PORT: an IP, or a host name Envoy
    /// resolves (LOGICAL_DNS).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:18000")]
    xds_address: Upstream,
    /// This Envoy's node id (with --xds), one per Envoy; default ferry-envoy-HOST-PORT-RANDOM
    /// (unique per rendering). Envoys sharing one bootstrap file: start each with Envoy's
    /// --service-node, which overrides it.
    #[arg(long)]
    node_id: Option<String>,
    /// With --xds: seconds to wait for the first snapshot before answering 500 (0 = forever).
    #[arg(long, default_value_t = 60)]
    initial_fetch_timeout: u32,
    #[arg(long, default_value_t = 10000)]
    listen_port: u16,
    #[arg(long, default_value_t = 9901)]
    admin_port: u16,
    /// The reader on 127.0.0.1 at this port (see --reader-address for another host).
    #[arg(long, default_value_t = 8090)]
    reader_port: u16,
    /// The reader, HOST:PORT: an IP, or a host name Envoy resolves with STRICT_DNS (every
    /// address is a reader, health-checked on its own: e.g. a Kubernetes headless service).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "reader_port")]
    reader_address: Option<Upstream>,
    /// The reader cluster's protocol: http1 (HTTP/1.1 keep-alive) or http2 (h2c, prior
    /// knowledge); the default is the measured choice (bench/README.md).
    #[arg(long, value_enum, default_value_t = ReaderProtocol::default())]
    reader_protocol: ReaderProtocol,
    /// The model on 127.0.0.1 at this port (see --model-address for another host).
    #[arg(long, default_value_t = 8080)]
    model_port: u16,
    /// The model, HOST:PORT: an IP, or a host name Envoy resolves with LOGICAL_DNS (one name
    /// that load-balances already: e.g. a Kubernetes ClusterIP service).
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "model_port")]
    model_address: Option<Upstream>,
    /// Also render a listener on 127.0.0.1:PORT that proxies Redis (Envoy's redis_proxy); point
    /// the reader's --redis at redis://127.0.0.1:PORT.
    #[arg(long, value_name = "PORT")]
    redis_proxy_port: Option<u16>,
    /// A Redis behind the proxy, HOST:PORT (repeatable; default 127.0.0.1:6379). Several
    /// standalone servers are shards (keys spread by consistent hash), not replicas.
    #[arg(
        long = "redis-upstream",
        value_name = "HOST:PORT",
        requires = "redis_proxy_port"
    )]
    redis_upstreams: Vec<Upstream>,
    /// The --redis-upstream addresses are seeds of a Redis Cluster (envoy.clusters.redis).
    #[arg(long, requires = "redis_proxy_port")]
    redis_cluster: bool,
    /// Envoy's per-connection buffer limit; every route's max_body_bytes must fit in it.
    #[arg(long, default_value_t = 8 * 1024 * 1024)]
    buffer_limit_bytes: u64,
    /// Write the config here instead of stdout.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

/// Which build of the filter Envoy runs.
#[derive(clap::Args)]
struct RuntimeArgs {
    /// wasm: the proxy-wasm filter on Envoy's V8 runtime (--wasm FILE); native: the same
    /// filter as an Envoy dynamic module (--native-module FILE, libferry_native.so).
    #[arg(long, value_enum, default_value_t = RuntimeKind::Wasm)]
    runtime: RuntimeKind,
    /// The native module (target/native/libferry_native.so), as Envoy will open it (with
    /// --runtime native).
    #[arg(long, value_name = "FILE")]
    native_module: Option<PathBuf>,
}

impl RuntimeArgs {
    /// The runtime and the absolute path of the file Envoy loads (`wasm` for the Wasm build);
    /// `None` paths are allowed only when Envoy gets the filter elsewhere (`--xds`).
    fn resolve(&self, wasm: Option<&Path>, paths_needed: bool) -> Result<(Runtime, String)> {
        let (flag, path) = match self.runtime {
            RuntimeKind::Wasm => ("--wasm", wasm),
            RuntimeKind::Native => ("--native-module", self.native_module.as_deref()),
        };
        let path = match path {
            Some(p) => {
                if !p.is_file() {
                    eprintln!(
                        "warning: {} does not exist (yet); Envoy needs it",
                        p.display()
                    );
                }
                envoy_config::absolute_wasm_path(p)?
            }
            None if paths_needed => anyhow::bail!(
                "--runtime {} needs {flag} FILE",
                clap::ValueEnum::to_possible_value(&self.runtime)
                    .map_or_else(String::new, |v| v.get_name().to_owned())
            ),
            None => String::new(),
        };
        Ok(match self.runtime {
            RuntimeKind::Wasm => (Runtime::Wasm, path),
            RuntimeKind::Native => (Runtime::Native { module_path: path }, String::new()),
        })
    }
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Feature repo folder (holding ferry.yaml): the first snapshot, then watched for changes.
    repo: PathBuf,
    /// The ferry filter's .wasm file, as Envoy will open it (with --runtime wasm).
    #[arg(long)]
    wasm: Option<PathBuf>,
    #[command(flatten)]
    runtime: RuntimeArgs,
    /// xDS (gRPC) address.
    #[arg(long, default_value = "127.0.0.1:18000")]
    xds_listen: std::net::SocketAddr,
    /// HTTP address: /status, /metrics, /healthz, POST /v1/snapshot.
    #[arg(long, default_value = "127.0.0.1:8091")]
    http_listen: std::net::SocketAddr,
    /// Require `Authorization: Bearer TOKEN` on pushes.
    #[arg(long, env = "FERRY_PUSH_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// How often to check ferry.yaml for changes, in milliseconds (0 = do not watch).
    #[arg(long, default_value_t = 1000)]
    watch_interval_ms: u64,
    /// How long a changed ferry.yaml must stay unchanged before it is applied, in
    /// milliseconds (so a half-written file is not).
    #[arg(long, default_value_t = 500)]
    watch_debounce_ms: u64,
    /// Where the current snapshot is saved on every change and restored from at start
    /// (default: REPO/.ferry). Must be writable.
    #[arg(long, env = "FERRY_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// The HTTP filter's name in the bootstrap (the ECDS resource name).
    #[arg(long, default_value = "ferry")]
    filter_name: String,
    /// The most Envoy streams served at once.
    #[arg(long, default_value_t = 1024)]
    max_streams: usize,
    /// Tests only: honour `x-ferry-unchecked` on pushes, skipping validation, so that a
    /// snapshot the filter refuses can reach Envoy. Only in builds with `test-switches`.
    #[cfg(feature = "test-switches")]
    #[arg(long, hide = true)]
    allow_invalid: bool,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Apply(args) => apply_cmd(args),
        Command::Serve(args) => serve_cmd(args),
        Command::Materialize(args) => {
            let mut opts = WriteOptions::with_redis(args.redis);
            opts.batch_size = usize::try_from(args.batch_size)?;
            opts.key_ttl_seconds = parse_key_ttl(args.key_ttl)?;
            if args.prune && opts.redis.cluster {
                // SCAN walks one node of a Cluster: a prune there would miss most keys.
                anyhow::bail!(
                    "--prune does not support --redis-cluster yet (SCAN walks one node of a \
                     Cluster); materialize without --prune, older vectors expire with --key-ttl"
                );
            }
            opts.prune = args.prune;
            materialize_cmd(&load(&args.repo)?, &opts)
        }
        Command::EnvoyConfig(args) => envoy_config_cmd(args),
        Command::OciImage(args) => {
            let image = ferry::oci::write_image(&args.wasm, &args.output, &args.tag)?;
            println!(
                "wrote {} ({}:{}, manifest {}, plugin.wasm sha256:{}, layer {} bytes)",
                args.output.display(),
                args.output.display(),
                args.tag,
                image.manifest_digest,
                image.wasm_sha256,
                image.layer_size
            );
            Ok(())
        }
        Command::PluginConfig(args) => {
            let reg = load(&args.repo)?;
            let reader = args.reader_cluster.as_deref();
            let json = match (&args.snapshot_url, &args.snapshot_cluster) {
                (Some(url), Some(cluster)) => envoy_config::plugin_config_pull_json(
                    url,
                    cluster,
                    args.snapshot_poll_ms,
                    reader,
                )?,
                _ => envoy_config::plugin_config_json(&reg, reader)?,
            };
            println!("{json}");
            Ok(())
        }
    }
}

fn apply_cmd(args: ApplyArgs) -> Result<()> {
    let snap = apply(&args.repo, args.output.as_deref())?;
    if args.materialize || args.push.is_some() {
        let mut opts = WriteOptions::with_redis(args.redis);
        opts.key_ttl_seconds = parse_key_ttl(args.key_ttl)?;
        push_cmd(
            &args.repo,
            snap,
            args.push.as_deref(),
            args.token.as_deref(),
            args.materialize,
            &opts,
        )?;
    }
    Ok(())
}

fn envoy_config_cmd(args: EnvoyConfigArgs) -> Result<()> {
    let reg = load(&args.repo)?;
    let (runtime, wasm_path) = args.runtime.resolve(args.wasm.as_deref(), !args.xds)?;
    let opts = StaticOptions {
        wasm_path,
        runtime,
        listen_port: args.listen_port,
        admin_port: args.admin_port,
        reader: args
            .reader_address
            .unwrap_or_else(|| Upstream::loopback(args.reader_port)),
        model: args
            .model_address
            .unwrap_or_else(|| Upstream::loopback(args.model_port)),
        buffer_limit_bytes: args.buffer_limit_bytes,
        reader_protocol: args.reader_protocol,
        redis_proxy: args.redis_proxy_port.map(|listen_port| RedisProxyOptions {
            listen_port,
            upstreams: if args.redis_upstreams.is_empty() {
                vec![Upstream::loopback(6379)]
            } else {
                args.redis_upstreams
            },
            redis_cluster: args.redis_cluster,
        }),
    };
    let text = if args.xds {
        let x = XdsOptions {
            node_id: args
                .node_id
                .unwrap_or_else(|| default_node_id(args.listen_port)),
            xds: args.xds_address,
            initial_fetch_timeout_s: args.initial_fetch_timeout,
        };
        render_xds(&reg, &opts, &x)?
    } else {
        envoy_config::render_static(&reg, &opts)?
    };
    match args.output {
        Some(p) => std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

fn load(repo: &Path) -> Result<Registry> {
    // Validation errors are already one precise line each: print them as they are.
    repo::load(repo).map_err(|e| match e {
        repo::RepoError::Invalid { ref issues, .. } => {
            anyhow::anyhow!("{e}\n{} problem(s) in the feature repo", issues.len())
        }
        other => other.into(),
    })
}

fn parse_key_ttl(key_ttl: Option<String>) -> Result<Option<u64>> {
    key_ttl
        .map(|t| {
            repo::scalars::parse_duration(&t)
                .map(|s| s.unsigned_abs())
                .map_err(|e| anyhow::anyhow!("--key-ttl: {e}"))
        })
        .transpose()
}

fn apply(repo: &Path, output: Option<&Path>) -> Result<ferry_protos::v1::Snapshot> {
    let reg = load(repo)?;
    let snap = snapshot::build(&reg);
    println!("project {}  snapshot {}", reg.project, snap.version);
    for s in &reg.services {
        let keys: Vec<String> = s
            .keys
            .iter()
            .map(|k| format!("{} ({})", k.join_key, k.key_type.as_str()))
            .collect();
        let total: usize = s.views.iter().map(|v| v.features.len()).sum();
        println!(
            "feature service {}  fingerprint {}  keys: {}  {} features",
            s.name,
            ferry_protos::fingerprint_hex(s.fingerprint),
            keys.join(", "),
            total
        );
        for sv in &s.views {
            let v = &reg.views[sv.view];
            println!(
                "  view {:<24} ttl {:<6} {} feature(s)",
                v.name,
                format_ttl(v.ttl_seconds),
                sv.features.len()
            );
        }
    }
    for r in &reg.routes {
        let m = r.matcher.to_string();
        println!(
            "route {}  {}  -> {}  format {}  entity [{}]  names {}  missing {}  stale {}  reader error {}  max body {} B, {} entities, timeout {} ms",
            r.name,
            m,
            std::iter::once(r.service)
                .chain(r.extra_services.iter().map(|e| e.service))
                .map(|s| reg.services[s].name.as_str())
                .collect::<Vec<_>>()
                .join(" + "),
            r.format.word(),
            r.entity_fields.join(", "),
            r.feature_names.as_str_name().to_ascii_lowercase(),
            policy(r.on_missing_entity.as_str_name()),
            policy(r.on_stale.as_str_name()),
            policy(r.on_reader_error.as_str_name()),
            r.max_body_bytes,
            r.max_entities,
            r.reader_timeout_ms
        );
    }
    if let Some(path) = output {
        std::fs::write(path, snapshot::encode(&snap))
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "wrote {} ({} bytes)",
            path.display(),
            snapshot::encode(&snap).len()
        );
    }
    Ok(snap)
}

/// `MISSING_REJECT` → `reject`.
fn policy(name: &str) -> String {
    name.rsplit('_').next().unwrap_or(name).to_ascii_lowercase()
}

fn materialize_cmd(reg: &Registry, opts: &WriteOptions) -> Result<()> {
    let started = Instant::now();
    let tables = materialize::load_tables(reg)?;
    for v in &tables.summaries {
        eprintln!(
            "read view {}: {} rows, {} entities in {:.2}s",
            v.view, v.rows_read, v.entities, v.seconds
        );
    }
    let progress = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    progress.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {human_pos}/{human_len} entities, eta {eta}",
        )?
        .progress_chars("=> "),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let summaries = runtime.block_on(materialize::run(reg, &tables, opts, &progress))?;
    for s in &summaries {
        println!(
            "materialized {} (fingerprint {}): {} entities, {} bytes ({:.0} B/entity) in {:.3}s = {:.0} entities/s",
            s.service,
            ferry_protos::fingerprint_hex(s.fingerprint),
            s.entities,
            s.bytes,
            s.bytes as f64 / (s.entities.max(1)) as f64,
            s.seconds,
            s.entities_per_second()
        );
        if let Some(p) = s.pruned {
            println!(
                "pruned {}: {} vector(s) of entities no longer in the sources removed ({} key(s) scanned)",
                s.service, p.removed, p.scanned
            );
        }
    }
    println!("done in {:.2}s", started.elapsed().as_secs_f64());
    Ok(())
}

/// `apply --push/--materialize`: materialize what the control plane does not serve yet, then
/// push, so that no Envoy switches to a fingerprint whose vectors are not in Redis.
fn push_cmd(
    repo: &Path,
    snap: ferry_protos::v1::Snapshot,
    url: Option<&str>,
    token: Option<&str>,
    materialize: bool,
    opts: &WriteOptions,
) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if materialize {
        let mut reg = load(repo)?;
        if let Some(url) = url {
            let served = runtime
                .block_on(push::status(url))
                .context("asking the control plane which fingerprints it serves")?
                .snapshot
                .map(|s| s.services)
                .unwrap_or_default();
            reg.services.retain(|s| {
                let fingerprint = ferry_protos::fingerprint_hex(s.fingerprint);
                !served
                    .iter()
                    .any(|c| c.name == s.name && c.fingerprint == fingerprint)
            });
        }
        // Routes refer to services by index; materializing needs only the services.
        reg.routes.clear();
        if reg.services.is_empty() {
            println!("every fingerprint is already served: nothing to materialize");
        } else {
            materialize_cmd(&reg, opts)?;
        }
    }
    let Some(url) = url else { return Ok(()) };
    let started = Instant::now();
    let pushed = match runtime.block_on(push::push(url, token, snapshot::encode(&snap))) {
        Ok(p) => p,
        Err(push::PushError::Refused { status, message }) => {
            anyhow::bail!("the control plane refused the snapshot (HTTP {status}): {message}")
        }
        Err(e) => return Err(e.into()),
    };
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    println!(
        "pushed snapshot {} to {url} in {ms:.1} ms ({})",
        pushed.version,
        if pushed.changed {
            "now current"
        } else {
            "already current"
        }
    );
    Ok(())
}

fn serve_cmd(args: ServeArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let (runtime, wasm_path) = args.runtime.resolve(args.wasm.as_deref(), true)?;
    let state_dir = args
        .state_dir
        .unwrap_or_else(|| args.repo.join(serve::persist::DEFAULT_STATE_DIR));
    let opts = ServeOptions {
        state_dir,
        repo: args.repo,
        xds_listen: args.xds_listen,
        http_listen: args.http_listen,
        filter: FilterOptions {
            filter_name: args.filter_name,
            wasm_path,
            runtime,
        },
        reader_cluster: envoy_config::TEMPLATE_READER_CLUSTER.to_owned(),
        token: args.token.filter(|t| !t.is_empty()),
        watch: (args.watch_interval_ms > 0).then(|| serve::watch::Watch {
            interval: std::time::Duration::from_millis(args.watch_interval_ms),
            debounce: std::time::Duration::from_millis(args.watch_debounce_ms),
        }),
        max_streams: args.max_streams,
        #[cfg(feature = "test-switches")]
        allow_invalid: args.allow_invalid,
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(serve::run(opts))
}
