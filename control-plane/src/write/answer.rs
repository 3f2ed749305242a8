//! The write API's answers, in Feast 0.67's shapes, from one table: a refused request is
//! Feast's error body (`to_error_detail()`: a JSON *string* holding `{"module", "class",
//! "message"}`, what Feast's clients parse) or, for a malformed request, FastAPI's validation
//! body (`{"detail": [...]}`); every refusal also carries `x-ferry-error` with Ferry's code.
//! Success is Feast's: `/push` answers 200 with no body, `/write-to-online-store` 200 `null`;
//! `x-ferry-rows-*` headers say what each row did.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use serde_json::json;

use super::bounded::Exceeded;
use super::rows::Problems;

/// What a refused write is told to wait before retrying when every write slot is taken.
pub const RETRY_AFTER_SECONDS: &str = "1";

/// The header naming Ferry's error code.
pub const ERROR_HEADER: &str = "x-ferry-error";

/// Why a write request was refused or failed.
#[derive(Debug)]
pub enum WriteError {
    /// The body is not the request shape; FastAPI's `detail` entries.
    Invalid(Vec<serde_json::Value>),
    UnknownPushSource(String),
    UnknownView {
        view: String,
        project: String,
    },
    /// `to` asks for Feast's offline store.
    Offline(String),
    /// `to` is no push mode at all.
    UnknownMode(String),
    Rows(Problems),
    TooLarge(usize),
    /// Over a bound of the write's content (rows, a cell, a list, a vector).
    Exceeds(Exceeded),
    /// Every write slot is taken (`--max-concurrent-writes`).
    Busy(usize),
    /// The writes admitted already queue this much Redis work at `--max-write-keys-per-second`.
    Paced(std::time::Duration),
    NoSnapshot,
    Redis(String),
    Contended(String),
    /// The check of a body did not finish (a task failed): a bug, nothing was written.
    Internal(String),
}

impl WriteError {
    /// A refused set of rows: too large when a row went over a bound, else invalid.
    pub fn rows(mut p: Problems) -> WriteError {
        match p.too_large.take() {
            Some(e) => Self::Exceeds(e),
            None => Self::Rows(p),
        }
    }

    /// (status, Ferry's code, Feast's class) of each refusal: the one table.
    fn row(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Self::Invalid(_) => (StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", ""),
            Self::UnknownPushSource(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "unknown_push_source",
                "PushSourceNotFoundException",
            ),
            Self::UnknownView { .. } => (
                StatusCode::NOT_FOUND,
                "unknown_view",
                "FeatureViewNotFoundException",
            ),
            Self::Offline(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "offline_write_refused",
                "OfflineWriteRefused",
            ),
            Self::UnknownMode(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                "ValueError",
            ),
            Self::Rows(_) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_rows",
                "InvalidRows",
            ),
            Self::TooLarge(_) => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                "BodyTooLarge",
            ),
            Self::Exceeds(e) => (StatusCode::PAYLOAD_TOO_LARGE, e.code(), "WriteTooLarge"),
            Self::Busy(_) | Self::Paced(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_writes",
                "TooManyWrites",
            ),
            Self::NoSnapshot => (StatusCode::SERVICE_UNAVAILABLE, "no_snapshot", "NoSnapshot"),
            Self::Redis(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "redis_unavailable",
                "RedisUnavailable",
            ),
            Self::Contended(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "write_contended",
                "WriteContended",
            ),
            Self::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "InternalError",
            ),
        }
    }

    /// Ferry's code (the `x-ferry-error` header, the refusal metric's reason).
    pub fn code(&self) -> &'static str {
        self.row().1
    }

    /// Whether nothing was written (a refusal before any write).
    pub fn before_writing(&self) -> bool {
        !matches!(self, Self::Redis(_) | Self::Contended(_))
    }

    /// The refusal's message, as the error body carries it.
    pub fn message(&self) -> String {
        match self {
            Self::Invalid(_) => "the request body is not the expected shape".to_owned(),
            Self::UnknownPushSource(n) => format!("Unable to find push source '{n}'."),
            Self::UnknownView { view, project } => {
                format!("Feature view {view} does not exist in project {project}")
            }
            Self::Offline(to) => format!(
                "to: '{to}' asks for Feast's offline store, which Ferry does not write; push \
                 with to: 'online' (and write the offline store with Feast)"
            ),
            Self::UnknownMode(to) => format!(
                "{to} is not a supported push format. Please specify one of these ['online', \
                 'offline', 'online_and_offline']."
            ),
            Self::Rows(p) => format!(
                "the request's rows were refused, nothing was written: {}",
                p.summary()
            ),
            Self::TooLarge(max) => format!("write requests are limited to {max} bytes"),
            Self::Exceeds(e) => format!("nothing was written: {e}"),
            Self::Busy(max) => format!(
                "{max} write requests are being answered, the most this control plane takes at \
                 once (--max-concurrent-writes); retry after the Retry-After seconds"
            ),
            Self::Paced(backlog) => format!(
                "the writes being answered queue {:.1} s of Redis work at \
                 --max-write-keys-per-second (at most {} s); nothing was written, retry after the \
                 Retry-After seconds",
                backlog.as_secs_f64(),
                super::pace::MAX_BACKLOG.as_secs()
            ),
            Self::NoSnapshot => "this control plane has no valid snapshot yet".to_owned(),
            Self::Redis(e) | Self::Contended(e) => e.clone(),
            Self::Internal(e) => format!("the write's check failed, nothing was written: {e}"),
        }
    }

    pub fn response(&self) -> Response<Full<Bytes>> {
        let (status, code, class) = self.row();
        let body = match self {
            Self::Invalid(detail) => json!({ "detail": detail }),
            _ => {
                let mut detail = json!({
                    "module": if class.ends_with("Exception") { "feast.errors" } else { "ferry" },
                    "class": class,
                    "message": self.message(),
                    "ferry_error": code,
                });
                if let Self::Rows(p) = self {
                    detail["problems"] = json!(p.list);
                    detail["more_problems"] = json!(p.more);
                }
                // Feast's shape: the detail serialized, sent as a JSON string.
                serde_json::Value::String(detail.to_string())
            }
        };
        let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
        *r.status_mut() = status;
        let h = r.headers_mut();
        h.insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        h.insert(ERROR_HEADER, hyper::header::HeaderValue::from_static(code));
        match self {
            Self::Busy(_) => {
                h.insert(
                    hyper::header::RETRY_AFTER,
                    hyper::header::HeaderValue::from_static(RETRY_AFTER_SECONDS),
                );
            }
            // The seconds until the queue is back under the bound, at least 1.
            Self::Paced(backlog) => {
                let over = backlog.saturating_sub(super::pace::MAX_BACKLOG);
                let secs = over.as_secs() + u64::from(over.subsec_nanos() > 0);
                h.insert(hyper::header::RETRY_AFTER, secs.max(1).into());
            }
            _ => {}
        }
        r
    }
}

/// What a successful write did, per request row.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub written: u64,
    pub skipped_older: u64,
    pub refused: u64,
}

/// Feast's success answer, with the counts in headers.
pub fn success(feast_null_body: bool, counts: Counts) -> Response<Full<Bytes>> {
    let body = if feast_null_body { "null" } else { "" };
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    let h = r.headers_mut();
    if feast_null_body {
        h.insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
    }
    for (name, n) in [
        ("x-ferry-rows-written", counts.written),
        ("x-ferry-rows-skipped-older", counts.skipped_older),
        ("x-ferry-rows-refused", counts.refused),
    ] {
        h.insert(name, hyper::header::HeaderValue::from(n));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_paced_refusal_is_429_with_the_seconds_until_the_queue_is_under_its_bound() {
        // 12.3 s queued against a bound of 10 s: retry after 3 s.
        let r = WriteError::Paced(Duration::from_millis(12_300)).response();
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()["retry-after"], "3");
        assert_eq!(r.headers()[ERROR_HEADER], "too_many_writes");
        // Right at the bound (the check refuses only past it, with its own keys): at least 1 s.
        let r = WriteError::Paced(Duration::from_secs(10)).response();
        assert_eq!(r.headers()["retry-after"], "1");
        assert!(WriteError::Paced(Duration::from_secs(11)).before_writing());
    }
}
