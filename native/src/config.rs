//! The module's filter configuration: the snapshot Envoy handed over, or with `snapshot_url` the
//! one pulled last (`pull`), checked once on the main thread and parsed again into an
//! `Rc<Config>` on each worker thread that uses it (ferry-core's config is single-threaded, as
//! in the Wasm build where each worker has its VM). A pulled snapshot replaces the current one
//! whole, behind a lock held only to clone an `Arc`: a stream takes the snapshot current when it
//! starts and keeps it to its end.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use ferry_core::config::Config;
use ferry_core::error::FerryError;
use ferry_core::metrics::{self, Metrics, ViewMetrics};
use ferry_core::plugin_config::{self, Overrides, Plugin};
use ferry_core::snapshot_pull::Answer;

use crate::envoy::ConfigEnvoy;
use crate::pull::Pulling;

/// Per-thread parsed configs kept; older ones are dropped first (a new snapshot replaces the
/// current one, so a worker rarely holds more than two).
const PER_THREAD: usize = 4;

pub struct FilterConfig {
    /// Host metric ids, in `metrics::ALL` order.
    metric_ids: Vec<Option<u32>>,
    /// What new streams run on; None while a pulled snapshot has not arrived.
    current: RwLock<Option<Arc<Snapshot>>>,
    /// With `snapshot_url`: the pull, driven from the main thread.
    pull: Option<Pulling>,
}

/// One snapshot, as each worker parses it again.
struct Snapshot {
    /// Unique for the life of the process: keys the per-thread copies.
    generation: u64,
    source: Source,
    /// The snapshot's per (service, view) metric ids.
    view_ids: ViewMetrics,
}

enum Source {
    /// The plugin configuration itself (binary, or JSON with `snapshot_base64`).
    Plugin(Vec<u8>),
    /// A pulled snapshot's protobuf, with the JSON form's overrides.
    Pulled { raw: Vec<u8>, overrides: Overrides },
}

impl Source {
    fn parse(&self) -> Option<Config> {
        match self {
            Source::Plugin(bytes) => plugin_config::parse(bytes).ok(),
            Source::Pulled { raw, overrides } => overrides.apply(raw).ok(),
        }
    }
}

/// What a new stream runs on.
pub enum ForStream {
    /// This thread's copy of the current snapshot (None: it did not parse here, which the main
    /// thread's check makes unexpected; requests then go unenriched, as with no config).
    Ready(Option<Rc<Config>>, Rc<Metrics>),
    /// A pulled snapshot has not arrived: the request is answered with this error.
    NotLoaded(FerryError),
}

/// A worker's parsed copy of one snapshot: (generation, snapshot, metric ids).
type Parsed = (u64, Rc<Config>, Rc<Metrics>);

thread_local! {
    static PARSED: RefCell<Vec<Parsed>> = const { RefCell::new(Vec::new()) };
}

fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl FilterConfig {
    /// Checks the plugin configuration; `define` gives a metric's host id (the config's Envoy
    /// object). The snapshot it carries comes back too (None when it names a `snapshot_url`).
    pub fn new(
        bytes: Vec<u8>,
        define: impl FnMut(metrics::Kind, &str) -> Option<u32>,
    ) -> Result<(FilterConfig, Option<Config>), String> {
        let plugin = plugin_config::parse_plugin(&bytes).map_err(|e| e.to_string())?;
        let mut define = define;
        let metric_ids = metrics::ALL
            .iter()
            .map(|(_, kind, name)| define(*kind, name))
            .collect();
        let (current, pull, config) = match plugin {
            Plugin::Snapshot(config) => {
                // Envoy freezes metric definitions once the config is made: per-view metrics
                // exist for this snapshot only, not for pulled ones.
                let view_ids = ViewMetrics::define(&config, &ViewMetrics::default(), &mut define);
                let snapshot = Snapshot {
                    generation: next_generation(),
                    source: Source::Plugin(bytes),
                    view_ids,
                };
                (Some(Arc::new(snapshot)), None, Some(config))
            }
            Plugin::Pull(pull) => (None, Some(Pulling::new(pull)), None),
        };
        let fc = FilterConfig {
            metric_ids,
            current: RwLock::new(current),
            pull,
        };
        Ok((fc, config))
    }

    /// The pull, when the configuration names a `snapshot_url`.
    pub fn pull(&self) -> Option<&Pulling> {
        self.pull.as_ref()
    }

    /// Makes a pulled snapshot (`raw`, validated by the puller) the one new streams run on.
    pub fn swap(&self, raw: Vec<u8>, overrides: Overrides) {
        let snapshot = Snapshot {
            generation: next_generation(),
            source: Source::Pulled { raw, overrides },
            view_ids: ViewMetrics::default(),
        };
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        *current = Some(Arc::new(snapshot));
    }

    /// A tick of the pull's clock (main thread; `pull`).
    pub fn on_pull_tick(&self, envoy: &impl ConfigEnvoy) {
        if let Some(pulling) = &self.pull {
            pulling.tick(envoy);
        }
    }

    /// The answer to the pull's GET (main thread; `pull`).
    pub fn on_pulled(
        &self,
        envoy: &impl ConfigEnvoy,
        answer: &Answer,
        read_body: impl FnOnce(usize) -> Vec<u8>,
    ) {
        if let Some(pulling) = &self.pull {
            pulling.answered(envoy, answer, read_body, |raw, o| self.swap(raw, o));
        }
    }

    /// What a stream starting now on this thread runs on (parsed here on first use).
    pub fn for_this_thread(&self) -> ForStream {
        let current = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let Some(snapshot) = current else {
            return match &self.pull {
                Some(p) => ForStream::NotLoaded(p.not_loaded()),
                None => ForStream::Ready(None, Rc::new(self.metrics(&ViewMetrics::default()))),
            };
        };
        PARSED.with(|cell| {
            let mut cache = cell.borrow_mut();
            let found = cache.iter().find(|(g, _, _)| *g == snapshot.generation);
            if let Some((_, c, m)) = found {
                return ForStream::Ready(Some(c.clone()), m.clone());
            }
            let metrics = Rc::new(self.metrics(&snapshot.view_ids));
            let Some(config) = snapshot.source.parse() else {
                return ForStream::Ready(None, metrics);
            };
            let config = Rc::new(config);
            if cache.len() >= PER_THREAD {
                cache.remove(0);
            }
            cache.push((snapshot.generation, config.clone(), metrics.clone()));
            ForStream::Ready(Some(config), metrics)
        })
    }

    fn metrics(&self, views: &ViewMetrics) -> Metrics {
        let mut ids = self.metric_ids.iter();
        let metrics = Metrics::define(|_, _| ids.next().copied().flatten());
        metrics.with_views(views.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::metrics::Metric;

    fn snapshot() -> Vec<u8> {
        prost::Message::encode_to_vec(&ferry_test_support::snapshot::snapshot())
    }

    fn ready(fc: &FilterConfig) -> Option<Rc<Config>> {
        match fc.for_this_thread() {
            ForStream::Ready(c, _) => c,
            ForStream::NotLoaded(e) => unreachable!("{e}"),
        }
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
        let (a, b) = (ready(&fc), ready(&fc));
        assert!(matches!((&a, &b), (Some(a), Some(b)) if Rc::ptr_eq(a, b)));
        let ForStream::Ready(_, m) = fc.for_this_thread() else {
            unreachable!()
        };
        assert_eq!(m.id(Metric::Enriched), Some(1));
        let other = std::thread::spawn(move || ready(&fc).map(|c| c.routes.len()));
        assert!(matches!(other.join(), Ok(Some(n)) if n > 0));
    }

    #[test]
    fn a_swapped_snapshot_serves_new_streams_and_an_old_stream_keeps_its_own() {
        let (fc, _) =
            FilterConfig::new(snapshot(), |_, _| None).unwrap_or_else(|e| unreachable!("{e}"));
        let before = ready(&fc);
        let mut s = ferry_test_support::snapshot::snapshot();
        s.project = "swapped".into();
        let overrides = Overrides {
            reader_cluster: Some("r".into()),
            headers_held: false,
        };
        fc.swap(prost::Message::encode_to_vec(&s), overrides);
        let after = ready(&fc);
        assert_eq!(after.as_ref().map(|c| c.project.as_str()), Some("swapped"));
        assert_eq!(after.map(|c| c.reader_cluster.clone()), Some("r".into()));
        assert_ne!(before.map(|c| c.project.clone()), Some("swapped".into()));
    }
}
