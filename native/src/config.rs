//! The module's filter configuration: the snapshot bytes Envoy handed over, checked once on
//! the main thread, and parsed again into an `Rc<Config>` on each worker thread that uses it
//! (ferry-core's config is single-threaded, as in the Wasm build where each worker has its VM).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use ferry_core::config::Config;
use ferry_core::metrics::{self, Metrics, ViewMetrics};

/// Per-thread parsed configs kept; older ones are dropped first (a new snapshot replaces the
/// filter config, so a worker rarely holds more than two).
const PER_THREAD: usize = 4;

pub struct FilterConfig {
    /// Unique for the life of the process: keys the per-thread copies.
    generation: u64,
    snapshot: Vec<u8>,
    /// Host metric ids, in `metrics::ALL` order.
    metric_ids: Vec<Option<u32>>,
    /// The snapshot's per (service, view) metric ids.
    view_ids: ViewMetrics,
}

/// A worker's parsed copy of one filter config: (generation, snapshot, metric ids).
type Parsed = (u64, Rc<Config>, Rc<Metrics>);

thread_local! {
    static PARSED: RefCell<Vec<Parsed>> = const { RefCell::new(Vec::new()) };
}

impl FilterConfig {
    /// Checks the snapshot; `define` gives a metric's host id (the config's Envoy object).
    pub fn new(
        snapshot: Vec<u8>,
        define: impl FnMut(metrics::Kind, &str) -> Option<u32>,
    ) -> Result<(FilterConfig, Config), String> {
        let config = ferry_core::plugin_config::parse(&snapshot).map_err(|e| e.to_string())?;
        let mut define = define;
        let metric_ids = metrics::ALL
            .iter()
            .map(|(_, kind, name)| define(*kind, name))
            .collect();
        let view_ids = ViewMetrics::define(&config, &ViewMetrics::default(), &mut define);
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let generation = NEXT.fetch_add(1, Ordering::Relaxed);
        Ok((
            FilterConfig {
                generation,
                snapshot,
                metric_ids,
                view_ids,
            },
            config,
        ))
    }

    /// This thread's parsed copy (parsed on first use; it validated on the main thread, so a
    /// failure here is not expected and leaves requests unenriched, as with no config).
    pub fn for_this_thread(&self) -> (Option<Rc<Config>>, Rc<Metrics>) {
        PARSED.with(|cell| {
            let mut cache = cell.borrow_mut();
            if let Some((_, c, m)) = cache.iter().find(|(g, _, _)| *g == self.generation) {
                return (Some(c.clone()), m.clone());
            }
            let mut ids = self.metric_ids.iter();
            let metrics = Metrics::define(|_, _| ids.next().copied().flatten());
            let metrics = Rc::new(metrics.with_views(self.view_ids.clone()));
            let Ok(config) = ferry_core::plugin_config::parse(&self.snapshot) else {
                return (None, metrics);
            };
            let config = Rc::new(config);
            if cache.len() >= PER_THREAD {
                cache.remove(0);
            }
            cache.push((self.generation, config.clone(), metrics.clone()));
            (Some(config), metrics)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::metrics::Metric;

    fn snapshot() -> Vec<u8> {
        prost::Message::encode_to_vec(&ferry_test_support::snapshot::snapshot())
    }

    #[test]
    fn bad_snapshot_is_refused_with_the_reason() {
        let err = FilterConfig::new(b"{\"nope\": 1}".to_vec(), |_, _| None)
            .err()
            .unwrap_or_default();
        assert!(!err.is_empty());
    }

    #[test]
    fn each_thread_parses_once_and_keeps_the_metric_ids() {
        let mut n = 0;
        let (fc, _) = FilterConfig::new(snapshot(), |_, _| {
            n += 1;
            Some(n)
        })
        .unwrap_or_else(|e| unreachable!("{e}"));
        let (a, m) = fc.for_this_thread();
        let (b, _) = fc.for_this_thread();
        assert!(matches!((&a, &b), (Some(a), Some(b)) if Rc::ptr_eq(a, b)));
        assert_eq!(m.id(Metric::Enriched), Some(1));
        let other = std::thread::spawn(move || {
            let (c, _) = fc.for_this_thread();
            c.map(|c| c.routes.len())
        });
        assert!(matches!(other.join(), Ok(Some(n)) if n > 0));
    }
}
