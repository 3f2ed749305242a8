//! What `/status` (JSON) and `/metrics` (Prometheus text) say about the control plane: the
//! current snapshot with its services and fingerprints, every connected Envoy with the version
//! it ACKed and its last NACK, and whether they all converged.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use serde_json::{json, Value as Json};

use super::resources::RESOURCE_TYPE;
use super::state::State;

pub fn status_json(state: &State) -> Json {
    let current = state.current();
    let version = current.as_ref().map(|c| c.snapshot.version.clone());
    let snapshot = current.as_ref().map(|c| {
        json!({
            "version": c.snapshot.version,
            "project": c.snapshot.project,
            "source": c.source,
            "since_ms": c.since_ms,
            "services": c.snapshot.services.iter().map(|s| json!({
                "name": s.name,
                "fingerprint": ferry_protos::fingerprint_hex(s.fingerprint),
            })).collect::<Vec<_>>(),
            "routes": c.snapshot.routes.iter().map(|r| json!({
                "name": r.name, "service": r.service,
            })).collect::<Vec<_>>(),
        })
    });
    let mut converged = true;
    let nodes: Vec<Json> = state
        .streams()
        .into_iter()
        .map(|(id, info)| {
            let ecds = info.types.get(&RESOURCE_TYPE);
            let acked = info.acked();
            let ok = info.converged_on(version.as_deref());
            converged &= ok;
            let types: serde_json::Map<String, Json> = info
                .types
                .iter()
                .map(|(t, s)| {
                    (
                        t.type_url().to_owned(),
                        json!({
                            "sent_version": s.sent_version,
                            "sent_nonce": s.sent_nonce,
                            "acked_version": s.acked_version,
                            "responses_sent": s.responses_sent,
                            "last_nack": s.last_nack.as_ref().map(|n| json!({
                                "version": n.version, "error": n.error,
                            })),
                        }),
                    )
                })
                .collect();
            json!({
                "stream": id,
                "node": info.node.id,
                "cluster": info.node.cluster,
                "connected_ms": info.connected_ms,
                "acked_version": acked,
                "converged": ok,
                "last_nack": ecds.and_then(|t| t.last_nack.as_ref()).map(|n| json!({
                    "version": n.version, "error": n.error, "at_ms": info.last_nack_ms,
                })),
                "types": types,
            })
        })
        .collect();
    json!({
        "snapshot": snapshot,
        "last_refused": state.last_refused().map(|r| json!({
            "source": r.source, "error": r.error, "at_ms": r.at_ms,
        })),
        "nodes": nodes,
        "converged": converged && version.is_some(),
    })
}

pub fn metrics_text(state: &State) -> String {
    let m = &state.metrics;
    let mut out = String::new();
    let mut counter = |name: &str, help: &str, v: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    };
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    counter(
        "ferry_xds_streams_total",
        "xDS streams opened.",
        get(&m.streams_total),
    );
    counter(
        "ferry_xds_responses_total",
        "DiscoveryResponses sent.",
        get(&m.responses_total),
    );
    counter("ferry_xds_acks_total", "ACKs received.", get(&m.acks_total));
    counter(
        "ferry_xds_nacks_total",
        "NACKs received.",
        get(&m.nacks_total),
    );
    counter(
        "ferry_xds_stale_nonces_total",
        "Requests answering an old nonce (ignored).",
        get(&m.stale_nonces_total),
    );
    counter(
        "ferry_xds_withheld_total",
        "Times a version a node refused was not resent.",
        get(&m.withheld_total),
    );
    counter(
        "ferry_snapshot_updates_total",
        "Snapshots made current.",
        get(&m.snapshot_updates_total),
    );
    counter(
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
    let current = state.current();
    let version = current.as_ref().map(|c| c.snapshot.version.clone());
    let streams = state.streams();
    let acked = streams
        .iter()
        .filter(|(_, i)| i.converged_on(version.as_deref()))
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
    out
}
