//! What one client may make the server keep: node ids, resource names and NACK details are
//! chosen by whoever connects, so each is bounded here before anything stores it, and one node
//! id may hold only so many streams. A request over a bound ends its stream with an error
//! (the data is never stored); a NACK's `error_detail` is kept truncated instead (it is what an
//! operator reads on `/status`, so its head is worth keeping). Each kind of refusal is logged
//! once at warn (then at debug) and counted in `ferry_xds_refused_total{reason}`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;

/// Longest node id and node cluster (Istio's `sidecar~IP~POD.NS~NS.svc.cluster.local` is
/// well under it).
pub const MAX_NODE_ID_BYTES: usize = 1024;
/// Most resource names one request may subscribe to (ferry serves one ECDS resource).
pub const MAX_RESOURCE_NAMES: usize = 64;
/// Longest resource name.
pub const MAX_RESOURCE_NAME_BYTES: usize = 512;
/// The part of a NACK's `error_detail` that is kept.
pub const MAX_NACK_DETAIL_BYTES: usize = 4096;
/// Streams the server holds by default (`--max-streams`): a fleet of 10,000 Envoys (issue #26)
/// and room to spare. Measured by `bench/fleet.sh`, an idle stream costs `ferry serve` about
/// 37 KB (HTTP/2's own buffers most of it), so the bound keeps a flood of streams under
/// ~600 MB; it was 1,024, which refused the 1,025th Envoy of a fleet.
pub const DEFAULT_MAX_STREAMS: usize = 16_384;
/// Streams one node id may hold by default (`--max-streams-per-node`): Envoys that share a
/// node id (the replicas of one bootstrap) share these.
pub const DEFAULT_STREAMS_PER_NODE: usize = 128;

/// Why a stream was refused; the `reason` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The node id or cluster is too long.
    NodeId,
    /// Too many resource names, or one too long.
    ResourceNames,
    /// This node id holds its most streams already.
    StreamsPerNode,
    /// The server holds its most streams already.
    Streams,
    /// The node id is not one the client certificate may use.
    NodeIdentity,
}

impl Refusal {
    const ALL: [Refusal; 5] = [
        Self::NodeId,
        Self::ResourceNames,
        Self::StreamsPerNode,
        Self::Streams,
        Self::NodeIdentity,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::NodeId => "node_id",
            Self::ResourceNames => "resource_names",
            Self::StreamsPerNode => "streams_per_node",
            Self::Streams => "streams",
            Self::NodeIdentity => "node_identity",
        }
    }

    /// The gRPC status that ends the refused stream.
    pub fn status(self, detail: &str) -> tonic::Status {
        match self {
            Self::NodeId | Self::ResourceNames => tonic::Status::invalid_argument(detail),
            Self::StreamsPerNode | Self::Streams => tonic::Status::resource_exhausted(detail),
            Self::NodeIdentity => tonic::Status::permission_denied(detail),
        }
    }
}

/// Whether a request's client-chosen fields fit the bounds; the refusal and its message if not.
pub fn check_request(req: &DiscoveryRequest) -> Result<(), (Refusal, String)> {
    if let Some(node) = &req.node {
        if node.id.len() > MAX_NODE_ID_BYTES || node.cluster.len() > MAX_NODE_ID_BYTES {
            return Err((
                Refusal::NodeId,
                format!("node id or cluster longer than {MAX_NODE_ID_BYTES} bytes"),
            ));
        }
    }
    if req.resource_names.len() > MAX_RESOURCE_NAMES {
        return Err((
            Refusal::ResourceNames,
            format!(
                "{} resource names, at most {MAX_RESOURCE_NAMES}",
                req.resource_names.len()
            ),
        ));
    }
    if req
        .resource_names
        .iter()
        .any(|n| n.len() > MAX_RESOURCE_NAME_BYTES)
    {
        return Err((
            Refusal::ResourceNames,
            format!("a resource name longer than {MAX_RESOURCE_NAME_BYTES} bytes"),
        ));
    }
    Ok(())
}

/// `detail` cut to at most `max` bytes (on a character boundary), marked when cut.
pub fn truncate(detail: &str, max: usize) -> String {
    if detail.len() <= max {
        return detail.to_owned();
    }
    let mut end = max;
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes, truncated)", &detail[..end], detail.len())
}

/// The streams each node id (or verified identity) holds, and which refusals were logged
/// already. Its map has at
/// most one entry per running stream, so the server's stream cap bounds it too.
#[derive(Debug)]
pub struct Bounds {
    per_node: Mutex<HashMap<String, usize>>,
    max_per_node: usize,
    logged: [AtomicBool; 5],
}

/// One stream's place among its node id's; given back on drop.
#[derive(Debug)]
pub struct NodeSlot {
    bounds: Arc<Bounds>,
    node: String,
}

impl Drop for NodeSlot {
    fn drop(&mut self) {
        let mut per_node = self.bounds.lock();
        if let Some(n) = per_node.get_mut(&self.node) {
            *n -= 1;
            if *n == 0 {
                per_node.remove(&self.node);
            }
        }
    }
}

impl Bounds {
    pub fn new(max_per_node: usize) -> Bounds {
        Bounds {
            per_node: Mutex::new(HashMap::new()),
            max_per_node,
            logged: Default::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        // A panic while holding the lock leaves plain counts behind: keep going.
        self.per_node.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for one more stream of `node`; None when it holds its most already.
    pub fn admit(self: &Arc<Self>, node: &str) -> Option<NodeSlot> {
        let mut per_node = self.lock();
        let n = per_node.entry(node.to_owned()).or_insert(0);
        if *n >= self.max_per_node {
            return None;
        }
        *n += 1;
        Some(NodeSlot {
            bounds: self.clone(),
            node: node.to_owned(),
        })
    }

    pub fn max_per_node(&self) -> usize {
        self.max_per_node
    }

    /// Logs a refusal: at warn the first time of its kind, at debug after that (a client
    /// reconnecting in a loop must not flood the log).
    pub fn log(&self, refusal: Refusal, node: &str, detail: &str) {
        let i = Refusal::ALL.iter().position(|r| *r == refusal).unwrap_or(0);
        // The node id is client-chosen: log its head only.
        let node = truncate(node, 128);
        if !self.logged[i].swap(true, Ordering::Relaxed) {
            tracing::warn!(reason = refusal.label(), %node, detail, "xDS stream refused (logged once per reason; counted in ferry_xds_refused_total)");
        } else {
            tracing::debug!(reason = refusal.label(), %node, detail, "xDS stream refused");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::config::core::v3::Node as EnvoyNode;

    fn request(node: &str, names: Vec<String>) -> DiscoveryRequest {
        DiscoveryRequest {
            node: Some(EnvoyNode {
                id: node.into(),
                ..Default::default()
            }),
            resource_names: names,
            ..Default::default()
        }
    }

    #[test]
    fn node_ids_and_resource_names_are_bounded() {
        assert!(check_request(&request("envoy-1", vec!["ferry".into()])).is_ok());
        let at_most = "n".repeat(MAX_NODE_ID_BYTES);
        assert!(check_request(&request(&at_most, vec![])).is_ok());
        let long = "n".repeat(MAX_NODE_ID_BYTES + 1);
        assert_eq!(
            check_request(&request(&long, vec![])).unwrap_err().0,
            Refusal::NodeId
        );
        let many = vec!["r".to_owned(); MAX_RESOURCE_NAMES + 1];
        let (why, msg) = check_request(&request("e", many)).unwrap_err();
        assert_eq!(why, Refusal::ResourceNames);
        assert!(msg.contains("65 resource names"), "{msg}");
        let long_name = vec!["r".repeat(MAX_RESOURCE_NAME_BYTES + 1)];
        assert_eq!(
            check_request(&request("e", long_name)).unwrap_err().0,
            Refusal::ResourceNames
        );
        assert_eq!(
            Refusal::NodeId.status("x").code(),
            tonic::Code::InvalidArgument
        );
        assert_eq!(
            Refusal::StreamsPerNode.status("x").code(),
            tonic::Code::ResourceExhausted
        );
    }

    #[test]
    fn a_long_detail_is_truncated_on_a_character_boundary() {
        assert_eq!(truncate("short", 10), "short");
        let cut = truncate(&"é".repeat(10), 5);
        assert!(cut.starts_with("éé…"), "{cut}");
        assert!(cut.ends_with("(20 bytes, truncated)"), "{cut}");
    }

    #[test]
    fn a_node_id_holds_at_most_its_streams_and_a_closed_one_frees_its_place() {
        let bounds = Arc::new(Bounds::new(2));
        let a1 = bounds.admit("a").unwrap();
        let a2 = bounds.admit("a").unwrap();
        assert!(bounds.admit("a").is_none(), "a third stream of a");
        let b = bounds.admit("b").unwrap();
        drop(a1);
        let a3 = bounds.admit("a").unwrap();
        drop((a2, a3, b));
        assert!(bounds.lock().is_empty(), "no node left behind");
    }
}
