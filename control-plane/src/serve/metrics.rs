//! What `/metrics` says about the control plane, in Prometheus text: counters of the xDS
//! streams, snapshots and pushes, and gauges of who is connected and on the current snapshot.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use super::state::{Metrics, State};

pub fn metrics_text(state: &State) -> String {
    let mut out = String::new();
    xds_counters(&mut out, &state.metrics);
    snapshot_counters(&mut out, &state.metrics);
    gauges(&mut out, state);
    out
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

fn counter(out: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
    );
}

fn xds_counters(out: &mut String, m: &Metrics) {
    counter(
        out,
        "ferry_xds_streams_total",
        "xDS streams opened.",
        get(&m.streams_total),
    );
    counter(
        out,
        "ferry_xds_responses_total",
        "DiscoveryResponses sent.",
        get(&m.responses_total),
    );
    counter(
        out,
        "ferry_xds_acks_total",
        "ACKs received.",
        get(&m.acks_total),
    );
    counter(
        out,
        "ferry_xds_nacks_total",
        "NACKs received.",
        get(&m.nacks_total),
    );
    counter(
        out,
        "ferry_xds_stale_nonces_total",
        "Requests answering an old nonce (ignored).",
        get(&m.stale_nonces_total),
    );
    counter(
        out,
        "ferry_xds_withheld_total",
        "Times a version a node refused was not resent.",
        get(&m.withheld_total),
    );
}

fn snapshot_counters(out: &mut String, m: &Metrics) {
    counter(
        out,
        "ferry_snapshot_updates_total",
        "Snapshots made current.",
        get(&m.snapshot_updates_total),
    );
    counter(
        out,
        "ferry_snapshots_refused_total",
        "Snapshots refused by validation (pushed or read from the repo).",
        get(&m.snapshots_refused_total),
    );
    let _ = writeln!(
        out,
        "# HELP ferry_push_requests_total Snapshot pushes by outcome.\n# TYPE ferry_push_requests_total counter\n\
         ferry_push_requests_total{{outcome=\"accepted\"}} {}\n\
         ferry_push_requests_total{{outcome=\"unauthorized\"}} {}\n\
         ferry_push_requests_total{{outcome=\"rejected\"}} {}",
        get(&m.push_ok_total),
        get(&m.push_unauthorized_total),
        get(&m.push_rejected_total)
    );
}

fn gauges(out: &mut String, state: &State) {
    let current = state.current();
    let version = current.as_ref().map(|c| c.snapshot.version.as_str());
    let streams = state.streams();
    let acked = streams
        .iter()
        .filter(|(_, i)| i.converged_on(version))
        .count();
    let _ = writeln!(
        out,
        "# HELP ferry_xds_connected_streams Connected xDS streams.\n# TYPE ferry_xds_connected_streams gauge\n\
         ferry_xds_connected_streams {}\n\
         # HELP ferry_xds_streams_acked_current Streams whose Envoy ACKed the current snapshot.\n\
         # TYPE ferry_xds_streams_acked_current gauge\nferry_xds_streams_acked_current {acked}",
        streams.len()
    );
    if let Some(c) = current {
        let _ = writeln!(
            out,
            "# HELP ferry_snapshot_info The current snapshot.\n# TYPE ferry_snapshot_info gauge\n\
             ferry_snapshot_info{{version=\"{}\",project=\"{}\",source=\"{}\"}} 1",
            c.snapshot.version, c.snapshot.project, c.source
        );
    }
}
