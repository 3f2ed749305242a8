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

pub mod decode;
pub mod files;
pub mod metrics;
pub mod parquet_file;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use bytes::Bytes;
use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_server::{
    AccessLogService, AccessLogServiceServer,
};
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::LogEntries;
use envoy_types::pb::envoy::service::accesslog::v3::{
    StreamAccessLogsMessage, StreamAccessLogsResponse,
};
use ferry_http_serve::{Options, Tls};
use ferry_protos::v1::ServedLog;
use http_body_util::Full;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status, Streaming};

use crate::xds::grpc::XdsConn;
pub use files::FileOptions;
pub use metrics::SinkMetrics;

/// Records in flight between the gRPC handler and the writer thread.
pub const CHANNEL_RECORDS: usize = 4096;
/// The largest access-log message decoded. Envoy sends a batch once 64 KiB are buffered, so a
/// message is that plus one entry, whose record the filter keeps under 256 KiB.
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;
/// Streams one connection may open (Envoy opens one per worker thread and logger).
pub const STREAMS_PER_CONNECTION: u32 = 64;
/// The default of `--max-streams`: streams open at once over all connections.
pub const DEFAULT_MAX_STREAMS: usize = 1024;

pub struct SinkOptions {
    pub files: FileOptions,
    pub grpc: TcpListener,
    pub http: TcpListener,
    /// TLS of the gRPC listener (mTLS when it has a client CA).
    pub tls: Option<Tls>,
    /// Access-log streams open at once; one more is refused (`RESOURCE_EXHAUSTED`).
    pub max_streams: usize,
}

/// The access-log service: decodes each entry's record and hands it to the writer.
#[derive(Clone)]
struct Sink {
    records: SyncSender<ServedLog>,
    metrics: SinkMetrics,
    /// Streams open now, against `max_streams`.
    open: Arc<AtomicUsize>,
    max_streams: usize,
}

/// One open stream: counted while it lives.
struct StreamSlot {
    open: Arc<AtomicUsize>,
    metrics: SinkMetrics,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let now = self.open.fetch_sub(1, Ordering::SeqCst) - 1;
        self.metrics.streams.set(now as i64);
    }
}

impl Sink {
    /// A slot for one more stream, or the status refusing it.
    fn open_stream(&self) -> Result<StreamSlot, Status> {
        let taken = self
            .open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.max_streams).then_some(n + 1)
            });
        match taken {
            Ok(n) => {
                self.metrics.streams.set(n as i64 + 1);
                Ok(StreamSlot {
                    open: self.open.clone(),
                    metrics: self.metrics.clone(),
                })
            }
            Err(_) => {
                self.metrics.streams_refused.inc();
                Err(Status::resource_exhausted(format!(
                    "the log sink has {} access-log streams open, its --max-streams",
                    self.max_streams
                )))
            }
        }
    }

    fn take(&self, message: StreamAccessLogsMessage) {
        let Some(LogEntries::HttpLogs(logs)) = message.log_entries else {
            return;
        };
        for entry in &logs.log_entry {
            match decode::record(entry) {
                None => {}
                Some(Ok(log)) => self.hand_over(log),
                Some(Err(e)) => {
                    self.metrics.drop_rows(metrics::UNDECODABLE, 1);
                    tracing::debug!(error = %e, "undecodable served-feature record");
                }
            }
        }
    }

    fn hand_over(&self, log: ServedLog) {
        let rows = log.services.iter().map(|s| s.instances.len()).sum();
        match self.records.try_send(log) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.metrics.drop_rows(metrics::BUFFER_FULL, rows);
            }
        }
    }
}

#[tonic::async_trait]
impl AccessLogService for Sink {
    async fn stream_access_logs(
        &self,
        request: Request<Streaming<StreamAccessLogsMessage>>,
    ) -> Result<Response<StreamAccessLogsResponse>, Status> {
        let _slot = self.open_stream()?;
        let mut stream = request.into_inner();
        while let Some(message) = stream.message().await? {
            self.take(message);
        }
        Ok(Response::new(StreamAccessLogsResponse {}))
    }
}

/// Runs the sink until `stop` fires; then writes every group still open.
pub async fn run(opts: SinkOptions, mut stop: tokio::sync::watch::Receiver<bool>) -> Result<()> {
    let metrics = SinkMetrics::new();
    std::fs::create_dir_all(&opts.files.dir)
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
    let http_stop = stop.clone();
    let http = tokio::spawn(serve_metrics(opts.http, metrics, http_stop));
    let incoming = ferry_http_serve::stream::incoming(opts.grpc, opts.tls);
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::ReceiverStream::new(incoming),
        |(io, peer)| Ok::<_, std::io::Error>(XdsConn { io, peer }),
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

async fn serve_metrics(
    listener: TcpListener,
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
    ferry_http_serve::serve(listener, &Options::default(), handler, shutdown).await;
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
mod tests;
