//! The gRPC side: ADS and ECDS (state of the world) over tonic. Each stream is a task
//! ([`super::stream`]) over its own [`StreamState`]; this file only admits streams, names
//! what each service may serve, and carries each connection's verified client identity
//! ([`XdsConn`], tonic's connect info) to its streams.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ferry_http_serve::stream::Stream as Io;
use ferry_http_serve::{Peer, PeerIdentity};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

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

use super::callbacks::Callbacks;
use super::identity::NodePolicy;
use super::limits::{Bounds, Refusal};
use super::protocol::Event;
use super::protocol::StreamState;
use super::refusals::Refusals;
use super::resource_type::ResourceType;
use super::source::{Node, SnapshotSource};
use super::stream::{self, Shared};

/// Responses queued per stream before the stream task waits for Envoy to read.
const STREAM_QUEUE: usize = 8;
/// Largest request accepted from Envoy (a DiscoveryRequest is small; NACK details included).
const MAX_REQUEST_BYTES: usize = 4 << 20;

type Responses = ReceiverStream<Result<DiscoveryResponse, Status>>;
type DeltaResponses = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

/// The answer to every delta stream.
fn delta_unsupported() -> Status {
    Status::unimplemented("ferry serves state-of-the-world xDS (api_type: GRPC), not delta")
}

/// Both discovery services over one snapshot source and one set of callbacks.
#[derive(Clone)]
pub struct Xds {
    shared: Shared,
    /// Flips to true on shutdown: every stream ends.
    shutdown: watch::Receiver<bool>,
    /// Bound on concurrent streams.
    max_streams: usize,
    /// Streams running now.
    open: Arc<AtomicUsize>,
    /// The next stream's id (its nonce prefix); ids are never reused.
    next_id: Arc<AtomicU64>,
}

/// Holds one of the `max_streams` places until its stream's task ends.
struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Xds {
    pub fn new(
        source: Arc<dyn SnapshotSource>,
        callbacks: Arc<dyn Callbacks>,
        shutdown: watch::Receiver<bool>,
        max_streams: usize,
        max_streams_per_node: usize,
    ) -> Xds {
        Xds {
            shared: Shared {
                source,
                callbacks,
                refusals: Arc::new(Refusals::default()),
                bounds: Arc::new(Bounds::new(max_streams_per_node)),
                policy: Arc::new(NodePolicy::default()),
            },
            shutdown,
            max_streams,
            open: Arc::new(AtomicUsize::new(0)),
            next_id: Arc::new(AtomicU64::new(1)),
        }
    }

    /// Which node ids each verified client identity may use (default: its own names).
    pub fn with_node_policy(mut self, policy: NodePolicy) -> Xds {
        self.shared.policy = Arc::new(policy);
        self
    }

    pub fn ads(&self) -> AggregatedDiscoveryServiceServer<Xds> {
        AggregatedDiscoveryServiceServer::new(self.clone())
            .max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    pub fn ecds(&self) -> ExtensionConfigDiscoveryServiceServer<Xds> {
        ExtensionConfigDiscoveryServiceServer::new(self.clone())
            .max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    fn admit(&self) -> Option<Admitted> {
        let before = self.open.fetch_add(1, Ordering::Relaxed);
        let admitted = Admitted(self.open.clone());
        (before < self.max_streams).then_some(admitted)
    }

    /// Starts a stream serving `allowed` types (None = any, ADS).
    fn start(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
        allowed: Option<Vec<ResourceType>>,
    ) -> Result<Response<Responses>, Status> {
        let Some(admitted) = self.admit() else {
            let detail = format!("too many xDS streams (at most {})", self.max_streams);
            let refusal = Refusal::Streams;
            self.shared.bounds.log(refusal, "", &detail);
            let event = Event::Refused {
                refusal,
                detail: detail.clone(),
            };
            self.shared.callbacks.on_event(0, &Node::default(), &event);
            return Err(refusal.status(&detail));
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let identity = request
            .extensions()
            .get::<Peer>()
            .and_then(|p| p.identity.clone());
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(STREAM_QUEUE);
        let task = stream::run(
            self.shared.clone(),
            (id, identity),
            StreamState::new(id, allowed),
            inbound,
            tx,
            self.shutdown.clone(),
        );
        tokio::spawn(async move {
            task.await;
            drop(admitted);
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Xds {
    type StreamAggregatedResourcesStream = Responses;
    type DeltaAggregatedResourcesStream = DeltaResponses;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        self.start(request, None)
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<DeltaResponses>, Status> {
        Err(delta_unsupported())
    }
}

#[tonic::async_trait]
impl ExtensionConfigDiscoveryService for Xds {
    type StreamExtensionConfigsStream = Responses;
    type DeltaExtensionConfigsStream = DeltaResponses;

    async fn stream_extension_configs(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Responses>, Status> {
        self.start(request, Some(vec![ResourceType::ExtensionConfig]))
    }

    async fn delta_extension_configs(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<DeltaResponses>, Status> {
        Err(delta_unsupported())
    }

    async fn fetch_extension_configs(
        &self,
        _request: Request<DiscoveryRequest>,
    ) -> Result<Response<DiscoveryResponse>, Status> {
        Err(Status::unimplemented("use the streaming API"))
    }
}

/// A connection the xDS server accepted (plain, or TLS with its handshake done), carrying its
/// [`Peer`] to every request as tonic's connect info.
pub struct XdsConn {
    pub io: Io,
    pub peer: Peer,
}

impl XdsConn {
    /// The verified client identity of this connection.
    pub fn identity(&self) -> Option<&PeerIdentity> {
        self.peer.identity.as_deref()
    }
}

impl tonic::transport::server::Connected for XdsConn {
    type ConnectInfo = Peer;

    fn connect_info(&self) -> Peer {
        self.peer.clone()
    }
}

impl AsyncRead for XdsConn {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl AsyncWrite for XdsConn {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
