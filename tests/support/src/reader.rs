//! The reader's messages: the filter's `VectorRequest` and the reader's `VectorResponse`.

use ferry_protos::v1::{Lookup, LookupResult, VectorRequest, VectorResponse};
use prost::Message;

/// A request of `project`: one lookup per (service, fingerprint, entity keys).
pub fn request(project: &str, lookups: &[(&str, u64, &[&str])]) -> VectorRequest {
    VectorRequest {
        project: project.into(),
        lookups: lookups
            .iter()
            .map(|(service, fingerprint, keys)| Lookup {
                feast: None,
                service: (*service).into(),
                fingerprint: *fingerprint,
                entity_keys: keys.iter().map(|k| (*k).to_string()).collect(),
            })
            .collect(),
    }
}

/// The reader's 200 answer to a one-lookup request: these stored vectors, in the order of the
/// keys (an empty one = not found).
pub fn response(vectors: Vec<Vec<u8>>) -> Vec<u8> {
    responses(vec![vectors])
}

/// The reader's 200 answer to a request of several lookups: one list of vectors per lookup.
pub fn responses(lookups: Vec<Vec<Vec<u8>>>) -> Vec<u8> {
    VectorResponse {
        results: lookups
            .into_iter()
            .map(|vectors| LookupResult { vectors })
            .collect(),
    }
    .encode_to_vec()
}
