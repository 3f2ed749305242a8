//! The filter's Envoy stats (proxy-wasm metrics). Defined once per VM by the root context;
//! Envoy shows them as `wasmcustom.<name>` in `/stats`, `<name>` in Prometheus (docs/metrics.md).

use crate::config::Route;
use crate::host::Host;

pub mod views;

pub use views::{Served, ViewMetrics};

/// What one request's on-demand features gave (`request/on_demand.rs`), for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DerivedCounts {
    /// Derived features computed to a value.
    pub values: usize,
    /// Derived features `INVALID` (budget included).
    pub invalid: usize,
    /// The request's budget ran out (its remaining derived features are `INVALID`).
    pub budget_spent: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Histogram,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Requests forwarded with their features.
    Enriched,
    /// Requests answered by Ferry with an error.
    Rejected,
    /// Requests forwarded unenriched (`on_reader_error: forward`).
    Degraded,
    EntitiesFound,
    EntitiesMissing,
    EntitiesStale,
    /// Reader or Redis failures of any kind (timeouts included).
    ReaderErrors,
    ReaderTimeouts,
    CacheHits,
    CacheMisses,
    CacheEvictions,
    /// Time from dispatch to the reader's answer, microseconds.
    ReaderLatencyUs,
    /// On-demand features computed to a value.
    DerivedValues,
    /// On-demand features null with status INVALID (evaluation errors, budget included).
    DerivedInvalid,
    /// Requests whose evaluation budget ran out.
    DerivedBudgetExhausted,
    /// Served-feature records handed to Envoy (filter state), for its access logger.
    LogsHanded,
    /// Served-feature records dropped in the filter: over the size bound, or refused by Envoy.
    LogsDropped,
}

pub const ALL: [(Metric, Kind, &str); 17] = [
    (Metric::Enriched, Kind::Counter, "ferry_requests_enriched"),
    (Metric::Rejected, Kind::Counter, "ferry_requests_rejected"),
    (Metric::Degraded, Kind::Counter, "ferry_requests_degraded"),
    (Metric::EntitiesFound, Kind::Counter, "ferry_entities_found"),
    (
        Metric::EntitiesMissing,
        Kind::Counter,
        "ferry_entities_missing",
    ),
    (Metric::EntitiesStale, Kind::Counter, "ferry_entities_stale"),
    (Metric::ReaderErrors, Kind::Counter, "ferry_reader_errors"),
    (
        Metric::ReaderTimeouts,
        Kind::Counter,
        "ferry_reader_timeouts",
    ),
    (Metric::CacheHits, Kind::Counter, "ferry_cache_hits"),
    (Metric::CacheMisses, Kind::Counter, "ferry_cache_misses"),
    (
        Metric::CacheEvictions,
        Kind::Counter,
        "ferry_cache_evictions",
    ),
    (
        Metric::ReaderLatencyUs,
        Kind::Histogram,
        "ferry_reader_latency_us",
    ),
    (Metric::DerivedValues, Kind::Counter, "ferry_derived_values"),
    (
        Metric::DerivedInvalid,
        Kind::Counter,
        "ferry_derived_invalid",
    ),
    (
        Metric::DerivedBudgetExhausted,
        Kind::Counter,
        "ferry_derived_budget_exhausted",
    ),
    (Metric::LogsHanded, Kind::Counter, "ferry_logs_handed"),
    (Metric::LogsDropped, Kind::Counter, "ferry_logs_dropped"),
];

/// Host ids of the defined metrics; a metric the host refused to define is skipped.
#[derive(Debug, Default)]
pub struct Metrics {
    ids: [Option<u32>; ALL.len()],
    /// The current snapshot's per (service, view) metrics (`views`).
    views: ViewMetrics,
}

impl Metrics {
    pub fn define(mut define: impl FnMut(Kind, &str) -> Option<u32>) -> Metrics {
        let mut ids = [None; ALL.len()];
        for (slot, (_, kind, name)) in ids.iter_mut().zip(ALL) {
            *slot = define(kind, name);
        }
        Metrics {
            ids,
            views: ViewMetrics::default(),
        }
    }

    /// These metrics with `views` as the per (service, view) ones.
    pub fn with_views(&self, views: ViewMetrics) -> Metrics {
        Metrics {
            ids: self.ids,
            views,
        }
    }

    pub fn views(&self) -> &ViewMetrics {
        &self.views
    }

    /// Records what a request served on `route`: per (service, view) the values by status
    /// (one add per non-zero count) and each row's age.
    pub fn count_served(&self, host: &impl Host, route: &Route, served: &Served) {
        let mut ages: Vec<Option<u32>> = Vec::with_capacity(served.cells.len());
        let mut cells = served.cells.iter();
        for part in &route.parts {
            let ids = self.views.ids(&part.service.name);
            for i in 0..part.service.views.len() {
                let (Some(counts), view) = (cells.next(), ids.get(i)) else {
                    return;
                };
                ages.push(view.and_then(|v| v.age));
                let Some(view) = view else { continue };
                for (id, n) in view.values.iter().zip(counts) {
                    if let (Some(id), true) = (id, *n > 0) {
                        host.metric_add(*id, i64::try_from(*n).unwrap_or(i64::MAX));
                    }
                }
            }
        }
        for (cell, age) in &served.ages_s {
            if let Some(Some(id)) = ages.get(*cell) {
                host.metric_record(*id, *age);
            }
        }
    }

    pub fn id(&self, m: Metric) -> Option<u32> {
        ALL.iter()
            .position(|(x, _, _)| *x == m)
            .and_then(|i| self.ids[i])
    }

    /// Adds `delta` to a counter (nothing for 0 or a metric the host did not define).
    pub fn count(&self, host: &impl Host, m: Metric, delta: usize) {
        if let (Some(id), true) = (self.id(m), delta > 0) {
            host.metric_add(id, i64::try_from(delta).unwrap_or(i64::MAX));
        }
    }

    /// Counts what computing a request's on-demand features gave.
    pub fn count_derived(&self, host: &impl Host, d: &DerivedCounts) {
        self.count(host, Metric::DerivedValues, d.values);
        self.count(host, Metric::DerivedInvalid, d.invalid);
        self.count(
            host,
            Metric::DerivedBudgetExhausted,
            usize::from(d.budget_spent),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_definitions() {
        let mut next = 10;
        let m = Metrics::define(|kind, name| {
            next += 1;
            (name != "ferry_cache_hits")
                .then_some(next + if kind == Kind::Histogram { 100 } else { 0 })
        });
        assert_eq!(m.id(Metric::Enriched), Some(11));
        assert_eq!(m.id(Metric::CacheHits), None, "refused by the host");
        assert_eq!(m.id(Metric::ReaderLatencyUs), Some(122));
    }
}
