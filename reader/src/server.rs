//! Starting the reader: binding `--listen` and serving it through the shared accept loop
//! (HTTP/1.1 keep-alive and h2c on one port, graceful drain), and the shutdown signal.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferry_http_serve::{Options, Tls};
use tokio::net::TcpListener;

use crate::config::Config;
use crate::service::Reader;

/// How long requests in flight may take to finish after a shutdown signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Why the reader could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The Redis flags cannot be used (malformed URL, unreadable CA file, ...).
    #[error("{0}")]
    Redis(#[from] ferry_redis::SetupError),
    /// The TLS files cannot be used.
    #[error("{0}")]
    Tls(#[from] ferry_http_serve::TlsError),
    /// A network address without mTLS, and no `--insecure`.
    #[error("{0}")]
    Exposed(#[from] Box<ferry_http_serve::exposure::Exposed>),
}

/// Binds `--listen` and serves until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    let insecure = ferry_http_serve::exposure::check(
        "the reader",
        config.listen,
        config.lack(),
        config.insecure,
    )?;
    if insecure {
        tracing::warn!(
            listen = %config.listen,
            "INSECURE: the reader listens on a network address without mTLS (--insecure): \
             anyone who reaches it reads any entity's features"
        );
    }
    let tls = config.tls()?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
    let reader = Arc::new(Reader::new(&config)?);
    serve_tls(listener, reader, tls, shutdown).await;
    Ok(())
}

/// Serves on an already bound listener until `shutdown` completes, then drains for up to
/// `SHUTDOWN_GRACE`. Tests call this with a `127.0.0.1:0` listener.
pub async fn serve(listener: TcpListener, reader: Arc<Reader>, shutdown: impl Future<Output = ()>) {
    serve_tls(listener, reader, None, shutdown).await;
}

/// [`serve`], over TLS when `tls` is given (with client certificates when it has a client CA).
pub async fn serve_tls(
    listener: TcpListener,
    reader: Arc<Reader>,
    tls: Option<Tls>,
    shutdown: impl Future<Output = ()>,
) {
    let local = listener.local_addr().ok();
    let mtls = tls.as_ref().is_some_and(Tls::requires_client_certificates);
    tracing::info!(listen = ?local, tls = tls.is_some(), mtls, redis = %reader.store().addr(), "ferry reader listening");

    // Learn (and log) whether Redis is there without holding up the listener.
    let probe = reader.clone();
    tokio::spawn(async move {
        let _ = probe.store().ping().await;
    });

    // No header read timeout: hyper runs it on idle keep-alive connections too, racing Envoy's
    // pool. Idle connections are closed by `--idle-timeout-ms` instead, set longer than the
    // pool's own idle timeout (see `Config::idle_timeout_ms`).
    let (max_connections, idle_timeout) = reader.connections();
    let options = Options {
        h2c: true,
        max_concurrent_streams: Some(reader.max_concurrency()),
        max_connections: Some(max_connections),
        idle_timeout: Some(idle_timeout),
        header_read_timeout: None,
        grace: SHUTDOWN_GRACE,
        tls,
    };
    let handler = move |request| {
        let reader = reader.clone();
        async move { reader.handle(request).await }
    };
    ferry_http_serve::serve(listener, &options, handler, shutdown).await;
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received"),
        () = terminate => tracing::info!("SIGTERM received"),
    }
}
