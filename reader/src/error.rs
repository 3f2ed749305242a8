//! Every way a reader request can fail, and the one place where each becomes an HTTP status and
//! a JSON body `{"error": "<code>", "message": "<what exactly>"}`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};

/// A failed request. The message says exactly what was wrong, for the operator reading the
/// filter's logs; the code is stable, for programs.
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    /// The request was malformed: undecodable protobuf, an invalid name or entity key, no
    /// lookups.
    #[error("{0}")]
    BadRequest(String),
    /// No route at this path.
    #[error("no such endpoint: {0}")]
    NotFound(String),
    /// The path exists but not with this method; carries the allowed one.
    #[error("{method} is not allowed here; use {allow}")]
    MethodNotAllowed { method: String, allow: &'static str },
    /// More entity keys than `--max-batch`.
    #[error("request has {keys} entity keys; this reader accepts at most {max} per request")]
    BatchTooLarge { keys: usize, max: u32 },
    /// A count over one of `ferry_protos::limits` (lookups, join keys, views, Feast fields
    /// per entity or per call, bytes of field names), found before any decoding or Redis work.
    #[error("request too large: {0}")]
    TooLarge(ferry_protos::limits::Exceeded),
    /// Body larger than `--max-body-bytes`.
    #[error("request body exceeds {max} bytes")]
    BodyTooLarge { max: u64 },
    /// Redis could not be reached or refused to serve.
    #[error("redis unavailable: {0}")]
    RedisUnavailable(String),
    /// Redis did not answer within `--redis-timeout-ms`.
    #[error("redis did not answer within {0} ms")]
    RedisTimeout(u64),
    /// Something that cannot happen did (e.g. Redis answered MGET with the wrong shape).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ReaderError {
    /// The HTTP status this error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) => StatusCode::BAD_REQUEST,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::BatchTooLarge { .. } | Self::BodyTooLarge { .. } | Self::TooLarge(_) => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            Self::RedisUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::RedisTimeout(_) => StatusCode::GATEWAY_TIMEOUT,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable machine-readable code in the JSON body.
    pub fn code(&self) -> &'static str {
        use ferry_protos::reader_error as code;
        match self {
            Self::BadRequest(_) => code::BAD_REQUEST,
            Self::NotFound(_) => code::NOT_FOUND,
            Self::MethodNotAllowed { .. } => code::METHOD_NOT_ALLOWED,
            Self::BatchTooLarge { .. } => code::BATCH_TOO_LARGE,
            Self::BodyTooLarge { .. } => code::BODY_TOO_LARGE,
            Self::TooLarge(_) => code::LOOKUP_TOO_LARGE,
            Self::RedisUnavailable(_) => code::REDIS_UNAVAILABLE,
            Self::RedisTimeout(_) => code::REDIS_TIMEOUT,
            Self::Internal(_) => code::INTERNAL,
        }
    }

    /// The JSON body: `{"error": code, "message": what exactly}`, and for a limit, the limit's
    /// name, the value asked for and the maximum.
    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({ "error": self.code(), "message": self.to_string() });
        if let Self::TooLarge(e) = self {
            body["limit"] = e.limit.into();
            body["value"] = e.value.into();
            body["max"] = e.max.into();
        }
        body
    }

    /// The complete HTTP answer.
    pub fn into_response(self) -> Response<Full<Bytes>> {
        let mut response = json_response(self.status(), &self.body());
        if let Self::MethodNotAllowed { allow, .. } = self {
            response
                .headers_mut()
                .insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
        }
        response
    }
}

impl From<ferry_protos::limits::Exceeded> for ReaderError {
    fn from(e: ferry_protos::limits::Exceeded) -> Self {
        Self::TooLarge(e)
    }
}

/// A JSON response with the given status.
pub fn json_response(status: StatusCode, body: &serde_json::Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn errors_become_json_with_code_and_message() {
        let response = ReaderError::BatchTooLarge { keys: 5, max: 2 }.into_response();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"], "batch_too_large");
        assert_eq!(
            json["message"],
            "request has 5 entity keys; this reader accepts at most 2 per request"
        );
    }

    #[tokio::test]
    async fn a_limit_is_named_in_the_body() {
        let exceeded = ferry_protos::limits::check("feast_views", 300, 256).unwrap_err();
        let response = ReaderError::TooLarge(exceeded).into_response();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"], "lookup_too_large");
        assert_eq!(json["limit"], "feast_views");
        assert_eq!(
            (json["value"].as_u64(), json["max"].as_u64()),
            (Some(300), Some(256))
        );
        assert_eq!(
            json["message"],
            "request too large: feast_views 300 is over the limit of 256"
        );
    }

    #[test]
    fn method_not_allowed_says_what_is() {
        let response = ReaderError::MethodNotAllowed {
            method: "GET".into(),
            allow: "POST",
        }
        .into_response();
        assert_eq!(response.headers()["allow"], "POST");
    }
}
