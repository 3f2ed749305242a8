//! What `/metrics` says about the control plane, as OpenMetrics text from `prometheus-client`:
//! counters of the xDS streams, snapshots and pushes (registered once, incremented where things
//! happen), and gauges of who is connected and on the current snapshot, given at each scrape.

use prometheus_client::encoding::{text, EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

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
pub struct SnapshotLabels {
    pub version: String,
    pub project: String,
    pub source: &'static str,
}

/// What the gauges show, read from the state at each scrape.
#[derive(Debug, Default)]
pub struct Gauges {
    pub connected_streams: usize,
    /// Streams whose Envoy ACKed the current snapshot.
    pub streams_acked_current: usize,
    /// The current snapshot; None before there is one.
    pub snapshot: Option<SnapshotLabels>,
    /// `--shared-state`: (Redis answers, this replica holds the lease); None without.
    pub shared: Option<(bool, bool)>,
}

/// The counters of what the xDS streams did; clones count into the same series.
#[derive(Debug, Clone, Default)]
pub struct XdsCounters {
    pub streams_total: Counter,
    pub responses_total: Counter,
    pub acks_total: Counter,
    pub nacks_total: Counter,
    pub stale_nonces_total: Counter,
    pub withheld_total: Counter,
    /// Streams refused over a bound, by `reason` (`ferry_xds::bounds`).
    pub refused_total: Family<Vec<(String, String)>, Counter>,
}

impl XdsCounters {
    /// Counts one stream refused for `reason`.
    pub fn refused(&self, reason: &str) {
        self.refused_total
            .get_or_create(&vec![("reason".to_owned(), reason.to_owned())])
            .inc();
    }
}

pub fn inc(c: &Counter) {
    c.inc();
}

/// The counters behind `/metrics`; all monotonic.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub xds: XdsCounters,
    pub snapshot_updates_total: Counter,
    pub snapshots_refused_total: Counter,
    push_requests: Family<PushLabels, Counter>,
    /// `--shared-state` records refused (out-of-range sequence, bad signature), by reason.
    shared_refused: Family<Vec<(String, String)>, Counter>,
    /// Feature writes (`crate::write`).
    pub write: crate::write::metrics::WriteMetrics,
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
            xds: XdsCounters::default(),
            snapshot_updates_total: Counter::default(),
            snapshots_refused_total: Counter::default(),
            push_requests,
            shared_refused: Family::default(),
            write: crate::write::metrics::WriteMetrics::default(),
        };
        // Counter names go without `_total`: the encoder appends it. It also appends a `.` to
        // each help text.
        let counters = [
            (
                "ferry_xds_streams",
                "xDS streams opened",
                &m.xds.streams_total,
            ),
            (
                "ferry_xds_responses",
                "DiscoveryResponses sent",
                &m.xds.responses_total,
            ),
            ("ferry_xds_acks", "ACKs received", &m.xds.acks_total),
            ("ferry_xds_nacks", "NACKs received", &m.xds.nacks_total),
            (
                "ferry_xds_stale_nonces",
                "Requests answering an old nonce (ignored)",
                &m.xds.stale_nonces_total,
            ),
            (
                "ferry_xds_withheld",
                "Times a version a node refused was not resent",
                &m.xds.withheld_total,
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
        m.register_families();
        m.write.register(&mut m.registry);
        m
    }
}

impl Metrics {
    /// The labelled counters.
    fn register_families(&mut self) {
        self.registry.register(
            "ferry_xds_refused",
            "xDS streams refused over a bound (node id, resource names, streams), by reason",
            self.xds.refused_total.clone(),
        );
        self.registry.register(
            "ferry_push_requests",
            "Snapshot pushes by outcome",
            self.push_requests.clone(),
        );
        self.registry.register(
            "ferry_shared_records_refused",
            "Shared records (--shared-state) this replica refused to serve, by reason",
            self.shared_refused.clone(),
        );
    }

    /// Counts one shared record refused for `reason`.
    pub fn shared_refused(&self, reason: &str) {
        self.shared_refused
            .get_or_create(&vec![("reason".to_owned(), reason.to_owned())])
            .inc();
    }

    /// Counts one `POST /v1/snapshot`.
    pub fn push(&self, outcome: PushOutcome) {
        self.push_requests
            .get_or_create(&PushLabels { outcome })
            .inc();
    }
}

/// The OpenMetrics text (ends with `# EOF`), served as [`CONTENT_TYPE`].
pub fn metrics_text(metrics: &Metrics, gauges: Gauges) -> String {
    let gauges = gauge_registry(gauges);
    let mut out = String::with_capacity(4096);
    // Writing to a String cannot fail; were the encoder to err, what it wrote is still served.
    let encoded = text::encode_registry(&mut out, &metrics.registry)
        .and_then(|()| text::encode(&mut out, &gauges));
    if let Err(e) = encoded {
        tracing::error!(error = %e, "encoding /metrics failed");
    }
    out
}

/// The gauges: a registry of their own, built per scrape (a few small allocations, on a path
/// Prometheus calls every few seconds at most).
fn gauge_registry(gauges: Gauges) -> Registry {
    let mut r = Registry::default();
    let gauge = |n: usize| {
        let g: Gauge = Gauge::default();
        g.set(i64::try_from(n).unwrap_or(i64::MAX));
        g
    };
    r.register(
        "ferry_xds_connected_streams",
        "Connected xDS streams",
        gauge(gauges.connected_streams),
    );
    r.register(
        "ferry_xds_streams_acked_current",
        "Streams whose Envoy ACKed the current snapshot",
        gauge(gauges.streams_acked_current),
    );
    let info = Family::<SnapshotLabels, Gauge>::default();
    if let Some(labels) = &gauges.snapshot {
        info.get_or_create(labels).set(1);
    }
    r.register("ferry_snapshot_info", "The current snapshot", info);
    if let Some((available, leader)) = gauges.shared {
        r.register(
            "ferry_shared_state_available",
            "1 while the shared state's Redis answers (--shared-state), 0 while pushes are refused",
            gauge(usize::from(available)),
        );
        r.register(
            "ferry_shared_state_watches_repo",
            "1 on the replica holding the lease on the repo files",
            gauge(usize::from(leader)),
        );
    }
    r
}
