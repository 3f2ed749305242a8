//! The feature tensors Ferry appends to a KServe v2 request: one typed tensor per feature, or
//! one packed FP32 tensor.

use ferry_protos::v1::ValueType;
use serde_json::{json, Value as Json};

use super::PACKED_TENSOR;
use crate::config::Route;
use crate::error::FerryError;
use crate::values;
use crate::vector::EntityFeatures;

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

/// One FP32 tensor `[N, F]` of every entity's features (numbers only, nulls as 0).
pub(super) fn packed_tensor(route: &Route, features: &[EntityFeatures]) -> Json {
    let data: Vec<Json> = features
        .iter()
        .flat_map(|f| f.values.iter().map(|v| as_number(&values::to_json(v))))
        .collect();
    json!({"name": PACKED_TENSOR, "shape": [features.len(), route.feature_count], "datatype": "FP32", "data": data})
}

/// One typed tensor per feature: `[N]`, or `[N, D]` for embeddings; nulls as the type's zero.
pub(super) fn feature_tensors(
    route: &Route,
    features: &[EntityFeatures],
) -> Result<Vec<Json>, FerryError> {
    let n = features.len();
    per_feature(route, |j, name, t| {
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
        Ok(json!({"name": name, "shape": shape, "datatype": datatype(t), "data": data}))
    })
}

/// One tensor per output feature of the route, in output order (both KServe v2 formats):
/// `tensor(j, name, type)` builds the tensor of column `j` (the index into every entity's
/// values).
pub(crate) fn per_feature<T>(
    route: &Route,
    mut tensor: impl FnMut(usize, &str, ValueType) -> Result<T, FerryError>,
) -> Result<Vec<T>, FerryError> {
    let mut tensors = Vec::with_capacity(route.feature_count);
    for (j, (name, t)) in route
        .output_names
        .iter()
        .zip(route.value_types())
        .enumerate()
    {
        tensors.push(tensor(j, name, t)?);
    }
    Ok(tensors)
}

/// An embedding feature's column as `[N, D]` data: every list of one batch has the same
/// length D; a null is D zeros.
fn embedding_column(name: &str, column: &[Json]) -> Result<(Json, Vec<Json>), FerryError> {
    let lists: Vec<Option<&Vec<Json>>> = column.iter().map(Json::as_array).collect();
    let d = embedding_width(name, lists.iter().flatten().map(|l| l.len()))?;
    let data: Vec<Json> = lists
        .into_iter()
        .flat_map(|l| l.cloned().unwrap_or_else(|| vec![json!(0.0); d]))
        .collect();
    Ok((json!([column.len(), d]), data))
}

/// The width D of an embedding feature's `[N, D]` tensor: every list of one batch (`lengths`,
/// nulls left out) must have the same length; 0 when all are null.
pub(crate) fn embedding_width(
    name: &str,
    mut lengths: impl Iterator<Item = usize>,
) -> Result<usize, FerryError> {
    let d = lengths.next().unwrap_or(0);
    match lengths.find(|l| *l != d) {
        Some(other) => Err(FerryError::BadVector {
            detail: format!("feature '{name}' has lists of lengths {d} and {other} in one batch"),
        }),
        None => Ok(d),
    }
}
