//! Feast's registry server (`registry_type: remote`, `path: host:port`, run by `feast
//! serve_registry`): five unary gRPC calls on one connection (`ListEntities`,
//! `ListFeatureViews`, ... for the project, uncached: `registry_server.proto`) give the objects
//! the registry file would hold. Plain HTTP/2 over hyper (each call is one request and one
//! answer; no gRPC framework needed), over TLS when Feast's config says so (`is_tls`, `cert`),
//! with the bearer token Feast's client would send (`auth:` of `feature_store.yaml`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_protos::feast_registry_server::{ListRequest, ListResponse, LISTS};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use serde_norway::Value as Yaml;

/// Connecting and the call together give up after this long.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The largest registry answer read.
const MAX_ANSWER: usize = 64 << 20;
/// Where a Kubernetes pod's service account token is mounted (Feast reads it too).
const SA_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// A parsed remote registry.
#[derive(Clone)]
pub struct RemoteRegistry {
    /// `host:port`.
    pub addr: String,
    /// The CA the server's certificate is checked against, when TLS is on.
    pub ca: Option<PathBuf>,
    /// The TLS server name (`authority:` if given, else the host).
    pub authority: String,
    /// `authorization: Bearer ...`, from `auth:`.
    token: Option<String>,
}

impl std::fmt::Debug for RemoteRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteRegistry")
            .field("addr", &self.addr)
            .field("ca", &self.ca)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// The remote registry `registry` (the `registry:` map) and `auth` of `feature_store.yaml`
/// describe; `env` reads the environment, `dir` is the Feast repo (relative `cert` paths).
pub fn parse(
    registry: &Yaml,
    auth: Option<&Yaml>,
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RemoteRegistry, String> {
    let text = |k: &str| {
        registry
            .get(k)
            .and_then(Yaml::as_str)
            .filter(|s| !s.is_empty())
    };
    let addr = text("path").ok_or("a remote registry needs path: HOST:PORT")?;
    let addr = addr.strip_prefix("grpc://").unwrap_or(addr).to_owned();
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => host,
        _ => return Err(format!("remote registry path '{addr}' is not HOST:PORT")),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    if text("client_cert").is_some() || text("client_key").is_some() {
        return Err(
            "client_cert / client_key (mTLS to the registry server) are not supported".into(),
        );
    }
    let is_tls = registry
        .get("is_tls")
        .and_then(Yaml::as_bool)
        .unwrap_or(false);
    // As Feast's client: `cert`, else SSL_CERT_FILE or REQUESTS_CA_BUNDLE.
    let ca = match (text("cert"), is_tls) {
        (Some(cert), _) => Some(dir.join(cert)),
        (None, true) => Some(
            env("SSL_CERT_FILE")
                .or_else(|| env("REQUESTS_CA_BUNDLE"))
                .map(PathBuf::from)
                .ok_or("is_tls needs cert: FILE, SSL_CERT_FILE or REQUESTS_CA_BUNDLE")?,
        ),
        (None, false) => None,
    };
    Ok(RemoteRegistry {
        addr: addr.clone(),
        ca,
        authority: text("authority").map(str::to_owned).unwrap_or(host),
        token: bearer(auth, env, &|p| std::fs::read_to_string(p).ok())?,
    })
}

/// The token Feast's client sends for `auth:` (no_auth, oidc, kubernetes), from the same
/// places, except that Ferry never asks an identity provider for one (`client_secret`).
pub fn bearer(
    auth: Option<&Yaml>,
    env: &dyn Fn(&str) -> Option<String>,
    file: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<String>, String> {
    let Some(auth) = auth else {
        return Ok(None);
    };
    let text = |k: &str| auth.get(k).and_then(Yaml::as_str).filter(|s| !s.is_empty());
    let sa = || {
        file(SA_TOKEN)
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
    };
    let token = match text("type").unwrap_or("no_auth") {
        "no_auth" => return Ok(None),
        "oidc" => match (text("token"), text("token_env_var"), text("client_secret")) {
            (Some(t), _, _) => Some(t.to_owned()),
            (None, Some(var), _) => Some(
                env(var)
                    .filter(|t| !t.is_empty())
                    .ok_or_else(|| format!("auth token_env_var '{var}' is not set or empty"))?,
            ),
            (None, None, Some(_)) => {
                return Err(
                    "auth with client_secret (a token fetched from the identity \
                            provider) is not supported: give token or token_env_var"
                        .into(),
                )
            }
            (None, None, None) => env("FEAST_OIDC_TOKEN")
                .filter(|t| !t.is_empty())
                .or_else(sa),
        },
        "kubernetes" => text("user_token")
            .map(str::to_owned)
            .or_else(sa)
            .or_else(|| env("LOCAL_K8S_TOKEN").filter(|t| !t.is_empty())),
        other => return Err(format!("auth type '{other}' is not supported")),
    };
    token
        .map(Some)
        .ok_or_else(|| "auth needs a token and none was found (token, token_env_var, FEAST_OIDC_TOKEN, the service account token, LOCAL_K8S_TOKEN)".into())
}

type Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

impl RemoteRegistry {
    /// What messages name.
    pub fn shown(&self) -> String {
        let scheme = if self.ca.is_some() { "grpcs" } else { "grpc" };
        format!("{scheme}://{}", self.addr)
    }

    async fn connect(&self) -> Result<Sender, String> {
        let tcp = tokio::net::TcpStream::connect(&self.addr)
            .await
            .map_err(|e| format!("connecting: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let exec = TokioExecutor::new();
        let Some(ca) = &self.ca else {
            let (sender, conn) = hyper::client::conn::http2::handshake(exec, TokioIo::new(tcp))
                .await
                .map_err(|e| format!("HTTP/2: {e}"))?;
            tokio::spawn(conn);
            return Ok(sender);
        };
        let name = rustls::pki_types::ServerName::try_from(self.authority.clone())
            .map_err(|e| format!("TLS server name '{}': {e}", self.authority))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca)?))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS: {e}"))?;
        let (sender, conn) = hyper::client::conn::http2::handshake(exec, TokioIo::new(tls))
            .await
            .map_err(|e| format!("HTTP/2: {e}"))?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// `project`'s objects as (field number of their list in `feast.core.Registry`,
    /// serialized object), in the server's order.
    pub async fn fetch(&self, project: &str) -> Result<Vec<(u32, Bytes)>, String> {
        let all = async {
            let mut sender = self.connect().await?;
            // The server's cache, as Feast's own clients read it: `allow_cache: false` makes
            // the server reload its registry from its store, which discards the objects of a
            // `feast apply` in progress through it (applied uncommitted, committed at the
            // end): polling with it lost half of such an apply.
            let request = ListRequest {
                project: project.to_owned(),
                allow_cache: true,
            }
            .encode_to_vec();
            let mut objects = Vec::new();
            for (path, field) in LISTS {
                let answer = self.call(&mut sender, path, &request).await?;
                let list = ListResponse::decode(answer)
                    .map_err(|e| format!("{path}: not a list answer: {e}"))?;
                objects.extend(list.objects.into_iter().map(|o| (field, Bytes::from(o))));
            }
            Ok(objects)
        };
        tokio::time::timeout(TIMEOUT, all)
            .await
            .map_err(|_| format!("no answer within {TIMEOUT:?}"))?
    }

    /// One unary call on the connection.
    async fn call(&self, sender: &mut Sender, path: &str, message: &[u8]) -> Result<Bytes, String> {
        let scheme = if self.ca.is_some() { "https" } else { "http" };
        let mut request = hyper::Request::post(format!("{scheme}://{}{path}", self.authority))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .body(Full::new(frame(message)))
            .map_err(|e| e.to_string())?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("{path}: the call failed: {e}"))?;
        let (head, body) = response.into_parts();
        if head.status != hyper::StatusCode::OK {
            return Err(format!(
                "{path}: HTTP status {} (is this Feast's registry server?)",
                head.status
            ));
        }
        let collected = Limited::new(body, MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| format!("reading the answer: {e}"))?;
        // A failed call may answer with its status in the headers alone ("trailers-only").
        let trailers = collected.trailers().cloned().unwrap_or_default();
        let status = trailers
            .get("grpc-status")
            .or(head.headers.get("grpc-status"));
        let message = trailers
            .get("grpc-message")
            .or(head.headers.get("grpc-message"));
        match status.and_then(|s| s.to_str().ok()) {
            Some("0") => unframe(collected.to_bytes()),
            Some(code) => Err(format!(
                "{path}: gRPC status {code}{}",
                message
                    .and_then(|m| m.to_str().ok())
                    .map(|m| format!(": {}", percent_decode(m)))
                    .unwrap_or_default()
            )),
            None => Err("the answer has no gRPC status (is this Feast's registry server?)".into()),
        }
    }
}

/// One uncompressed gRPC message.
fn frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

/// The one message of a unary answer.
fn unframe(body: Bytes) -> Result<Bytes, String> {
    let Some((&[flag, a, b, c, d], _)) = body.split_first_chunk::<5>() else {
        return Err("the answer holds no gRPC message".into());
    };
    let len = u32::from_be_bytes([a, b, c, d]) as usize;
    if flag != 0 || body.len() != len + 5 {
        return Err(format!(
            "expected one uncompressed gRPC message, got flag {flag}, length {len}, {} bytes",
            body.len() - 5
        ));
    }
    Ok(body.slice(5..))
}

/// grpc-message is percent-encoded.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn client_config(ca: &Path) -> Result<rustls::ClientConfig, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::CertificateDer;
    let shown = ca.display();
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{shown}: {e}"))? {
        roots
            .add(cert.map_err(|e| format!("{shown}: {e}"))?)
            .map_err(|e| format!("{shown}: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

#[cfg(test)]
#[path = "remote_tests.rs"]
mod tests;
