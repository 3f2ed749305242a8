//! The access-log gRPC service: admits a stream under `--max-streams`, decodes each entry's
//! record and hands it to the writer thread; a record naming no instance is rejected here, so it
//! never reaches a group, a file or a folder.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;

use envoy_types::pb::envoy::service::accesslog::v3::access_log_service_server::AccessLogService;
use envoy_types::pb::envoy::service::accesslog::v3::stream_access_logs_message::LogEntries;
use envoy_types::pb::envoy::service::accesslog::v3::{
    StreamAccessLogsMessage, StreamAccessLogsResponse,
};
use ferry_protos::v1::ServedLog;
use tonic::{Request, Response, Status, Streaming};

use super::decode;
use super::metrics::{self, SinkMetrics};

/// The access-log service: decodes each entry's record and hands it to the writer.
#[derive(Clone)]
pub(super) struct Sink {
    pub(super) records: SyncSender<ServedLog>,
    pub(super) metrics: SinkMetrics,
    /// Streams open now, against `max_streams`.
    pub(super) open: Arc<AtomicUsize>,
    pub(super) max_streams: usize,
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

    pub(super) fn take(&self, message: StreamAccessLogsMessage) {
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
        if rows == 0 {
            self.metrics.reject(metrics::NO_INSTANCES);
            return;
        }
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
