//! The client side of the control plane's HTTP API, for `ferry apply --push`: read `/status`
//! (which fingerprints are served now) and `POST /v1/snapshot`, as the API's own wire types.
//! Plain HTTP/1.1 over loopback or a private network, one connection per call, every call
//! bounded in time.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use crate::repo::Registry;
use crate::serve::api::{ApiError, Pushed, ServiceStatus, Status, PUSH_PATH};

const CALL_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("control plane URL '{0}' must look like http://HOST:PORT")]
    Url(String),
    #[error(
        "control plane URL '{0}': https:// is not supported yet; `ferry apply --push` speaks \
         plain HTTP only (use it on loopback or a private network, with a push token)"
    )]
    Https(String),
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

/// An answer: HTTP status and body.
struct Answer {
    status: u16,
    body: Bytes,
}

/// `http://host:port[/]` → ("host:port").
fn authority(url: &str) -> Result<String, PushError> {
    if url.starts_with("https://") {
        return Err(PushError::Https(url.to_owned()));
    }
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| PushError::Url(url.to_owned()))?;
    let auth = rest.trim_end_matches('/');
    if auth.is_empty() || auth.contains('/') || !auth.contains(':') {
        return Err(PushError::Url(url.to_owned()));
    }
    Ok(auth.to_owned())
}

async fn call(
    url: &str,
    method: &str,
    path: &'static str,
    token: Option<&str>,
    body: Vec<u8>,
) -> Result<Answer, PushError> {
    let auth = authority(url)?;
    let io = |e: &dyn std::fmt::Display| PushError::Io {
        url: url.to_owned(),
        reason: e.to_string(),
    };
    let fut = async {
        let stream = tokio::net::TcpStream::connect(&auth)
            .await
            .map_err(|e| io(&e))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| io(&e))?;
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &auth)
            .header("content-type", ferry_protos::PROTOBUF_CONTENT_TYPE);
        if let Some(t) = token {
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
        .map_err(|_| PushError::Timeout(url.to_owned()))?
}

/// Decodes a 200 answer as `T`; any other answer is the API's error.
fn decode<T: serde::de::DeserializeOwned>(
    url: &str,
    path: &'static str,
    answer: Answer,
) -> Result<T, PushError> {
    if answer.status != 200 {
        let message = serde_json::from_slice::<ApiError>(&answer.body).map_or_else(
            |_| String::from_utf8_lossy(&answer.body).into_owned(),
            |e| e.message,
        );
        return Err(PushError::Refused {
            status: answer.status,
            message,
        });
    }
    serde_json::from_slice(&answer.body).map_err(|e| PushError::Unexpected {
        url: url.to_owned(),
        path,
        reason: e.to_string(),
    })
}

/// `GET /status`, with the push token when there is one (it also reads).
pub async fn status(url: &str, token: Option<&str>) -> Result<Status, PushError> {
    let answer = call(url, "GET", "/status", token, Vec::new()).await?;
    decode(url, "/status", answer)
}

/// `POST /v1/snapshot`; a refusal is [`PushError::Refused`].
pub async fn push(url: &str, token: Option<&str>, snapshot: Vec<u8>) -> Result<Pushed, PushError> {
    let answer = call(url, "POST", PUSH_PATH, token, snapshot).await?;
    decode(url, PUSH_PATH, answer)
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
    fn urls_are_plain_http_host_and_port() {
        assert_eq!(
            authority("http://127.0.0.1:8091").unwrap(),
            "127.0.0.1:8091"
        );
        assert_eq!(authority("http://cp:8091/").unwrap(), "cp:8091");
        let e = authority("https://cp:8091").unwrap_err().to_string();
        assert!(e.contains("https:// is not supported yet"), "{e}");
        assert!(authority("http://cp").is_err());
        assert!(authority("http://cp:1/x").is_err());
    }
}
