//! KServe v2 / Triton `ModelInfer` over gRPC (`inference.GRPCInferenceService/ModelInfer`): the
//! body is one length-prefixed `ModelInferRequest`. Entity ids come from named input tensors
//! (`BYTES`, or `INT64`/`INT32`, shape `[N]` or `[N, 1]`) in either representation: typed
//! `contents`, or `raw_input_contents` (what Triton's own clients send). Features are appended
//! as input tensors in the request's representation, one per feature or one packed FP32
//! tensor, with the statuses in the request parameter `ferry_statuses`, as the JSON format
//! does. Input tensors the client sent under Ferry's names are dropped (with their raw data).
//! Errors are answered as gRPC statuses (`FerryError::grpc_status`), not JSON.

mod tensors;
#[cfg(test)]
#[path = "kserve_v2_grpc_tests.rs"]
mod tests;

use ferry_protos::inference::infer_parameter::ParameterChoice;
use ferry_protos::inference::model_infer_request::InferInputTensor;
use ferry_protos::inference::{InferParameter, ModelInferRequest};
use prost::Message;
use serde_json::Value as Json;

use super::document::shape;
use super::kserve_v2::{self, binary, PACKED_TENSOR};
use super::metadata;
use super::request_fields;
use crate::config::{KeyKind, Route, RouteField};
use crate::error::FerryError;
use crate::vector::EntityFeatures;

/// The gRPC message prefix: a compressed flag and a 4-byte big-endian length.
const PREFIX: usize = 5;

#[derive(Debug)]
pub struct ParsedRequest {
    request: ModelInferRequest,
    pub keys: Vec<String>,
    /// The request fields of each instance, from the tensors of their names.
    pub fields: request_fields::Fields,
}

impl ParsedRequest {
    /// Whether the client sent its tensors' data as `raw_input_contents`.
    fn raw(&self) -> bool {
        !self.request.raw_input_contents.is_empty()
    }
}

/// The one message of a unary gRPC request body.
pub fn unframe(body: &[u8]) -> Result<&[u8], FerryError> {
    let bad = |m: String| FerryError::BadFraming(m);
    let Some((prefix, message)) = body.split_first_chunk::<PREFIX>() else {
        return Err(bad(format!(
            "the body ({} bytes) is shorter than a gRPC message prefix",
            body.len()
        )));
    };
    if prefix[0] != 0 {
        return Err(bad(
            "the gRPC message is compressed; Ferry reads uncompressed ModelInfer requests".into(),
        ));
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    if usize::try_from(len).ok() != Some(message.len()) {
        return Err(bad(format!(
            "the gRPC message prefix says {len} bytes, the body holds {} after it \
             (ModelInfer is unary: exactly one message)",
            message.len()
        )));
    }
    Ok(message)
}

/// `message` with its gRPC prefix (uncompressed).
pub fn frame(message: &[u8]) -> Vec<u8> {
    let len = u32::try_from(message.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(PREFIX + message.len());
    out.push(0);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(message);
    out
}

pub fn parse(body: &[u8], route: &Route) -> Result<ParsedRequest, FerryError> {
    let request = ModelInferRequest::decode(unframe(body)?)
        .map_err(|e| FerryError::MalformedProtobuf(format!("ModelInferRequest: {e}")))?;
    let raw = &request.raw_input_contents;
    if !raw.is_empty() {
        if raw.len() != request.inputs.len() {
            return Err(shape(&format!(
                "raw_input_contents has {} entries for {} inputs: it needs one per input",
                raw.len(),
                request.inputs.len()
            )));
        }
        if let Some(t) = request.inputs.iter().find(|t| t.contents.is_some()) {
            return Err(shape(&format!(
                "input tensor '{}' has contents, but the request sends raw_input_contents: \
                 one representation for all inputs",
                t.name
            )));
        }
    }
    let keys = kserve_v2::tensor_keys(route, |name, kind| {
        let mut named = request
            .inputs
            .iter()
            .enumerate()
            .filter(|(_, t)| t.name == name);
        let (at, tensor) = named
            .next()
            .ok_or_else(|| FerryError::MissingEntityTensor { name: name.into() })?;
        // A second tensor of that name could be the one the model reads.
        if named.next().is_some() {
            return Err(FerryError::DuplicateEntityId { field: name.into() });
        }
        id_column(tensor, raw.get(at).map(Vec::as_slice), kind, route)
    })?;
    let (keys, fields) = kserve_v2::with_fields(route, keys, |f| field_tensor(&request, f))?;
    Ok(ParsedRequest {
        request,
        keys,
        fields,
    })
}

/// The tensor holding a request field, as JSON elements: typed `contents` only (Ferry does
/// not read request fields from `raw_input_contents`: refused by name).
fn field_tensor(
    request: &ModelInferRequest,
    f: &RouteField,
) -> Result<Option<kserve_v2::Tensor>, FerryError> {
    let mut named = request.inputs.iter().filter(|t| t.name == f.field);
    let Some(t) = named.next() else {
        return Ok(None);
    };
    if named.next().is_some() {
        return Err(kserve_v2::duplicate_tensor(&f.field));
    }
    let place = || format!("input tensor '{}'", f.field);
    if !request.raw_input_contents.is_empty() {
        let reason = "sent in raw_input_contents, which Ferry does not read for request \
                      fields; send typed contents"
            .to_string();
        return Err(request_fields::invalid(&place, f, reason));
    }
    let c = t.contents.clone().unwrap_or_default();
    let elements: Vec<Json> = match t.datatype.as_str() {
        "BYTES" => c
            .bytes_contents
            .into_iter()
            .map(|b| String::from_utf8(b).map(Json::from))
            .collect::<Result<_, _>>()
            .map_err(|_| request_fields::invalid(&place, f, "not UTF-8".into()))?,
        "BOOL" => c.bool_contents.into_iter().map(Json::from).collect(),
        "FP32" => c.fp32_contents.into_iter().map(Json::from).collect(),
        "FP64" => c.fp64_contents.into_iter().map(Json::from).collect(),
        "INT64" => c.int64_contents.into_iter().map(Json::from).collect(),
        "INT8" | "INT16" | "INT32" => c.int_contents.into_iter().map(Json::from).collect(),
        "UINT64" => c.uint64_contents.into_iter().map(Json::from).collect(),
        _ => c.uint_contents.into_iter().map(Json::from).collect(),
    };
    let dims = dims(t, &f.field)?;
    Ok(Some((elements, dims, t.datatype.clone())))
}

/// A tensor's shape as sizes (input tensor `name`): refused unless every dimension is
/// non-negative.
fn dims(t: &InferInputTensor, name: &str) -> Result<Vec<u64>, FerryError> {
    t.shape
        .iter()
        .map(|d| u64::try_from(*d).ok())
        .collect::<Option<_>>()
        .ok_or_else(|| {
            shape(&format!(
                "input tensor '{name}': shape must be non-negative integers"
            ))
        })
}

/// The canonical ids of one entity tensor; `raw` is its raw contents in raw mode.
fn id_column(
    t: &InferInputTensor,
    raw: Option<&[u8]>,
    kind: KeyKind,
    route: &Route,
) -> Result<Vec<String>, FerryError> {
    let name = t.name.as_str();
    let dims = dims(t, name)?;
    let n = kserve_v2::id_count(&t.datatype, &dims, name, kind, route)?;
    let values = match raw {
        Some(data) => binary::ids(data, &t.datatype, n),
        None => contents_ids(t, n),
    }
    .map_err(|why| shape(&format!("input tensor '{name}': {why}")))?;
    kserve_v2::canonical_ids(&values, name, kind)
}

/// The `n` ids of an entity tensor's typed contents (`None`: not UTF-8).
fn contents_ids(t: &InferInputTensor, n: usize) -> Result<Vec<Option<Json>>, String> {
    let c = t.contents.clone().unwrap_or_default();
    let ids: Vec<Option<Json>> = match t.datatype.as_str() {
        "BYTES" => c
            .bytes_contents
            .into_iter()
            .map(|b| String::from_utf8(b).ok().map(Json::from))
            .collect(),
        "INT32" => c.int_contents.into_iter().map(|i| Some(i.into())).collect(),
        _ => c
            .int64_contents
            .into_iter()
            .map(|i| Some(i.into()))
            .collect(),
    };
    if ids.len() != n {
        return Err(format!(
            "shape says {n} ids, contents has {} {} values",
            ids.len(),
            t.datatype
        ));
    }
    Ok(ids)
}

/// The request with the features appended (the client's tensors under Ferry's names dropped)
/// and Ferry's parameters set, framed for gRPC.
pub fn rewrite(
    req: ParsedRequest,
    route: &Route,
    packed: bool,
    features: Vec<EntityFeatures>,
) -> Result<Vec<u8>, FerryError> {
    let appended = if packed {
        vec![tensors::packed(route, &features)]
    } else {
        tensors::per_feature(route, &features)?
    };
    let raw_mode = req.raw();
    let mut request = req.request;
    let ours = |name: &str| name == PACKED_TENSOR || route.output_names.iter().any(|o| o == name);
    let inputs = std::mem::take(&mut request.inputs);
    let mut raw = std::mem::take(&mut request.raw_input_contents).into_iter();
    for t in inputs {
        // Raw contents lie in input order: dropping an input drops its entry.
        let data = raw.next();
        if ours(&t.name) {
            continue;
        }
        request.inputs.push(t);
        request.raw_input_contents.extend(data);
    }
    for t in appended {
        let (input, data) = t.into_input(raw_mode);
        request.inputs.push(input);
        request.raw_input_contents.extend(data);
    }
    let statuses: Vec<Json> = features
        .iter()
        .map(|f| Json::Object(metadata::not_present(route, f)))
        .collect();
    let string = |s: String| InferParameter {
        parameter_choice: Some(ParameterChoice::StringParam(s)),
    };
    let p = &mut request.parameters;
    p.insert("ferry_service".into(), string(route.services_label.clone()));
    p.insert(
        "ferry_fingerprint".into(),
        string(route.fingerprints_label.clone()),
    );
    p.insert(
        "ferry_statuses".into(),
        string(Json::Array(statuses).to_string()),
    );
    if !route.derived.version_label.is_empty() {
        p.insert(
            "ferry_derived_version".into(),
            string(route.derived.version_label.clone()),
        );
    }
    Ok(frame(&request.encode_to_vec()))
}
