//! The JSON document of a body format: read from the body, written back as the new body, and
//! how a body of the wrong shape is reported.

use serde_json::Value as Json;

use crate::error::FerryError;

/// The rewritten document as the new body. Writing a `serde_json::Value` cannot fail (its keys
/// are strings, its numbers finite); should it, the request is refused rather than sent on
/// with an empty body.
pub fn write_document(doc: &Json) -> Result<Vec<u8>, FerryError> {
    serde_json::to_vec(doc)
        .map_err(|e| FerryError::BadShape(format!("cannot write the enriched body: {e}")))
}

pub fn parse_json(body: &[u8]) -> Result<Json, FerryError> {
    serde_json::from_slice(body).map_err(|e| FerryError::MalformedJson(e.to_string()))
}

pub fn shape(msg: &str) -> FerryError {
    FerryError::BadShape(msg.to_string())
}
