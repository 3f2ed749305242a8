//! The control plane's HTTP API: `GET /status` (JSON), `GET /metrics` (OpenMetrics text),
//! `GET /healthz`, `POST /v1/snapshot` (a `ferry.v1.Snapshot`, what `ferry apply --push`
//! sends; bearer token when one is configured) and `GET /v1/snapshot` (the current one, what
//! the wasm filter pulls); with the write role, `POST /push` and `POST /write-to-online-store`
//! (feature writes, `crate::write`). Every answer is JSON except `/metrics` and the snapshot
//! itself.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_http_serve::Options;
use ferry_protos::v1;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use prost::Message as _;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::api::{ApiError, ErrorCode, Pushed, SNAPSHOT_PATH, UNCHECKED_HEADER, VERSION_HEADER};
use super::auth::{Access, Decision, Role};
use super::metrics::PushOutcome;
use super::state::{Offered, Refused, State};
use super::{metrics, status};
use crate::write::answer::{WriteError, ERROR_HEADER};
use crate::write::request::Endpoint;
use crate::write::Writer;

/// Largest snapshot accepted.
const MAX_BODY_BYTES: usize = 8 << 20;
/// Connections served at once by default (`--max-http-connections`): well above a fleet's
/// pollers (under Istio every Envoy worker of every sidecar polls `GET /v1/snapshot`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// Time allowed to send the request headers, and the whole body.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refused write's body is read and dropped before the answer goes anyway.
const DISCARD_TIMEOUT: Duration = Duration::from_secs(2);
/// A keep-alive connection with no request for this long is closed: well above the filter's
/// snapshot poll period (5 s by default), so a polling Envoy keeps its connection, while a
/// client that went quiet stops holding one of `max_connections`.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The API's settings.
#[derive(Clone)]
pub struct Api {
    pub state: Arc<State>,
    /// Who may do what (bearer tokens, client certificate identities); none = open.
    pub access: Access,
    /// A listener runs on a network address short of TLS or credentials (`--insecure`): said
    /// on `/status`.
    pub insecure: bool,
    /// TLS (client certificates optional, verified when shown); None: plaintext.
    pub tls: Option<ferry_http_serve::Tls>,
    /// Connections served at once; more wait in the accept queue.
    pub max_connections: usize,
    /// Tests only (`--allow-invalid`): honour [`UNCHECKED_HEADER`] on pushes,
    /// skipping validation, so that a snapshot the filter refuses can reach Envoy.
    #[cfg(feature = "test-switches")]
    pub allow_invalid: bool,
    /// Feature writes.
    pub writer: Arc<Writer>,
}

/// Serves the API on `listener` until `shutdown` changes: HTTP/1.1 only, at most
/// `api.max_connections` at once, `READ_TIMEOUT` for the headers, idle connections closed after
/// `IDLE_TIMEOUT`; then drains requests in flight.
pub async fn serve(listener: TcpListener, api: Api, mut shutdown: watch::Receiver<bool>) {
    let options = Options {
        h2c: false,
        max_connections: Some(api.max_connections),
        header_read_timeout: Some(READ_TIMEOUT),
        idle_timeout: Some(IDLE_TIMEOUT),
        tls: api.tls.clone(),
        ..Options::default()
    };
    let handler = move |req| {
        let api = api.clone();
        async move { handle(&api, req).await }
    };
    let shutdown = async move {
        let _ = shutdown.changed().await;
    };
    ferry_http_serve::serve(listener, &options, handler, shutdown).await;
}

fn reply(status: StatusCode, body: &impl Serialize) -> Response<Full<Bytes>> {
    let text = serde_json::to_string(body).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn error(code: ErrorCode, message: impl Into<String>) -> Response<Full<Bytes>> {
    refusal(code, message, None)
}

/// An error answer; `current_version` on refused pushes.
fn refusal(
    code: ErrorCode,
    message: impl Into<String>,
    current_version: Option<String>,
) -> Response<Full<Bytes>> {
    let status =
        StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = ApiError {
        error: code,
        message: message.into(),
        current_version,
    };
    reply(status, &body)
}

async fn handle(api: &Api, req: Request<Incoming>) -> Response<Full<Bytes>> {
    if let Some(endpoint) = Endpoint::from_path(req.uri().path()) {
        return write(api, endpoint, req).await;
    }
    let reads =
        matches!(req.uri().path(), "/status" | SNAPSHOT_PATH) && req.method() == Method::GET;
    if reads {
        if let Some(refused) = refusal_for(authorize(api, &req, Role::Read), Role::Read) {
            return refused;
        }
    }
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/status") => {
            reply(StatusCode::OK, &status::status(&api.state, api.insecure))
        }
        (&Method::GET, "/healthz") => reply(StatusCode::OK, &serde_json::json!({"ok": true})),
        (&Method::GET, "/readyz") => readiness(api.state.current().is_some()),
        (&Method::GET, "/metrics") => {
            let mut r = Response::new(Full::new(Bytes::from(api.state.metrics_text())));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static(metrics::CONTENT_TYPE),
            );
            r
        }
        (&Method::POST, SNAPSHOT_PATH) => push(api, req).await,
        (&Method::GET, SNAPSHOT_PATH) => current_snapshot(&api.state, &req),
        (_, "/status" | "/healthz" | "/readyz" | "/metrics" | SNAPSHOT_PATH) => error(
            ErrorCode::MethodNotAllowed,
            "GET /status, /metrics, /healthz, /readyz, /v1/snapshot; POST /v1/snapshot",
        ),
        (_, path) => error(ErrorCode::NotFound, format!("no such endpoint: {path}")),
    }
}

/// `GET /v1/snapshot`: the current snapshot's bytes, what the wasm filter pulls when its JSON
/// plugin configuration names a `snapshot_url`. The ETag is the quoted content version, so a
/// poll whose `if-none-match` names it costs a 304 and no body.
fn current_snapshot(state: &State, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let current = state.current();
    let tags: Vec<&str> = req
        .headers()
        .get_all(hyper::header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    // The body (signed or not) and its content type: one function of `signing`.
    snapshot_answer(
        current.as_ref().map(|c| {
            let (content_type, body) = super::signing::served(c.signed.as_ref(), &c.encoded);
            (c.snapshot.version.as_str(), content_type, body)
        }),
        &tags,
    )
}

/// `GET /readyz`: 200 once this control plane serves a snapshot, 503 `no_snapshot` before (a
/// replica started while the shared state's Redis is away serves none until it returns: a
/// readiness probe keeps Envoys off it). Open, as `/healthz` is, so it names no version.
fn readiness(serving: bool) -> Response<Full<Bytes>> {
    if serving {
        reply(StatusCode::OK, &serde_json::json!({"ready": true}))
    } else {
        error(
            ErrorCode::NoSnapshot,
            "this control plane serves no snapshot yet",
        )
    }
}

/// The answer to `GET /v1/snapshot` given the current snapshot (its version, content type and
/// bytes, encoded once and shared by every poller) and the `if-none-match` values.
fn snapshot_answer(
    snapshot: Option<(&str, &'static str, &Bytes)>,
    if_none_match: &[&str],
) -> Response<Full<Bytes>> {
    let Some((version, content_type, encoded)) = snapshot else {
        return error(
            ErrorCode::NoSnapshot,
            "this control plane has no valid snapshot yet",
        );
    };
    let etag = format!("\"{version}\"");
    let unchanged = if_none_match
        .iter()
        .flat_map(|v| v.split(','))
        .any(|tag| tag.trim() == etag || tag.trim() == "*");
    let mut r = if unchanged {
        let mut r = Response::new(Full::new(Bytes::new()));
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        Response::new(Full::new(encoded.clone()))
    };
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    let mut set = |name, value: &str| {
        if let Ok(v) = hyper::header::HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    };
    set(hyper::header::ETAG, &etag);
    set(
        hyper::header::HeaderName::from_static(VERSION_HEADER),
        version,
    );
    r
}

/// What the request's bearer token and client certificate allow for `role`.
fn authorize(api: &Api, req: &Request<Incoming>, role: Role) -> Decision {
    let header = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let identity = req
        .extensions()
        .get::<ferry_http_serve::Peer>()
        .and_then(|p| p.identity.as_deref());
    api.access.decide(role, header, identity)
}

/// The answer to a request `decision` does not allow; None when it does.
fn refusal_for(decision: Decision, role: Role) -> Option<Response<Full<Bytes>>> {
    let (what, token) = match role {
        Role::Read => (
            "reading this control plane",
            "ferry apply --token or FERRY_PUSH_TOKEN; the read token reads",
        ),
        Role::Push => (
            "pushing to this control plane",
            "ferry apply --token or FERRY_PUSH_TOKEN",
        ),
        Role::Write => (
            "writing features",
            "the write token of ferry serve --write-token",
        ),
    };
    match decision {
        Decision::Allowed => None,
        Decision::Unauthenticated => Some(error(
            ErrorCode::Unauthorized,
            format!(
                "{what} needs a credential: `Authorization: Bearer <token>` ({token}), or a \
                 client certificate granted the role (--grant)"
            ),
        )),
        Decision::Forbidden => Some(error(
            ErrorCode::Forbidden,
            format!(
                "{what} needs the {} role, which this credential does not hold (--grant)",
                role.name()
            ),
        )),
        // Loopback is no exception: once Envoy routes `POST /push` here (`ferry envoy-config
        // --write-address`), every client of that Envoy would write.
        Decision::NoWriteCredential => Some(error(
            ErrorCode::Forbidden,
            "writing features is off: this control plane has no write credential; start \
             ferry serve with --write-token/FERRY_WRITE_TOKEN, --write-token-file/\
             FERRY_WRITE_TOKEN_FILE or --grant write=IDENTITY",
        )),
    }
}

async fn push(api: &Api, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let state = &api.state;
    if let Some(refused) = refusal_for(authorize(api, &req, Role::Push), Role::Push) {
        state.metrics.push(PushOutcome::Unauthorized);
        return refused;
    }
    let unchecked = req.headers().contains_key(UNCHECKED_HEADER);
    let bytes = match read_body(req).await {
        Ok(b) => b,
        Err(answer) => {
            state.metrics.push(PushOutcome::Rejected);
            return answer;
        }
    };
    let offered = match v1::Snapshot::decode(bytes.as_ref()) {
        // Installing saves (with fsync) under the install lock: off the runtime's threads.
        Ok(snap) => {
            let api = api.clone();
            tokio::task::spawn_blocking(move || api.offer(snap, unchecked))
                .await
                .unwrap_or_else(|e| Err(Refused::NotSaved(format!("install task failed: {e}"))))
        }
        Err(e) => {
            let e = Refused::Undecodable(e.to_string());
            state.refuse("push", e.to_string());
            Err(e)
        }
    };
    match offered {
        Ok(o) => {
            state.metrics.push(PushOutcome::Accepted);
            let services = state
                .current()
                .map(|c| status::services(&c.snapshot))
                .unwrap_or_default();
            let body = Pushed {
                version: o.version,
                changed: o.changed,
                services,
                sequence: o.sequence,
            };
            reply(StatusCode::OK, &body)
        }
        Err(e) => {
            state.metrics.push(PushOutcome::Rejected);
            tracing::warn!(error = %e, "pushed snapshot refused; the last good one stays");
            let code = match e {
                Refused::Undecodable(_) => ErrorCode::BadSnapshot,
                Refused::Invalid(_) => ErrorCode::InvalidSnapshot,
                Refused::NotSaved(_) => ErrorCode::StateNotSaved,
                Refused::SharedUnavailable(_) => ErrorCode::SharedStateUnavailable,
            };
            let current = state.current().map(|c| c.snapshot.version.clone());
            refusal(code, e.to_string(), current)
        }
    }
}

/// `POST /push`, `POST /write-to-online-store`: the write role, a bounded body, then the
/// writer.
async fn write(api: &Api, endpoint: Endpoint, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let writer = &api.writer;
    if req.method() != Method::POST {
        return with_code(
            error(ErrorCode::MethodNotAllowed, "POST only"),
            "method_not_allowed",
        );
    }
    let decision = authorize(api, &req, Role::Write);
    if let Some(refused) = refusal_for(decision, Role::Write) {
        let code = match decision {
            Decision::Forbidden => "forbidden",
            Decision::NoWriteCredential => "no_write_credential",
            _ => "unauthorized",
        };
        writer.metrics.refused(code);
        return with_code(refused, code);
    }
    // The slot before the body: a refused write holds no body in memory. Its body is still
    // read and dropped (bounded): a server that answers and closes with a body unread resets
    // the connection, and a proxy in front (Envoy) then turns the 429 into its own 503.
    let _slot = match writer.slot() {
        Ok(slot) => slot,
        Err(busy) => {
            discard(req.into_body()).await;
            return busy.response();
        }
    };
    let limit = crate::write::MAX_BODY_BYTES;
    let body = Limited::new(req.into_body(), limit);
    let bytes = match tokio::time::timeout(READ_TIMEOUT, body.collect()).await {
        Ok(Ok(b)) => b.to_bytes(),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            let e = WriteError::TooLarge(limit);
            writer.refused(&e);
            return e.response();
        }
        Ok(Err(e)) => return with_code(error(ErrorCode::BadRequest, e.to_string()), "bad_request"),
        Err(_) => {
            return with_code(
                error(ErrorCode::Timeout, "body not received in time"),
                "timeout",
            )
        }
    };
    let current = api.state.current();
    let held = api.state.held_back();
    writer
        .handle(
            endpoint,
            bytes,
            current.as_ref().map(|c| &c.snapshot),
            held.as_deref(),
        )
        .await
}

/// Reads and drops a refused write's body, up to [`crate::write::MAX_BODY_BYTES`] and
/// `DISCARD_TIMEOUT`: nothing is kept, and the connection ends cleanly after the answer.
async fn discard(body: Incoming) {
    let mut body = Limited::new(body, crate::write::MAX_BODY_BYTES);
    let drain = async {
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_TIMEOUT, drain).await;
}

/// `answer` with `x-ferry-error: code`, as every write refusal carries.
fn with_code(mut answer: Response<Full<Bytes>>, code: &'static str) -> Response<Full<Bytes>> {
    answer
        .headers_mut()
        .insert(ERROR_HEADER, hyper::header::HeaderValue::from_static(code));
    answer
}

/// The whole body, bounded in size and time; or the error answer.
async fn read_body(req: Request<Incoming>) -> Result<Bytes, Response<Full<Bytes>>> {
    let body = Limited::new(req.into_body(), MAX_BODY_BYTES);
    match tokio::time::timeout(READ_TIMEOUT, body.collect()).await {
        Ok(Ok(b)) => Ok(b.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(error(
            ErrorCode::TooLarge,
            format!("snapshots are limited to {MAX_BODY_BYTES} bytes"),
        )),
        Ok(Err(e)) => Err(error(ErrorCode::BadRequest, e.to_string())),
        Err(_) => Err(error(ErrorCode::Timeout, "body not received in time")),
    }
}

impl Api {
    /// Offers a pushed snapshot; `unchecked` (the header) skips validation only when the
    /// control plane runs with `--allow-invalid` (tests only).
    #[cfg(feature = "test-switches")]
    fn offer(&self, snap: v1::Snapshot, unchecked: bool) -> Result<Offered, Refused> {
        if unchecked && self.allow_invalid {
            self.state.offer_unvalidated(snap, "push")
        } else {
            self.state.offer(snap, "push")
        }
    }

    #[cfg(not(feature = "test-switches"))]
    fn offer(&self, snap: v1::Snapshot, _unchecked: bool) -> Result<Offered, Refused> {
        self.state.offer(snap, "push")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(r: Response<Full<Bytes>>) -> Bytes {
        r.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn readiness_waits_for_a_snapshot() {
        let r = readiness(false);
        assert_eq!(r.status(), 503);
        let e: ApiError = serde_json::from_slice(&body(r).await).unwrap();
        assert_eq!(e.error, ErrorCode::NoSnapshot);

        let r = readiness(true);
        assert_eq!(r.status(), 200);
        let ready: serde_json::Value = serde_json::from_slice(&body(r).await).unwrap();
        assert_eq!(ready, serde_json::json!({"ready": true}));
    }

    #[tokio::test]
    async fn the_snapshot_is_served_with_its_version_as_etag_and_304_when_unchanged() {
        let r = snapshot_answer(None, &[]);
        assert_eq!(r.status(), 503);
        let e: ApiError = serde_json::from_slice(&body(r).await).unwrap();
        assert_eq!(e.error, ErrorCode::NoSnapshot);

        let snap = v1::Snapshot {
            project: "p".into(),
            version: "v7".into(),
            ..Default::default()
        };
        let encoded = Bytes::from(snap.encode_to_vec());
        let shared = Some(("v7", "application/x-protobuf", &encoded));
        for tags in [&[][..], &["\"v6\""], &["v7"]] {
            let r = snapshot_answer(shared, tags);
            assert_eq!(r.status(), 200, "{tags:?}");
            assert_eq!(r.headers()["etag"], "\"v7\"");
            assert_eq!(r.headers()[VERSION_HEADER], "v7");
            assert_eq!(r.headers()["content-type"], "application/x-protobuf");
            assert_eq!(body(r).await, snap.encode_to_vec());
        }
        for tags in [
            &["\"v7\""][..],
            &["\"v1\", \"v7\""],
            &["\"v1\"", "\"v7\""],
            &["*"],
        ] {
            let r = snapshot_answer(shared, tags);
            assert_eq!(r.status(), 304, "{tags:?}");
            assert!(body(r).await.is_empty());
        }
    }
}
