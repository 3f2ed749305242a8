//! KServe v2 / Open Inference Protocol JSON: entity ids come from named input tensors (`BYTES`
//! or `INT64`, shape `[N]` or `[N, 1]`); features are appended as typed input tensors, one per
//! feature (`[N]`, embeddings `[N, D]`), or one packed FP32 tensor `[N, F]`. Tensors cannot
//! hold null: a null feature is sent as its type's zero, and its status (NOT_FOUND,
//! OUTSIDE_MAX_AGE, NULL_VALUE) is reported in `parameters.ferry_statuses`. Input tensors the
//! client sent under Ferry's names are dropped.

use ferry_protos::v1::ValueType;
use serde_json::{json, Map, Value as Json};

use super::document::{self, shape};
use super::entity;
use super::metadata;
use crate::config::{KeyKind, Route};
use crate::error::FerryError;
use crate::values;
use crate::vector::EntityFeatures;

/// Name of the packed tensor.
pub const PACKED_TENSOR: &str = "ferry_features";

#[derive(Debug)]
pub struct ParsedRequest {
    /// How the client spelled numbers the reader respells (see `document`).
    spellings: document::Spellings,
    doc: Map<String, Json>,
    pub keys: Vec<String>,
}

pub fn parse(body: &[u8], route: &Route) -> Result<ParsedRequest, FerryError> {
    let parsed = document::parse_json(body)?;
    let Json::Object(doc) = parsed.json else {
        return Err(shape(
            "the body must be a JSON object with an \"inputs\" array (Open Inference Protocol)",
        ));
    };
    let inputs = match doc.get("inputs") {
        Some(Json::Array(a)) => a,
        Some(_) => return Err(shape("\"inputs\" must be an array of tensors")),
        None => {
            return Err(shape(
                "the body has no \"inputs\" array (KServe v2 / Open Inference Protocol)",
            ))
        }
    };
    // One column of ids per join key of every part, then each part's keys per entity.
    let mut part_keys: Vec<Vec<String>> = Vec::with_capacity(route.parts.len());
    let mut n = None;
    for p in &route.parts {
        let mut columns: Vec<Vec<String>> = Vec::with_capacity(p.entity_fields.len());
        for (name, key) in p.entity_fields.iter().zip(&p.service.entity_keys) {
            let mut named = inputs
                .iter()
                .filter(|t| t.get("name").and_then(Json::as_str) == Some(name.as_str()));
            let tensor = named
                .next()
                .ok_or_else(|| FerryError::MissingEntityTensor { name: name.clone() })?;
            // A second tensor of that name could be the one the model reads.
            if named.next().is_some() {
                return Err(FerryError::DuplicateEntityId {
                    field: name.clone(),
                });
            }
            let column = id_column(tensor, name, key.kind, route)?;
            let want = *n.get_or_insert(column.len());
            if column.len() != want {
                return Err(shape(&format!(
                    "entity tensors hold {want} and {} ids: they must match",
                    column.len()
                )));
            }
            columns.push(column);
        }
        part_keys.push(
            (0..n.unwrap_or(0))
                .map(|i| {
                    ferry_protos::entity_key(
                        &columns.iter().map(|c| c[i].as_str()).collect::<Vec<_>>(),
                    )
                })
                .collect(),
        );
    }
    let n = n.unwrap_or(0);
    let mut keys = Vec::with_capacity(n * part_keys.len());
    for i in 0..n {
        for pk in &part_keys {
            keys.push(pk[i].clone());
        }
    }
    Ok(ParsedRequest {
        doc,
        keys,
        spellings: parsed.spellings,
    })
}

/// The canonical ids of one entity tensor, checked against its datatype and shape.
fn id_column(
    t: &Json,
    name: &str,
    kind: KeyKind,
    route: &Route,
) -> Result<Vec<String>, FerryError> {
    let bad = |what: String| shape(&format!("input tensor '{name}': {what}"));
    let datatype = t.get("datatype").and_then(Json::as_str).unwrap_or("");
    let ok_type = match kind {
        KeyKind::String => datatype == "BYTES",
        KeyKind::Int64 => matches!(datatype, "INT64" | "INT32"),
    };
    if !ok_type {
        let want = if kind == KeyKind::String {
            "BYTES"
        } else {
            "INT64"
        };
        return Err(bad(format!("datatype must be {want}, got '{datatype}'")));
    }
    let dims: Vec<u64> = match t.get("shape").and_then(Json::as_array) {
        Some(s) => s
            .iter()
            .map(Json::as_u64)
            .collect::<Option<_>>()
            .ok_or_else(|| bad("shape must be non-negative integers".into()))?,
        None => return Err(bad("no shape".into())),
    };
    let n = match dims.as_slice() {
        [n] | [n, 1] => usize::try_from(*n).unwrap_or(usize::MAX),
        _ => return Err(bad(format!("shape must be [N] or [N, 1], got {dims:?}"))),
    };
    entity::check_count(n, route)?;
    let data = t
        .get("data")
        .and_then(Json::as_array)
        .ok_or_else(|| bad("no data array".into()))?;
    // Row-major JSON may nest [N, 1] as [[a], [b]].
    let flat: Vec<&Json> = data
        .iter()
        .flat_map(|v| match v {
            Json::Array(inner) => inner.iter().collect::<Vec<_>>(),
            other => vec![other],
        })
        .collect();
    if flat.len() != n {
        return Err(bad(format!("shape says {n} ids, data has {}", flat.len())));
    }
    flat.iter()
        .enumerate()
        .map(|(i, v)| {
            entity::entity_part(v, kind).map_err(|reason| FerryError::InvalidEntityId {
                place: format!("input tensor '{name}'[{i}]"),
                reason,
            })
        })
        .collect()
}

fn datatype(t: ValueType) -> &'static str {
    match t {
        ValueType::Int32 => "INT32",
        ValueType::Int64 => "INT64",
        ValueType::Float64 => "FP64",
        ValueType::Bool => "BOOL",
        ValueType::String | ValueType::Bytes => "BYTES",
        ValueType::Float32 | ValueType::Float32List | ValueType::Unspecified => "FP32",
    }
}

fn zero(t: ValueType) -> Json {
    match t {
        ValueType::Bool => Json::Bool(false),
        ValueType::String | ValueType::Bytes => Json::from(""),
        ValueType::Float32 | ValueType::Float64 => json!(0.0),
        _ => json!(0),
    }
}

/// A numeric feature as a number for the packed FP32 tensor (bools as 0/1, null as 0).
fn as_number(v: &Json) -> Json {
    match v {
        Json::Bool(b) => json!(u8::from(*b)),
        Json::Number(_) => v.clone(),
        _ => json!(0),
    }
}

pub fn rewrite(
    mut req: ParsedRequest,
    route: &Route,
    packed: bool,
    features: Vec<EntityFeatures>,
) -> Result<Vec<u8>, FerryError> {
    let tensors = if packed {
        vec![packed_tensor(route, &features)]
    } else {
        feature_tensors(route, &features)?
    };
    let statuses: Vec<Json> = features
        .iter()
        .map(|f| Json::Object(metadata::not_present(route, f)))
        .collect();
    if let Some(Json::Array(inputs)) = req.doc.get_mut("inputs") {
        let ours = |t: &Json| {
            let name = t.get("name").and_then(Json::as_str).unwrap_or("");
            name == PACKED_TENSOR || route.output_names.iter().any(|o| o == name)
        };
        inputs.retain(|t| !ours(t));
        inputs.extend(tensors);
    }
    // OIP parameters are scalars: the statuses travel as a compact JSON string.
    let params = req
        .doc
        .entry("parameters")
        .or_insert_with(|| Json::Object(Map::new()));
    if !params.is_object() {
        *params = Json::Object(Map::new());
    }
    if let Json::Object(p) = params {
        p.insert(
            "ferry_service".into(),
            Json::from(route.services_label.as_str()),
        );
        p.insert(
            "ferry_fingerprint".into(),
            Json::from(route.fingerprints_label.as_str()),
        );
        p.insert(
            "ferry_statuses".into(),
            Json::from(Json::Array(statuses).to_string()),
        );
    }
    document::write_document(&Json::Object(req.doc), req.spellings)
}

/// One FP32 tensor `[N, F]` of every entity's features (numbers only, nulls as 0).
fn packed_tensor(route: &Route, features: &[EntityFeatures]) -> Json {
    let data: Vec<Json> = features
        .iter()
        .flat_map(|f| f.values.iter().map(|v| as_number(&values::to_json(v))))
        .collect();
    json!({"name": PACKED_TENSOR, "shape": [features.len(), route.feature_count], "datatype": "FP32", "data": data})
}

/// One typed tensor per feature: `[N]`, or `[N, D]` for embeddings; nulls as the type's zero.
fn feature_tensors(route: &Route, features: &[EntityFeatures]) -> Result<Vec<Json>, FerryError> {
    let n = features.len();
    let mut tensors = Vec::with_capacity(route.feature_count);
    for (j, (name, f)) in route.output_names.iter().zip(route.features()).enumerate() {
        let t = f.value_type;
        let column: Vec<Json> = features
            .iter()
            .map(|f| f.values.get(j).map_or(Json::Null, values::to_json))
            .collect();
        let (shape, data) = if t == ValueType::Float32List {
            embedding_column(name, &column)?
        } else {
            let data = column
                .into_iter()
                .map(|v| if v.is_null() { zero(t) } else { v })
                .collect();
            (json!([n]), data)
        };
        tensors.push(json!({"name": name, "shape": shape, "datatype": datatype(t), "data": data}));
    }
    Ok(tensors)
}

/// An embedding feature's column as `[N, D]` data: every list of one batch has the same
/// length D; a null is D zeros.
fn embedding_column(name: &str, column: &[Json]) -> Result<(Json, Vec<Json>), FerryError> {
    let lists: Vec<Option<&Vec<Json>>> = column.iter().map(Json::as_array).collect();
    let lengths: Vec<usize> = lists.iter().flatten().map(|l| l.len()).collect();
    let d = lengths.first().copied().unwrap_or(0);
    if let Some(other) = lengths.iter().find(|l| **l != d) {
        return Err(FerryError::BadVector {
            detail: format!("feature '{name}' has lists of lengths {d} and {other} in one batch"),
        });
    }
    let data: Vec<Json> = lists
        .into_iter()
        .flat_map(|l| l.cloned().unwrap_or_else(|| vec![json!(0.0); d]))
        .collect();
    Ok((json!([column.len(), d]), data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixture::snapshot;
    use crate::config::Config;
    use crate::vector::FeatureStatus;
    use ferry_protos::v1 as pb;

    fn v2(packed: bool) -> Config {
        let mut s = snapshot();
        s.routes[0].format = pb::Format::KserveV2 as i32;
        s.routes[0].packed = packed;
        Config::from_snapshot(s).unwrap()
    }

    fn feats(age: Json, score: Json, count: Json) -> EntityFeatures {
        let statuses = [&age, &score, &count]
            .iter()
            .map(|v| {
                if v.is_null() {
                    FeatureStatus::NotFound
                } else {
                    FeatureStatus::Present
                }
            })
            .collect();
        EntityFeatures {
            values: crate::values::fvs(&[age, score, count]),
            statuses,
        }
    }

    #[test]
    fn ids_from_flat_or_nested_tensors() {
        let c = v2(false);
        let r = &c.routes[0];
        let flat = br#"{"inputs":[{"name":"amount","shape":[2],"datatype":"FP32","data":[1.0,2.0]},
            {"name":"user_id","shape":[2],"datatype":"BYTES","data":["u1","u2"]}]}"#;
        assert_eq!(parse(flat, r).unwrap().keys, ["u1", "u2"]);
        let nested = br#"{"inputs":[{"name":"user_id","shape":[2,1],"datatype":"BYTES","data":[["u1"],["u2"]]}]}"#;
        assert_eq!(parse(nested, r).unwrap().keys, ["u1", "u2"]);
    }

    #[test]
    fn bad_tensors_are_named() {
        let c = v2(false);
        let r = &c.routes[0];
        let msg = |b: &[u8]| parse(b, r).unwrap_err().message();
        assert_eq!(
            msg(br#"{"inputs":[]}"#),
            "no input tensor named 'user_id' (it must hold the entity ids)"
        );
        assert_eq!(
            msg(br#"{"inputs":[{"name":"user_id","shape":[1],"datatype":"INT64","data":[1]}]}"#),
            "input tensor 'user_id': datatype must be BYTES, got 'INT64'"
        );
        assert_eq!(
            msg(br#"{"inputs":[{"name":"user_id","shape":[3],"datatype":"BYTES","data":["a"]}]}"#),
            "input tensor 'user_id': shape says 3 ids, data has 1"
        );
        assert_eq!(
            msg(br#"{"inputs":[{"name":"user_id","shape":[1],"datatype":"BYTES","data":[""]}]}"#),
            "input tensor 'user_id'[0]: id must be 1 to 256 bytes, got 0"
        );
        assert!(msg(br#"{"instances":[]}"#).contains("no \"inputs\" array"));
        let twice = parse(
            br#"{"inputs":[{"name":"user_id","shape":[1],"datatype":"BYTES","data":["u1"]},
                {"name":"user_id","shape":[1],"datatype":"BYTES","data":["u2"]}]}"#,
            r,
        )
        .unwrap_err();
        assert_eq!((twice.status(), twice.code()), (400, "duplicate_entity_id"));
        let e = parse(
            br#"{"inputs":[{"name":"user_id","shape":[11],"datatype":"BYTES","data":[]}]}"#,
            r,
        )
        .unwrap_err();
        assert_eq!(e.code(), "too_many_entities");
    }

    #[test]
    fn one_typed_tensor_per_feature_with_zero_for_null_and_forged_tensors_dropped() {
        let c = v2(false);
        let r = &c.routes[0];
        let body = br#"{"id":"r1","inputs":[{"name":"user_id","shape":[2],"datatype":"BYTES","data":["u1","u2"]},
            {"name":"profile__age","shape":[2],"datatype":"INT64","data":[99,99]}]}"#;
        let req = parse(body, r).unwrap();
        let packed = matches!(r.format, crate::config::Format::KserveV2 { packed: true });
        let out = rewrite(
            req,
            r,
            packed,
            vec![
                feats(json!(30), json!(0.5), json!(2)),
                feats(Json::Null, Json::Null, json!(7)),
            ],
        )
        .unwrap();
        let v: Json = serde_json::from_slice(&out).unwrap();
        let inputs = v["inputs"].as_array().unwrap();
        assert_eq!(
            inputs.len(),
            4,
            "user_id + 3 features; the forged profile__age is gone"
        );
        assert_eq!(
            inputs[1],
            json!({"name": "profile__age", "shape": [2], "datatype": "INT64", "data": [30, 0]})
        );
        assert_eq!(
            inputs[2],
            json!({"name": "profile__score", "shape": [2], "datatype": "FP32", "data": [0.5, 0.0]})
        );
        assert_eq!(inputs[3]["data"], json!([2, 7]));
        assert_eq!(v["id"], "r1");
        assert_eq!(v["parameters"]["ferry_fingerprint"], "123456789abcdef0");
        let statuses: Json =
            serde_json::from_str(v["parameters"]["ferry_statuses"].as_str().unwrap()).unwrap();
        assert_eq!(
            statuses,
            json!([{}, {"profile__age": "NOT_FOUND", "profile__score": "NOT_FOUND"}])
        );
    }

    #[test]
    fn packed_tensor_is_fp32_n_by_f() {
        let c = v2(true);
        let r = &c.routes[0];
        let req = parse(
            br#"{"inputs":[{"name":"user_id","shape":[2],"datatype":"BYTES","data":["u1","u2"]}]}"#,
            r,
        )
        .unwrap();
        let packed = matches!(r.format, crate::config::Format::KserveV2 { packed: true });
        let out = rewrite(
            req,
            r,
            packed,
            vec![
                feats(json!(30), json!(0.5), json!(2)),
                feats(Json::Null, json!(1.5), json!(7)),
            ],
        )
        .unwrap();
        let v: Json = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["inputs"][1],
            json!({"name": "ferry_features", "shape": [2, 3], "datatype": "FP32", "data": [30, 0.5, 2, 0, 1.5, 7]})
        );
    }

    #[test]
    fn packed_refuses_non_numeric_features() {
        let mut s = snapshot();
        s.routes[0].format = pb::Format::KserveV2 as i32;
        s.routes[0].packed = true;
        s.services[0].views[1].features[0].r#type = pb::ValueType::String as i32;
        let e = Config::from_snapshot(s).unwrap_err();
        assert!(e.to_string().contains("is string, not numeric"), "{e}");
    }
}
