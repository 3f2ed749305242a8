//! The `kserve_v2_grpc` target: Triton `ModelInfer` bodies (a gRPC message prefix and a
//! `ModelInferRequest`) to `parse` → `rewrite` through the format dispatcher, as the filter
//! calls them.
//!
//! Properties, beyond the keys every format keeps (`check_keys`):
//! - the rewrite is one uncompressed gRPC message whose prefix states its length, and it decodes
//!   as a `ModelInferRequest` that parses again to the same keys;
//! - the client's inputs not under Ferry's names come first, unchanged and in order, with their
//!   raw contents (worked out here from the input, not from the filter);
//! - after them come Ferry's tensors, each once, in the route's order (the packed tensor alone
//!   on a packed route), one row per entity, in the client's representation (raw contents of
//!   the datatype's size, or typed contents); so no client tensor is left under a Ferry name;
//! - `ferry_service` and `ferry_fingerprint` are the route's, `ferry_statuses` a JSON array
//!   of one object per entity; every other parameter is the client's.

use std::collections::BTreeMap;

use ferry_core::config::{Format, Route};
use ferry_core::format::kserve_v2::PACKED_TENSOR;
use ferry_core::format::{self, kserve_v2_grpc};
use ferry_protos::inference::infer_parameter::ParameterChoice;
use ferry_protos::inference::model_infer_request::InferInputTensor;
use ferry_protos::inference::{InferParameter, ModelInferRequest};
use prost::Message;
use serde_json::Value as Json;

use super::{check_keys, features, seed};

/// A KServe v2 JSON tensor's `data`, flattened one level (rows of a 2-D tensor run on).
pub fn tensor_data(tensor: &Json) -> Vec<&Json> {
    tensor["data"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|v| v.as_array().map_or(vec![v], |inner| inner.iter().collect()))
        .collect()
}

/// Puts the KServe v2 document `doc`'s `parameters` on `r`, each value as `choice` makes it.
pub fn set_parameters(
    r: &mut ModelInferRequest,
    doc: &Json,
    choice: impl Fn(&Json) -> ParameterChoice,
) {
    for (k, v) in doc["parameters"].as_object().into_iter().flatten() {
        r.parameters.insert(
            k.clone(),
            InferParameter {
                parameter_choice: Some(choice(v)),
            },
        );
    }
}

/// `r` as one uncompressed gRPC message: the flag byte, the length, the message.
pub fn framed(r: &ModelInferRequest) -> Vec<u8> {
    let message = r.encode_to_vec();
    let mut out = vec![0];
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(&message);
    out
}

pub fn check(data: &[u8], route: &Route) {
    let Ok(req) = format::parse(data, route, None) else {
        return;
    };
    let ids = req.keys().to_vec();
    let entities = check_keys(route, &ids);
    let sent = decode(data, "the client's body parsed, yet");
    let out = match format::rewrite(req, route, features(route, entities, seed(data))) {
        Ok(out) => out,
        Err(_) => return,
    };
    assert!(
        out.headers.is_empty(),
        "a gRPC rewrite sets headers: {:?}",
        out.headers
    );
    let body = out.body.unwrap_or_default();
    let got = decode(&body, "the rewrite");
    let kept = check_client_inputs(&sent, &got, route);
    check_ferry_tensors(&got, kept, route, entities);
    check_parameters(&sent.parameters, &got.parameters, route, entities);
    match format::parse(&body, route, None) {
        Ok(again) => assert_eq!(again.keys(), ids.as_slice(), "entities changed"),
        Err(e) => panic!(
            "the rewritten body is no longer a request ({})",
            e.message()
        ),
    }
}

/// The one `ModelInferRequest` of a framed body; a panic naming `who` if it is none.
fn decode(body: &[u8], who: &str) -> ModelInferRequest {
    let message = match kserve_v2_grpc::unframe(body) {
        Ok(m) => m,
        Err(e) => panic!("{who}: not one gRPC message ({})", e.message()),
    };
    match ModelInferRequest::decode(message) {
        Ok(r) => r,
        Err(e) => panic!("{who}: not a ModelInferRequest ({e})"),
    }
}

fn ours(route: &Route, name: &str) -> bool {
    name == PACKED_TENSOR || route.output_names.iter().any(|o| o == name)
}

/// The client's inputs not under Ferry's names lead the rewrite unchanged, with their raw
/// contents in raw mode; returns how many.
fn check_client_inputs(sent: &ModelInferRequest, got: &ModelInferRequest, route: &Route) -> usize {
    let raw = !sent.raw_input_contents.is_empty();
    let kept: Vec<(&InferInputTensor, Option<&Vec<u8>>)> = sent
        .inputs
        .iter()
        .zip((0..).map(|i| sent.raw_input_contents.get(i)))
        .filter(|(t, _)| !ours(route, &t.name))
        .collect();
    let n = kept.len();
    assert!(
        got.inputs.len() >= n,
        "{} inputs in the rewrite for {n} of the client's kept",
        got.inputs.len()
    );
    for (i, (t, data)) in kept.iter().enumerate() {
        // As encoded: a NaN in the contents is not equal to itself.
        assert_eq!(
            got.inputs[i].encode_to_vec(),
            t.encode_to_vec(),
            "the client's input {i} changed: {t:?} became {:?}",
            got.inputs[i]
        );
        if raw {
            assert_eq!(
                got.raw_input_contents.get(i),
                *data,
                "the raw contents of the client's input {} changed",
                t.name
            );
        }
    }
    if raw {
        assert_eq!(
            got.raw_input_contents.len(),
            got.inputs.len(),
            "raw mode: one raw entry per input"
        );
    } else {
        assert!(
            got.raw_input_contents.is_empty(),
            "typed contents in, raw contents out"
        );
    }
    n
}

/// After the client's inputs: Ferry's tensors, each once, in the route's order.
fn check_ferry_tensors(got: &ModelInferRequest, kept: usize, route: &Route, entities: usize) {
    let packed = matches!(route.format, Format::KserveV2Grpc { packed: true });
    let want: Vec<&str> = if packed {
        vec![PACKED_TENSOR]
    } else {
        route.output_names.iter().map(String::as_str).collect()
    };
    let appended: Vec<&str> = got.inputs[kept..].iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        appended, want,
        "after the client's inputs, Ferry's tensors in order, each once"
    );
    let raw = !got.raw_input_contents.is_empty();
    for (i, t) in got.inputs.iter().enumerate().skip(kept) {
        let rows = usize::try_from(t.shape.first().copied().unwrap_or(-1)).ok();
        assert_eq!(rows, Some(entities), "{}: shape {:?}", t.name, t.shape);
        if !raw {
            assert!(t.contents.is_some(), "{}: no typed contents", t.name);
            continue;
        }
        assert!(t.contents.is_none(), "{}: contents in raw mode", t.name);
        let size = match t.datatype.as_str() {
            "BOOL" => Some(1),
            "INT32" | "FP32" => Some(4),
            "INT64" | "FP64" => Some(8),
            _ => None,
        };
        if let Some(size) = size {
            let elements: i64 = t.shape.iter().product();
            let len = got.raw_input_contents[i].len();
            assert_eq!(
                i64::try_from(len).ok(),
                Some(elements * size),
                "{}: {len} raw bytes for shape {:?} of {}",
                t.name,
                t.shape,
                t.datatype
            );
        }
    }
}

fn string_param(p: &BTreeMap<String, InferParameter>, name: &str) -> String {
    match p.get(name).and_then(|v| v.parameter_choice.as_ref()) {
        Some(ParameterChoice::StringParam(s)) => s.clone(),
        other => panic!("parameter {name}: {other:?}"),
    }
}

/// Ferry's three parameters hold the route's values; the client's others are kept.
fn check_parameters(
    sent: &BTreeMap<String, InferParameter>,
    got: &BTreeMap<String, InferParameter>,
    route: &Route,
    entities: usize,
) {
    const FERRY: [&str; 3] = ["ferry_service", "ferry_fingerprint", "ferry_statuses"];
    assert_eq!(string_param(got, FERRY[0]), route.services_label);
    assert_eq!(string_param(got, FERRY[1]), route.fingerprints_label);
    let statuses = string_param(got, FERRY[2]);
    match serde_json::from_str::<Json>(&statuses) {
        Ok(Json::Array(a)) if a.len() == entities && a.iter().all(Json::is_object) => {}
        _ => panic!("ferry_statuses for {entities} entities: {statuses}"),
    }
    let others = |p: &BTreeMap<String, InferParameter>| {
        let mut p = p.clone();
        p.retain(|k, _| !FERRY.contains(&k.as_str()));
        p
    };
    let encoded = |p: BTreeMap<String, InferParameter>| -> Vec<(String, Vec<u8>)> {
        p.into_iter().map(|(k, v)| (k, v.encode_to_vec())).collect()
    };
    assert_eq!(
        encoded(others(got)),
        encoded(others(sent)),
        "the client's parameters changed"
    );
}
