//! The feature tensors Ferry appends to a `ModelInferRequest`, as protobuf: one typed tensor per
//! feature (`[N]`, embeddings `[N, D]`) or one packed FP32 tensor `[N, F]`, the same choices and
//! null rules as the JSON format (a null is its type's zero). Each is written in the request's
//! own representation: typed `contents`, or raw little-endian bytes when the client sent
//! `raw_input_contents`.

use ferry_protos::inference::model_infer_request::InferInputTensor;
use ferry_protos::inference::InferTensorContents;
use ferry_protos::v1::value::Kind;
use ferry_protos::v1::ValueType;

use crate::config::Route;
use crate::error::FerryError;
use crate::format::kserve_v2::{features, PACKED_TENSOR};
use crate::vector::EntityFeatures;

/// One tensor's data, typed.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Column {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bytes(Vec<Vec<u8>>),
}

impl Column {
    fn datatype(&self) -> &'static str {
        match self {
            Column::Bool(_) => "BOOL",
            Column::I32(_) => "INT32",
            Column::I64(_) => "INT64",
            Column::F32(_) => "FP32",
            Column::F64(_) => "FP64",
            Column::Bytes(_) => "BYTES",
        }
    }

    /// The data as the protocol's typed contents.
    fn contents(self) -> InferTensorContents {
        let mut c = InferTensorContents::default();
        match self {
            Column::Bool(v) => c.bool_contents = v,
            Column::I32(v) => c.int_contents = v,
            Column::I64(v) => c.int64_contents = v,
            Column::F32(v) => c.fp32_contents = v,
            Column::F64(v) => c.fp64_contents = v,
            Column::Bytes(v) => c.bytes_contents = v,
        }
        c
    }

    /// The data as raw bytes: little-endian numbers, BOOL one byte, BYTES elements each
    /// a 4-byte little-endian length and the bytes.
    fn raw(&self) -> Vec<u8> {
        match self {
            Column::Bool(v) => v.iter().map(|b| u8::from(*b)).collect(),
            Column::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Column::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Column::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Column::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Column::Bytes(v) => {
                let mut out = Vec::with_capacity(v.iter().map(|e| e.len() + 4).sum());
                for e in v {
                    let len = u32::try_from(e.len()).unwrap_or(u32::MAX);
                    out.extend_from_slice(&len.to_le_bytes());
                    out.extend_from_slice(e);
                }
                out
            }
        }
    }
}

/// A tensor to append: its input message (without data) and its data.
pub(super) struct Tensor {
    pub name: String,
    pub shape: Vec<i64>,
    pub data: Column,
}

impl Tensor {
    /// The input tensor and, in raw mode, its raw contents.
    pub(super) fn into_input(self, raw: bool) -> (InferInputTensor, Option<Vec<u8>>) {
        let mut t = InferInputTensor {
            name: self.name,
            datatype: self.data.datatype().into(),
            shape: self.shape,
            ..Default::default()
        };
        if raw {
            return (t, Some(self.data.raw()));
        }
        t.contents = Some(self.data.contents());
        (t, None)
    }
}

fn dim(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A feature value as a number for the packed FP32 tensor (bools as 0/1, null as 0).
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

/// One FP32 tensor `[N, F]` of every entity's features.
pub(super) fn packed(route: &Route, features: &[EntityFeatures]) -> Tensor {
    let data = features
        .iter()
        .flat_map(|f| f.values.iter().map(|v| as_f32(v.as_ref())))
        .collect();
    Tensor {
        name: PACKED_TENSOR.into(),
        shape: vec![dim(features.len()), dim(route.feature_count)],
        data: Column::F32(data),
    }
}

/// One typed tensor per feature.
pub(super) fn per_feature(
    route: &Route,
    features: &[EntityFeatures],
) -> Result<Vec<Tensor>, FerryError> {
    let n = features.len();
    features::per_feature(route, |j, name, t| {
        let column: Vec<Option<&Kind>> = features
            .iter()
            .map(|e| e.values.get(j).and_then(Option::as_ref))
            .collect();
        let (shape, data) = if t == ValueType::Float32List {
            embedding(name, &column)?
        } else {
            (vec![dim(n)], scalar_column(t, &column))
        };
        Ok(Tensor {
            name: name.to_owned(),
            shape,
            data,
        })
    })
}

/// A scalar feature's values in its type's column; a null is the type's zero (numbers are
/// taken in any numeric kind, as the JSON formats write them).
fn scalar_column(t: ValueType, column: &[Option<&Kind>]) -> Column {
    fn map<T>(column: &[Option<&Kind>], f: fn(Option<&Kind>) -> T) -> Vec<T> {
        column.iter().map(|v| f(*v)).collect()
    }
    match t {
        ValueType::Int32 => Column::I32(map(column, |v| match v {
            Some(Kind::Int32Val(i)) => *i,
            Some(Kind::Int64Val(i)) => i32::try_from(*i).unwrap_or(0),
            _ => 0,
        })),
        ValueType::Int64 => Column::I64(map(column, |v| match v {
            Some(Kind::Int64Val(i)) => *i,
            Some(Kind::Int32Val(i)) => i64::from(*i),
            _ => 0,
        })),
        ValueType::Float64 => Column::F64(map(column, |v| match v {
            Some(Kind::DoubleVal(d)) => *d,
            other => f64::from(as_f32(other)),
        })),
        ValueType::Bool => Column::Bool(map(column, |v| matches!(v, Some(Kind::BoolVal(true))))),
        ValueType::String | ValueType::Bytes => Column::Bytes(map(column, |v| match v {
            Some(Kind::StringVal(s)) => s.as_bytes().to_vec(),
            Some(Kind::BytesVal(b)) => b.clone(),
            _ => Vec::new(),
        })),
        ValueType::Float32 | ValueType::Float32List | ValueType::Unspecified => {
            Column::F32(map(column, as_f32))
        }
    }
}

/// An embedding feature as `[N, D]` FP32: every list of one batch has the same length D; a
/// null is D zeros.
fn embedding(name: &str, column: &[Option<&Kind>]) -> Result<(Vec<i64>, Column), FerryError> {
    let lists: Vec<Option<&Vec<f32>>> = column
        .iter()
        .map(|v| match v {
            Some(Kind::FloatListVal(l)) => Some(&l.values),
            _ => None,
        })
        .collect();
    let d = features::embedding_width(name, lists.iter().flatten().map(|l| l.len()))?;
    let data = lists
        .into_iter()
        .flat_map(|l| l.cloned().unwrap_or_else(|| vec![0.0; d]))
        .collect();
    Ok((vec![dim(column.len()), dim(d)], Column::F32(data)))
}
