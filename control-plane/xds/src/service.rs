//! The ADS and ECDS gRPC services, in place of tonic's generated ones, so that a response
//! goes out as the bytes every stream shares ([`Response`]): each message is written as HTTP/2
//! DATA frames of its 5-byte gRPC prefix, the shared encoding itself (never copied per
//! stream), and its nonce; then trailers with the stream's status. Requests are decoded by
//! tonic's `Streaming` with a small buffer (a fleet's streams are idle nearly always). Delta
//! xDS and the unary fetch answer `UNIMPLEMENTED`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf as _, Bytes};
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryRequest;
use ferry_http_serve::Peer;
use hyper::body::Frame;
use prost::Message as _;
use tokio::sync::mpsc;
use tonic::body::Body;
use tonic::codec::{BufferSettings, DecodeBuf, Decoder};
use tonic::codegen::http;
use tonic::server::NamedService;
use tonic::{Request, Status, Streaming};

use super::grpc::Xds;
use super::resource_type::ResourceType;
use super::response::Response;

/// Largest request accepted from Envoy (a DiscoveryRequest is small; NACK details included).
const MAX_REQUEST_BYTES: usize = 4 << 20;
/// Initial size of each stream's decode buffer (tonic's default is 8 KiB): a request is a few
/// hundred bytes.
const BUFFER_BYTES: usize = 1024;

/// Requests decoded with prost.
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestDecoder;

impl Decoder for RequestDecoder {
    type Item = DiscoveryRequest;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<DiscoveryRequest>, Status> {
        let request = DiscoveryRequest::decode(src.copy_to_bytes(src.remaining()))
            .map_err(|e| Status::invalid_argument(format!("not a DiscoveryRequest: {e}")))?;
        Ok(Some(request))
    }

    fn buffer_settings(&self) -> BufferSettings {
        BufferSettings::new(BUFFER_BYTES, 32 * 1024)
    }
}

/// A stream's responses as the HTTP/2 response body.
pub(super) struct ResponseBody {
    rx: mpsc::Receiver<Result<Response, Status>>,
    /// The rest of the message being written (its shared bytes, its nonce).
    queued: VecDeque<Bytes>,
    done: bool,
}

impl ResponseBody {
    pub(super) fn new(rx: mpsc::Receiver<Result<Response, Status>>) -> ResponseBody {
        ResponseBody {
            rx,
            queued: VecDeque::with_capacity(3),
            done: false,
        }
    }

    fn trailers(status: &Status) -> Frame<Bytes> {
        let mut trailers = http::HeaderMap::new();
        let _ = status.add_header(&mut trailers);
        Frame::trailers(trailers)
    }
}

impl hyper::body::Body for ResponseBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(chunk) = self.queued.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        if self.done {
            return Poll::Ready(None);
        }
        let frame = match std::task::ready!(self.rx.poll_recv(cx)) {
            Some(Ok(r)) => {
                let nonce = Bytes::from(r.nonce_field());
                let len = u32::try_from(r.shared.len() + nonce.len()).unwrap_or(u32::MAX);
                let mut prefix = Vec::with_capacity(5);
                prefix.push(0); // not compressed
                prefix.extend_from_slice(&len.to_be_bytes());
                self.queued.push_back(r.shared);
                self.queued.push_back(nonce);
                Frame::data(Bytes::from(prefix))
            }
            Some(Err(status)) => {
                self.done = true;
                Self::trailers(&status)
            }
            None => {
                self.done = true;
                Self::trailers(&Status::ok(""))
            }
        };
        Poll::Ready(Some(Ok(frame)))
    }
}

/// Which discovery service: its gRPC name, its streaming method, the types it serves.
pub trait Api: Send + Sync + 'static {
    const NAME: &'static str;
    const STREAM_PATH: &'static str;
    /// None: any type (ADS).
    fn allowed() -> Option<Vec<ResourceType>>;
}

/// `envoy.service.discovery.v3.AggregatedDiscoveryService`.
pub enum Ads {}

impl Api for Ads {
    const NAME: &'static str = "envoy.service.discovery.v3.AggregatedDiscoveryService";
    const STREAM_PATH: &'static str =
        "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources";
    fn allowed() -> Option<Vec<ResourceType>> {
        None
    }
}

/// `envoy.service.extension.v3.ExtensionConfigDiscoveryService`.
pub enum Ecds {}

impl Api for Ecds {
    const NAME: &'static str = "envoy.service.extension.v3.ExtensionConfigDiscoveryService";
    const STREAM_PATH: &'static str =
        "/envoy.service.extension.v3.ExtensionConfigDiscoveryService/StreamExtensionConfigs";
    fn allowed() -> Option<Vec<ResourceType>> {
        Some(vec![ResourceType::ExtensionConfig])
    }
}

/// One discovery service over the server's streams.
pub struct Service<A: Api> {
    xds: Xds,
    api: PhantomData<fn() -> A>,
}

impl<A: Api> Service<A> {
    pub fn new(xds: Xds) -> Service<A> {
        Service {
            xds,
            api: PhantomData,
        }
    }
}

impl Xds {
    /// The aggregated discovery service over this server's streams.
    pub fn ads(&self) -> Service<Ads> {
        Service::new(self.clone())
    }

    /// The extension config discovery service (ECDS alone) over them.
    pub fn ecds(&self) -> Service<Ecds> {
        Service::new(self.clone())
    }
}

impl<A: Api> Clone for Service<A> {
    fn clone(&self) -> Self {
        Service::new(self.xds.clone())
    }
}

impl<A: Api> NamedService for Service<A> {
    const NAME: &'static str = A::NAME;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<A: Api, B> tonic::codegen::Service<http::Request<B>> for Service<A>
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
    B::Data: Send,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != A::STREAM_PATH {
            let status = Status::unimplemented(
                "ferry serves state-of-the-world xDS streams (api_type: GRPC): not delta, not fetch",
            );
            return Box::pin(async move { Ok(status.into_http()) });
        }
        let peer = req.extensions().get::<Peer>().cloned();
        let streaming = Streaming::new_request(
            RequestDecoder,
            req.into_body(),
            None,
            Some(MAX_REQUEST_BYTES),
        );
        let mut request = Request::new(streaming);
        if let Some(peer) = peer {
            request.extensions_mut().insert(peer);
        }
        let answer = match self.xds.start(request, A::allowed()) {
            Ok(rx) => {
                let mut r = http::Response::new(Body::new(ResponseBody::new(rx)));
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/grpc"),
                );
                r
            }
            Err(status) => status.into_http(),
        };
        Box::pin(async move { Ok(answer) })
    }
}
