//! Every way a request can fail, and the one place where each becomes an HTTP status and a JSON
//! error body.

use std::fmt::Write;

/// How many entity ids an error message lists before it only counts the rest.
const MAX_IDS_IN_MESSAGE: usize = 10;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FerryError {
    /// A matched route got a request without a body.
    #[error("this route enriches request bodies, but the request has none")]
    NoBody,
    #[error("request body is {size} bytes, over this route's limit of {limit} bytes")]
    BodyTooLarge { limit: u32, size: u64 },
    #[error("request body is not valid JSON: {0}")]
    MalformedJson(String),
    /// A gRPC body that is not a valid protobuf message of the route's type.
    #[error("request body is not a valid protobuf message: {0}")]
    MalformedProtobuf(String),
    /// Valid JSON, but not the shape the route's format expects.
    #[error("{0}")]
    BadShape(String),
    /// KServe v2's binary tensor data extension framed wrongly (the header length, the
    /// inputs' `binary_data_size`, or BYTES elements do not add up).
    #[error("{0}")]
    BadFraming(String),
    /// `place` names the entity (e.g. `instances[3]`); `field` the missing join key.
    #[error("{place} has no entity id field '{field}'")]
    MissingEntityId { place: String, field: String },
    /// `place` names the id (e.g. `instances[3].user_id`).
    #[error("{place}: {reason}")]
    InvalidEntityId { place: String, reason: String },
    /// A request field an on-demand view reads holds a value of another type than declared
    /// (or one Ferry does not read, e.g. a binary tensor); `place` names the instance.
    #[error("{place}: request field '{field}': {reason}")]
    InvalidRequestField {
        place: String,
        field: String,
        reason: String,
    },
    /// KServe v2: no input tensor holds this join key.
    #[error("no input tensor named '{name}' (it must hold the entity ids)")]
    MissingEntityTensor { name: String },
    #[error("the request has no entities to enrich")]
    NoEntities,
    #[error("request has {count} entities, over this route's limit of {limit}")]
    TooManyEntities { limit: u32, count: u64 },
    /// A size the client declares (a tensor's shape, a list's length) over its limit, or one
    /// whose buffer could not be reserved: refused before anything is allocated or looped over
    /// (`format::declared`).
    #[error("{what} declares {size}, over {limit}")]
    DeclaredTooLarge {
        what: String,
        size: u64,
        limit: String,
    },
    /// A member or tensor Ferry reads (or any member of a JSON body Ferry rewrites) is given
    /// twice: Ferry and the model could each read a different one.
    #[error("{place}: '{field}' is given more than once; send it exactly once")]
    DuplicateField { place: String, field: String },
    /// `on_missing_entity: reject` and some entities have no vector.
    #[error("no features for {}: {}", entities(.ids.len()), list(.ids))]
    EntitiesNotFound { ids: Vec<String> },
    /// `on_stale: reject` and some entities have a view older than its TTL.
    #[error("features older than their view's ttl for {}: {}", entities(.ids.len()), list(.ids))]
    StaleFeatures { ids: Vec<String> },
    /// The reader could not be reached or reset the call (Envoy's own 503, or no response).
    #[error("feature reader unavailable: {detail}")]
    ReaderUnavailable { detail: String },
    /// Envoy gave up waiting for the reader (its 504).
    #[error("feature reader timed out: {detail}")]
    ReaderTimeout { detail: String },
    /// The reader is up but Redis is not (the reader's `redis_unavailable`).
    #[error("feature store (Redis) unavailable: {detail}")]
    RedisUnavailable { detail: String },
    /// Redis did not answer the reader in time (the reader's `redis_timeout`).
    #[error("feature store (Redis) timed out: {detail}")]
    RedisTimeout { detail: String },
    /// The reader refused the call or failed otherwise.
    #[error("feature reader answered {status}: {detail}")]
    ReaderError { status: u16, detail: String },
    /// The reader's answer could not be used (undecodable, wrong count, corrupt vector).
    #[error("unusable feature vector: {detail}")]
    BadVector { detail: String },
    /// A stored vector carries another fingerprint than the snapshot's: never used.
    #[error(
        "vector for entity '{entity}' has fingerprint {}, the snapshot expects {}",
        ferry_protos::fingerprint_hex(*.found),
        ferry_protos::fingerprint_hex(*.expected)
    )]
    FingerprintMismatch {
        entity: String,
        expected: u64,
        found: u64,
    },
    /// Header mode: the features header would be over the route's bound.
    #[error("the features take {size} bytes, over this route's header limit of {limit} bytes")]
    FeaturesTooLarge { size: usize, limit: u32 },
    /// The call to the reader could not even be dispatched (e.g. unknown cluster).
    #[error("could not call the feature reader: {detail}")]
    DispatchFailed { detail: String },
    /// The Envoy route's metadata names a Ferry route the snapshot does not have.
    #[error(
        "the Envoy route names Ferry route '{name}' (metadata.filter_metadata.ferry.route), \
         which the current registry snapshot does not have"
    )]
    UnknownRoute { name: String },
    /// The path lies under a protected prefix but matches no route.
    #[error(
        "path '{path}' is under the protected prefix '{prefix}' but matches no Ferry route; \
         requests there are never forwarded unenriched"
    )]
    NoRoute { path: String, prefix: String },
    /// The entity id is given twice (two id headers, two id tensors): the model might read the
    /// other one.
    #[error("entity id '{field}' is given more than once; send it exactly once")]
    DuplicateEntityId { field: String },
    /// A body on a body route, sent with a method other than POST, PUT or PATCH.
    #[error(
        "this route enriches POST, PUT and PATCH bodies; a {method} request with a body is refused"
    )]
    UnexpectedBody { method: String },
    /// The reader refused the call as malformed or too large (its 4xx): never the client's
    /// doing, so never failed open.
    #[error("feature reader refused the call ({status}): {detail}")]
    ReaderRejected { status: u16, detail: String },
    /// The rewrite needs request headers changed, but Envoy already sent them upstream (the
    /// wasm filter runs without `allow_on_headers_stop_iteration`).
    #[error(
        "this route's rewrite sets request headers ({names}), which Envoy already sent \
         upstream: the wasm filter needs allow_on_headers_stop_iteration for this route"
    )]
    HeadersAlreadySent { names: String },
    /// The plugin configuration names a `snapshot_url` and no snapshot came from it yet: no
    /// request is forwarded unenriched, since none can be told apart from a Ferry route.
    #[error("no registry snapshot loaded yet from {url}; retried every {poll_ms} ms")]
    SnapshotNotLoaded { url: String, poll_ms: u64 },
    /// A `feast_rest` request Feast's REST server refuses, answered as `feast serve` does: its
    /// status and body (see `format::feast_rest::errors`); `code` is Ferry's name for it.
    #[error("{body}")]
    FeastRest {
        status: u16,
        code: &'static str,
        body: String,
    },
}

impl FerryError {
    /// The one table from error to HTTP status and wire code.
    fn status_and_code(&self) -> (u16, &'static str) {
        use FerryError as E;
        match self {
            E::NoBody => (400, "no_body"),
            E::MalformedJson(_) => (400, "malformed_json"),
            E::MalformedProtobuf(_) => (400, "malformed_protobuf"),
            E::BadShape(_) => (400, "bad_request_shape"),
            E::BadFraming(_) => (400, "bad_binary_framing"),
            E::MissingEntityId { .. } | E::MissingEntityTensor { .. } => (400, "missing_entity_id"),
            E::InvalidEntityId { .. } => (400, "invalid_entity_id"),
            E::InvalidRequestField { .. } => (400, "invalid_request_field"),
            E::DuplicateEntityId { .. } => (400, "duplicate_entity_id"),
            E::DuplicateField { .. } => (400, "duplicate_field"),
            E::NoEntities => (400, "no_entities"),
            E::NoRoute { .. } => (404, "no_route"),
            E::EntitiesNotFound { .. } => (404, "entity_not_found"),
            E::UnexpectedBody { .. } => (405, "unexpected_body"),
            E::BodyTooLarge { .. } => (413, "body_too_large"),
            E::TooManyEntities { .. } => (413, "too_many_entities"),
            E::DeclaredTooLarge { .. } => (413, "declared_size_too_large"),
            E::StaleFeatures { .. } => (422, "stale_features"),
            E::ReaderUnavailable { .. } => (503, "reader_unavailable"),
            E::RedisUnavailable { .. } => (503, "redis_unavailable"),
            E::ReaderTimeout { .. } => (504, "reader_timeout"),
            E::RedisTimeout { .. } => (504, "redis_timeout"),
            E::ReaderError { .. } => (502, "reader_error"),
            E::ReaderRejected { .. } => (502, "reader_rejected"),
            E::BadVector { .. } => (502, "bad_vector"),
            E::FingerprintMismatch { .. } => (502, "fingerprint_mismatch"),
            E::FeaturesTooLarge { .. } => (502, "features_too_large"),
            E::DispatchFailed { .. } => (500, "dispatch_failed"),
            E::UnknownRoute { .. } => (500, "unknown_route"),
            E::HeadersAlreadySent { .. } => (500, "headers_already_sent"),
            E::SnapshotNotLoaded { .. } => (503, "snapshot_not_loaded"),
            E::FeastRest { status, code, .. } => (*status, code),
        }
    }

    /// The gRPC status code a gRPC route answers this error with, by its HTTP status: the
    /// client's mistakes are INVALID_ARGUMENT (too big: RESOURCE_EXHAUSTED), the reader or
    /// Redis away UNAVAILABLE, their timeouts DEADLINE_EXCEEDED, unusable vectors INTERNAL.
    pub fn grpc_status(&self) -> u32 {
        use FerryError as E;
        match self {
            E::EntitiesNotFound { .. } | E::NoRoute { .. } => grpc::NOT_FOUND,
            E::StaleFeatures { .. } => grpc::FAILED_PRECONDITION,
            E::ReaderError { .. } => grpc::UNAVAILABLE,
            _ => match self.status() {
                413 => grpc::RESOURCE_EXHAUSTED,
                400..=499 => grpc::INVALID_ARGUMENT,
                503 => grpc::UNAVAILABLE,
                504 => grpc::DEADLINE_EXCEEDED,
                _ => grpc::INTERNAL,
            },
        }
    }

    pub fn status(&self) -> u16 {
        self.status_and_code().0
    }

    pub fn code(&self) -> &'static str {
        self.status_and_code().1
    }

    /// The reader path failed (unreachable, timed out, Redis down, refused, not dispatched):
    /// the failures `on_reader_error` governs. A bad vector is never one of them.
    pub fn is_reader_failure(&self) -> bool {
        matches!(
            self,
            FerryError::ReaderError { .. }
                | FerryError::ReaderUnavailable { .. }
                | FerryError::ReaderTimeout { .. }
                | FerryError::RedisUnavailable { .. }
                | FerryError::RedisTimeout { .. }
                | FerryError::DispatchFailed { .. }
        )
    }

    /// The message of the JSON body (the Display text, kept beside each variant above).
    pub fn message(&self) -> String {
        self.to_string()
    }

    /// The headers of Ferry's own error answer: `x-ferry-error` tells it from Envoy's local
    /// replies (which the bootstraps' `local_reply_config` rewrites, and must not here).
    pub fn reply_headers(&self) -> Vec<(&'static str, &'static str)> {
        vec![
            ("content-type", "application/json"),
            ("x-ferry-error", self.code()),
        ]
    }

    /// The JSON error body: `{"error": code, "message": ..., "route": ...}`.
    /// `route` is omitted when the request matched none (e.g. `no_route`). A `FeastRest`
    /// error is answered with Feast's own body instead.
    pub fn body(&self, route: &str) -> Vec<u8> {
        if let FerryError::FeastRest { body, .. } = self {
            return body.clone().into_bytes();
        }
        let mut v = serde_json::json!({
            "error": self.code(),
            "message": self.message(),
        });
        if !route.is_empty() {
            v["route"] = serde_json::Value::from(route);
        }
        v.to_string().into_bytes()
    }
}

/// The gRPC status codes Ferry answers with (grpc/grpc doc/statuscodes.md).
pub mod grpc {
    pub const INVALID_ARGUMENT: u32 = 3;
    pub const DEADLINE_EXCEEDED: u32 = 4;
    pub const NOT_FOUND: u32 = 5;
    pub const RESOURCE_EXHAUSTED: u32 = 8;
    pub const FAILED_PRECONDITION: u32 = 9;
    pub const INTERNAL: u32 = 13;
    pub const UNAVAILABLE: u32 = 14;

    /// `grpc-message` as gRPC writes it: the UTF-8 bytes outside printable ASCII, and `%`
    /// itself, as `%XX`. Envoy encodes a proxy-wasm gRPC reply's message so; a host that writes
    /// the header itself (the native module) must, or an entity id with a control byte or
    /// non-ASCII text goes raw into a header.
    pub fn percent_encode(message: &str) -> String {
        let mut out = String::with_capacity(message.len());
        for b in message.bytes() {
            if (b' '..=b'~').contains(&b) && b != b'%' {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }
}

/// "1 entity", "2 entities".
fn entities(n: usize) -> String {
    if n == 1 {
        "1 entity".to_owned()
    } else {
        format!("{n} entities")
    }
}

fn list(ids: &[String]) -> String {
    let mut out = String::new();
    for (i, id) in ids.iter().take(MAX_IDS_IN_MESSAGE).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        // A composite key reads as its parts, e.g. ('1001', 'u000001').
        if id.contains(ferry_protos::ENTITY_KEY_SEPARATOR) {
            let parts: Vec<String> = id
                .split(ferry_protos::ENTITY_KEY_SEPARATOR)
                .map(|p| format!("'{p}'"))
                .collect();
            let _ = write!(out, "({})", parts.join(", "));
        } else {
            let _ = write!(out, "'{id}'");
        }
    }
    if ids.len() > MAX_IDS_IN_MESSAGE {
        let _ = write!(out, " and {} more", ids.len() - MAX_IDS_IN_MESSAGE);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grpc_message_is_percent_encoded_as_grpc_writes_it() {
        let said = "bad_vector: entity '0\u{1f}0' ü 100% sure";
        assert_eq!(
            grpc::percent_encode(said),
            "bad_vector: entity '0%1F0' %C3%BC 100%25 sure"
        );
        // The native build's gRPC reply (the host's default) sends it so.
        use crate::host::{testing::FakeHost, Host};
        let host = FakeHost::default();
        host.send_grpc_error(grpc::INTERNAL, said, vec![]);
        let (_, headers, _) = host.sent.borrow().clone().unwrap_or_default();
        let message = headers.iter().find(|(n, _)| n == "grpc-message");
        assert_eq!(
            message.map(|(_, v)| v.as_str()),
            Some(grpc::percent_encode(said).as_str())
        );
    }

    #[test]
    fn error_body_names_code_message_and_route() {
        let e = FerryError::EntitiesNotFound {
            ids: vec!["u1".into(), "u2".into()],
        };
        assert_eq!(e.status(), 404);
        let v: serde_json::Value = serde_json::from_slice(&e.body("fraud")).unwrap();
        assert_eq!(v["error"], "entity_not_found");
        assert_eq!(v["route"], "fraud");
        assert_eq!(v["message"], "no features for 2 entities: 'u1', 'u2'");
        let composite = FerryError::StaleFeatures {
            ids: vec![ferry_protos::entity_key(&["1001", "u000001"])],
        };
        assert_eq!(
            composite.message(),
            "features older than their view's ttl for 1 entity: ('1001', 'u000001')"
        );
    }

    #[test]
    fn long_id_lists_are_truncated() {
        let ids: Vec<String> = (0..15).map(|i| format!("u{i}")).collect();
        let m = FerryError::EntitiesNotFound { ids }.message();
        assert!(m.ends_with("'u9' and 5 more"), "{m}");
    }

    /// Every (status, code) of the code's one table, and of `feast_rest`'s errors, read from
    /// their source: `status_and_code`'s arms, and the calls of `format/feast_rest/errors.rs`'s
    /// three makers (`feast(status, code`, `feast_error(status, code`, `exception(code`: 500).
    fn codes_of_the_code() -> std::collections::BTreeSet<(u16, String)> {
        let mut out = std::collections::BTreeSet::new();
        let src = include_str!("error.rs");
        let from = src.find("fn status_and_code").unwrap();
        let table = &src[from..from + src[from..].find("pub fn grpc_status").unwrap()];
        for arm in table.split("=> (").skip(1) {
            let (status, rest) = arm.split_once(", ").unwrap();
            if let (Ok(status), Some(code)) = (status.parse(), rest.strip_prefix('"')) {
                out.insert((status, code[..code.find('"').unwrap()].to_owned()));
            }
        }
        let feast: String = include_str!("format/feast_rest/errors.rs")
            .split_whitespace()
            .collect();
        for (maker, status) in [
            ("feast(", None),
            ("feast_error(", None),
            ("exception(", Some(500)),
        ] {
            for call in feast.split(maker).skip(1) {
                let (status, rest) = match status {
                    Some(s) => (s, call),
                    None => match call.split_once(',') {
                        Some((s, rest)) if s.parse::<u16>().is_ok() => (s.parse().unwrap(), rest),
                        _ => continue,
                    },
                };
                if let Some(code) = rest.strip_prefix('"') {
                    out.insert((status, code[..code.find('"').unwrap()].to_owned()));
                }
            }
        }
        out
    }

    /// docs/errors.md's tables against the code: every code with its status, and no code the
    /// code does not have. A row may name several codes of one status (`a` / `b`).
    #[test]
    fn the_errors_page_lists_every_code_with_its_status() {
        let code = codes_of_the_code();
        assert!(
            code.len() > 40,
            "the source scan found too little: {code:?}"
        );
        let mut docs = std::collections::BTreeSet::new();
        for line in include_str!("../../docs/errors.md").lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let Some(Ok(status)) = cells.get(1).map(|s| s.parse::<u16>()) else {
                continue;
            };
            for c in cells[2].split('/') {
                docs.insert((status, c.trim().trim_matches('`').to_owned()));
            }
        }
        let undocumented: Vec<_> = code.difference(&docs).collect();
        let unknown: Vec<_> = docs.difference(&code).collect();
        assert!(
            undocumented.is_empty() && unknown.is_empty(),
            "docs/errors.md differs from the code's table of statuses and codes \
             (core/src/error.rs status_and_code, core/src/format/feast_rest/errors.rs):\n\
             in the code, not in the page (status, code): {undocumented:?}\n\
             in the page, not in the code: {unknown:?}"
        );
    }
}
