//! `ferry log-sink`'s `/metrics`: rows written and dropped (by reason), files written, write
//! errors, rows held in memory, access-log streams open and refused.

use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

/// Why rows were dropped: the `reason` label of `ferry_log_sink_records_dropped`.
pub const BUFFER_FULL: &str = "buffer_full";
pub const WRITE_ERROR: &str = "write_error";
pub const UNDECODABLE: &str = "undecodable";

#[derive(Debug, Clone, Default)]
pub struct SinkMetrics {
    /// Rows (one per instance per FeatureService of a logged request) in complete files.
    pub written: Counter,
    dropped: Family<Labels, Counter>,
    pub files: Counter,
    /// Files that could not be written (unwritable or full directory, ...).
    pub errors: Counter,
    /// Rows held in memory, waiting for their file.
    pub buffered: Gauge,
    /// Access-log streams open now.
    pub streams: Gauge,
    /// Streams refused because `--max-streams` were open.
    pub streams_refused: Counter,
}

impl SinkMetrics {
    pub fn new() -> Self {
        let m = SinkMetrics::default();
        for reason in [BUFFER_FULL, WRITE_ERROR, UNDECODABLE] {
            drop(m.dropped.get_or_create(&label(reason)));
        }
        m
    }

    pub fn drop_rows(&self, reason: &str, rows: usize) {
        self.dropped
            .get_or_create(&label(reason))
            .inc_by(rows as u64);
    }

    pub fn dropped(&self, reason: &str) -> u64 {
        self.dropped.get_or_create(&label(reason)).get()
    }

    /// The OpenMetrics text of every series.
    pub fn text(&self) -> String {
        let mut registry = Registry::default();
        registry.register(
            "ferry_log_sink_records_written",
            "Served-feature rows written in complete Parquet files",
            self.written.clone(),
        );
        registry.register(
            "ferry_log_sink_records_dropped",
            "Served-feature rows dropped, by reason",
            self.dropped.clone(),
        );
        registry.register(
            "ferry_log_sink_files_written",
            "Parquet files completed (renamed into place)",
            self.files.clone(),
        );
        registry.register(
            "ferry_log_sink_write_errors",
            "Parquet files that could not be written",
            self.errors.clone(),
        );
        registry.register(
            "ferry_log_sink_records_buffered",
            "Served-feature rows held in memory for their file",
            self.buffered.clone(),
        );
        registry.register(
            "ferry_log_sink_streams",
            "Access-log streams open",
            self.streams.clone(),
        );
        registry.register(
            "ferry_log_sink_streams_refused",
            "Access-log streams refused: --max-streams were open",
            self.streams_refused.clone(),
        );
        let mut out = String::new();
        if let Err(e) = text::encode(&mut out, &registry) {
            tracing::error!(error = %e, "encoding /metrics");
        }
        out
    }
}

fn label(reason: &str) -> Labels {
    vec![("reason".to_owned(), reason.to_owned())]
}
