//! The client side of the control plane's HTTP API, for `ferry apply --push`: read `/status`
//! (which fingerprints are served now) and `POST /v1/snapshot`, as the API's own wire types.
//! HTTP/1.1 over plain TCP (`http://`, loopback) or TLS (`https://`, with a client certificate
//! for mTLS), one connection per call, every call bounded in time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use super::api::{ApiError, Pushed, ServiceStatus, Status, SNAPSHOT_PATH};
use ferry_repo::Registry;

const CALL_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("control plane URL '{0}' must look like http://HOST:PORT or https://HOST:PORT")]
    Url(String),
    #[error("TLS for {url}: {reason}")]
    Tls { url: String, reason: String },
    #[error("control plane at {url}: {reason}")]
    Io { url: String, reason: String },
    #[error("control plane at {0}: no answer within {CALL_TIMEOUT:?}")]
    Timeout(String),
    /// The API answered with an error (its message, or the raw body when not the API's JSON).
    #[error("HTTP {status}: {message}")]
    Refused { status: u16, message: String },
    #[error("control plane at {url}: unexpected answer to {path}: {reason}")]
    Unexpected {
        url: String,
        path: &'static str,
        reason: String,
    },
}

/// How to reach the API: the push token, and the TLS files for an `https://` URL.
#[derive(Clone, Debug, Default)]
pub struct Client {
    /// Sent as `Authorization: Bearer`.
    pub token: Option<String>,
    /// The CA that signed the control plane's certificate (PEM); without it, an `https://` URL
    /// is refused (there is no system trust store here to fall back on).
    pub ca: Option<PathBuf>,
    /// A client certificate and its key (PEM), for mTLS (`ferry serve --grant push=...`).
    pub cert: Option<(PathBuf, PathBuf)>,
}

/// An answer: HTTP status and body.
struct Answer {
    status: u16,
    body: Bytes,
}

/// `http[s]://host:port[/]` → (TLS, "host:port").
fn authority(url: &str) -> Result<(bool, String), ClientError> {
    let (tls, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(rest), _) => (true, rest),
        (None, Some(rest)) => (false, rest),
        (None, None) => return Err(ClientError::Url(url.to_owned())),
    };
    let auth = rest.trim_end_matches('/');
    if auth.is_empty() || auth.contains('/') || !auth.contains(':') {
        return Err(ClientError::Url(url.to_owned()));
    }
    Ok((tls, auth.to_owned()))
}

/// The TLS client `client` describes, for the server at `url`.
fn connector(url: &str, client: &Client) -> Result<tokio_rustls::TlsConnector, ClientError> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let fail = |reason: String| ClientError::Tls {
        url: url.to_owned(),
        reason,
    };
    let ca = client
        .ca
        .as_ref()
        .ok_or_else(|| fail("an https:// URL needs --ca (the CA of its certificate)".into()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        CertificateDer::pem_file_iter(ca).map_err(|e| fail(format!("{}: {e}", ca.display())))?
    {
        let cert = cert.map_err(|e| fail(format!("{}: {e}", ca.display())))?;
        roots
            .add(cert)
            .map_err(|e| fail(format!("{}: {e}", ca.display())))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(e.to_string()))?
        .with_root_certificates(roots);
    let mut config = match &client.cert {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| fail(format!("{}: {e}", cert.display())))?;
            let key = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| fail(format!("{}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| fail(e.to_string()))?
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// An HTTP/1.1 connection to `auth`, over TLS when `tls`.
async fn connect(
    url: &str,
    (tls, auth): (bool, &str),
    client: &Client,
) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, ClientError> {
    let io = |e: &dyn std::fmt::Display| ClientError::Io {
        url: url.to_owned(),
        reason: e.to_string(),
    };
    let stream = tokio::net::TcpStream::connect(auth)
        .await
        .map_err(|e| io(&e))?;
    if !tls {
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| io(&e))?;
        tokio::spawn(conn);
        return Ok(sender);
    }
    let host = auth.rsplit_once(':').map_or(auth, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| io(&e))?;
    let stream = connector(url, client)?
        .connect(name, stream)
        .await
        .map_err(|e| io(&e))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| io(&e))?;
    tokio::spawn(conn);
    Ok(sender)
}

async fn call(
    url: &str,
    method: &str,
    path: &'static str,
    client: &Client,
    body: Vec<u8>,
) -> Result<Answer, ClientError> {
    let (tls, auth) = authority(url)?;
    let io = |e: &dyn std::fmt::Display| ClientError::Io {
        url: url.to_owned(),
        reason: e.to_string(),
    };
    let fut = async {
        let mut sender = connect(url, (tls, &auth), client).await?;
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &auth)
            .header("content-type", ferry_protos::PROTOBUF_CONTENT_TYPE);
        if let Some(t) = &client.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req.body(Full::new(Bytes::from(body))).map_err(|e| io(&e))?;
        let resp = sender.send_request(req).await.map_err(|e| io(&e))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| io(&e))?
            .to_bytes();
        Ok(Answer { status, body })
    };
    tokio::time::timeout(CALL_TIMEOUT, fut)
        .await
        .map_err(|_| ClientError::Timeout(url.to_owned()))?
}

/// Decodes a 200 answer as `T`; any other answer is the API's error.
fn decode<T: serde::de::DeserializeOwned>(
    url: &str,
    path: &'static str,
    answer: Answer,
) -> Result<T, ClientError> {
    if answer.status != 200 {
        let message = serde_json::from_slice::<ApiError>(&answer.body).map_or_else(
            |_| String::from_utf8_lossy(&answer.body).into_owned(),
            |e| e.message,
        );
        return Err(ClientError::Refused {
            status: answer.status,
            message,
        });
    }
    serde_json::from_slice(&answer.body).map_err(|e| ClientError::Unexpected {
        url: url.to_owned(),
        path,
        reason: e.to_string(),
    })
}

/// `GET /status`, with the push token when there is one (it also reads).
pub async fn status(url: &str, client: &Client) -> Result<Status, ClientError> {
    let answer = call(url, "GET", "/status", client, Vec::new()).await?;
    decode(url, "/status", answer)
}

/// `POST /v1/snapshot`; a refusal is [`ClientError::Refused`].
pub async fn send_snapshot(
    url: &str,
    client: &Client,
    snapshot: Vec<u8>,
) -> Result<Pushed, ClientError> {
    let answer = call(url, "POST", SNAPSHOT_PATH, client, snapshot).await?;
    decode(url, SNAPSHOT_PATH, answer)
}

/// What `apply --push --materialize` writes before pushing: the services of `reg` whose
/// fingerprint the control plane does not serve (`served`, from its `/status`), and no routes
/// (they refer to services by index; materializing needs only the services).
pub fn unserved(mut reg: Registry, served: &[ServiceStatus]) -> Registry {
    reg.services.retain(|s| {
        let fingerprint = ferry_protos::fingerprint_hex(s.fingerprint);
        !served
            .iter()
            .any(|c| c.name == s.name && c.fingerprint == fingerprint)
    });
    reg.routes.clear();
    reg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_http_or_https_host_and_port() {
        assert_eq!(
            authority("http://127.0.0.1:8091").unwrap(),
            (false, "127.0.0.1:8091".to_owned())
        );
        assert_eq!(
            authority("http://cp:8091/").unwrap(),
            (false, "cp:8091".to_owned())
        );
        assert_eq!(
            authority("https://cp:8091").unwrap(),
            (true, "cp:8091".to_owned())
        );
        assert!(authority("ftp://cp:1").is_err());
        let e = connector("https://cp:8091", &Client::default())
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("needs --ca"), "{e}");
        assert!(authority("http://cp").is_err());
        assert!(authority("http://cp:1/x").is_err());
    }
}
