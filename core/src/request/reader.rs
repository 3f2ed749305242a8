//! The one reader call of a request: the `VectorRequest` for the keys the near cache did not
//! hold, the reader's answer judged (its status, its JSON error), and the vectors it holds.

use ferry_protos::v1::{Lookup, VectorRequest, VectorResponse};
use prost::Message;
use serde_json::Value as Json;

use crate::config::{Config, Route};
use crate::error::FerryError;

/// Longest reader error message copied into Ferry's own error.
const MAX_DETAIL: usize = 300;

/// The single reader call for a request.
#[derive(Debug)]
pub struct ReaderCall {
    pub body: Vec<u8>,
    /// The indices (into the request's keys) of the vectors the answer holds, in its order.
    pub order: Vec<usize>,
    /// How many vectors each lookup of the answer holds.
    pub lookup_sizes: Vec<usize>,
}

/// The one reader call for the keys at `wanted` (indices into `keys`, the request's keys: one
/// per route part for each entity): one lookup per part that has any, in part order.
pub fn reader_request(
    config: &Config,
    route: &Route,
    keys: &[String],
    wanted: &[usize],
) -> ReaderCall {
    let parts = route.keys_per_entity();
    let mut lookups = Vec::with_capacity(parts);
    let mut order = Vec::with_capacity(wanted.len());
    let mut lookup_sizes = Vec::with_capacity(parts);
    for (p, part) in route.parts.iter().enumerate() {
        let start = order.len();
        order.extend(wanted.iter().copied().filter(|j| j % parts == p));
        if order.len() == start {
            continue;
        }
        lookup_sizes.push(order.len() - start);
        lookups.push(Lookup {
            service: part.service.name.clone(),
            fingerprint: part.service.fingerprint,
            entity_keys: order[start..].iter().map(|j| keys[*j].clone()).collect(),
            feast: part.service.feast.clone(),
        });
    }
    let body = VectorRequest {
        project: config.project.clone(),
        lookups,
    }
    .encode_to_vec();
    ReaderCall {
        body,
        order,
        lookup_sizes,
    }
}

/// Judges the reader's answer: `status` is None when the call failed without a response.
/// The reader's own errors carry a JSON code; a 503/504 without one is Envoy's own reply (the
/// reader cluster is unreachable, reset, or timed out).
pub fn check_reader_status(
    status: Option<u16>,
    body: &[u8],
    timeout_ms: u32,
) -> Result<(), FerryError> {
    let Some(status) = status else {
        return Err(FerryError::ReaderUnavailable {
            detail: format!(
                "no response (connection failure, reset, or no answer within {timeout_ms} ms)"
            ),
        });
    };
    if status == 200 {
        return Ok(());
    }
    let (code, detail) = reader_error(body);
    use ferry_protos::reader_error::{REDIS_TIMEOUT, REDIS_UNAVAILABLE};
    Err(match (code.as_deref(), status) {
        (Some(REDIS_UNAVAILABLE), _) => FerryError::RedisUnavailable { detail },
        (Some(REDIS_TIMEOUT), _) => FerryError::RedisTimeout { detail },
        // The reader refused what the filter sent (malformed, over a limit): a Ferry bug or a
        // request the filter should have refused, never a reason to forward unenriched.
        (Some(_), 400..=499) => FerryError::ReaderRejected { status, detail },
        (Some(_), _) => FerryError::ReaderError { status, detail },
        // A 4xx without the reader's JSON (e.g. another server at the reader's address) is a
        // refusal too: only an unreachable or failing reader path may fail open.
        (None, 400..=499) => FerryError::ReaderRejected { status, detail },
        (None, 504) => FerryError::ReaderTimeout {
            detail: format!("no answer within {timeout_ms} ms"),
        },
        (None, 503) => FerryError::ReaderUnavailable { detail },
        (None, _) => FerryError::ReaderError { status, detail },
    })
}

/// The reader's `{"error": code, "message": ...}`, or (None, the start of the body).
fn reader_error(body: &[u8]) -> (Option<String>, String) {
    if let Ok(Json::Object(m)) = serde_json::from_slice::<Json>(body) {
        if let (Some(Json::String(code)), Some(Json::String(msg))) =
            (m.get("error"), m.get("message"))
        {
            return (Some(code.clone()), msg.chars().take(MAX_DETAIL).collect());
        }
    }
    (
        None,
        String::from_utf8_lossy(body)
            .chars()
            .take(MAX_DETAIL)
            .collect(),
    )
}

/// The vectors of a reader answer, one per requested key, lookup after lookup (empty = not
/// found); `lookup_sizes` is what was asked.
pub fn reader_vectors(
    reader_body: &[u8],
    lookup_sizes: &[usize],
) -> Result<Vec<Vec<u8>>, FerryError> {
    let bad = |detail: String| FerryError::BadVector { detail };
    let resp = VectorResponse::decode(reader_body)
        .map_err(|e| bad(format!("undecodable reader response: {e}")))?;
    if resp.results.len() != lookup_sizes.len() {
        return Err(bad(format!(
            "reader answered {} lookups for {}",
            resp.results.len(),
            lookup_sizes.len()
        )));
    }
    let mut out = Vec::with_capacity(lookup_sizes.iter().sum());
    for (result, expected) in resp.results.into_iter().zip(lookup_sizes) {
        if result.vectors.len() != *expected {
            return Err(bad(format!(
                "reader answered {} vectors for {expected} entities",
                result.vectors.len()
            )));
        }
        out.extend(result.vectors);
    }
    Ok(out)
}

#[cfg(test)]
#[path = "reader_tests.rs"]
mod tests;
