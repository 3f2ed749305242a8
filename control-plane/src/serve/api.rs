//! The HTTP API's wire types: what `/status`, `POST /v1/snapshot` and every error answer carry.
//! The server writes them ([`super::http`]), `ferry apply --push` ([`super::client`]) and the
//! integration tests read them back: one definition for both ends, so a field cannot drift.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Path of the snapshot endpoint: `POST` sends one (`ferry apply --push`), `GET` reads the
/// current one (a pulling filter).
pub const SNAPSHOT_PATH: &str = "/v1/snapshot";
/// `GET /v1/snapshot`'s header naming the version it sends (also its ETag, quoted): the
/// filter's own constant, so both ends agree.
pub const VERSION_HEADER: &str = ferry_core::snapshot_pull::VERSION_HEADER;
/// Header that asks to skip the filter's validation on a push. Tests only: honoured only by a
/// `ferry` built with the `test-switches` feature and started with `--allow-invalid`.
pub const UNCHECKED_HEADER: &str = "x-ferry-unchecked";

/// `GET /status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// The current snapshot; None before the first.
    pub snapshot: Option<SnapshotStatus>,
    /// The last snapshot refused (pushed, or read from the repo); the last good one stayed.
    pub last_refused: Option<LastRefused>,
    /// Every connected stream, oldest first.
    pub nodes: Vec<NodeStatus>,
    /// There is a current snapshot and every connected node ACKed it.
    pub converged: bool,
    /// A listener (the HTTP API, or xDS) runs on a network address without what it needs to
    /// know its clients (TLS, mTLS, a push credential) because of `--insecure`.
    #[serde(default)]
    pub insecure: bool,
    /// With `--shared-state`: this replica and the Redis it shares the snapshot through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_state: Option<SharedStatus>,
}

/// A replica's view of the shared state (`--shared-state`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedStatus {
    /// This replica's id (the lease's value).
    pub replica: String,
    /// `--cluster-name`: the deployment's keys.
    pub cluster: String,
    /// Redis answered the last call: pushes are accepted.
    pub available: bool,
    /// Why it did not, while it does not.
    pub error: Option<String>,
    /// The sequence of the shared snapshot this replica serves (0: none yet).
    pub sequence: u64,
    /// This replica holds the lease: it applies the repo files' changes.
    pub watches_repo: bool,
    /// Why the last shared record this replica refused to serve was refused (#35); None
    /// when none was.
    #[serde(default)]
    pub refused_record: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotStatus {
    pub version: String,
    pub project: String,
    /// `file` (the served repo) or `push` (this API).
    pub source: String,
    /// When it was accepted (a restored snapshot keeps the time it was first accepted).
    pub since_ms: u64,
    /// The state file it was restored from when `ferry serve` started; None when this
    /// process accepted it.
    #[serde(default)]
    pub restored_from: Option<String>,
    pub services: Vec<ServiceStatus>,
    pub routes: Vec<RouteStatus>,
}

/// A FeatureService as served: its fingerprint pins the vector layout in Redis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceStatus {
    pub name: String,
    /// 16 hex digits, as in the Redis keys.
    pub fingerprint: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteStatus {
    pub name: String,
    pub service: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastRefused {
    /// `file` or `push`.
    pub source: String,
    pub error: String,
    pub at_ms: u64,
}

/// One connected xDS stream (one Envoy, or one of its connections).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub stream: u64,
    /// Envoy's node id; empty until its first request names it.
    pub node: String,
    /// The verified client certificate's name (xDS over mTLS): what this node's NACKs and
    /// streams are kept under. None without mTLS.
    #[serde(default)]
    pub identity: Option<String>,
    pub cluster: String,
    pub connected_ms: u64,
    /// The filter config version this Envoy ACKed last.
    pub acked_version: Option<String>,
    /// It ACKed the current snapshot.
    pub converged: bool,
    /// Its last refusal of the filter config.
    pub last_nack: Option<NodeNack>,
    /// Another connected stream has the same node id: two Envoys given one id (a bootstrap
    /// shared without `--service-node`), whose NACKs the control plane cannot tell apart.
    #[serde(default)]
    pub shares_node_id: bool,
    /// The protocol state per type URL this stream asked for.
    pub types: BTreeMap<String, TypeStatus>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeNack {
    /// The version Envoy refused.
    pub version: String,
    /// Envoy's `error_detail`.
    pub error: String,
    pub at_ms: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeStatus {
    pub sent_version: Option<String>,
    pub sent_nonce: Option<String>,
    pub acked_version: Option<String>,
    pub responses_sent: u64,
    pub last_nack: Option<Nack>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nack {
    pub version: String,
    pub error: String,
}

/// `POST /v1/snapshot` accepted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pushed {
    /// The snapshot's content version (the control plane's, whatever the pusher wrote).
    pub version: String,
    /// False when it was already the current snapshot.
    pub changed: bool,
    pub services: Vec<ServiceStatus>,
    /// The sequence it is current at (signed snapshots carry it; replicas order by it).
    #[serde(default)]
    pub sequence: u64,
}

/// Every answer that is not a success.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiError {
    pub error: ErrorCode,
    pub message: String,
    /// On a refused push: the snapshot that stays current.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
}

/// The API's error codes and their HTTP statuses: the one table of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// No credential (bearer token or client certificate), or a token nobody holds.
    Unauthorized,
    /// A credential without the role the request needs.
    Forbidden,
    /// Not a `ferry.v1.Snapshot`.
    BadSnapshot,
    /// A snapshot the filter (or the bootstrap) refuses.
    InvalidSnapshot,
    TooLarge,
    BadRequest,
    /// The body did not arrive in time.
    Timeout,
    MethodNotAllowed,
    NotFound,
    /// Valid, but the state directory could not save it: not made current.
    StateNotSaved,
    /// `GET /v1/snapshot` before any snapshot was accepted.
    NoSnapshot,
    /// `--shared-state`: Redis is away, so a push cannot be shared with the other replicas.
    SharedStateUnavailable,
}

impl ErrorCode {
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::BadSnapshot | ErrorCode::BadRequest => 400,
            ErrorCode::InvalidSnapshot => 422,
            ErrorCode::TooLarge => 413,
            ErrorCode::Timeout => 408,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::NotFound => 404,
            ErrorCode::StateNotSaved => 500,
            ErrorCode::NoSnapshot | ErrorCode::SharedStateUnavailable => 503,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_codes_are_the_snake_case_words() {
        let e = ApiError {
            error: ErrorCode::MethodNotAllowed,
            message: "m".into(),
            current_version: None,
        };
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(text, r#"{"error":"method_not_allowed","message":"m"}"#);
        assert_eq!(serde_json::from_str::<ApiError>(&text).unwrap(), e);
    }
}
