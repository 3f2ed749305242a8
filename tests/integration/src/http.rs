//! HTTP for the tests: hyper over one explicit connection (so keep-alive reuse is real and
//! visible), HTTP/1.1 or h2c (HTTP/2 with prior knowledge), optionally with request trailers,
//! plus raw-socket helpers for readiness probes and chunked uploads.

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Frame;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// The request body of both connection kinds: one data frame, or data frames then trailers.
pub type RequestBody = BoxBody<Bytes, Infallible>;

/// How a [`Conn`] speaks to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    /// HTTP/2 over cleartext with prior knowledge (no upgrade).
    H2c,
}

pub struct Response {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
    /// The response's trailers, if it had any (a gRPC answer's `grpc-status`).
    pub trailers: Option<hyper::HeaderMap>,
}

impl Response {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// An error Ferry answered itself, the model not called: (status, JSON `error`,
    /// `message`).
    pub fn ferry_error(&self) -> (u16, String, String) {
        assert!(
            self.header("x-echo-headers").is_none(),
            "the model must not be called on an error"
        );
        let v = self.json();
        (
            self.status,
            v["error"].as_str().unwrap().to_string(),
            v["message"].as_str().unwrap().to_string(),
        )
    }

    /// The request headers the demo model received (it echoes them in `x-echo-headers`).
    pub fn upstream_headers(&self) -> serde_json::Value {
        let h = self.header("x-echo-headers").unwrap_or_else(|| {
            panic!(
                "not answered by the model (status {}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        });
        serde_json::from_str(h).expect("x-echo-headers is JSON")
    }
}

enum Sender {
    Http1(http1::SendRequest<RequestBody>),
    H2c(http2::SendRequest<RequestBody>),
}

/// One keep-alive connection to 127.0.0.1:port, HTTP/1.1 or h2c.
pub struct Conn {
    port: u16,
    sender: Sender,
}

impl Conn {
    /// An HTTP/1.1 connection.
    pub async fn open(port: u16) -> Conn {
        Conn::open_with(port, Protocol::Http1).await
    }

    /// An h2c connection (HTTP/2 with prior knowledge).
    pub async fn open_h2c(port: u16) -> Conn {
        Conn::open_with(port, Protocol::H2c).await
    }

    pub async fn open_with(port: u16, protocol: Protocol) -> Conn {
        let stream = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::net::TcpStream::connect(("127.0.0.1", port)),
        )
        .await
        .expect("connect within 5 s")
        .expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let io = TokioIo::new(stream);
        let sender = match protocol {
            Protocol::Http1 => {
                let (sender, conn) = http1::handshake(io).await.expect("handshake");
                tokio::spawn(conn);
                Sender::Http1(sender)
            }
            Protocol::H2c => {
                let (sender, conn) = http2::handshake(TokioExecutor::new(), io)
                    .await
                    .expect("h2c handshake");
                tokio::spawn(conn);
                Sender::H2c(sender)
            }
        };
        Conn { port, sender }
    }

    /// Sends `body` as one data frame (with its content-length on HTTP/1.1).
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Response {
        let body = Full::new(body.into()).boxed();
        self.send_body(method, path, headers, body).await
    }

    /// Sends `body` in two data frames (one if it is shorter than two bytes) of unknown total
    /// length, then `trailers` as a trailers frame: on HTTP/1.1 a chunked body whose trailer
    /// section holds them (announced in a `trailer` header, as hyper requires), on h2c a
    /// HEADERS frame with END_STREAM after the DATA frames. The body may be empty: then only
    /// the trailers follow the headers.
    pub async fn send_with_trailers(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
        trailers: &[(&str, &str)],
    ) -> Response {
        let body: Bytes = body.into();
        let mut trailer_map = hyper::HeaderMap::new();
        for (n, v) in trailers {
            trailer_map.append(
                hyper::header::HeaderName::from_bytes(n.as_bytes()).expect("trailer name"),
                hyper::header::HeaderValue::from_str(v).expect("trailer value"),
            );
        }
        let mid = body.len() / 2;
        let mut frames = std::collections::VecDeque::new();
        for part in [body.slice(..mid), body.slice(mid..)] {
            if !part.is_empty() {
                frames.push_back(Frame::data(part));
            }
        }
        frames.push_back(Frame::trailers(trailer_map));
        let names: Vec<&str> = trailers.iter().map(|(n, _)| *n).collect();
        let announce = names.join(", ");
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        if matches!(self.sender, Sender::Http1(_)) && !names.is_empty() {
            all.push(("trailer", announce.as_str()));
        }
        self.send_body(method, path, &all, Frames(frames).boxed())
            .await
    }

    async fn send_body(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: RequestBody,
    ) -> Response {
        let host = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
            .map_or_else(
                || format!("127.0.0.1:{}", self.port),
                |(_, v)| (*v).to_string(),
            );
        let mut req = hyper::Request::builder().method(method);
        req = match self.sender {
            // HTTP/1.1: origin-form target and a host header.
            Sender::Http1(_) => req.uri(path).header("host", host.as_str()),
            // HTTP/2 has no host header: the authority travels in :authority.
            Sender::H2c(_) => req.uri(format!("http://{host}{path}")),
        };
        // JSON unless the caller names its own content type (gRPC: application/grpc).
        if !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            req = req.header("content-type", "application/json");
        }
        for (n, v) in headers {
            if !n.eq_ignore_ascii_case("host") {
                req = req.header(*n, *v);
            }
        }
        let req = req.body(body).expect("request");
        let sent = async {
            match &mut self.sender {
                Sender::Http1(s) => {
                    s.ready().await?;
                    s.send_request(req).await
                }
                Sender::H2c(s) => {
                    s.ready().await?;
                    s.send_request(req).await
                }
            }
        };
        let resp = tokio::time::timeout(Duration::from_secs(10), sent)
            .await
            .expect("response within 10 s")
            .expect("response");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let collected = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect())
            .await
            .expect("response body within 10 s")
            .expect("body");
        let trailers = collected.trailers().cloned();
        Response {
            status,
            headers,
            body: collected.to_bytes(),
            trailers,
        }
    }

    pub async fn post(&mut self, path: &str, body: impl Into<Bytes>) -> Response {
        self.send("POST", path, &[], body).await
    }
}

/// A request body that yields its frames in order, of unknown length (so HTTP/1.1 sends it
/// chunked).
struct Frames(std::collections::VecDeque<Frame<Bytes>>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.get_mut().0.pop_front().map(Ok))
    }
}

/// POST on a fresh connection.
pub async fn post(port: u16, path: &str, body: impl Into<Bytes>) -> Response {
    Conn::open(port).await.post(path, body).await
}

/// Whether GET 127.0.0.1:port/path answers 2xx (blocking; for readiness waits).
pub fn get_ok(port: u16, path: &str) -> bool {
    raw(
        port,
        format!("GET {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .map(|r| r.starts_with("HTTP/1.0 2") || r.starts_with("HTTP/1.1 2"))
    .unwrap_or(false)
}

/// GET 127.0.0.1:port/path on a fresh connection: the whole response, head and body
/// (blocking).
pub fn get(port: u16, path: &str) -> String {
    raw(
        port,
        format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap_or_else(|e| panic!("GET {path} on port {port}: {e}"))
}

/// The reader's count of keys asked for (`ferry_reader_keys_requested_total` on its
/// `/metrics`).
pub fn reader_keys_requested(reader_port: u16) -> i64 {
    let m = get(reader_port, "/metrics");
    m.lines()
        .find_map(|l| {
            l.strip_prefix("ferry_reader_keys_requested_total ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no keys counter in:\n{m}"))
}

/// Writes `request` on a fresh connection and returns everything read until the server closes
/// (or 5 s pass).
pub fn raw(port: u16, request: &[u8]) -> std::io::Result<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(request)?;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    Ok(String::from_utf8_lossy(&out).into_owned())
}
