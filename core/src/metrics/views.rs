//! Per (FeatureService, feature view) metrics: values served by status and the age of the
//! rows served (issue #24's monitoring). Defined per snapshot, one series set per (service,
//! view) of it, at most `MAX_VIEW_SERIES` pairs. The labels travel in the metric name
//! (`ferry_view_values.service.S.view.V.status.ST`, `ferry_view_age_seconds.service.S.view.V`)
//! and Envoy's `stats_tags` (our bootstrap) turn them into Prometheus labels.

use std::collections::HashMap;

use super::Kind;
use crate::config::{Config, Route, Service};
use crate::vector::FeatureStatus;

/// The most (service, view) pairs given metrics; pairs past it (in snapshot order) get none.
pub const MAX_VIEW_SERIES: usize = 512;

/// The value statuses counted, in `ViewIds::values` order (the `status` label).
pub const STATUSES: [&str; 4] = ["present", "null", "missing", "stale"];

pub const VALUES_NAME: &str = "ferry_view_values";
pub const AGE_NAME: &str = "ferry_view_age_seconds";

/// The Prometheus histogram buckets (seconds) our bootstrap gives `ferry_view_age_seconds`:
/// a streaming push (seconds) to a weekly batch job (7 days) stay readable.
pub const AGE_BUCKETS_S: [u64; 16] = [
    1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800, 345600, 604800,
];

/// Host ids of one view's metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ViewIds {
    pub view: String,
    /// By status, in `STATUSES` order.
    pub values: [Option<u32>; 4],
    pub age: Option<u32>,
}

/// Every (service, view) metric of a snapshot: per service name, one entry per view in the
/// service's view order. Plain data (Send): the native build defines them on Envoy's main
/// thread and hands them to the workers.
#[derive(Debug, Clone, Default)]
pub struct ViewMetrics {
    services: HashMap<String, Vec<ViewIds>>,
}

/// A name or label value as Envoy's tag rules read it: no `.` (the separator), nothing but
/// `[A-Za-z0-9_-]` (anything else becomes `_`).
pub fn label(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `ferry_view_values.service.S.view.V.status.ST`, `ferry_view_age_seconds.service.S.view.V`.
pub fn names(service: &str, view: &str) -> ([String; 4], String) {
    let base = format!(".service.{}.view.{}", label(service), label(view));
    let values = STATUSES.map(|st| format!("{VALUES_NAME}{base}.status.{st}"));
    (values, format!("{AGE_NAME}{base}"))
}

impl ViewMetrics {
    /// Defines the metrics of every (service, view) of `config` (up to `MAX_VIEW_SERIES`),
    /// reusing the ids `known` holds for the same names.
    pub fn define(
        config: &Config,
        known: &ViewMetrics,
        define: impl FnMut(Kind, &str) -> Option<u32>,
    ) -> ViewMetrics {
        ViewMetrics::define_at_most(config, known, MAX_VIEW_SERIES, define)
    }

    /// `define`, with at most `max` (service, view) pairs.
    pub fn define_at_most(
        config: &Config,
        known: &ViewMetrics,
        max: usize,
        mut define: impl FnMut(Kind, &str) -> Option<u32>,
    ) -> ViewMetrics {
        let mut services = HashMap::new();
        let mut pairs = 0;
        for service in &config.services {
            if services.contains_key(&service.name) {
                continue;
            }
            let old = known.services.get(&service.name);
            let mut views = Vec::with_capacity(service.views.len());
            for view in &service.views {
                pairs += 1;
                if pairs > max {
                    break;
                }
                if let Some(ids) = old.and_then(|o| o.iter().find(|v| v.view == view.name)) {
                    views.push(ids.clone());
                    continue;
                }
                let (values, age) = names(&service.name, &view.name);
                views.push(ViewIds {
                    view: view.name.clone(),
                    values: values.map(|n| define(Kind::Counter, &n)),
                    age: define(Kind::Histogram, &age),
                });
            }
            services.insert(service.name.clone(), views);
        }
        ViewMetrics { services }
    }

    /// The (service, view) pairs with metrics.
    pub fn pairs(&self) -> usize {
        self.services.values().map(Vec::len).sum()
    }

    pub fn ids(&self, service: &str) -> &[ViewIds] {
        self.services.get(service).map_or(&[], Vec::as_slice)
    }
}

/// What one request served, per (route part, view): values by status, and the age of each
/// view row found (stale rows included: their age is what shows a dead job).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Served {
    /// One cell per (part, view) of the route, parts in order, views in service order.
    pub cells: Vec<[usize; 4]>,
    /// (cell, age in whole seconds) of each row served.
    pub ages_s: Vec<(usize, u64)>,
}

impl Served {
    pub fn new(route: &Route) -> Served {
        let views = route.parts.iter().map(|p| p.service.views.len()).sum();
        Served {
            cells: vec![[0; 4]; views],
            ages_s: Vec::new(),
        }
    }

    /// Counts one entity's features of `service` (`statuses`, flattened over its views) whose
    /// view rows had `times_us` (0 = no row), the part's cells starting at `first`.
    pub fn add(
        &mut self,
        first: usize,
        service: &Service,
        statuses: &[FeatureStatus],
        times_us: &[i64],
        now_us: i64,
    ) {
        let mut at = 0;
        for (i, view) in service.views.iter().enumerate() {
            let n = view.features.len();
            let cell = first + i;
            if let Some(counts) = self.cells.get_mut(cell) {
                for s in statuses.get(at..at + n).unwrap_or_default() {
                    if let Some(k) = status_index(*s) {
                        counts[k] += 1;
                    }
                }
            }
            if let Some(&t) = times_us.get(i).filter(|t| **t > 0) {
                let age = now_us.saturating_sub(t).max(0) / 1_000_000;
                self.ages_s.push((cell, u64::try_from(age).unwrap_or(0)));
            }
            at += n;
        }
    }
}

fn status_index(s: FeatureStatus) -> Option<usize> {
    match s {
        FeatureStatus::Present => Some(0),
        FeatureStatus::NullValue => Some(1),
        FeatureStatus::NotFound => Some(2),
        FeatureStatus::OutsideMaxAge => Some(3),
        FeatureStatus::Invalid => None,
    }
}
