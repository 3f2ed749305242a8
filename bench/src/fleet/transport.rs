//! How a simulated Envoy reaches `ferry serve`: a TCP connection from one of many loopback
//! source addresses (127.0.0.x, so a fleet is not bound by one address's ports), plain or TLS
//! with a client certificate, then HTTP/2 (xDS) or HTTP/1.1 (the snapshot pull), each
//! connection owned by one simulated Envoy as a real Envoy owns its ADS connection.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use anyhow::{Context as _, Result};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpSocket, TcpStream};
use tonic::codegen::http;

/// A connection's byte stream, plain or TLS.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// Loopback source addresses the clients are spread over (127.0.0.2 ..).
pub const SOURCE_ADDRESSES: u32 = 50;

/// The source address of client `i`.
pub fn source(i: usize) -> IpAddr {
    let host = 2 + (i as u32 % SOURCE_ADDRESSES);
    IpAddr::V4(Ipv4Addr::new(
        127,
        0,
        (host >> 8) as u8,
        (host & 0xff) as u8,
    ))
}

/// Opens a TCP connection to `to` from `from` (any free port), Nagle off.
pub async fn tcp(from: IpAddr, to: SocketAddr) -> Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    let stream = socket.connect(to).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// A TLS client: the server's CA, and (for mTLS) a client certificate and key.
#[derive(Clone)]
pub struct TlsClient {
    connector: tokio_rustls::TlsConnector,
}

impl TlsClient {
    /// From PEM files; `alpn` is what the connection will speak (`h2`, `http/1.1`).
    pub fn load(ca: &Path, cert: &Path, key: &Path, alpn: &[u8]) -> Result<TlsClient> {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).with_context(|| ca.display().to_string())? {
            roots.add(c?)?;
        }
        let chain = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .with_context(|| cert.display().to_string())?;
        let key = PrivateKeyDer::from_pem_file(key).with_context(|| key.display().to_string())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(TlsClient {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    async fn wrap(&self, tcp: TcpStream) -> Result<Box<dyn Io>> {
        let name = rustls::pki_types::ServerName::IpAddress(Ipv4Addr::LOCALHOST.into());
        let tls = self.connector.connect(name, tcp).await?;
        Ok(Box::new(tls))
    }
}

/// A connection, plain or TLS.
pub async fn connect(from: IpAddr, to: SocketAddr, tls: Option<&TlsClient>) -> Result<Box<dyn Io>> {
    let tcp = tcp(from, to).await?;
    match tls {
        Some(tls) => tls.wrap(tcp).await,
        None => Ok(Box::new(tcp)),
    }
}

/// One HTTP/2 connection as a gRPC transport for tonic's generated clients.
#[derive(Clone)]
pub struct H2(http2::SendRequest<tonic::body::Body>);

impl H2 {
    /// The HTTP/2 handshake over `io`, with this initial stream window (Envoy's default is
    /// 256 MiB; a small one makes a client that stops reading push back sooner).
    pub async fn handshake(io: Box<dyn Io>, stream_window: u32) -> Result<H2> {
        let (send, conn) = http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(stream_window)
            .initial_connection_window_size(stream_window.max(1 << 20))
            .handshake(TokioIo::new(io))
            .await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(H2(send))
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for H2 {
    type Response = http::Response<Incoming>;
    type Error = hyper::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(req))
    }
}

/// One HTTP/1.1 keep-alive connection (a poller's, as one Envoy worker's pool holds it).
pub async fn http1(
    io: Box<dyn Io>,
) -> Result<http1::SendRequest<http_body_util::Empty<bytes::Bytes>>> {
    let (send, conn) = http1::handshake(TokioIo::new(io)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// Raises this process's open-file limit to `want`: the soft limit, and the hard one past the
/// machine's when the process may (root with CAP_SYS_RESOURCE); else the soft limit up to the
/// hard one. Children (`ferry serve`) inherit it. The limit now.
pub fn raise_open_files(want: u64) -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let now = getrlimit(Resource::Nofile);
    let soft = now.current.unwrap_or(u64::MAX);
    if soft >= want {
        return soft;
    }
    let past = Rlimit {
        current: Some(want),
        maximum: now.maximum.map(|h| h.max(want)),
    };
    if setrlimit(Resource::Nofile, past).is_ok() {
        return want;
    }
    let hard = now.maximum.unwrap_or(u64::MAX);
    let within = Rlimit {
        current: Some(hard.min(want)),
        maximum: now.maximum,
    };
    match setrlimit(Resource::Nofile, within) {
        Ok(()) => hard.min(want),
        Err(_) => soft,
    }
}
