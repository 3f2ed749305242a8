//! `ferry serve`: the control plane, with logs on stderr.

use std::path::PathBuf;

use anyhow::Result;
use ferry::envoy_config;
use ferry::serve::auth::token;
use ferry::serve::resources::FilterOptions;
use ferry::serve::{self, ServeOptions};

use super::filter_build::RuntimeArgs;
use super::{TlsArgs, TlsListener};

/// The listeners `ferry serve`'s TLS flags apply to.
pub struct ServeListeners;

impl TlsListener for ServeListeners {
    const CERT_HELP: &'static str =
        "Serve TLS on both listeners (the HTTP API and xDS) with this certificate chain (PEM, \
         leaf first); with --tls-key. Reloaded when the file changes (new connections use it)";
    const CLIENT_CA_HELP: &'static str =
        "Client certificates must chain to these CAs (PEM bundle): required on xDS (each \
         Envoy's identity), verified when presented on the HTTP API (where --grant gives them \
         roles)";
}

#[derive(clap::Args)]
pub struct ServeArgs {
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
    /// HTTP address: /status, /metrics, /healthz, POST /v1/snapshot, POST /push, POST
    /// /write-to-online-store.
    #[arg(long, default_value = "127.0.0.1:8091")]
    http_listen: std::net::SocketAddr,
    /// The push token: pushes need `Authorization: Bearer TOKEN` (it also reads). Required
    /// when --http-listen is not a loopback address (or pass --insecure). Every token must hold
    /// 128 bits (32 hex or 22 base64 characters, e.g. `openssl rand -hex 32`).
    #[arg(long, env = "FERRY_PUSH_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The push token, from a file (a Kubernetes secret volume); instead of --token.
    #[arg(long, env = "FERRY_PUSH_TOKEN_FILE")]
    push_token_file: Option<PathBuf>,
    /// The read token: reads `GET /v1/snapshot` and `/status` (they name the fingerprints),
    /// e.g. the filter's pull (`ferry plugin-config --snapshot-token`). Needs a push token.
    #[arg(long, env = "FERRY_READ_TOKEN", hide_env_values = true)]
    read_token: Option<String>,
    /// The read token, from a file; instead of --read-token.
    #[arg(long, env = "FERRY_READ_TOKEN_FILE")]
    read_token_file: Option<PathBuf>,
    /// The write token: feature writes (`POST /push`, `POST /write-to-online-store`) need
    /// `Authorization: Bearer TOKEN`; it does nothing else. Without a write credential (this,
    /// or --grant write=IDENTITY) feature writes are refused, on loopback too.
    #[arg(long, env = "FERRY_WRITE_TOKEN", hide_env_values = true)]
    write_token: Option<String>,
    /// The write token, from a file; instead of --write-token.
    #[arg(long, env = "FERRY_WRITE_TOKEN_FILE")]
    write_token_file: Option<PathBuf>,
    /// Where feature writes go (the Redis the reader reads).
    #[command(flatten)]
    redis: ferry_redis::RedisArgs,
    #[command(flatten)]
    tls: TlsArgs<ServeListeners>,
    /// IDENTITY=NODE_ID: a client certificate whose URI or DNS SAN matches IDENTITY may use the
    /// xDS node ids matching NODE_ID (`*` matches any run of characters but `/`); repeatable. Always
    /// allowed: a node id equal to one of its names, or such a name followed by `~` and
    /// anything.
    #[arg(long = "node-identity", value_name = "IDENTITY=NODE_ID")]
    node_identities: Vec<ferry_xds::NodeRule>,
    /// ROLE=IDENTITY: grant a role (read, push, write) on the HTTP API to the client
    /// certificates whose URI or DNS SAN matches IDENTITY (`*` matches any run but `/`); repeatable.
    /// push also reads.
    #[arg(long = "grant", value_name = "ROLE=IDENTITY")]
    grants: Vec<ferry::serve::auth::Grant>,
    /// Run a listener on a non-loopback address short of what it needs: the HTTP API without
    /// TLS or without a push credential, xDS without mTLS. Logged loudly at start and shown on
    /// /status (`insecure: true`).
    #[arg(long)]
    insecure: bool,
    /// The most HTTP API connections served at once (idle keep-alive pollers count); the
    /// open-file soft limit is raised to fit when the hard limit allows.
    #[arg(long, default_value_t = serve::http::DEFAULT_MAX_CONNECTIONS)]
    max_http_connections: usize,
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
    /// Run as one of several replicas: the current snapshot, its sequence and the held-back
    /// one live in the Redis of --redis (keys under `ferry:cp:{CLUSTER}:`), not in the state
    /// directory; one replica at a time (a lease) applies the repo files' changes.
    #[arg(long, env = "FERRY_SHARED_STATE")]
    shared_state: bool,
    /// With --shared-state: the deployment's name in the shared keys, so two deployments on
    /// one Redis do not mix.
    #[arg(
        long,
        env = "FERRY_CLUSTER_NAME",
        default_value = "ferry",
        requires = "shared_state"
    )]
    cluster_name: String,
    /// With --shared-state: how often a replica reads the shared sequence besides the
    /// notifications (which a reconnect can lose), in milliseconds.
    #[arg(long, default_value_t = 1000, requires = "shared_state")]
    shared_poll_ms: u64,
    /// With --shared-state: how long the lease on watching the repo files lasts unless its
    /// holder renews it (every third of it), in milliseconds: a dead holder's successor
    /// takes over within it.
    #[arg(long, default_value_t = 3000, requires = "shared_state")]
    lease_ms: u64,
    /// With --shared-state: another public key of the deployment (`[ID=]FILE_OR_BASE64`, as
    /// `ferry plugin-config --snapshot-key` takes it), repeatable. A replica serves a shared
    /// record only if it is signed by its own --signing-key or one of these (a rotation, where
    /// replicas hold different keys for a while); any other is refused.
    #[arg(
        long = "shared-state-key",
        value_name = "[ID=]KEY",
        requires = "shared_state"
    )]
    shared_state_keys: Vec<String>,
    /// An Ed25519 private key (PKCS#8 PEM: `ferry keygen`, `openssl genpkey -algorithm
    /// ed25519`): `GET /v1/snapshot` then serves signed snapshots, which a filter with
    /// `snapshot_keys` verifies (Istio, Envoy Gateway).
    #[arg(long, env = "FERRY_SIGNING_KEY_FILE", value_name = "FILE")]
    signing_key: Option<PathBuf>,
    /// The signing key's id, as the filter's `snapshot_keys` names it (default: derived from
    /// the public key, as `ferry keygen` and `ferry plugin-config --snapshot-key` derive it).
    #[arg(long, value_name = "ID", requires = "signing_key")]
    signing_key_id: Option<String>,
    /// Feature writes (`POST /push`, `/write-to-online-store`) answered at once; one more is
    /// refused 429 with `Retry-After` (its body dropped unparsed).
    #[arg(long, env = "FERRY_MAX_CONCURRENT_WRITES", default_value_t = ferry::write::DEFAULT_MAX_WRITES,
          value_parser = clap::builder::TypedValueParser::map(
              clap::value_parser!(u16).range(1..), usize::from))]
    max_concurrent_writes: usize,
    /// Keys a second that feature writes may read and compare-and-set in Redis, over every
    /// write: a write flood then takes a bounded share of the Redis the readers use (a large
    /// write takes longer, and one that would wait over 10 s is refused 429). 0: no bound.
    #[arg(long, env = "FERRY_MAX_WRITE_KEYS_PER_SECOND", value_name = "N",
          default_value_t = ferry::write::pace::DEFAULT_KEYS_PER_SECOND)]
    max_write_keys_per_second: u32,
    /// The HTTP filter's name in the bootstrap (the ECDS resource name).
    #[arg(long, default_value = "ferry")]
    filter_name: String,
    /// The most Envoy streams served at once (each holds an open file; the open-file soft
    /// limit is raised to fit when the hard limit allows).
    #[arg(long, default_value_t = ferry_xds::bounds::DEFAULT_MAX_STREAMS)]
    max_streams: usize,
    /// The most Envoy streams one node id may hold (Envoys sharing a node id share these).
    #[arg(long, default_value_t = ferry_xds::bounds::DEFAULT_STREAMS_PER_NODE)]
    max_streams_per_node: usize,
    /// Tests only: honour `x-ferry-unchecked` on pushes, skipping validation, so that a
    /// snapshot the filter refuses can reach Envoy. Only in builds with `test-switches`.
    #[cfg(feature = "test-switches")]
    #[arg(long, hide = true)]
    allow_invalid: bool,
}

/// The push and read tokens the flags give.
fn tokens(args: &ServeArgs) -> Result<serve::auth::Tokens> {
    Ok(serve::auth::Tokens {
        push: token(
            args.token.as_deref(),
            "--token/FERRY_PUSH_TOKEN",
            args.push_token_file.as_deref(),
            "--push-token-file/FERRY_PUSH_TOKEN_FILE",
        )?,
        read: token(
            args.read_token.as_deref(),
            "--read-token/FERRY_READ_TOKEN",
            args.read_token_file.as_deref(),
            "--read-token-file/FERRY_READ_TOKEN_FILE",
        )?,
        write: token(
            args.write_token.as_deref(),
            "--write-token/FERRY_WRITE_TOKEN",
            args.write_token_file.as_deref(),
            "--write-token-file/FERRY_WRITE_TOKEN_FILE",
        )?,
    })
}

/// `--shared-state` and its flags; None without it.
fn shared_options(args: &ServeArgs) -> Result<Option<serve::shared_state::SharedOptions>> {
    if !args.shared_state {
        return Ok(None);
    }
    let keys = args
        .shared_state_keys
        .iter()
        .map(|k| serve::signing::public_key(k))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("--shared-state-key {e}"))?;
    Ok(Some(serve::shared_state::SharedOptions {
        cluster: args.cluster_name.clone(),
        poll: std::time::Duration::from_millis(args.shared_poll_ms.max(10)),
        lease: std::time::Duration::from_millis(args.lease_ms.max(300)),
        keys,
    }))
}

pub fn run(args: ServeArgs) -> Result<()> {
    ferry_http_serve::logging::init(ferry_http_serve::logging::LogTo::Stderr);
    let (runtime, wasm_path) = args.runtime.resolve(args.wasm.as_deref(), true)?;
    let signer = args
        .signing_key
        .as_deref()
        .map(|path| serve::signing::Signer::from_file(path, args.signing_key_id.clone()))
        .transpose()
        .map_err(|e| anyhow::anyhow!("--signing-key {e}"))?
        .map(std::sync::Arc::new);
    let tokens = tokens(&args)?;
    let shared = shared_options(&args)?;
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
        access: serve::auth::Access {
            tokens,
            grants: args.grants,
        },
        tls: args.tls.files(),
        node_rules: args.node_identities,
        insecure: args.insecure,
        max_http_connections: args.max_http_connections,
        watch: (args.watch_interval_ms > 0).then(|| serve::watch::Watch {
            interval: std::time::Duration::from_millis(args.watch_interval_ms),
            debounce: std::time::Duration::from_millis(args.watch_debounce_ms),
        }),
        max_streams: args.max_streams,
        max_streams_per_node: args.max_streams_per_node,
        signer,
        redis: args.redis,
        max_writes: args.max_concurrent_writes,
        write_keys_per_second: args.max_write_keys_per_second,
        shared,
        #[cfg(feature = "test-switches")]
        allow_invalid: args.allow_invalid,
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(serve::run(opts))
}
