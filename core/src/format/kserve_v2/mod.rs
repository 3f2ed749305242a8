//! KServe v2 / Open Inference Protocol JSON: entity ids come from named input tensors (`BYTES`
//! or `INT64`, shape `[N]` or `[N, 1]`); features are appended as typed input tensors, one per
//! feature (`[N]`, embeddings `[N, D]`), or one packed FP32 tensor `[N, F]`. Tensors cannot
//! hold null: a null feature is sent as its type's zero, and its status (NOT_FOUND,
//! OUTSIDE_MAX_AGE, NULL_VALUE) is reported in `parameters.ferry_statuses`. Input tensors the
//! client sent under Ferry's names are dropped, in JSON or binary form.
//!
//! Requests may use the binary tensor data extension (`binary`): the ids may then come from a
//! binary input, the features are appended as JSON tensors to the JSON header, and the binary
//! data of the client's other inputs goes on unchanged after it.

pub mod binary;
pub(crate) mod features;
#[cfg(test)]
#[path = "kserve_v2_tests.rs"]
mod tests;

use serde_json::{Map, Value as Json};

use super::declared;
use super::document::{self, shape};
use super::entity;
use super::metadata;
use super::request_fields;
use crate::config::{KeyKind, Route, RouteField};
use crate::error::FerryError;
use crate::vector::EntityFeatures;

/// Name of the packed tensor.
pub const PACKED_TENSOR: &str = "ferry_features";

#[derive(Debug)]
pub struct ParsedRequest {
    /// How the client spelled numbers the reader respells (see `document`).
    spellings: document::Spellings,
    doc: Map<String, Json>,
    pub keys: Vec<String>,
    /// The request fields of each instance, from the tensors of their names.
    pub fields: request_fields::Fields,
    /// The body's binary part (empty without the extension).
    binary: binary::Part,
}

/// What a rewrite produces: the new body, and the new `Inference-Header-Content-Length` when
/// the client framed its body with one.
#[derive(Debug)]
pub struct Rewritten {
    pub body: Vec<u8>,
    pub header_length: Option<usize>,
}

/// Parses a request body; `framing` is the `Inference-Header-Content-Length` header, if sent.
pub fn parse(
    body: &[u8],
    route: &Route,
    framing: Option<&str>,
) -> Result<ParsedRequest, FerryError> {
    let (json_part, binary_part) = binary::split(body, framing)?;
    let parsed = document::parse_json(json_part)?;
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
    let bin = binary::locate(inputs, binary_part, framing.is_some())?;
    let keys = tensor_keys(route, |name, kind| {
        let mut named = inputs
            .iter()
            .enumerate()
            .filter(|(_, t)| t.get("name").and_then(Json::as_str) == Some(name));
        let (at, tensor) = named
            .next()
            .ok_or_else(|| FerryError::MissingEntityTensor { name: name.into() })?;
        // A second tensor of that name could be the one the model reads.
        if named.next().is_some() {
            return Err(FerryError::DuplicateEntityId { field: name.into() });
        }
        let data = bin.ranges[at].clone().map(|r| &bin.bytes[r]);
        id_column(tensor, data, name, kind, route)
    })?;
    let (keys, fields) = with_fields(route, keys, |f| field_tensor(inputs, &bin, f))?;
    Ok(ParsedRequest {
        doc,
        keys,
        fields,
        spellings: parsed.spellings,
        binary: bin,
    })
}

/// The JSON tensor holding the request field `f`, if the request has one: its elements
/// (flattened), shape and datatype. Given twice, or as binary data, it is refused.
fn field_tensor(
    inputs: &[Json],
    bin: &binary::Part,
    f: &RouteField,
) -> Result<Option<Tensor>, FerryError> {
    let mut named = inputs
        .iter()
        .enumerate()
        .filter(|(_, t)| t.get("name").and_then(Json::as_str) == Some(f.field.as_str()))
        .map(|(at, _)| at);
    let Some(at) = named.next() else {
        return Ok(None);
    };
    // A second tensor of that name could be the one the model reads.
    if named.next().is_some() {
        return Err(duplicate_tensor(&f.field));
    }
    if bin.ranges.get(at).is_some_and(Option::is_some) {
        let reason = "sent as binary tensor data, which Ferry does not read for request \
                      fields; send it as JSON data"
            .to_string();
        return Err(request_fields::invalid(
            &|| format!("input tensor '{}'", f.field),
            f,
            reason,
        ));
    }
    let t = &inputs[at];
    let datatype = t.get("datatype").and_then(Json::as_str).unwrap_or("");
    let dims = shape_of(t, &f.field)?;
    let data = t.get("data").and_then(Json::as_array);
    let flat = flatten(data.map_or(&[][..], Vec::as_slice));
    Ok(Some((flat, dims, datatype.to_string())))
}

/// The request fields of a tensor request: `tensor(field)` gives the elements, shape and
/// datatype of the tensor holding `field`, if there is one. A route whose services have no
/// entity key (on-demand views over request fields only) counts its instances by the request
/// field tensors, and gets one empty key per instance and part.
pub(crate) fn with_fields(
    route: &Route,
    mut keys: Vec<String>,
    mut tensor: impl FnMut(&RouteField) -> Result<Option<Tensor>, FerryError>,
) -> Result<(Vec<String>, request_fields::Fields), FerryError> {
    if !request_fields::wanted(route) {
        return Ok((keys, Vec::new()));
    }
    let keyless = route.parts.iter().all(|p| p.entity_fields.is_empty());
    let mut n = (!keyless).then(|| keys.len() / route.keys_per_entity());
    let mut columns = Vec::with_capacity(route.derived.fields.len());
    for f in &route.derived.fields {
        let column = match tensor(f)? {
            Some((elements, dims, datatype)) => {
                let c = request_fields::of_tensor(&elements, &dims, &datatype, f, (n, route))?;
                n = Some(c.len());
                c
            }
            None => Vec::new(),
        };
        columns.push(column);
    }
    let n = n.unwrap_or(0);
    if keyless {
        entity::check_count(n, route)?;
        keys = vec![String::new(); n * route.keys_per_entity()];
    }
    Ok((keys, request_fields::interleave(columns, n)))
}

/// A request field's tensor sent twice: Ferry would derive from one, the model might read the
/// other.
pub(crate) fn duplicate_tensor(name: &str) -> FerryError {
    FerryError::DuplicateField {
        place: "inputs".into(),
        field: name.into(),
    }
}

/// A request field tensor's elements (flattened), shape and datatype.
pub(crate) type Tensor = (Vec<Json>, Vec<u64>, String);

/// A tensor's shape, as non-negative integers.
fn shape_of(t: &Json, name: &str) -> Result<Vec<u64>, FerryError> {
    let bad = |what: &str| shape(&format!("input tensor '{name}': {what}"));
    t.get("shape")
        .and_then(Json::as_array)
        .ok_or_else(|| bad("no shape"))?
        .iter()
        .map(Json::as_u64)
        .collect::<Option<_>>()
        .ok_or_else(|| bad("shape must be non-negative integers"))
}

/// JSON tensor data flattened (row-major JSON may nest rows).
fn flatten(data: &[Json]) -> Vec<Json> {
    let mut out = Vec::with_capacity(data.len());
    for v in data {
        match v {
            Json::Array(inner) => out.extend(flatten(inner)),
            other => out.push(other.clone()),
        }
    }
    out
}

/// The canonical ids of one entity tensor, checked against its datatype and shape; `binary`
/// is its data when it came in the binary part.
fn id_column(
    t: &Json,
    binary: Option<&[u8]>,
    name: &str,
    kind: KeyKind,
    route: &Route,
) -> Result<Vec<String>, FerryError> {
    let bad = |what: String| shape(&format!("input tensor '{name}': {what}"));
    let datatype = t.get("datatype").and_then(Json::as_str).unwrap_or("");
    let dims: Vec<u64> = match t.get("shape").and_then(Json::as_array) {
        Some(s) => s
            .iter()
            .map(Json::as_u64)
            .collect::<Option<_>>()
            .ok_or_else(|| bad("shape must be non-negative integers".into()))?,
        None => return Err(bad("no shape".into())),
    };
    let n = id_count(datatype, &dims, name, kind, route)?;
    let values = match binary {
        Some(data) => binary::ids(data, datatype, n)
            .map_err(|why| FerryError::BadFraming(format!("input tensor '{name}': {why}")))?,
        None => json_ids(t, n).map_err(bad)?,
    };
    canonical_ids(&values, name, kind)
}

/// The entity keys of a request whose ids come in named tensors, in request order (one per
/// route part for each entity); `column(name, kind)` gives the canonical ids of the tensor
/// named `name`. Every tensor must hold the same number of ids.
pub(crate) fn tensor_keys(
    route: &Route,
    mut column: impl FnMut(&str, KeyKind) -> Result<Vec<String>, FerryError>,
) -> Result<Vec<String>, FerryError> {
    // Every part's id columns first: the count comes from whichever part has a key (a keyless
    // part, e.g. a service of request fields only beside a keyed one, has no column).
    let mut part_columns: Vec<Vec<Vec<String>>> = Vec::with_capacity(route.parts.len());
    let mut n = None;
    for p in &route.parts {
        let mut columns: Vec<Vec<String>> = Vec::with_capacity(p.entity_fields.len());
        for (name, key) in p.entity_fields.iter().zip(&p.service.entity_keys) {
            let column = column(name, key.kind)?;
            let want = *n.get_or_insert(column.len());
            if column.len() != want {
                return Err(shape(&format!(
                    "entity tensors hold {want} and {} ids: they must match",
                    column.len()
                )));
            }
            columns.push(column);
        }
        part_columns.push(columns);
    }
    let n = n.unwrap_or(0);
    let mut keys = Vec::with_capacity(n * part_columns.len());
    for i in 0..n {
        for columns in &part_columns {
            let parts: Vec<&str> = columns
                .iter()
                .filter_map(|c| c.get(i).map(String::as_str))
                .collect();
            keys.push(ferry_protos::entity_key(&parts));
        }
    }
    Ok(keys)
}

/// How many ids an entity tensor of this datatype and shape holds: `BYTES` for string keys,
/// `INT64` (or `INT32`) for integer keys, shape `[N]` or `[N, 1]`, N within the route's limit.
pub(crate) fn id_count(
    datatype: &str,
    dims: &[u64],
    name: &str,
    kind: KeyKind,
    route: &Route,
) -> Result<usize, FerryError> {
    let bad = |what: String| shape(&format!("input tensor '{name}': {what}"));
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
    match dims {
        // The declared u64 itself: saturated to a 32-bit usize first, the Wasm build would
        // name another count in its refusal than the native one.
        [n] | [n, 1] => declared::entities(*n, route),
        _ => Err(bad(format!("shape must be [N] or [N, 1], got {dims:?}"))),
    }
}

/// The canonical form of each id of the tensor `name` (`None`: not UTF-8), by the id rules.
pub(crate) fn canonical_ids(
    values: &[Option<Json>],
    name: &str,
    kind: KeyKind,
) -> Result<Vec<String>, FerryError> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let part = match v {
                Some(v) => entity::entity_part(v, kind),
                None => Err("id is not valid UTF-8".to_string()),
            };
            part.map_err(|reason| FerryError::InvalidEntityId {
                place: format!("input tensor '{name}'[{i}]"),
                reason,
            })
        })
        .collect()
}

/// The `n` ids of an entity tensor's JSON `data`, flat or nested.
fn json_ids(t: &Json, n: usize) -> Result<Vec<Option<Json>>, String> {
    let data = t
        .get("data")
        .and_then(Json::as_array)
        .ok_or_else(|| "no data array".to_string())?;
    // Row-major JSON may nest [N, 1] as [[a], [b]].
    let flat: Vec<Option<Json>> = data
        .iter()
        .flat_map(|v| match v {
            Json::Array(inner) => inner.iter().cloned().map(Some).collect::<Vec<_>>(),
            other => vec![Some(other.clone())],
        })
        .collect();
    if flat.len() != n {
        return Err(format!("shape says {n} ids, data has {}", flat.len()));
    }
    Ok(flat)
}

/// The request with the features: appended as JSON tensors (after the client's, whose binary
/// data is kept as it came), the client's tensors under Ferry's names dropped (with their
/// binary data), and the statuses in `parameters`.
pub fn rewrite(
    mut req: ParsedRequest,
    route: &Route,
    packed: bool,
    features: Vec<EntityFeatures>,
) -> Result<Rewritten, FerryError> {
    let tensors = if packed {
        vec![features::packed_tensor(route, &features)]
    } else {
        features::feature_tensors(route, &features)?
    };
    let statuses: Vec<Json> = features
        .iter()
        .map(|f| Json::Object(metadata::not_present(route, f)))
        .collect();
    let bin = &req.binary;
    let mut kept_binary = Vec::with_capacity(bin.bytes.len());
    if let Some(Json::Array(inputs)) = req.doc.get_mut("inputs") {
        let ours = |t: &Json| {
            let name = t.get("name").and_then(Json::as_str).unwrap_or("");
            name == PACKED_TENSOR || route.output_names.iter().any(|o| o == name)
        };
        // Binary data lies in input order: dropping an input drops its range.
        let sent = std::mem::take(inputs);
        for (i, t) in sent.into_iter().enumerate() {
            if ours(&t) {
                continue;
            }
            if let Some(r) = bin.ranges.get(i).cloned().flatten() {
                kept_binary.extend_from_slice(&bin.bytes[r]);
            }
            inputs.push(t);
        }
        inputs.extend(tensors);
    }
    set_parameters(&mut req.doc, route, statuses);
    let header = document::write_document(&Json::Object(req.doc), req.spellings)?;
    let header_length = req.binary.framed.then_some(header.len());
    Ok(Rewritten {
        body: binary::join(header, &kept_binary),
        header_length,
    })
}

/// Ferry's request parameters: service, fingerprint and statuses. OIP parameters are scalars:
/// the statuses travel as a compact JSON string.
fn set_parameters(doc: &mut Map<String, Json>, route: &Route, statuses: Vec<Json>) {
    let params = doc
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
        if !route.derived.version_label.is_empty() {
            p.insert(
                "ferry_derived_version".into(),
                Json::from(route.derived.version_label.as_str()),
            );
        }
    }
}
