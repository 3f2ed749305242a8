//! The write path's series on `ferry serve`'s `/metrics`: rows by result, refusals by reason,
//! compare-and-set conflicts, and the latency of a whole write request.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use ferry_vector_store::merge::Refusal;

type Labels = Vec<(String, String)>;

/// Row results: the `result` label of `ferry_write_rows_total`.
pub const WRITTEN: &str = "written";
pub const SKIPPED_OLDER: &str = "skipped_older";
pub const REFUSED: &str = "refused";

/// Request refusals (nothing written) beside the per-vector ones of [`Refusal`].
pub const REQUEST_REASONS: [&str; 13] = [
    "invalid_request",
    "invalid_rows",
    "unknown_push_source",
    "unknown_view",
    "offline_write_refused",
    "body_too_large",
    "too_many_rows",
    "cell_too_large",
    "list_too_long",
    "vector_too_large",
    "too_many_writes",
    "unauthorized",
    "forbidden",
];

#[derive(Debug, Clone)]
pub struct WriteMetrics {
    rows: Family<Labels, Counter>,
    refusals: Family<Labels, Counter>,
    pub conflicts_total: Counter,
    pub latency: Histogram,
    /// Write requests holding a slot (`--max-concurrent-writes`) now.
    pub in_flight: Gauge,
    /// Seconds writes' keys waited for their slot (`--max-write-keys-per-second`).
    pub paced_seconds: Counter<f64>,
}

impl Default for WriteMetrics {
    fn default() -> Self {
        let m = WriteMetrics {
            rows: Family::default(),
            refusals: Family::default(),
            conflicts_total: Counter::default(),
            // 100 µs .. ~6.5 s.
            latency: Histogram::new(exponential_buckets(0.0001, 2.0, 17)),
            in_flight: Gauge::default(),
            paced_seconds: Counter::default(),
        };
        for result in [WRITTEN, SKIPPED_OLDER, REFUSED] {
            drop(m.rows.get_or_create(&label("result", result)));
        }
        for reason in REQUEST_REASONS
            .into_iter()
            .chain(Refusal::ALL.map(Refusal::label))
        {
            drop(m.refusals.get_or_create(&label("reason", reason)));
        }
        m
    }
}

fn label(name: &str, value: &str) -> Labels {
    vec![(name.to_owned(), value.to_owned())]
}

impl WriteMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "ferry_write_rows",
            "Pushed rows by result: written (to at least one vector), skipped_older (every \
             vector holds a newer row), refused (a vector refused it)",
            self.rows.clone(),
        );
        registry.register(
            "ferry_write_refusals",
            "Write refusals by reason: whole requests (nothing written) and single vectors",
            self.refusals.clone(),
        );
        registry.register(
            "ferry_write_conflicts",
            "Compare-and-set attempts that found the vector changed and read it again",
            self.conflicts_total.clone(),
        );
        registry.register(
            "ferry_writes_in_flight",
            "Write requests being answered now (each holds one of --max-concurrent-writes)",
            self.in_flight.clone(),
        );
        registry.register(
            "ferry_write_paced_seconds",
            "Seconds write keys waited for their slot under --max-write-keys-per-second",
            self.paced_seconds.clone(),
        );
        registry.register(
            "ferry_write_duration_seconds",
            "Time to answer a write request (validation and every vector written)",
            self.latency.clone(),
        );
    }

    pub fn rows(&self, result: &str, n: u64) {
        self.rows.get_or_create(&label("result", result)).inc_by(n);
    }

    pub fn refused(&self, reason: &str) {
        self.refusals.get_or_create(&label("reason", reason)).inc();
    }
}
