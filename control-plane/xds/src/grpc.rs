//! The gRPC side: ADS and ECDS (state of the world) over tonic. Each stream is a task
//! ([`super::stream`]) over its own [`StreamState`]; this file only admits streams, names
//! what each service may serve, and carries each connection's verified client identity
//! ([`XdsConn`], tonic's connect info) to its streams; `service` is the gRPC side.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use ferry_http_serve::stream::Stream as Io;
use ferry_http_serve::{Peer, PeerIdentity};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Status, Streaming};

use super::bounds::{Bounds, Refusal};
use super::callbacks::Callbacks;
use super::identity::NodePolicy;
use super::protocol::Event;
use super::protocol::StreamState;
use super::refusals::Refusals;
use super::resource_type::ResourceType;
use super::response::Response as XdsResponse;
use super::source::{Node, SnapshotSource};
use super::stream::{self, Shared};

/// Responses queued per stream before the stream task waits for Envoy to read: one. A stream
/// whose Envoy does not read holds at most that one (and what its connection buffers); the
/// changes meanwhile are not queued, and the latest is sent once it reads again.
const STREAM_QUEUE: usize = 1;

/// Where the response body reads a stream's responses from.
pub(super) type Responses = mpsc::Receiver<Result<XdsResponse, Status>>;

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

    fn admit(&self) -> Option<Admitted> {
        let before = self.open.fetch_add(1, Ordering::Relaxed);
        let admitted = Admitted(self.open.clone());
        (before < self.max_streams).then_some(admitted)
    }

    /// Starts a stream serving `allowed` types (None = any, ADS).
    pub(super) fn start(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
        allowed: Option<Vec<ResourceType>>,
    ) -> Result<Responses, Status> {
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
        Ok(rx)
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
