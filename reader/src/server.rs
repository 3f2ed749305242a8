//! Accepting connections: HTTP/1.1 keep-alive and h2c (prior knowledge) on one port, Nagle off,
//! and a graceful shutdown that stops accepting and lets requests in flight finish.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
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
}

/// Binds `--listen` and serves until `shutdown` completes.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<(), StartError> {
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: config.listen,
            source,
        })?;
    let reader = Arc::new(Reader::new(&config)?);
    serve(listener, reader, shutdown).await;
    Ok(())
}

/// Serves on an already bound listener until `shutdown` completes, then drains for up to
/// `SHUTDOWN_GRACE`. Tests call this with a `127.0.0.1:0` listener.
pub async fn serve(listener: TcpListener, reader: Arc<Reader>, shutdown: impl Future<Output = ()>) {
    let local = listener.local_addr().ok();
    tracing::info!(listen = ?local, redis = %reader.store().addr(), "ferry reader listening");

    // Learn (and log) whether Redis is there without holding up the listener.
    let probe = reader.clone();
    tokio::spawn(async move {
        let _ = probe.store().ping().await;
    });

    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .keep_alive(true)
        .timer(TokioTimer::new())
        // hyper's header read timeout also runs while a keep-alive connection sits idle, so it
        // would close Envoy's pooled connections and race Envoy reusing them (a reset request).
        // The pool's owner, Envoy, decides when an idle connection goes.
        .header_read_timeout(None);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(reader.max_concurrency());

    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Responses are small and written whole: Nagle would only add latency.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(%peer, error = %e, "TCP_NODELAY not set");
        }
        let reader = reader.clone();
        let service = service_fn(move |request| {
            let reader = reader.clone();
            async move { Ok::<_, Infallible>(reader.handle(request).await) }
        });
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }

    drop(listener);
    tracing::info!(
        connections = graceful.count(),
        "shutting down: no new connections, draining"
    );
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!(grace_s = SHUTDOWN_GRACE.as_secs(), "requests still in flight after the grace period; exiting");
        }
    }
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
