//! Feast 0.67's `/get-online-features` answer, column-major: `results` holds one column per
//! join key (the values as sent, PRESENT, the epoch) and then one per requested feature
//! (`values`, `statuses`, `event_timestamps`, one per entity); `metadata.feature_names` names
//! them in the same order. Values are written as Feast's protobuf-to-JSON writes them (a
//! float32 as the double it widens to, bytes as base64), event times as RFC 3339 UTC with 0,
//! 3, 6 or 9 fractional digits.

use ferry_protos::v1::value::Kind;
use serde_json::{json, Map, Value as Json};

use super::ParsedRequest;
use crate::values::{self, FeatureValue};
use crate::vector::{EntityFeatures, FeatureStatus};

/// The event time Feast reports for a join key or a feature without a row.
const EPOCH: &str = "1970-01-01T00:00:00Z";

/// The response body for `features[i]` of entity i.
pub fn render(req: &ParsedRequest, features: &[EntityFeatures]) -> Vec<u8> {
    let mut results = Vec::with_capacity(req.join_keys.len() + req.columns.len());
    let mut names = Vec::with_capacity(results.capacity());
    for (name, column) in &req.join_keys {
        let n = column.len();
        results.push(json!({
            "values": column,
            "statuses": vec![FeatureStatus::Present.as_str(); n],
            "event_timestamps": vec![EPOCH; n],
        }));
        names.push(Json::from(name.as_str()));
    }
    for (name, index) in &req.columns {
        let mut values = Vec::with_capacity(features.len());
        let mut statuses = Vec::with_capacity(features.len());
        let mut times = Vec::with_capacity(features.len());
        for (i, f) in features.iter().enumerate() {
            let status = f
                .statuses
                .get(*index)
                .copied()
                .unwrap_or(FeatureStatus::NotFound);
            values.push(f.values.get(*index).map_or(Json::Null, feast_json));
            statuses.push(Json::from(status.as_str()));
            let us = req
                .event_times_us
                .get(i)
                .and_then(|t| t.get(*index))
                .copied()
                .unwrap_or(0);
            let time = if status == FeatureStatus::NotFound || us == 0 {
                EPOCH.to_string()
            } else {
                rfc3339(us)
            };
            times.push(Json::from(time));
        }
        results.push(json!({"values": values, "statuses": statuses, "event_timestamps": times}));
        names.push(Json::from(name.as_str()));
    }
    let mut body = Map::new();
    body.insert("results".into(), Json::Array(results));
    body.insert("metadata".into(), json!({ "feature_names": names }));
    Json::Object(body).to_string().into_bytes()
}

/// A value as Feast writes it: a float32 as the double it widens to (Feast's JSON says
/// `0.1` stored as float32 as `0.10000000149011612`), everything else as Ferry writes it.
fn feast_json(v: &FeatureValue) -> Json {
    let wide = |f: f32| serde_json::Number::from_f64(f64::from(f)).map_or(Json::Null, Json::Number);
    match v {
        Some(Kind::FloatVal(f)) => wide(*f),
        Some(Kind::FloatListVal(l)) => Json::Array(l.values.iter().map(|f| wide(*f)).collect()),
        other => values::to_json(other),
    }
}

/// `us` (µs since the epoch) as protobuf's JSON writes a Timestamp.
pub fn rfc3339(us: i64) -> String {
    crate::civil::rfc3339(us, true)
}
