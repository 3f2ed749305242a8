//! `ferry log-sink`: the served-feature log sink. Envoy's gRPC access-log service
//! (`envoy.service.accesslog.v3.AccessLogService`) streams each logged request's entry; the
//! record the filter left in filter state (`decode`) becomes rows, grouped and written as
//! Parquet files in Feast's feature-logging layout (`files`, `parquet_file`); `/metrics` on
//! its own HTTP listener (`metrics`).
//!
//! Nothing here can slow Envoy: the gRPC handler only decodes and hands records to the writer
//! thread over a bounded channel; a full channel drops the record and counts it. Envoy's own
//! logger drops (and counts, `access_logs.grpc_access_log.logs_dropped`) what it cannot send.
//!
//! Memory per stream is one message (at most [`MAX_MESSAGE_BYTES`]) and HTTP/2's windows; the
//! streams open at once are capped (`max_streams`): one more is refused with
//! `RESOURCE_EXHAUSTED` and counted, so a crowd of Envoys cannot grow the sink without bound.
//! Both listeners cap their connections as the other servers do (`max_connections`: the
//! access-log side, through the shared accept path; `max_http_connections`: `/metrics`, with
//! header and idle timeouts); `allowed` narrows mTLS to the certificates that may send logs
//! ([`identity`]); what stays on disk is bounded by age and bytes ([`retention`]).
//!
//! - [`decode`]: an access-log entry's filter state into served-feature rows.
//! - `service`: the access-log gRPC service (admits streams, hands records to the writer).
//! - [`files`]: the writer thread: rows grouped per service, layout and day, one file each.
//! - [`parquet_file`]: one Parquet file in Feast's feature-logging layout.
//! - [`retention`]: what stays on disk, by age and bytes.
//! - [`identity`]: which client certificates may send logs.
//! - [`metrics`]: the sink's `/metrics`.

pub mod decode;
pub mod files;
pub mod identity;
pub mod metrics;
pub mod parquet_file;
pub mod retention;
mod service;

use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::sync_channel;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_server::AccessLogServiceServer;
use ferry_http_serve::{Options, Tls};
use http_body_util::Full;
use tokio::net::TcpListener;

use ferry_xds::grpc::XdsConn;
pub use files::FileOptions;
pub use identity::Allowed;
pub use metrics::SinkMetrics;
pub use retention::RetentionOptions;
use service::Sink;

/// Records in flight between the gRPC handler and the writer thread.
pub const CHANNEL_RECORDS: usize = 4096;
/// The largest access-log message decoded. Envoy sends a batch once 64 KiB are buffered, so a
/// message is that plus one entry, whose record the filter keeps under 256 KiB.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// Streams one connection may open (Envoy opens one per worker thread and logger).
pub const STREAMS_PER_CONNECTION: u32 = 64;
/// The default of `--max-streams`: streams open at once over all connections.
pub const DEFAULT_MAX_STREAMS: usize = 1024;
/// The default of `--max-connections`: access-log connections served at once. Each Envoy
/// opens one per worker thread, each carrying at least one stream, so as many as streams.
pub const DEFAULT_MAX_CONNECTIONS: usize = DEFAULT_MAX_STREAMS;
/// The default of `--max-http-connections`: `/metrics` connections served at once (scrapers
/// and probes, a handful).
pub const DEFAULT_MAX_HTTP_CONNECTIONS: usize = 64;
/// Time a `/metrics` client has to send its request headers.
pub const HTTP_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// A `/metrics` connection with no request for this long is closed: longer than a keep-alive
/// scraper's interval (Prometheus' default is 60 s), so a scraper keeps its connection while one
/// that went quiet gives its slot back.
pub const HTTP_IDLE_TIMEOUT: Duration = Duration::from_secs(90);

pub struct SinkOptions {
    pub files: FileOptions,
    pub grpc: TcpListener,
    pub http: TcpListener,
    /// TLS of the gRPC listener (mTLS when it has a client CA).
    pub tls: Option<Tls>,
    /// Which client certificates may send logs (none: every one the TLS setup admits).
    pub allowed: Allowed,
    /// Access-log streams open at once; one more is refused (`RESOURCE_EXHAUSTED`).
    pub max_streams: usize,
    /// Access-log connections served at once; more wait in the accept queue.
    pub max_connections: usize,
    /// `/metrics` connections served at once; more wait in the accept queue.
    pub max_http_connections: usize,
}

/// Runs the sink until `stop` fires; then writes every group still open.
pub async fn run(opts: SinkOptions, mut stop: tokio::sync::watch::Receiver<bool>) -> Result<()> {
    let metrics = SinkMetrics::new();
    files::create_folder(&opts.files.dir)
        .with_context(|| format!("creating {}", opts.files.dir.display()))?;
    let (tx, rx) = sync_channel(CHANNEL_RECORDS);
    let writer = files::Files::new(opts.files.clone(), metrics.clone());
    let thread = std::thread::Builder::new()
        .name("log-sink-writer".into())
        .spawn(move || writer.run(rx))
        .context("starting the writer thread")?;
    let sink = Sink {
        records: tx,
        metrics: metrics.clone(),
        open: Arc::new(AtomicUsize::new(0)),
        max_streams: opts.max_streams.max(1),
    };
    let http = tokio::spawn(serve_metrics(
        opts.http,
        opts.max_http_connections.max(1),
        metrics.clone(),
        stop.clone(),
    ));
    let incoming =
        ferry_http_serve::stream::incoming_capped(opts.grpc, opts.tls, opts.max_connections.max(1));
    let allowed = opts.allowed;
    // A connection whose certificate is not allowed is dropped here: closed, its slot free.
    let incoming = tokio_stream::StreamExt::filter_map(
        tokio_stream::wrappers::ReceiverStream::new(incoming),
        move |(io, peer)| {
            allowed
                .admit(&peer, &metrics)
                .then_some(Ok::<_, std::io::Error>(XdsConn { io, peer }))
        },
    );
    let served = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .max_concurrent_streams(STREAMS_PER_CONNECTION)
        .add_service(AccessLogServiceServer::new(sink).max_decoding_message_size(MAX_MESSAGE_BYTES))
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = stop.changed().await;
        })
        .await;
    let _ = http.await;
    // The server (and with it every sender) is gone: the writer writes what it holds.
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    served.context("access-log service")
}

/// `/metrics` over HTTP/1.1, bounded as `ferry serve`'s API is: `max_connections` at once, the
/// headers within [`HTTP_HEADER_TIMEOUT`], idle connections closed after [`HTTP_IDLE_TIMEOUT`].
async fn serve_metrics(
    listener: TcpListener,
    max_connections: usize,
    metrics: SinkMetrics,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let handler = move |req: hyper::Request<hyper::body::Incoming>| {
        let metrics = metrics.clone();
        async move {
            if req.uri().path() == "/metrics" {
                let mut r = hyper::Response::new(Full::new(Bytes::from(metrics.text())));
                r.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static(
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    ),
                );
                r
            } else {
                let mut r = hyper::Response::new(Full::new(Bytes::from_static(b"not found\n")));
                *r.status_mut() = hyper::StatusCode::NOT_FOUND;
                r
            }
        }
    };
    let shutdown = async move {
        let _ = stop.changed().await;
    };
    let options = Options {
        h2c: false,
        max_connections: Some(max_connections),
        header_read_timeout: Some(HTTP_HEADER_TIMEOUT),
        idle_timeout: Some(HTTP_IDLE_TIMEOUT),
        ..Options::default()
    };
    ferry_http_serve::serve(listener, &options, handler, shutdown).await;
}

/// Where the sink listens, for its start line.
pub fn describe(grpc: SocketAddr, http: SocketAddr, opts: &FileOptions) -> String {
    format!(
        "served-feature log sink: access-log gRPC on {grpc}, /metrics on http://{http}, files under {}",
        opts.dir.display()
    )
}

#[cfg(test)]
mod stream_tests;
#[cfg(test)]
#[path = "log_sink_tests.rs"]
mod tests;
