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

/// Issue #22's reader memory bomb: one Feast lookup of 50 entity keys whose one view names
/// 1,000,000 empty feature fields (a 2 MB body; before the reader's bounds it took the reader
/// from 6 MB to 1.09 GB).
pub fn feast_bomb() -> VectorRequest {
    use ferry_protos::v1::{FeastJoinKey, FeastLayout, FeastView};
    VectorRequest {
        project: "bank".into(),
        lookups: vec![Lookup {
            service: "scoring".into(),
            fingerprint: 1,
            entity_keys: (0..50).map(|i| format!("e{i}")).collect(),
            feast: Some(FeastLayout {
                project: "bank".into(),
                join_keys: vec![FeastJoinKey {
                    name: "user_id".into(),
                    int64: false,
                }],
                views: vec![FeastView {
                    timestamp_field: b"_ts:v".to_vec(),
                    feature_fields: vec![Vec::new(); 1_000_000],
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }],
    }
}
