//! What `/status` says about the control plane (as [`api::Status`]): the current snapshot with
//! its services and fingerprints, every connected Envoy with the version it ACKed and its last
//! NACK, and whether they all converged.

use ferry_protos::v1;

use super::api::{self, NodeStatus, ServiceStatus, SnapshotStatus, Status, TypeStatus};
use super::state::{Current, State};
use super::streams::StreamInfo;
use ferry_xds::TypeState;

pub fn status(state: &State, insecure: bool) -> Status {
    let current = state.current();
    let version = current.as_ref().map(|c| c.snapshot.version.as_str());
    let streams = state.streams.list();
    let mut nodes: Vec<NodeStatus> = streams
        .iter()
        .map(|(id, info)| node_status(*id, info, version))
        .collect();
    for n in &mut nodes {
        n.shares_node_id = !n.node.is_empty()
            && streams.iter().any(|(id, i)| {
                *id != n.stream && i.node.id == n.node && i.node.identity == n.identity
            });
    }
    Status {
        snapshot: current.as_deref().map(snapshot_status),
        last_refused: state.last_refused().map(|r| api::LastRefused {
            source: r.source.to_owned(),
            error: r.error,
            at_ms: r.at_ms,
        }),
        converged: version.is_some() && nodes.iter().all(|n| n.converged),
        nodes,
        insecure,
        shared_state: state.shared().map(|s| s.status()),
    }
}

/// The services of a snapshot with their fingerprints (also the push API's answer).
pub fn services(snapshot: &v1::Snapshot) -> Vec<ServiceStatus> {
    snapshot
        .services
        .iter()
        .map(|s| ServiceStatus {
            name: s.name.clone(),
            fingerprint: ferry_protos::fingerprint_hex(s.fingerprint),
        })
        .collect()
}

fn snapshot_status(c: &Current) -> SnapshotStatus {
    SnapshotStatus {
        version: c.snapshot.version.clone(),
        project: c.snapshot.project.clone(),
        source: c.source.to_owned(),
        since_ms: c.since_ms,
        restored_from: c.restored_from.clone(),
        services: services(&c.snapshot),
        routes: c
            .snapshot
            .routes
            .iter()
            .map(|r| api::RouteStatus {
                name: r.name.clone(),
                service: r.service.clone(),
            })
            .collect(),
    }
}

fn node_status(id: u64, info: &StreamInfo, version: Option<&str>) -> NodeStatus {
    let served = info.types.get(&super::resources::RESOURCE_TYPE);
    NodeStatus {
        stream: id,
        node: info.node.id.clone(),
        identity: info.node.identity.clone(),
        cluster: info.node.cluster.clone(),
        connected_ms: info.connected_ms,
        acked_version: info.acked().map(str::to_owned),
        converged: info.converged_on(version),
        shares_node_id: false,
        last_nack: served
            .and_then(|t| t.last_nack.as_ref())
            .map(|n| api::NodeNack {
                version: n.version.clone(),
                error: n.error.clone(),
                at_ms: info.last_nack_ms,
            }),
        types: info
            .types
            .iter()
            .map(|(t, s)| (t.type_url().to_owned(), type_status(s)))
            .collect(),
    }
}

fn type_status(s: &TypeState) -> TypeStatus {
    TypeStatus {
        sent_version: s.sent_version.clone(),
        sent_nonce: s.sent_nonce.clone(),
        acked_version: s.acked_version.clone(),
        responses_sent: s.responses_sent,
        last_nack: s.last_nack.as_ref().map(|n| api::Nack {
            version: n.version.clone(),
            error: n.error.clone(),
        }),
    }
}
