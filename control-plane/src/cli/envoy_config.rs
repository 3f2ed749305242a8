//! `ferry envoy-config`: an Envoy bootstrap with the filter, the snapshot inlined or taken
//! from the control plane (`--xds`).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use ferry::envoy_config::xds_bootstrap::{default_node_id, render_xds, XdsOptions};
use ferry::envoy_config::{
    self, ClientTls, ReaderProtocol, RedisProxyOptions, StaticOptions, Upstream, UpstreamTls,
};

use super::filter_build::RuntimeArgs;
use super::load;

#[derive(clap::Args)]
pub struct EnvoyConfigArgs {
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
    /// Envoy's client certificate (PEM) for mTLS to the control plane and the reader, as Envoy
    /// opens it; with --tls-key and --tls-ca. Used by --xds-server-san and --reader-server-san.
    #[arg(long, requires_all = ["tls_key", "tls_ca"])]
    tls_cert: Option<String>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<String>,
    /// The CA (PEM) that signed the control plane's and the reader's certificates.
    #[arg(long, requires = "tls_cert")]
    tls_ca: Option<String>,
    /// With --xds: speak mTLS to the control plane, whose certificate must carry this SAN (a
    /// DNS name, or a URI such as a SPIFFE id).
    #[arg(long, requires_all = ["tls_cert", "xds"])]
    xds_server_san: Option<String>,
    /// Speak mTLS to the reader, whose certificate must carry this SAN.
    #[arg(long, requires = "tls_cert")]
    reader_server_san: Option<String>,
    /// With --tls-cert: the folder where the SDS files naming Envoy's certificate and CA are
    /// written (one per secret; Envoy reloads the PEM files when they change); default: the
    /// folder of --output.
    #[arg(long, requires = "tls_cert")]
    sds_dir: Option<PathBuf>,
    /// Route Feast's write endpoints (`POST /push`, `POST /write-to-online-store`) to
    /// `ferry serve`'s HTTP API at HOST:PORT (an IP, or a host name: LOGICAL_DNS), with the
    /// ferry filter disabled on them; e.g. 127.0.0.1:8091.
    #[arg(long, value_name = "HOST:PORT")]
    write_address: Option<Upstream>,
    /// Speak mTLS to the write address (`ferry serve` with --tls-cert), whose certificate must
    /// carry this SAN: off loopback the write credential must not cross the network in clear.
    #[arg(long, requires_all = ["tls_cert", "write_address"])]
    write_server_san: Option<String>,
    /// With --write-address: writes Envoy forwards to the API at once (the write cluster's
    /// circuit breakers; as many more wait in Envoy); every further one is answered `503`
    /// (`x-envoy-overloaded`, `Retry-After: 1`, a JSON body) at its headers, its body never
    /// forwarded. Match `ferry serve --max-concurrent-writes`, divided by the Envoy replicas.
    #[arg(long, value_name = "N", default_value_t = ferry::envoy_config::write_routes::DEFAULT_MAX_REQUESTS,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    write_max_requests: u32,
    /// Send served-feature logs (routes with `log:`) to `ferry log-sink` at HOST:PORT over
    /// Envoy's gRPC access-log service; also makes Envoy replace any client `x-request-id`.
    #[arg(long, value_name = "HOST:PORT")]
    log_sink: Option<Upstream>,
    /// Speak mTLS to the log sink, whose certificate must carry this SAN.
    #[arg(long, requires_all = ["tls_cert", "log_sink"])]
    log_sink_server_san: Option<String>,
    /// Write the config here instead of stdout.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

pub fn run(args: EnvoyConfigArgs) -> Result<()> {
    let reg = load(&args.repo)?;
    let client = match (&args.tls_cert, &args.tls_key, &args.tls_ca) {
        (Some(cert), Some(key), Some(ca)) => Some(ClientTls {
            cert: absolute(cert)?,
            key: absolute(key)?,
            ca: absolute(ca)?,
            sds_dir: sds_dir(args.sds_dir.as_deref(), args.output.as_deref())?,
        }),
        _ => None,
    };
    let upstream = |san: Option<String>| {
        san.zip(client.clone())
            .map(|(server_san, client)| UpstreamTls { client, server_san })
    };
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
        reader_tls: upstream(args.reader_server_san),
        write: args.write_address,
        write_tls: upstream(args.write_server_san),
        write_max_requests: args.write_max_requests,
        log_sink: args.log_sink,
        log_sink_tls: upstream(args.log_sink_server_san),
    };
    let text = if args.xds {
        let x = XdsOptions {
            node_id: args
                .node_id
                .unwrap_or_else(|| default_node_id(args.listen_port)),
            xds: args.xds_address,
            initial_fetch_timeout_s: args.initial_fetch_timeout,
            tls: upstream(args.xds_server_san),
        };
        render_xds(&reg, &opts, &x)?
    } else {
        envoy_config::render_static(&reg, &opts)?
    };
    if let Some(c) = &client {
        write_sds_files(c)?;
    }
    match args.output {
        Some(p) => std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// Where the SDS files go: --sds-dir, else beside --output.
fn sds_dir(dir: Option<&Path>, output: Option<&Path>) -> Result<String> {
    let dir = match (dir, output) {
        (Some(d), _) => d.to_owned(),
        (None, Some(o)) => o.parent().map_or_else(PathBuf::new, Path::to_owned),
        (None, None) => anyhow::bail!(
            "--tls-cert renders SDS files for Envoy's certificate and CA: name their folder \
             with --sds-dir (or write the bootstrap with --output, beside which they go)"
        ),
    };
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    absolute(&dir.display().to_string())
}

/// The SDS files of Envoy's certificate and CA (`envoy_config::tls::sds_files`).
fn write_sds_files(client: &ClientTls) -> Result<()> {
    std::fs::create_dir_all(&client.sds_dir)
        .with_context(|| format!("creating {}", client.sds_dir))?;
    for (path, text) in envoy_config::tls::sds_files(client)? {
        std::fs::write(&path, text).with_context(|| format!("writing {path}"))?;
    }
    Ok(())
}

/// A path as Envoy should open it: absolute (Envoy resolves a relative one against its own
/// working directory), not required to exist here.
fn absolute(path: &str) -> Result<String> {
    Ok(std::path::absolute(path)
        .with_context(|| format!("the path {path}"))?
        .display()
        .to_string())
}
