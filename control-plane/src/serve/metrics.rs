//! What `/metrics` says about the control plane, as OpenMetrics text from `prometheus-client`:
//! counters of the xDS streams, snapshots and pushes (registered once, incremented where things
//! happen), and gauges of who is connected and on the current snapshot, read from the
//! [`State`] at each scrape.

use prometheus_client::encoding::{text, EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::state::State;

/// The `Content-Type` of [`metrics_text`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How a push ended; the `outcome` label of `ferry_push_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PushOutcome {
    Accepted,
    Unauthorized,
    Rejected,
}

impl PushOutcome {
    const ALL: [PushOutcome; 3] = [Self::Accepted, Self::Unauthorized, Self::Rejected];
}

// By hand: the derive would write the variant names ("Accepted"), not the labels in use.
impl EncodeLabelValue for PushOutcome {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        let label = match self {
            Self::Accepted => "accepted",
            Self::Unauthorized => "unauthorized",
            Self::Rejected => "rejected",
        };
        EncodeLabelValue::encode(&label, encoder)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PushLabels {
    outcome: PushOutcome,
}

/// Labels of `ferry_snapshot_info`, in the order they are written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SnapshotLabels {
    version: String,
    project: String,
    source: &'static str,
}

/// The counters behind `/metrics`; all monotonic.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub streams_total: Counter,
    pub responses_total: Counter,
    pub acks_total: Counter,
    pub nacks_total: Counter,
    pub stale_nonces_total: Counter,
    pub withheld_total: Counter,
    pub snapshot_updates_total: Counter,
    pub snapshots_refused_total: Counter,
    push_requests: Family<PushLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let push_requests = Family::<PushLabels, Counter>::default();
        // Every outcome is shown from the start, at 0.
        for outcome in PushOutcome::ALL {
            drop(push_requests.get_or_create(&PushLabels { outcome }));
        }
        let mut m = Metrics {
            registry: Registry::default(),
            streams_total: Counter::default(),
            responses_total: Counter::default(),
            acks_total: Counter::default(),
            nacks_total: Counter::default(),
            stale_nonces_total: Counter::default(),
            withheld_total: Counter::default(),
            snapshot_updates_total: Counter::default(),
            snapshots_refused_total: Counter::default(),
            push_requests,
        };
        // Counter names go without `_total`: the encoder appends it. It also appends a `.` to
        // each help text.
        let counters = [
            ("ferry_xds_streams", "xDS streams opened", &m.streams_total),
            (
                "ferry_xds_responses",
                "DiscoveryResponses sent",
                &m.responses_total,
            ),
            ("ferry_xds_acks", "ACKs received", &m.acks_total),
            ("ferry_xds_nacks", "NACKs received", &m.nacks_total),
            (
                "ferry_xds_stale_nonces",
                "Requests answering an old nonce (ignored)",
                &m.stale_nonces_total,
            ),
            (
                "ferry_xds_withheld",
                "Times a version a node refused was not resent",
                &m.withheld_total,
            ),
            (
                "ferry_snapshot_updates",
                "Snapshots made current",
                &m.snapshot_updates_total,
            ),
            (
                "ferry_snapshots_refused",
                "Snapshots refused by validation (pushed or read from the repo)",
                &m.snapshots_refused_total,
            ),
        ]
        .map(|(name, help, c)| (name, help, c.clone()));
        for (name, help, counter) in counters {
            m.registry.register(name, help, counter);
        }
        m.registry.register(
            "ferry_push_requests",
            "Snapshot pushes by outcome",
            m.push_requests.clone(),
        );
        m
    }
}

impl Metrics {
    /// Counts one `POST /v1/snapshot`.
    pub fn push(&self, outcome: PushOutcome) {
        self.push_requests
            .get_or_create(&PushLabels { outcome })
            .inc();
    }
}

/// The OpenMetrics text (ends with `# EOF`), served as [`CONTENT_TYPE`].
pub fn metrics_text(state: &State) -> String {
    let gauges = gauges(state);
    let mut out = String::with_capacity(4096);
    // Writing to a String cannot fail; were the encoder to err, what it wrote is still served.
    let encoded = text::encode_registry(&mut out, &state.metrics.registry)
        .and_then(|()| text::encode(&mut out, &gauges));
    if let Err(e) = encoded {
        tracing::error!(error = %e, "encoding /metrics failed");
    }
    out
}

/// The gauges, computed now from the state: a registry of their own, built per scrape (a few
/// small allocations, on a path Prometheus calls every few seconds at most).
fn gauges(state: &State) -> Registry {
    let current = state.current();
    let version = current.as_ref().map(|c| c.snapshot.version.as_str());
    let streams = state.streams();
    let acked = streams
        .iter()
        .filter(|(_, i)| i.converged_on(version))
        .count();
    let mut r = Registry::default();
    let gauge = |n: usize| {
        let g: Gauge = Gauge::default();
        g.set(i64::try_from(n).unwrap_or(i64::MAX));
        g
    };
    r.register(
        "ferry_xds_connected_streams",
        "Connected xDS streams",
        gauge(streams.len()),
    );
    r.register(
        "ferry_xds_streams_acked_current",
        "Streams whose Envoy ACKed the current snapshot",
        gauge(acked),
    );
    let info = Family::<SnapshotLabels, Gauge>::default();
    if let Some(c) = &current {
        info.get_or_create(&SnapshotLabels {
            version: c.snapshot.version.clone(),
            project: c.snapshot.project.clone(),
            source: c.source,
        })
        .set(1);
    }
    r.register("ferry_snapshot_info", "The current snapshot", info);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy_config::TEMPLATE_READER_CLUSTER;
    use crate::serve::resources::FilterOptions;
    use crate::serve::state::inc;
    use crate::snapshot;
    use crate::test_support::{load_repo, ORDER_FILES, ORDER_YAML};

    fn state() -> State {
        let filter = FilterOptions {
            filter_name: "ferry".into(),
            wasm_path: "/ferry.wasm".into(),
            runtime: crate::envoy_config::Runtime::Wasm,
        };
        State::new(filter, TEMPLATE_READER_CLUSTER.into(), None)
    }

    fn has_line(text: &str, line: &str) {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }

    #[test]
    fn counters_and_scrape_time_gauges_in_openmetrics_text() {
        let state = state();
        let text = metrics_text(&state);
        for line in [
            "# TYPE ferry_xds_nacks counter",
            "ferry_xds_nacks_total 0",
            "ferry_push_requests_total{outcome=\"accepted\"} 0",
            "ferry_push_requests_total{outcome=\"unauthorized\"} 0",
            "ferry_push_requests_total{outcome=\"rejected\"} 0",
            "# TYPE ferry_xds_connected_streams gauge",
            "ferry_xds_connected_streams 0",
            "ferry_xds_streams_acked_current 0",
        ] {
            has_line(&text, line);
        }
        // No snapshot, no info series (an empty family is not written at all).
        assert!(!text.contains("ferry_snapshot_info"), "{text}");
        assert!(text.ends_with("\n# EOF\n"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");

        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let offered = state.offer(snapshot::build(&reg.unwrap()), "push").unwrap();
        inc(&state.metrics.nacks_total);
        state.metrics.push(PushOutcome::Rejected);
        state.metrics.push(PushOutcome::Rejected);
        let text = metrics_text(&state);
        let project = state.current().unwrap().snapshot.project.clone();
        for line in [
            "ferry_xds_nacks_total 1".to_string(),
            "ferry_snapshot_updates_total 1".to_string(),
            "ferry_push_requests_total{outcome=\"rejected\"} 2".to_string(),
            "# TYPE ferry_snapshot_info gauge".to_string(),
            format!(
                "ferry_snapshot_info{{version=\"{}\",project=\"{project}\",source=\"push\"}} 1",
                offered.version
            ),
        ] {
            has_line(&text, &line);
        }
    }
}
