//! The accept loop Ferry's HTTP servers share (the reader, the control plane's API, the demo
//! model): one port, HTTP/1.1 keep-alive and h2c (or TLS, [`tls`]), Nagle off, bounds, and a
//! graceful drain. Transport policy (TLS, connection caps, idle timeouts) belongs here, in
//! [`Options`]; the rule for who may listen where without it, in [`exposure`]. Each request
//! carries its connection's [`Peer`] (and its verified client identity) as an extension.
//! The servers' shared log set-up: [`logging`].

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

mod connection;
pub mod exposure;
mod idle;
pub mod logging;
pub mod stream;
pub mod tls;

pub use tls::{ClientAuth, Peer, PeerIdentity, Tls, TlsError, TlsFiles};

/// How a server accepts and keeps its connections.
#[derive(Debug, Clone)]
pub struct Options {
    /// Also serve HTTP/2 with prior knowledge (h2c) on the same port, told apart by the
    /// connection preface: Envoy's gRPC and h2 upstream pools speak it.
    pub h2c: bool,
    /// Connections served at once. A connection beyond the cap is not accepted: it waits in
    /// the kernel's accept queue (its client sees a connected socket and no answer yet) until
    /// a served one closes, then is served in arrival order; when that queue is full too, the
    /// kernel drops new SYNs and clients retry. The server's own file descriptors stay bounded
    /// by the cap. Pair it with [`Options::idle_timeout`], or clients that connect and stay
    /// silent hold every slot. `None`: no bound.
    pub max_connections: Option<usize>,
    /// HTTP/2 streams one connection may carry at once. `None`: hyper's default.
    pub max_concurrent_streams: Option<u32>,
    /// Time allowed to send a request's headers. hyper's header timer also runs while a
    /// keep-alive connection sits idle, so it closes idle pooled connections and races the pool
    /// reusing them: `None` leaves that to the pool's owner (Envoy).
    pub header_read_timeout: Option<Duration>,
    /// Close a connection (HTTP/1.1 keep-alive or h2c) that has carried no request for this
    /// long: none in flight, and the last one ended (or the connection opened) this long ago.
    /// Unlike `header_read_timeout`, it never cuts a request that is being answered, and it
    /// also covers a connection that never sends anything. A server behind a pool (Envoy) sets
    /// it longer than the pool's own idle timeout, so the pool closes first and never sends a
    /// request on a connection the server is closing. `None`: idle connections stay open.
    pub idle_timeout: Option<Duration>,
    /// How long requests in flight may take to finish once shutdown is signalled.
    pub grace: Duration,
    /// Serve TLS (and verify client certificates) instead of plaintext. `None`: plaintext.
    pub tls: Option<Tls>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            h2c: true,
            max_connections: None,
            max_concurrent_streams: None,
            header_read_timeout: None,
            idle_timeout: None,
            grace: Duration::from_secs(10),
            tls: None,
        }
    }
}

/// A response body any connection can carry (HTTP/1.1 or h2, on any worker thread).
pub trait ResponseBody:
    Body<Data: Send, Error: Into<Box<dyn std::error::Error + Send + Sync>>> + Send + 'static
{
}

impl<B> ResponseBody for B where
    B: Body<Data: Send, Error: Into<Box<dyn std::error::Error + Send + Sync>>> + Send + 'static
{
}

/// Serves `handler` on an already bound `listener` until `shutdown` completes; then stops
/// accepting and lets requests in flight finish for up to [`Options::grace`].
pub async fn serve<H, F, B>(
    listener: TcpListener,
    options: &Options,
    handler: H,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: ResponseBody,
{
    let builder = builder(options);
    let permits = options.max_connections.map(|n| Arc::new(Semaphore::new(n)));
    // Every connection holds a receiver: the drain waits for them all to be dropped.
    let (stop, _) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (permit, (stream, peer)) = tokio::select! {
            admitted = admit(&listener, permits.as_ref()) => match admitted {
                Some(admitted) => admitted,
                None => break,
            },
            () = &mut shutdown => break,
        };
        let (builder, handler) = (builder.clone(), handler.clone());
        let (tls, idle_timeout, stop) =
            (options.tls.clone(), options.idle_timeout, stop.subscribe());
        tokio::spawn(async move {
            // The handshake runs here, not in the accept loop: a slow client holds its own slot.
            match stream::handshake(stream, peer, tls.as_ref()).await {
                Ok((io, peer)) => serve_one(&builder, io, peer, handler, idle_timeout, stop).await,
                Err(e) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
            }
            drop(permit);
        });
    }
    drop(listener);
    drain(&stop, options.grace).await;
}

/// Serves one connection (its handshake done) until it ends.
async fn serve_one<H, F, B>(
    builder: &auto::Builder<TokioExecutor>,
    io: stream::Stream,
    peer: Peer,
    handler: H,
    idle_timeout: Option<Duration>,
    stop: watch::Receiver<bool>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: ResponseBody,
{
    let activity = idle::Activity::new();
    let addr = peer.addr;
    let service = {
        let activity = activity.clone();
        service_fn(move |mut request: Request<Incoming>| {
            let in_flight = activity.start();
            request.extensions_mut().insert(peer.clone());
            let answer = handler(request);
            async move {
                let response = answer.await;
                drop(in_flight);
                Ok::<_, Infallible>(response)
            }
        })
    };
    let connection = builder.serve_connection(TokioIo::new(io), service);
    if let Err(e) = connection::run(connection, activity, idle_timeout, stop).await {
        tracing::debug!(peer = %addr, error = %e, "connection ended with an error");
    }
}

/// The connection builder `options` describe.
fn builder(options: &Options) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .keep_alive(true)
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    let mut http2 = builder.http2();
    http2.timer(TokioTimer::new());
    if let Some(streams) = options.max_concurrent_streams {
        http2.max_concurrent_streams(streams);
    }
    if options.h2c {
        builder
    } else {
        builder.http1_only()
    }
}

/// The next connection, once a permit (if connections are bounded) allows it; `None` when the
/// bound is gone. Accept errors (typically out of file descriptors) back off instead of spinning.
async fn admit(
    listener: &TcpListener,
    permits: Option<&Arc<Semaphore>>,
) -> Option<(
    Option<OwnedSemaphorePermit>,
    (TcpStream, std::net::SocketAddr),
)> {
    let permit = match permits {
        Some(permits) => Some(permits.clone().acquire_owned().await.ok()?),
        None => None,
    };
    loop {
        match listener.accept().await {
            Ok(accepted) => return Some((permit, accepted)),
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Tells every connection to finish and close, and waits for them, for `grace` at most.
async fn drain(stop: &watch::Sender<bool>, grace: Duration) {
    tracing::info!(
        connections = stop.receiver_count(),
        "shutting down: no new connections, draining"
    );
    stop.send_replace(true);
    tokio::select! {
        () = stop.closed() => tracing::info!("all connections closed"),
        () = tokio::time::sleep(grace) => {
            tracing::warn!(grace_s = grace.as_secs_f64(), "requests still in flight after the grace period; exiting");
        }
    }
}

#[cfg(test)]
#[path = "http_serve_tests.rs"]
mod tests;

#[cfg(test)]
mod tls_tests;
