//! `kserve_v2_grpc` in `bypass`: the scenario's KServe v2 document sent as a framed
//! `ModelInferRequest` (typed contents or raw contents), and what reached the model read back:
//! its ids as a KServe v2 document (for `check::model_keys`), and Ferry's tensors and
//! parameters checked against what Ferry must write, in gRPC's own representation (worked out
//! here from the expected values: raw bytes for strings and bytes, NaN and infinities kept,
//! nulls as their type's zero).

use std::collections::BTreeMap;

use ferry_core::config::{Format, Route};
use ferry_core::format::kserve_v2::PACKED_TENSOR;
use ferry_protos::inference::infer_parameter::ParameterChoice;
use ferry_protos::inference::model_infer_request::InferInputTensor;
use ferry_protos::inference::{InferParameter, InferTensorContents, ModelInferRequest};
use ferry_protos::v1::{value::Kind, ValueType};
use prost::Message;
use serde_json::{json, Value as Json};

use super::expected::Expected;

/// One tensor's data, typed.
#[derive(Debug, Clone)]
pub enum Column {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bytes(Vec<Vec<u8>>),
}

impl Column {
    /// Equal element by element, a NaN equal to a NaN.
    fn same(&self, other: &Column) -> bool {
        fn floats<T: Copy + PartialEq>(a: &[T], b: &[T], nan: fn(T) -> bool) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y || (nan(*x) && nan(*y)))
        }
        match (self, other) {
            (Column::F32(a), Column::F32(b)) => floats(a, b, f32::is_nan),
            (Column::F64(a), Column::F64(b)) => floats(a, b, f64::is_nan),
            (Column::Bool(a), Column::Bool(b)) => a == b,
            (Column::I32(a), Column::I32(b)) => a == b,
            (Column::I64(a), Column::I64(b)) => a == b,
            (Column::Bytes(a), Column::Bytes(b)) => a == b,
            _ => false,
        }
    }
}

/// The scenario's KServe v2 document as the framed `ModelInferRequest` it stands for; in raw
/// mode every tensor's data goes to `raw_input_contents`.
pub fn body(doc: &Json, raw: bool) -> Vec<u8> {
    let mut r = ModelInferRequest {
        model_name: "m".into(),
        ..Default::default()
    };
    for t in doc["inputs"].as_array().into_iter().flatten() {
        let datatype = t["datatype"].as_str().unwrap_or("BYTES");
        let data = crate::grpc::tensor_data(t);
        let column = match datatype {
            "INT64" => Column::I64(data.iter().map(|v| int(v)).collect()),
            "FP32" => Column::F32(
                data.iter()
                    .map(|v| v.as_f64().unwrap_or(0.0) as f32)
                    .collect(),
            ),
            _ => Column::Bytes(data.iter().map(|v| text(v).into_bytes()).collect()),
        };
        let shape = t["shape"]
            .as_array()
            .map(|s| s.iter().filter_map(Json::as_i64).collect())
            .unwrap_or_default();
        let mut input = InferInputTensor {
            name: t["name"].as_str().unwrap_or("").into(),
            datatype: datatype.into(),
            shape,
            ..Default::default()
        };
        if raw {
            r.raw_input_contents.push(raw_of(&column));
        } else {
            input.contents = Some(contents_of(column));
        }
        r.inputs.push(input);
    }
    crate::grpc::set_parameters(&mut r, doc, |v| match v {
        Json::String(s) => ParameterChoice::StringParam(s.clone()),
        Json::Bool(b) => ParameterChoice::BoolParam(*b),
        other => ParameterChoice::DoubleParam(other.as_f64().unwrap_or(0.0)),
    });
    crate::grpc::framed(&r)
}

/// An id for an INT64 tensor (the scenario's wrong-typed ids become numbers gRPC can carry).
fn int(v: &Json) -> i64 {
    v.as_i64()
        .or_else(|| v.as_f64().map(|f| f as i64))
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

fn text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn contents_of(c: Column) -> InferTensorContents {
    let mut out = InferTensorContents::default();
    match c {
        Column::Bool(v) => out.bool_contents = v,
        Column::I32(v) => out.int_contents = v,
        Column::I64(v) => out.int64_contents = v,
        Column::F32(v) => out.fp32_contents = v,
        Column::F64(v) => out.fp64_contents = v,
        Column::Bytes(v) => out.bytes_contents = v,
    }
    out
}

fn raw_of(c: &Column) -> Vec<u8> {
    match c {
        Column::Bool(v) => v.iter().map(|b| u8::from(*b)).collect(),
        Column::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Column::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Column::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Column::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Column::Bytes(v) => v
            .iter()
            .flat_map(|e| {
                let len = u32::try_from(e.len()).unwrap_or(u32::MAX).to_le_bytes();
                len.into_iter().chain(e.iter().copied())
            })
            .collect(),
    }
}

/// What reached the model: one uncompressed gRPC message holding a `ModelInferRequest`.
pub fn decode(body: &[u8]) -> ModelInferRequest {
    let Some((prefix, message)) = body.split_first_chunk::<5>() else {
        panic!("the forwarded gRPC body has no message prefix: {body:?}");
    };
    let n = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    assert!(
        prefix[0] == 0 && usize::try_from(n).ok() == Some(message.len()),
        "the forwarded gRPC prefix says flag {} length {n} for {} bytes",
        prefix[0],
        message.len()
    );
    ModelInferRequest::decode(message)
        .unwrap_or_else(|e| panic!("the forwarded body is not a ModelInferRequest ({e})"))
}

/// A tensor's data, from its typed contents or its raw contents (`None`: neither decodes).
fn column(t: &InferInputTensor, raw: Option<&Vec<u8>>) -> Option<Column> {
    let Some(raw) = raw else {
        let c = t.contents.clone().unwrap_or_default();
        return Some(match t.datatype.as_str() {
            "BOOL" => Column::Bool(c.bool_contents),
            "INT32" => Column::I32(c.int_contents),
            "INT64" => Column::I64(c.int64_contents),
            "FP32" => Column::F32(c.fp32_contents),
            "FP64" => Column::F64(c.fp64_contents),
            "BYTES" => Column::Bytes(c.bytes_contents),
            _ => return None,
        });
    };
    fn fixed<const N: usize, T>(raw: &[u8], f: fn([u8; N]) -> T) -> Option<Vec<T>> {
        raw.len().is_multiple_of(N).then(|| {
            raw.chunks_exact(N)
                .map(|c| f(c.try_into().unwrap_or([0; N])))
                .collect()
        })
    }
    Some(match t.datatype.as_str() {
        "BOOL" => Column::Bool(raw.iter().map(|b| *b != 0).collect()),
        "INT32" => Column::I32(fixed(raw, i32::from_le_bytes)?),
        "INT64" => Column::I64(fixed(raw, i64::from_le_bytes)?),
        "FP32" => Column::F32(fixed(raw, f32::from_le_bytes)?),
        "FP64" => Column::F64(fixed(raw, f64::from_le_bytes)?),
        "BYTES" => {
            let mut out = Vec::new();
            let mut rest = raw.as_slice();
            while let Some((len, after)) = rest.split_first_chunk::<4>() {
                let (e, after) = after.split_at_checked(u32::from_le_bytes(*len) as usize)?;
                out.push(e.to_vec());
                rest = after;
            }
            if !rest.is_empty() {
                return None;
            }
            Column::Bytes(out)
        }
        _ => return None,
    })
}

/// The forwarded request's inputs as a KServe v2 document's `inputs` (ids: BYTES as text,
/// integers as numbers), for `check::model_keys`.
pub fn as_v2_document(r: &ModelInferRequest) -> Json {
    let raw = !r.raw_input_contents.is_empty();
    let inputs: Vec<Json> = r
        .inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let data: Vec<Json> =
                match column(t, raw.then(|| r.raw_input_contents.get(i)).flatten()) {
                    Some(Column::Bytes(v)) => v
                        .iter()
                        .map(|b| json!(String::from_utf8_lossy(b)))
                        .collect(),
                    Some(Column::I64(v)) => v.iter().map(|x| json!(x)).collect(),
                    Some(Column::I32(v)) => v.iter().map(|x| json!(x)).collect(),
                    _ => Vec::new(),
                };
            json!({"name": t.name, "shape": t.shape, "datatype": t.datatype, "data": data})
        })
        .collect();
    json!({ "inputs": inputs })
}

/// A feature value as the packed FP32 tensor holds it (bools 0/1, anything else 0).
fn as_f32(v: Option<&Kind>) -> f32 {
    match v {
        Some(Kind::Int32Val(i)) => *i as f32,
        Some(Kind::Int64Val(i)) => *i as f32,
        Some(Kind::FloatVal(f)) => *f,
        Some(Kind::DoubleVal(d)) => *d as f32,
        Some(Kind::BoolVal(b)) => f32::from(u8::from(*b)),
        _ => 0.0,
    }
}

/// The tensors Ferry must append: (name, datatype, shape, data); `Err` when it cannot (an
/// embedding's lists differ in length).
fn wanted(route: &Route, want: &Expected, packed: bool) -> Result<Vec<Tensor>, String> {
    let n = want.entities.len() as i64;
    if packed {
        let data = want
            .entities
            .iter()
            .flat_map(|e| e.values.iter().map(|v| as_f32(v.as_ref())))
            .collect();
        let f = route.output_names.len() as i64;
        return Ok(vec![(
            PACKED_TENSOR.into(),
            "FP32",
            vec![n, f],
            Column::F32(data),
        )]);
    }
    let mut out = Vec::new();
    for (j, (name, f)) in route.output_names.iter().zip(route.features()).enumerate() {
        let values: Vec<Option<&Kind>> =
            want.entities.iter().map(|e| e.values[j].as_ref()).collect();
        let tensor = match f.value_type {
            ValueType::Float32List => {
                let lists: Vec<Option<&Vec<f32>>> = values
                    .iter()
                    .map(|v| match v {
                        Some(Kind::FloatListVal(l)) => Some(&l.values),
                        _ => None,
                    })
                    .collect();
                let d = lists.iter().flatten().map(|l| l.len()).next().unwrap_or(0);
                if lists.iter().flatten().any(|l| l.len() != d) {
                    return Err(format!("{name}'s lists differ in length"));
                }
                let data = lists
                    .into_iter()
                    .flat_map(|l| l.cloned().unwrap_or_else(|| vec![0.0; d]))
                    .collect();
                (name.clone(), "FP32", vec![n, d as i64], Column::F32(data))
            }
            t => {
                let (datatype, data) = scalar(t, &values);
                (name.clone(), datatype, vec![n], data)
            }
        };
        out.push(tensor);
    }
    Ok(out)
}

type Tensor = (String, &'static str, Vec<i64>, Column);

/// A scalar feature's column: its values in its type, a null its type's zero.
fn scalar(t: ValueType, values: &[Option<&Kind>]) -> (&'static str, Column) {
    fn each<T>(values: &[Option<&Kind>], f: fn(Option<&Kind>) -> T) -> Vec<T> {
        values.iter().map(|v| f(*v)).collect()
    }
    match t {
        ValueType::Int32 => (
            "INT32",
            Column::I32(each(values, |v| match v {
                Some(Kind::Int32Val(i)) => *i,
                _ => 0,
            })),
        ),
        ValueType::Int64 => (
            "INT64",
            Column::I64(each(values, |v| match v {
                Some(Kind::Int64Val(i)) => *i,
                _ => 0,
            })),
        ),
        ValueType::Float64 => (
            "FP64",
            Column::F64(each(values, |v| match v {
                Some(Kind::DoubleVal(d)) => *d,
                _ => 0.0,
            })),
        ),
        ValueType::Bool => (
            "BOOL",
            Column::Bool(each(values, |v| matches!(v, Some(Kind::BoolVal(true))))),
        ),
        ValueType::String | ValueType::Bytes => (
            "BYTES",
            Column::Bytes(each(values, |v| match v {
                Some(Kind::StringVal(s)) => s.as_bytes().to_vec(),
                Some(Kind::BytesVal(b)) => b.clone(),
                _ => Vec::new(),
            })),
        ),
        _ => (
            "FP32",
            Column::F32(each(values, |v| match v {
                Some(Kind::FloatVal(f)) => *f,
                _ => 0.0,
            })),
        ),
    }
}

fn string_param(p: &BTreeMap<String, InferParameter>, name: &str) -> Option<String> {
    match p.get(name)?.parameter_choice.as_ref()? {
        ParameterChoice::StringParam(s) => Some(s.clone()),
        _ => None,
    }
}

/// Every Ferry-owned place of the forwarded request holds what Ferry wrote: each of its
/// tensors once with the wanted datatype, shape and data (in the request's representation);
/// none of the other kind's (the packed tensor on a typed route, feature tensors on a packed
/// one); `ferry_service`, `ferry_fingerprint`, `ferry_statuses` as Ferry wrote them.
pub fn check_enriched(route: &Route, want: &Expected, r: &ModelInferRequest) {
    let packed = matches!(route.format, Format::KserveV2Grpc { packed: true });
    let raw = !r.raw_input_contents.is_empty();
    if raw {
        assert_eq!(
            r.raw_input_contents.len(),
            r.inputs.len(),
            "raw contents per input"
        );
    }
    let tensors =
        wanted(route, want, packed).unwrap_or_else(|why| panic!("forwarded although {why}"));
    for (name, datatype, shape, data) in &tensors {
        let named: Vec<usize> = (0..r.inputs.len())
            .filter(|i| r.inputs[*i].name == *name)
            .collect();
        assert_eq!(named.len(), 1, "tensors named {name}");
        let t = &r.inputs[named[0]];
        assert_eq!(
            (t.datatype.as_str(), &t.shape),
            (*datatype, shape),
            "tensor {name}"
        );
        let got = column(t, raw.then(|| &r.raw_input_contents[named[0]]));
        assert!(
            got.as_ref().is_some_and(|g| g.same(data)),
            "tensor {name} is {got:?}, Ferry wrote {data:?}"
        );
    }
    let other: Vec<&str> = if packed {
        route.output_names.iter().map(String::as_str).collect()
    } else {
        vec![PACKED_TENSOR]
    };
    for name in other {
        assert!(
            !r.inputs.iter().any(|t| t.name == name),
            "a tensor {name} reaches the model; Ferry wrote none"
        );
    }
    let p = &r.parameters;
    assert_eq!(
        string_param(p, "ferry_service").as_deref(),
        Some(route.services_label.as_str())
    );
    assert_eq!(
        string_param(p, "ferry_fingerprint").as_deref(),
        Some(route.fingerprints_label.as_str())
    );
    let statuses: Json = string_param(p, "ferry_statuses")
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Json::Null);
    let expected = &want.metadata(route)["statuses"];
    assert!(
        super::expected::same(&statuses, expected),
        "ferry_statuses is {statuses}, Ferry wrote {expected}"
    );
}
