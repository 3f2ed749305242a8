//! The control plane's HTTP API: `GET /status` (JSON), `GET /metrics` (Prometheus text),
//! `GET /healthz`, and `POST /v1/snapshot` (a `ferry.v1.Snapshot`, what `ferry apply --push`
//! sends; bearer token when one is configured). Every answer is JSON except `/metrics`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_protos::v1;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prost::Message as _;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use super::state::{inc, Refused, State};
use super::status;

/// Path of the push endpoint.
pub const PUSH_PATH: &str = "/v1/snapshot";
/// Header that asks to skip the filter's validation; honoured only with `--allow-invalid`.
pub const UNCHECKED_HEADER: &str = "x-ferry-unchecked";
/// Largest snapshot accepted.
const MAX_BODY_BYTES: usize = 8 << 20;
/// Connections served at once; more wait in the accept queue.
const MAX_CONNECTIONS: usize = 64;
/// Time allowed to send the request headers, and the whole body.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The API's settings.
#[derive(Clone)]
pub struct Api {
    pub state: Arc<State>,
    /// Pushes need `Authorization: Bearer <token>` when set.
    pub token: Option<String>,
}

pub async fn serve(listener: TcpListener, api: Api, mut shutdown: watch::Receiver<bool>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = shutdown.changed() => break,
        };
        let (stream, _) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => break,
        };
        let api = api.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let api = api.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&api, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "HTTP connection ended");
            }
            drop(permit);
        });
    }
}

fn reply(status: StatusCode, body: serde_json::Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response<Full<Bytes>> {
    reply(status, json!({"error": code, "message": message.into()}))
}

async fn handle(api: &Api, req: Request<Incoming>) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/status") => reply(StatusCode::OK, status::status_json(&api.state)),
        (&Method::GET, "/healthz") => reply(StatusCode::OK, json!({"ok": true})),
        (&Method::GET, "/metrics") => {
            let mut r = Response::new(Full::new(Bytes::from(status::metrics_text(&api.state))));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        (&Method::POST, PUSH_PATH) => push(api, req).await,
        (_, "/status" | "/healthz" | "/metrics" | PUSH_PATH) => error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "GET /status, /metrics, /healthz; POST /v1/snapshot",
        ),
        (_, path) => error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no such endpoint: {path}"),
        ),
    }
}

/// Whether the request carries the configured bearer token (compared in constant time).
fn authorized(api: &Api, req: &Request<Incoming>) -> bool {
    let Some(token) = &api.token else { return true };
    let given = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

async fn push(api: &Api, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let state = &api.state;
    if !authorized(api, &req) {
        inc(&state.metrics.push_unauthorized_total);
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this control plane needs `Authorization: Bearer <token>` (ferry apply --token or FERRY_PUSH_TOKEN)",
        );
    }
    let unchecked = req.headers().contains_key(UNCHECKED_HEADER);
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES);
    let bytes = match tokio::time::timeout(READ_TIMEOUT, body.collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) => {
            inc(&state.metrics.push_rejected_total);
            return if e.is::<http_body_util::LengthLimitError>() {
                error(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too_large",
                    format!("snapshots are limited to {MAX_BODY_BYTES} bytes"),
                )
            } else {
                error(StatusCode::BAD_REQUEST, "bad_request", e.to_string())
            };
        }
        Err(_) => {
            inc(&state.metrics.push_rejected_total);
            return error(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "body not received in time",
            );
        }
    };
    let refused = |status, e: &Refused| {
        inc(&state.metrics.push_rejected_total);
        tracing::warn!(error = %e, "pushed snapshot refused; the last good one stays");
        let code = match e {
            Refused::Undecodable(_) => "bad_snapshot",
            Refused::Invalid(_) => "invalid_snapshot",
        };
        let current = state.current().map(|c| c.snapshot.version.clone());
        reply(
            status,
            json!({"error": code, "message": e.to_string(), "current_version": current}),
        )
    };
    let snap = match v1::Snapshot::decode(bytes.as_ref()) {
        Ok(s) => s,
        Err(e) => {
            let e = Refused::Undecodable(e.to_string());
            state.refuse("push", e.to_string());
            return refused(StatusCode::BAD_REQUEST, &e);
        }
    };
    match state.offer(snap, "push", unchecked) {
        Ok(o) => {
            inc(&state.metrics.push_ok_total);
            let services = state
                .current()
                .map(|c| {
                    c.snapshot
                        .services
                        .iter()
                        .map(|s| json!({"name": s.name, "fingerprint": ferry_protos::fingerprint_hex(s.fingerprint)}))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            reply(
                StatusCode::OK,
                json!({"version": o.version, "changed": o.changed, "services": services}),
            )
        }
        Err(e) => refused(StatusCode::UNPROCESSABLE_ENTITY, &e),
    }
}
