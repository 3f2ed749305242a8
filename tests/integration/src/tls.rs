//! The client side of the control links' TLS, for tests: an HTTP/1.1 request over TLS (rustls,
//! ring) trusting a test CA, with or without a client certificate; what a refused handshake
//! looks like is the `Err`.

use std::sync::Arc;

use bytes::Bytes;
use ferry_test_support::certs::{Ca, LeafFiles};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A TLS connector trusting `ca`, presenting `client` when given, offering HTTP/1.1.
pub fn connector(ca: &Ca, client: Option<&LeafFiles>) -> tokio_rustls::TlsConnector {
    connector_alpn(ca, client, b"http/1.1")
}

/// [`connector`] offering `alpn` (`h2` for gRPC).
pub fn connector_alpn(
    ca: &Ca,
    client: Option<&LeafFiles>,
    alpn: &[u8],
) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.pem.as_bytes()).expect("CA PEM"))
        .expect("CA");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots);
    let mut config = match client {
        Some(f) => builder
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(&f.cert)
                    .expect("certificate file")
                    .map(|c| c.expect("certificate"))
                    .collect(),
                PrivateKeyDer::from_pem_file(&f.key).expect("key"),
            )
            .expect("client certificate"),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One request to 127.0.0.1:`port` over TLS, expecting the server certificate to name
/// `server_name`: (status, body), or the error that ended it (a refused handshake shows here).
pub async fn request(
    port: u16,
    server_name: &str,
    trust: (&Ca, Option<&LeafFiles>),
    req: (&str, &str, &[(&str, &str)]),
    body: Vec<u8>,
) -> Result<(u16, String), String> {
    let (status, _, body) = exchange(port, server_name, trust, req, body).await?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// [`request`], answering (status, headers, body bytes).
pub async fn exchange(
    port: u16,
    server_name: &str,
    (ca, client): (&Ca, Option<&LeafFiles>),
    (method, path, headers): (&str, &str, &[(&str, &str)]),
    body: Vec<u8>,
) -> Result<(u16, hyper::HeaderMap, Vec<u8>), String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_owned()).map_err(|e| e.to_string())?;
    let stream = connector(ca, client)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", server_name);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok((status, headers, body.to_bytes().to_vec()))
}

/// The certificate (DER) the server on 127.0.0.1:`port` presents to a client trusting `ca`
/// (presenting `client`, offering ALPN `alpn`), after a full handshake.
pub async fn served_certificate(
    port: u16,
    server_name: &str,
    (ca, client): (&Ca, Option<&LeafFiles>),
    alpn: &[u8],
) -> Result<Vec<u8>, String> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_owned()).map_err(|e| e.to_string())?;
    let stream = connector_alpn(ca, client, alpn)
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (_, session) = stream.get_ref();
    session
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.as_ref().to_vec())
        .ok_or_else(|| "no certificate".to_owned())
}

/// Who calls a TLS server: trusting `ca`, presenting `client` when given.
pub type Caller<'a> = (&'a Ca, Option<&'a LeafFiles>);

/// One unary gRPC call over TLS (h2) to `server_name` at 127.0.0.1:`port`: POSTs `message`,
/// framed, to `path` and returns the `grpc-status` the call ended with (from the headers, else
/// the trailers), or the error that ended the call.
pub async fn grpc_status(
    port: u16,
    (ca, client): Caller<'_>,
    server_name: &str,
    path: &str,
    message: &[u8],
) -> Result<u32, String> {
    let mut framed = vec![0u8];
    framed.extend_from_slice(
        &u32::try_from(message.len())
            .map_err(|e| e.to_string())?
            .to_be_bytes(),
    );
    framed.extend_from_slice(message);
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_owned()).map_err(|e| e.to_string())?;
    let stream = connector_alpn(ca, client, b"h2")
        .connect(name, tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = hyper::Request::post(format!("https://{server_name}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from(framed)))
        .map_err(|e| e.to_string())?;
    let resp = sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())?;
    let status = |h: &hyper::HeaderMap| {
        h.get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u32>().ok())
    };
    if let Some(code) = status(resp.headers()) {
        return Ok(code);
    }
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    body.trailers()
        .and_then(status)
        .ok_or_else(|| "no grpc-status".to_owned())
}

/// The DER of the first certificate of a PEM text.
pub fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .expect("a PEM certificate")
        .as_ref()
        .to_vec()
}
