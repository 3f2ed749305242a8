//! `ferry serve`: the control plane. One current snapshot (from the repo, then from repo
//! changes and pushes) served to every Envoy over xDS (ADS and ECDS), an HTTP API for status,
//! metrics and pushes, and a graceful stop on SIGINT/SIGTERM.
//!
//! - [`state`]: the current snapshot and refusals, the xDS server's snapshot source.
//! - [`streams`]: connected streams and the xDS counters, the xDS server's callbacks.
//! - [`resources`]: the xDS resources built from a snapshot (the filter's ECDS config).
//! - [`http`]: `/status`, `/metrics`, `/healthz`, `POST /v1/snapshot`, and the feature
//!   writes' endpoints (`crate::write` executes them).
//! - [`api`]: the HTTP API's wire types (server and client share them).
//! - [`client`]: the API's client, for `ferry apply --push` (read `/status`, send a snapshot),
//!   and which services a snapshot leaves to materialize first.
//! - [`auth`]: the API's roles and tokens, and the start rules for them.
//! - [`status`], [`metrics`]: the JSON and OpenMetrics renderings.
//! - [`watch`]: polling the repo for changes, and the hold-back rule for them.
//! - [`persist`]: the state directory, where every accepted snapshot is saved.
//! - [`signing`]: the signed snapshot `GET /v1/snapshot` serves with `--signing-key`.
//! - [`startup`]: what is served first (the saved snapshot, or the repo).
//! - [`shared_state`], [`replica`]: `--shared-state`, replicas sharing the snapshot through Redis;
//!   [`record`], [`seal`]: what makes a shared record one to serve (its sequence, its
//!   signature).
//! - [`open_files`]: the open-file limit raised to fit the connection caps (also `ferry
//!   log-sink`'s).

pub mod api;
pub mod auth;
pub mod client;
pub mod http;
pub mod metrics;
pub mod open_files;
pub mod persist;
pub mod record;
pub mod replica;
pub mod resources;
pub mod seal;
pub mod shared_state;
pub mod signing;
pub mod startup;
pub mod state;
pub mod status;
pub mod streams;
pub mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use ferry_http_serve::exposure::{self, Lack};
use ferry_http_serve::{ClientAuth, Tls, TlsFiles};
use tokio::net::TcpListener;

use ferry_xds::{NodePolicy, NodeRule, Xds, XdsConn};
use resources::FilterOptions;
use state::State;

/// Everything `ferry serve` needs.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub repo: PathBuf,
    pub xds_listen: SocketAddr,
    pub http_listen: SocketAddr,
    pub filter: FilterOptions,
    pub reader_cluster: String,
    /// Who may read and push: bearer tokens and client certificate grants; none = open
    /// (loopback, or `insecure`).
    pub access: auth::Access,
    /// TLS for both listeners (the HTTP API and xDS); None: plaintext.
    pub tls: Option<TlsFiles>,
    /// The node ids each verified client identity may use on xDS, beyond its own names.
    pub node_rules: Vec<NodeRule>,
    /// Allow listeners on network addresses without TLS, mTLS or a push credential
    /// (`--insecure`).
    pub insecure: bool,
    /// HTTP API connections served at once.
    pub max_http_connections: usize,
    /// Where the current snapshot is saved, and restored from at start.
    pub state_dir: PathBuf,
    /// Repo polling; None = no watching.
    pub watch: Option<watch::Watch>,
    /// Accept snapshots the filter refuses when the push asks for it (tests only).
    #[cfg(feature = "test-switches")]
    pub allow_invalid: bool,
    pub max_streams: usize,
    /// xDS streams one node id may hold.
    pub max_streams_per_node: usize,
    /// `--signing-key`: `GET /v1/snapshot` serves signed snapshots.
    pub signer: Option<Arc<signing::Signer>>,
    /// The Redis feature writes go to (connected on first use).
    pub redis: ferry_redis::RedisArgs,
    /// Write requests answered at once (`--max-concurrent-writes`); more: 429.
    pub max_writes: usize,
    /// Keys a second the writes' Redis work may take (`--max-write-keys-per-second`; 0: no
    /// bound).
    pub write_keys_per_second: u32,
    /// `--shared-state`: the snapshot is shared with the other replicas through that Redis
    /// (the state directory is not used); None: this process alone.
    pub shared: Option<shared_state::SharedOptions>,
}

/// Runs until SIGINT or SIGTERM.
pub async fn run(opts: ServeOptions) -> Result<()> {
    let (insecure, (http_tls, xds_tls)) = (access_rules(&opts)?, load_tls(opts.tls.as_ref())?);
    open_files::raise_open_files(opts.max_http_connections + opts.max_streams);
    let (state, shared, hash) = start_state(&opts).await?;
    let writer = Arc::new(writer(&opts, &state)?);

    let xds_listener = bind(opts.xds_listen)
        .with_context(|| format!("binding the xDS port {}", opts.xds_listen))?;
    let http_listener = bind(opts.http_listen)
        .with_context(|| format!("binding the HTTP port {}", opts.http_listen))?;
    tracing::info!(
        xds = %xds_listener.local_addr()?,
        http = %http_listener.local_addr()?,
        version = %state.current().map(|c| c.snapshot.version.clone()).unwrap_or_default(),
        "ferry control plane serving"
    );

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = vec![tokio::spawn(serve_xds(
        xds(&state, &opts, &stop_rx),
        xds_listener,
        xds_tls,
        stop_rx.clone(),
    ))];
    let api = http::Api {
        state: state.clone(),
        access: opts.access.clone(),
        insecure,
        tls: http_tls,
        max_connections: opts.max_http_connections,
        #[cfg(feature = "test-switches")]
        allow_invalid: opts.allow_invalid,
        writer,
    };
    tasks.push(tokio::spawn(http::serve(
        http_listener,
        api,
        stop_rx.clone(),
    )));
    if let Some(shared) = shared {
        tasks.push(tokio::spawn(replica::run(
            state.clone(),
            shared,
            opts.repo.clone(),
            stop_rx.clone(),
        )));
    }
    if let Some(every) = opts.watch {
        tasks.push(tokio::spawn(watch::run(
            state.clone(),
            opts.repo.clone(),
            every,
            hash,
            stop_rx.clone(),
        )));
    }

    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    let grace = Duration::from_secs(5);
    for task in tasks {
        let _ = tokio::time::timeout(grace, task).await;
    }
    Ok(())
}

/// The state and what it serves first: restored from the state directory (or the repo), or
/// with `--shared-state` the shared snapshot; the `ferry.yaml` hash read.
async fn start_state(
    opts: &ServeOptions,
) -> Result<(
    Arc<State>,
    Option<Arc<shared_state::Shared>>,
    Option<[u8; 32]>,
)> {
    let shared = connect_shared_state(opts)?;
    let store = match shared {
        Some(_) => None,
        None => Some(persist::StateDir::open(&opts.state_dir)?),
    };
    let state = Arc::new(
        State::new(
            opts.filter.clone(),
            opts.reader_cluster.clone(),
            store.clone(),
        )
        .with_signer(opts.signer.clone())
        .with_shared(shared.clone()),
    );
    log_signer(opts.signer.as_deref());
    let hash = match (&store, &shared) {
        (Some(store), _) => startup::first_snapshot(&state, store, &opts.repo)?,
        (None, Some(shared)) => replica::first_snapshot(&state, shared, &opts.repo).await,
        (None, None) => None,
    };
    Ok((state, shared, hash))
}

/// Connections waiting to be accepted, per listener (the kernel caps it at
/// `net.core.somaxconn`). A fleet reconnecting at once (a control plane restarted under 10,000
/// Envoys) sends its SYNs together; tokio's default queue of 1,024 dropped most of them, and
/// each dropped client retried after 1, 3, 7, 15 s...: 10,000 mTLS streams took 57 s to
/// connect (`bench/fleet.sh`).
const ACCEPT_BACKLOG: u32 = 16_384;

/// A listener on `addr` with [`ACCEPT_BACKLOG`].
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_BACKLOG)
}

fn log_signer(signer: Option<&signing::Signer>) {
    if let Some(signer) = signer {
        tracing::info!(key = %signer.plugin_key(), "GET /v1/snapshot serves signed snapshots");
    }
}

/// `--shared-state`: the shared state's connection (lazy: a replica starts while Redis is
/// away).
fn connect_shared_state(opts: &ServeOptions) -> Result<Option<Arc<shared_state::Shared>>> {
    let Some(o) = &opts.shared else {
        return Ok(None);
    };
    let target = opts.redis.target()?;
    let timeouts = ferry_redis::Timeouts {
        connect: Duration::from_secs(2),
        response: Some(shared_state::REDIS_TIMEOUT),
    };
    // Whoever can write Redis can write the shared record: a replica serves only what one
    // of the deployment's keys signed (#35), so a replica needs a key to sign with.
    let signer = opts.signer.clone().ok_or_else(|| {
        anyhow::anyhow!(
            "--shared-state needs --signing-key: the replicas sign the shared record and serve \
             only what verifies under the deployment's keys, so that whoever can write Redis \
             cannot choose what every Envoy is configured with (make a key with `ferry keygen`)"
        )
    })?;
    let seal = seal::Seal::new(signer, o.keys.clone())
        .map_err(|e| anyhow::anyhow!("--shared-state-key: {e}"))?;
    let conn = target.connect_lazy(timeouts)?;
    let s = shared_state::Shared::new(target, conn, o.clone(), seal);
    tracing::info!(
        replica = %s.replica,
        current = %s.keys.current,
        keys = %s.seal_ids(),
        "--shared-state: the snapshot is shared with the other replicas through Redis, signed"
    );
    Ok(Some(Arc::new(s)))
}

/// The feature writer: Redis connected lazily, so the control plane starts (and serves xDS)
/// while Redis is away; a write then answers 503.
fn writer(opts: &ServeOptions, state: &State) -> Result<crate::write::Writer> {
    let redis = &opts.redis;
    let target = redis.target()?;
    let timeouts = ferry_redis::Timeouts {
        connect: Duration::from_secs(2),
        response: Some(Duration::from_secs(2)),
    };
    let conn = target.connect_lazy(timeouts)?;
    tracing::info!(redis = %target, "feature writes go to this Redis");
    Ok(crate::write::Writer::new(
        conn,
        state.metrics.write.clone(),
        opts.max_writes,
        opts.write_keys_per_second,
    ))
}

/// The xDS server over `state`, with the stream caps and node-id rules of `opts`.
fn xds(state: &Arc<State>, opts: &ServeOptions, stop: &tokio::sync::watch::Receiver<bool>) -> Xds {
    Xds::new(
        state.clone(),
        state.streams.clone(),
        stop.clone(),
        opts.max_streams,
        opts.max_streams_per_node,
    )
    .with_node_policy(NodePolicy::new(opts.node_rules.clone()))
}

/// The TLS of the HTTP API (client certificates optional, verified when shown) and of xDS
/// (client certificates required when there is a client CA), from the same files.
fn load_tls(files: Option<&TlsFiles>) -> Result<(Option<Tls>, Option<Tls>)> {
    let Some(files) = files else {
        return Ok((None, None));
    };
    let http = Tls::load(files.clone(), ClientAuth::Optional, &[b"http/1.1"])?;
    let xds = Tls::load(files.clone(), ClientAuth::Required, &[b"h2"])?;
    Ok((Some(http), Some(xds)))
}

/// The start rules of both listeners (one rule for all: `ferry_http_serve::exposure`): on a
/// network address the HTTP API needs TLS and a push credential, xDS needs mTLS; short of
/// that, `--insecure`, said loudly here and on `/status` (true then).
fn access_rules(opts: &ServeOptions) -> Result<bool> {
    opts.access.check()?;
    let tls = opts.tls.as_ref();
    let api = exposure::check(
        "the HTTP API",
        opts.http_listen,
        opts.access.lack(tls.is_some()),
        opts.insecure,
    )?;
    let xds_lack = match tls {
        Some(files) if files.client_ca.is_some() => None,
        _ => Some(Lack {
            missing: "without mTLS".to_owned(),
            risk: "serve itself every Envoy's configuration and act under any node id".to_owned(),
            remedy: "--tls-cert, --tls-key and --client-ca".to_owned(),
        }),
    };
    let xds = exposure::check("xDS", opts.xds_listen, xds_lack, opts.insecure)?;
    if !opts.access.writes_configured() {
        tracing::info!(
            "no write credential (--write-token, --write-token-file or --grant write=IDENTITY): \
             feature writes (POST /push, /write-to-online-store) are refused with 403"
        );
    }
    if api {
        tracing::warn!(
            http = %opts.http_listen,
            "INSECURE: the HTTP API listens on a network address without TLS or without a push \
             credential (--insecure): anyone who reaches it can push a snapshot to every Envoy \
             and read the fingerprints, and tokens travel in clear"
        );
    }
    if xds {
        tracing::warn!(
            xds = %opts.xds_listen,
            "INSECURE: xDS listens on a network address without mTLS (--insecure): anyone who \
             reaches it reads every Envoy's configuration and ACKs or NACKs under any node id"
        );
    }
    Ok(api || xds)
}

/// ADS and ECDS over gRPC, plaintext or TLS (each connection's verified client identity
/// reaches its streams as tonic's connect info); `xds` serves from the state and reports to
/// its stream table.
async fn serve_xds(
    xds: Xds,
    listener: TcpListener,
    tls: Option<Tls>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // tonic's own TLS cannot reload its files: connections come from the shared accept path.
    let incoming = ferry_http_serve::stream::incoming(listener, tls);
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(incoming),
        |(io, peer)| Ok::<_, std::io::Error>(XdsConn { io, peer }),
    );
    let served = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .add_service(xds.ads())
        .add_service(xds.ecds())
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.changed().await;
        })
        .await;
    if let Err(e) = served {
        tracing::error!(error = %e, "xDS server failed");
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
