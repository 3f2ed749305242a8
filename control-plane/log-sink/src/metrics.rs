//! `ferry log-sink`'s `/metrics`: rows written and dropped (by reason), records rejected whole,
//! files written, write errors, rows held in memory, access-log streams open and refused,
//! connections refused for their identity, and retention (files and bytes removed, bytes held).

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

/// Why a whole record was written nowhere: the `reason` label of
/// `ferry_log_sink_requests_rejected`.
pub const NO_INSTANCES: &str = "no_instances";

/// Why a file was removed: the `reason` label of `ferry_log_sink_files_removed`.
pub const AGE: &str = "age";
pub const BYTES: &str = "bytes";

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
    /// Logged requests whose record was written nowhere, by reason.
    rejected: Family<Labels, Counter>,
    /// gRPC connections closed after their handshake: the certificate matched no
    /// `--allow-identity`.
    pub identity_refused: Counter,
    /// Complete files removed by retention, by reason (`--retain-secs`, `--max-bytes`).
    removed: Family<Labels, Counter>,
    pub bytes_removed: Counter,
    /// Bytes of complete files under the directory, as retention counts them.
    pub bytes_held: Gauge,
    pub files_held: Gauge,
}

impl SinkMetrics {
    pub fn new() -> Self {
        let m = SinkMetrics::default();
        for reason in [BUFFER_FULL, WRITE_ERROR, UNDECODABLE] {
            drop(m.dropped.get_or_create(&label(reason)));
        }
        drop(m.rejected.get_or_create(&label(NO_INSTANCES)));
        for reason in [AGE, BYTES] {
            drop(m.removed.get_or_create(&label(reason)));
        }
        m
    }

    pub fn reject(&self, reason: &str) {
        self.rejected.get_or_create(&label(reason)).inc();
    }

    pub fn rejected(&self, reason: &str) -> u64 {
        self.rejected.get_or_create(&label(reason)).get()
    }

    /// A file retention removed, for `reason`.
    pub fn removed_file(&self, reason: &str, bytes: u64) {
        self.removed.get_or_create(&label(reason)).inc();
        self.bytes_removed.inc_by(bytes);
    }

    pub fn removed(&self, reason: &str) -> u64 {
        self.removed.get_or_create(&label(reason)).get()
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
        registry.register(
            "ferry_log_sink_requests_rejected",
            "Logged requests whose record was written nowhere, by reason",
            self.rejected.clone(),
        );
        registry.register(
            "ferry_log_sink_connections_refused_identity",
            "Access-log connections closed: the client certificate matched no --allow-identity",
            self.identity_refused.clone(),
        );
        self.register_retention(&mut registry);
        let mut out = String::new();
        if let Err(e) = text::encode(&mut out, &registry) {
            tracing::error!(error = %e, "encoding /metrics");
        }
        out
    }
}

impl SinkMetrics {
    fn register_retention(&self, registry: &mut Registry) {
        registry.register(
            "ferry_log_sink_files_removed",
            "Complete files removed by retention, by reason (age, bytes)",
            self.removed.clone(),
        );
        registry.register(
            "ferry_log_sink_removed_bytes",
            "Bytes of the files removed by retention",
            self.bytes_removed.clone(),
        );
        registry.register(
            "ferry_log_sink_held_bytes",
            "Bytes of complete files under --dir",
            self.bytes_held.clone(),
        );
        registry.register(
            "ferry_log_sink_held_files",
            "Complete files under --dir",
            self.files_held.clone(),
        );
    }
}

fn label(reason: &str) -> Labels {
    vec![("reason".to_owned(), reason.to_owned())]
}
