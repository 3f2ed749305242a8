//! One stream's task: feeds Envoy's requests and the source's changes to the stream's
//! [`StreamState`], tells the callbacks what happened, and writes back what it returns.

use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tokio::sync::{mpsc, watch};
use tonic::{Status, Streaming};

use ferry_http_serve::PeerIdentity;

use super::bounds::{truncate, Bounds, NodeSlot, Refusal};
use super::callbacks::Callbacks;
use super::identity::NodePolicy;
use super::protocol::{Event, Outcome, StreamState};
use super::refusals::Refusals;
use super::resource_type::ResourceType;
use super::response::Response;
use super::source::{Node, SnapshotSource};

/// Where a stream's responses go (tonic reads the other end).
pub(super) type Outbound = mpsc::Sender<Result<Response, Status>>;

/// What a stream task works with, shared by every stream of one server.
#[derive(Clone)]
pub(super) struct Shared {
    pub source: Arc<dyn SnapshotSource>,
    pub callbacks: Arc<dyn Callbacks>,
    pub refusals: Arc<Refusals>,
    pub bounds: Arc<Bounds>,
    pub policy: Arc<NodePolicy>,
}

struct Stream {
    id: u64,
    shared: Shared,
    /// The verified client certificate's names; None without mTLS.
    identity: Option<Arc<PeerIdentity>>,
    /// Default (empty id) until a request names the node.
    node: Node,
    /// This stream's place among its node id's streams, once the node is named.
    slot: Option<NodeSlot>,
    proto: StreamState,
}

/// Runs one stream until Envoy leaves, the source is gone, or shutdown.
pub(super) async fn run(
    shared: Shared,
    (id, identity): (u64, Option<Arc<PeerIdentity>>),
    proto: StreamState,
    mut inbound: Streaming<DiscoveryRequest>,
    tx: Outbound,
    mut shutdown: watch::Receiver<bool>,
) {
    shared.callbacks.on_stream_open(id);
    tracing::debug!(stream = id, "xDS stream opened");
    let mut changes = shared.source.subscribe();
    let mut s = Stream {
        id,
        shared,
        identity,
        node: Node::default(),
        slot: None,
        proto,
    };
    // The source changed and this stream has not been sent what it has now: taken up when
    // the outbound queue has room, so a stream whose Envoy does not read gets the latest
    // version when it reads again, never a queue of the versions in between.
    let mut pending = false;
    loop {
        let out = tokio::select! {
            msg = inbound.message() => match msg {
                Ok(Some(req)) => s.on_request(&req),
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(stream = id, error = %e, "xDS stream ended");
                    break;
                }
            },
            changed = changes.changed(), if !pending => {
                if !changed {
                    break;
                }
                pending = true;
                continue;
            }
            room = tx.reserve(), if pending => {
                pending = false;
                // The room is this task's: the send below takes it (only this task sends).
                if room.is_err() {
                    break;
                }
                match s.on_change() {
                    Some(out) => out,
                    None => continue,
                }
            }
            _ = shutdown.changed() => break,
        };
        s.observe(&out);
        if let Some((refusal, detail)) = out.refusal() {
            let _ = tx.send(Err(refusal.status(detail))).await;
            break;
        }
        if !s.send(out, &tx).await {
            break;
        }
    }
    s.shared.callbacks.on_stream_closed(id);
    tracing::debug!(stream = id, "xDS stream closed");
}

impl Stream {
    fn on_request(&mut self, req: &DiscoveryRequest) -> Outcome {
        if let Some(refused) = Outcome::over_bounds(req) {
            return refused;
        }
        if self.node.id.is_empty() {
            if let Some(n) = &req.node {
                if let Err(refused) = self.identify(&n.id, &n.cluster) {
                    return refused;
                }
            }
        }
        self.seed(req);
        let current = self.shared.source.snapshot(&self.node);
        self.proto.on_request(req, current.as_ref())
    }

    /// The first request naming the node: refused when the client certificate may not use
    /// that node id, or when the node id (its identity, over mTLS) holds its most streams.
    fn identify(&mut self, id: &str, cluster: &str) -> Result<(), Outcome> {
        let identity = self.identity.as_deref().map(PeerIdentity::primary);
        if !self.shared.policy.allows(self.identity.as_deref(), id) {
            let detail = format!(
                "node id '{}' is not allowed for the client certificate '{}' (--node-identity)",
                truncate(id, 128),
                identity.unwrap_or_default()
            );
            return Err(Outcome::refused(Refusal::NodeIdentity, detail));
        }
        let Some(slot) = self.shared.bounds.admit(identity.unwrap_or(id)) else {
            let max = self.shared.bounds.max_per_node();
            let who = match identity {
                Some(identity) => format!("identity '{identity}'"),
                None => format!("node id '{id}'"),
            };
            let detail = format!("{who} holds {max} xDS streams already (--max-streams-per-node)");
            return Err(Outcome::refused(Refusal::StreamsPerNode, detail));
        };
        self.slot = Some(slot);
        tracing::info!(stream = self.id, node = %id, identity = identity.unwrap_or("-"), "Envoy connected");
        self.node = Node {
            id: id.to_owned(),
            cluster: cluster.to_owned(),
            identity: identity.map(str::to_owned),
        };
        Ok(())
    }

    /// On the stream's first request for a type: what this node refused before is not sent
    /// again, if the request names a version. Envoy names the version it holds when it
    /// reconnects (the same process, which would refuse again); a fresh Envoy names none and
    /// starts clean: it may be one restarted with its .wasm fixed, or another Envoy that was
    /// given the same node id.
    fn seed(&mut self, req: &DiscoveryRequest) {
        let Some(t) = ResourceType::from_type_url(&req.type_url) else {
            return;
        };
        if !req.response_nonce.is_empty()
            || req.version_info.is_empty()
            || self.proto.types.contains_key(&t)
        {
            return;
        }
        for (rt, v) in self.shared.refusals.of(&self.node.key()) {
            if rt == t {
                self.proto.remember_rejected(t, &v);
            }
        }
    }

    /// The source changed: what to push (None when it has no snapshot for this node).
    fn on_change(&mut self) -> Option<Outcome> {
        let current = self.shared.source.snapshot(&self.node)?;
        Some(self.proto.on_snapshot(&current))
    }

    /// Logs and remembers what happened, then tells the callbacks.
    fn observe(&self, out: &Outcome) {
        let node = self.node.id.as_str();
        let key = self.node.key();
        for e in &out.events {
            match e {
                Event::Ack {
                    resource_type,
                    version,
                } => {
                    self.shared.refusals.forget(&key, *resource_type, version);
                    tracing::info!(node, %version, "ACK");
                }
                Event::Nack {
                    resource_type,
                    nack,
                } => {
                    self.shared
                        .refusals
                        .record(&key, *resource_type, &nack.version);
                    tracing::warn!(node, type_url = %resource_type, version = %nack.version, error = %nack.error, "NACK");
                }
                Event::Withheld { version, .. } => {
                    tracing::info!(node, %version, "not resending a version this node refused");
                }
                Event::Refused { refusal, detail } => {
                    self.shared.bounds.log(*refusal, node, detail);
                }
                Event::Subscribed { .. }
                | Event::StaleNonce { .. }
                | Event::NoTypeUrl
                | Event::UnknownType { .. } => {}
            }
            self.shared.callbacks.on_event(self.id, &self.node, e);
        }
        self.shared
            .callbacks
            .on_stream_state(self.id, &self.node, &self.proto.types);
    }

    /// Sends the responses in order; false when Envoy is gone.
    async fn send(&self, out: Outcome, tx: &Outbound) -> bool {
        for r in out.responses {
            self.shared.callbacks.on_response(self.id, &self.node, &r);
            tracing::debug!(node = %self.node.id, version = %r.version, nonce = %r.nonce, "sending");
            if tx.send(Ok(r)).await.is_err() {
                return false;
            }
        }
        true
    }
}
