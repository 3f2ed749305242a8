//! HTTP for the tests: hyper over one explicit connection (so keep-alive reuse is real and
//! visible), plus raw-socket helpers for readiness probes and chunked uploads.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

pub struct Response {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
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

/// One HTTP/1.1 keep-alive connection to 127.0.0.1:port.
pub struct Conn {
    port: u16,
    sender: SendRequest<Full<Bytes>>,
}

impl Conn {
    pub async fn open(port: u16) -> Conn {
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        Conn { port, sender }
    }

    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Response {
        let mut req = hyper::Request::builder().method(method).uri(path);
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            req = req.header("host", format!("127.0.0.1:{}", self.port));
        }
        req = req.header("content-type", "application/json");
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let req = req.body(Full::new(body.into())).expect("request");
        self.sender.ready().await.expect("connection ready");
        let resp = tokio::time::timeout(Duration::from_secs(10), self.sender.send_request(req))
            .await
            .expect("response within 10 s")
            .expect("response");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        Response {
            status,
            headers,
            body,
        }
    }

    pub async fn post(&mut self, path: &str, body: impl Into<Bytes>) -> Response {
        self.send("POST", path, &[], body).await
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
