//! `ferry serve`: the control plane. One current snapshot (from the repo, then from repo
//! changes and pushes) served to every Envoy over xDS (ADS and ECDS), an HTTP API for status,
//! metrics and pushes, and a graceful stop on SIGINT/SIGTERM.
//!
//! - [`state`]: the current snapshot and refusals, the xDS server's snapshot source.
//! - [`streams`]: connected streams and the xDS counters, the xDS server's callbacks.
//! - [`resources`]: the xDS resources built from a snapshot (the filter's ECDS config).
//! - [`http`]: `/status`, `/metrics`, `/healthz`, `POST /v1/snapshot`.
//! - [`api`]: the HTTP API's wire types (server and client share them).
//! - [`auth`]: the API's roles and tokens, and the start rules for them.
//! - [`status`], [`metrics`]: the JSON and OpenMetrics renderings.
//! - [`watch`]: polling the repo for changes, and the hold-back rule for them.
//! - [`persist`]: the state directory, where every accepted snapshot is saved.
//! - [`signing`]: the signed snapshot `GET /v1/snapshot` serves with `--signing-key`.
//! - [`startup`]: what is served first (the saved snapshot, or the repo).

pub mod api;
pub mod auth;
pub mod http;
mod limits;
pub mod metrics;
pub mod persist;
pub mod resources;
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
use tokio::net::TcpListener;

use crate::xds::Xds;
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
    /// Bearer tokens for pushes and reads; none = open (loopback, or `insecure`).
    pub tokens: auth::Tokens,
    /// Allow the HTTP API open (no push token) on a network address (`--insecure`).
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
}

/// Runs until SIGINT or SIGTERM.
pub async fn run(opts: ServeOptions) -> Result<()> {
    let insecure = access_rules(&opts)?;
    limits::raise_open_files(opts.max_http_connections);
    let store = persist::StateDir::open(&opts.state_dir)?;
    let state = Arc::new(
        State::new(
            opts.filter.clone(),
            opts.reader_cluster.clone(),
            Some(store.clone()),
        )
        .with_signer(opts.signer.clone()),
    );
    if let Some(signer) = &opts.signer {
        tracing::info!(key = %signer.plugin_key(), "GET /v1/snapshot serves signed snapshots");
    }
    let hash = startup::first_snapshot(&state, &store, &opts.repo)?;

    let xds_listener = TcpListener::bind(opts.xds_listen)
        .await
        .with_context(|| format!("binding the xDS port {}", opts.xds_listen))?;
    let http_listener = TcpListener::bind(opts.http_listen)
        .await
        .with_context(|| format!("binding the HTTP port {}", opts.http_listen))?;
    tracing::info!(
        xds = %xds_listener.local_addr()?,
        http = %http_listener.local_addr()?,
        version = %state.current().map(|c| c.snapshot.version.clone()).unwrap_or_default(),
        "ferry control plane serving"
    );

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = vec![tokio::spawn(serve_xds(
        state.clone(),
        xds_listener,
        stop_rx.clone(),
        (opts.max_streams, opts.max_streams_per_node),
    ))];
    let api = http::Api {
        state: state.clone(),
        tokens: opts.tokens.clone(),
        insecure,
        max_connections: opts.max_http_connections,
        #[cfg(feature = "test-switches")]
        allow_invalid: opts.allow_invalid,
    };
    tasks.push(tokio::spawn(http::serve(
        http_listener,
        api,
        stop_rx.clone(),
    )));
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

/// The start rules for the HTTP API's tokens; true when it runs open on a network address
/// (`--insecure`), said loudly here and on `/status`.
fn access_rules(opts: &ServeOptions) -> Result<bool> {
    let insecure = opts.tokens.check(opts.http_listen, opts.insecure)?;
    if insecure {
        tracing::warn!(
            http = %opts.http_listen,
            "INSECURE: the HTTP API listens on a network address with no push token \
             (--insecure): anyone who reaches it can push a snapshot to every Envoy and read \
             the fingerprints"
        );
    }
    Ok(insecure)
}

/// ADS and ECDS over gRPC, with `state` as the snapshot source and its stream table as the
/// callbacks.
async fn serve_xds(
    state: Arc<State>,
    listener: TcpListener,
    mut stop: tokio::sync::watch::Receiver<bool>,
    (max_streams, max_streams_per_node): (usize, usize),
) {
    let xds = Xds::new(
        state.clone(),
        state.streams.clone(),
        stop.clone(),
        max_streams,
        max_streams_per_node,
    );
    let served = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .add_service(xds.ads())
        .add_service(xds.ecds())
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            async move {
                let _ = stop.changed().await;
            },
        )
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
