//! Test harness: a real `redis-server` (ferry-test-support's) and a client to seed it, the reader
//! on `127.0.0.1:0`, and a small real HTTP client.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use ferry_protos::v1::{VectorRequest, VectorResponse};
use ferry_reader::{Config, Reader};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prost::Message;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use ferry_test_support::reader::request;
pub use ferry_test_support::redis::RedisServer;

/// Writes raw values under raw keys.
pub async fn set(redis: &RedisServer, pairs: &[(String, Vec<u8>)]) {
    let mut conn = connection(redis).await;
    for (k, v) in pairs {
        redis::cmd("SET")
            .arg(k)
            .arg(v.as_slice())
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }
}

pub async fn connection(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The reader served inside the test, on 127.0.0.1:0.
pub struct ReaderServer {
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl ReaderServer {
    pub async fn start(config: Config) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = Arc::new(Reader::new(&config).unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(ferry_reader::serve(listener, reader, async {
            let _ = rx.await;
        }));
        Self {
            addr,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Signals shutdown and waits for `serve` to return.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(15), task)
                .await
                .unwrap()
                .unwrap();
        }
    }
}

/// A decoded answer.
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub fn vectors(&self) -> VectorResponse {
        assert_eq!(
            self.status,
            StatusCode::OK,
            "{:?}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(
            self.headers["content-type"],
            ferry_protos::PROTOBUF_CONTENT_TYPE
        );
        VectorResponse::decode(self.body.clone()).unwrap()
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.body.to_vec()).unwrap()
    }
}

pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

pub fn http1_client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn h2c_client() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

pub async fn send(client: &HttpClient, method: Method, url: &str, body: Vec<u8>) -> Answer {
    let request = Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", ferry_protos::PROTOBUF_CONTENT_TYPE)
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

pub async fn get(client: &HttpClient, url: &str) -> Answer {
    send(client, Method::GET, url, Vec::new()).await
}

pub async fn post(client: &HttpClient, url: &str, request: &VectorRequest) -> Answer {
    send(client, Method::POST, url, request.encode_to_vec()).await
}

/// A body sent in chunks with no declared length (chunked transfer encoding on HTTP/1.1).
pub struct Chunked(pub VecDeque<Bytes>);

impl Body for Chunked {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}
