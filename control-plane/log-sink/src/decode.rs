//! From what Envoy's gRPC access-log service sends to served-feature rows: each HTTP entry's
//! filter state `wasm.ferry.log` (the Wasm build: an `Any` of `google.protobuf.BytesValue`
//! holding the `ferry.v1.ServedLog`) or `ferry.log` (the native build: an `Any` of
//! `google.protobuf.StringValue` holding it as base64, since a protobuf string must be UTF-8).

use base64::Engine as _;
use envoy_types::pb::envoy::data::accesslog::v3::HttpAccessLogEntry;
use ferry_protos::v1::{ServedLog, ValueType};
use prost::Message;

use super::parquet_file::{Layout, Row};

/// Filter-state names the record may be under (Wasm, native).
pub const KEYS: [&str; 2] = ["wasm.ferry.log", "ferry.log"];

const BYTES_VALUE: &str = "type.googleapis.com/google.protobuf.BytesValue";
const STRING_VALUE: &str = "type.googleapis.com/google.protobuf.StringValue";

/// Why an entry's record could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Undecodable {
    #[error("filter state {0} has type {1}, not BytesValue or StringValue")]
    Type(String, String),
    #[error("filter state {0} is not a ServedLog: {1}")]
    Record(String, String),
}

/// The record of one access-log entry (None: the request was not logged by Ferry).
pub fn record(entry: &HttpAccessLogEntry) -> Option<Result<ServedLog, Undecodable>> {
    let state = &entry.common_properties.as_ref()?.filter_state_objects;
    let (key, any) = KEYS.iter().find_map(|k| state.get(*k).map(|a| (*k, a)))?;
    Some(decode_any(key, &any.type_url, &any.value))
}

fn decode_any(key: &str, type_url: &str, value: &[u8]) -> Result<ServedLog, Undecodable> {
    let bad = |e: String| Undecodable::Record(key.to_owned(), e);
    let bytes = match type_url {
        BYTES_VALUE => Vec::<u8>::decode(value).map_err(|e| bad(e.to_string()))?,
        STRING_VALUE => {
            let text = String::decode(value).map_err(|e| bad(e.to_string()))?;
            base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .map_err(|e| bad(format!("not base64: {e}")))?
        }
        other => return Err(Undecodable::Type(key.to_owned(), other.to_owned())),
    };
    ServedLog::decode(bytes.as_slice()).map_err(|e| bad(e.to_string()))
}

/// The rows of a record: per service its layout and one row per instance.
pub fn rows(log: ServedLog) -> Vec<(Layout, Vec<Row>)> {
    let typed = |names: Vec<String>, types: &[i32]| -> Vec<(String, ValueType)> {
        names
            .into_iter()
            .enumerate()
            .map(|(i, n)| {
                let t = types.get(i).copied().unwrap_or_default();
                (n, ValueType::try_from(t).unwrap_or(ValueType::Unspecified))
            })
            .collect()
    };
    log.services
        .into_iter()
        .map(|s| {
            let layout = Layout {
                service: s.name,
                fingerprint: s.fingerprint,
                derived_version: s.derived_version,
                join_keys: typed(s.join_keys, &s.join_key_types),
                features: typed(s.feature_names, &s.feature_types),
            };
            let rows = s
                .instances
                .into_iter()
                .map(|i| Row {
                    entity_values: i.entity_values,
                    values: i.values.into_iter().map(|v| v.kind).collect(),
                    statuses: i.statuses,
                    event_times_us: i.event_times_us,
                    log_time_us: log.time_us,
                    request_id: log.request_id.clone(),
                    route: log.route.clone(),
                    request_status: log.status.clone(),
                })
                .collect();
            (layout, rows)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::data::accesslog::v3::AccessLogCommon;
    use envoy_types::pb::google::protobuf::Any;

    fn entry(key: &str, type_url: &str, value: Vec<u8>) -> HttpAccessLogEntry {
        let mut common = AccessLogCommon::default();
        common.filter_state_objects.insert(
            key.to_owned(),
            Any {
                type_url: type_url.to_owned(),
                value,
            },
        );
        HttpAccessLogEntry {
            common_properties: Some(common),
            ..Default::default()
        }
    }

    #[test]
    fn both_builds_forms_decode_to_the_same_record() {
        let log = ServedLog {
            request_id: "r1".into(),
            route: "fraud".into(),
            ..Default::default()
        };
        let raw = log.encode_to_vec();
        let wasm = entry("wasm.ferry.log", BYTES_VALUE, raw.clone().encode_to_vec());
        let text = base64::engine::general_purpose::STANDARD.encode(&raw);
        let native = entry("ferry.log", STRING_VALUE, text.encode_to_vec());
        assert_eq!(record(&wasm), Some(Ok(log.clone())));
        assert_eq!(record(&native), Some(Ok(log)));
        assert_eq!(record(&HttpAccessLogEntry::default()), None, "not Ferry's");
        let odd = entry("ferry.log", "type.googleapis.com/x.Y", vec![]);
        assert!(matches!(record(&odd), Some(Err(Undecodable::Type(..)))));
        let junk = entry("ferry.log", STRING_VALUE, "%%%".to_string().encode_to_vec());
        assert!(matches!(record(&junk), Some(Err(Undecodable::Record(..)))));
    }
}
