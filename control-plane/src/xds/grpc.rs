//! The gRPC side: ADS and ECDS (state of the world) over tonic. Each stream is a task that
//! feeds requests and snapshot changes to its [`StreamState`] and writes back what it returns.

use std::sync::Arc;

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::envoy::service::extension::v3::extension_config_discovery_service_server::{
    ExtensionConfigDiscoveryService, ExtensionConfigDiscoveryServiceServer,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::protocol::{Event, StreamState};
use super::resources::ECDS_TYPE_URL;
use crate::serve::state::{inc, State};

/// Responses queued per stream before the stream task waits for Envoy to read.
const STREAM_QUEUE: usize = 8;
/// Largest request accepted from Envoy (a DiscoveryRequest is small; NACK details included).
const MAX_REQUEST_BYTES: usize = 4 << 20;

type Responses = ReceiverStream<Result<DiscoveryResponse, Status>>;

/// Both discovery services over one shared [`State`].
#[derive(Clone)]
pub struct Xds {
    state: Arc<State>,
    /// Flips to true on shutdown: every stream ends.
    shutdown: watch::Receiver<bool>,
    /// Bound on concurrent streams.
    max_streams: usize,
}

impl Xds {
    pub fn new(state: Arc<State>, shutdown: watch::Receiver<bool>, max_streams: usize) -> Xds {
        Xds {
            state,
            shutdown,
            max_streams,
        }
    }

    pub fn ads(&self) -> AggregatedDiscoveryServiceServer<Xds> {
        AggregatedDiscoveryServiceServer::new(self.clone())
            .max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    pub fn ecds(&self) -> ExtensionConfigDiscoveryServiceServer<Xds> {
        ExtensionConfigDiscoveryServiceServer::new(self.clone())
            .max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    fn start(
        &self,
        inbound: Streaming<DiscoveryRequest>,
        allowed: Option<Vec<String>>,
    ) -> Result<Response<Responses>, Status> {
        if self.state.streams().len() >= self.max_streams {
            return Err(Status::resource_exhausted("too many xDS streams"));
        }
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let state = self.state.clone();
        let shutdown = self.shutdown.clone();
        tokio::spawn(run_stream(state, inbound, tx, allowed, shutdown));
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

async fn run_stream(
    state: Arc<State>,
    mut inbound: Streaming<DiscoveryRequest>,
    tx: mpsc::Sender<Result<DiscoveryResponse, Status>>,
    allowed: Option<Vec<String>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let id = state.open_stream();
    let mut proto = StreamState::new(id, allowed);
    let mut updates = state.subscribe();
    updates.borrow_and_update();
    let mut node: Option<(String, String)> = None;
    tracing::debug!(stream = id, "xDS stream opened");
    loop {
        let out = tokio::select! {
            msg = inbound.message() => match msg {
                Ok(Some(req)) => {
                    if node.is_none() {
                        if let Some(n) = &req.node {
                            tracing::info!(stream = id, node = %n.id, "Envoy connected");
                            for (t, v) in state.rejected_by(&n.id) {
                                proto.remember_rejected(&t, &v);
                            }
                            node = Some((n.id.clone(), n.cluster.clone()));
                        }
                    }
                    let current = state.current().map(|c| c.xds.clone());
                    proto.on_request(&req, current.as_ref())
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(stream = id, error = %e, "xDS stream ended");
                    break;
                }
            },
            changed = updates.changed() => {
                if changed.is_err() {
                    break;
                }
                let current = updates.borrow_and_update().clone();
                match current {
                    Some(c) => proto.on_snapshot(&c.xds),
                    None => continue,
                }
            }
            _ = shutdown.changed() => break,
        };
        let node_id = node.as_ref().map_or("", |(n, _)| n.as_str());
        let mut nacked = false;
        for e in &out.events {
            match e {
                Event::Ack { version, .. } => {
                    inc(&state.metrics.acks_total);
                    tracing::info!(node = node_id, %version, "ACK");
                }
                Event::Nack { type_url, nack } => {
                    nacked = true;
                    state.record_nack(node_id, type_url, nack);
                }
                Event::StaleNonce { .. } => inc(&state.metrics.stale_nonces_total),
                Event::Withheld { version, .. } => {
                    inc(&state.metrics.withheld_total);
                    tracing::info!(node = node_id, %version, "not resending a version this node refused");
                }
                Event::Subscribed { .. } | Event::NoTypeUrl => {}
            }
        }
        state.update_stream(
            id,
            node.as_ref().map(|(n, c)| (n.as_str(), c.as_str())),
            &proto,
            nacked,
        );
        for r in out.responses {
            inc(&state.metrics.responses_total);
            tracing::debug!(node = node_id, version = %r.version_info, nonce = %r.nonce, "sending");
            if tx.send(Ok(r)).await.is_err() {
                break;
            }
        }
    }
    state.close_stream(id);
    tracing::debug!(stream = id, "xDS stream closed");
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Xds {
    type StreamAggregatedResourcesStream = Responses;
    type DeltaAggregatedResourcesStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        self.start(request.into_inner(), None)
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented(
            "ferry serves state-of-the-world xDS (api_type: GRPC), not delta",
        ))
    }
}

#[tonic::async_trait]
impl ExtensionConfigDiscoveryService for Xds {
    type StreamExtensionConfigsStream = Responses;
    type DeltaExtensionConfigsStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_extension_configs(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        self.start(request.into_inner(), Some(vec![ECDS_TYPE_URL.to_owned()]))
    }

    async fn delta_extension_configs(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaExtensionConfigsStream>, Status> {
        Err(Status::unimplemented(
            "ferry serves state-of-the-world xDS (api_type: GRPC), not delta",
        ))
    }

    async fn fetch_extension_configs(
        &self,
        _request: Request<DiscoveryRequest>,
    ) -> Result<Response<DiscoveryResponse>, Status> {
        Err(Status::unimplemented("use the streaming API"))
    }
}
