//! The matrix's gRPC requests (Triton `ModelInfer`, built with the protocol's generated types)
//! and the demo model's gRPC echo read back. Both sides are turned into the KServe v2 JSON
//! document they stand for (`inputs` with name, datatype, shape, parameters and the data
//! decoded from typed or raw contents; `parameters`; `id`), so the KServe v2 checks of
//! `places` judge them: Ferry's tensors and `ferry_*` parameters against the store, and
//! everything else against what the client sent.

use std::collections::BTreeMap;

use ferry_protos::inference::infer_parameter::ParameterChoice;
use ferry_protos::inference::model_infer_request::InferInputTensor;
use ferry_protos::inference::{
    InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse,
};
use prost::Message;
use serde_json::{json, Map, Value as Json};

/// The path every gRPC `ModelInfer` call is made at.
pub const PATH: &str = "/inference.GRPCInferenceService/ModelInfer";

/// How the client sends its tensors' data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Typed `contents` per tensor.
    Typed,
    /// `raw_input_contents` (what tritonclient's `infer()` sends).
    Raw,
}

/// A tensor's data.
enum Data {
    Bytes(Vec<Vec<u8>>),
    F32(Vec<f32>),
    I64(Vec<i64>),
}

/// A request under construction.
pub struct Call {
    request: ModelInferRequest,
    mode: Mode,
}

impl Call {
    pub fn new(mode: Mode) -> Call {
        let mut request = ModelInferRequest {
            model_name: "fraud".into(),
            id: "req-1".into(),
            ..Default::default()
        };
        request
            .parameters
            .insert("client".into(), string_param("kept"));
        Call { request, mode }
    }

    fn tensor(mut self, name: &str, shape: Vec<i64>, data: Data) -> Call {
        let (datatype, contents, raw) = match data {
            Data::Bytes(v) => {
                let mut raw = Vec::new();
                for e in &v {
                    raw.extend_from_slice(&u32::try_from(e.len()).unwrap().to_le_bytes());
                    raw.extend_from_slice(e);
                }
                let c = InferTensorContents {
                    bytes_contents: v,
                    ..Default::default()
                };
                ("BYTES", c, raw)
            }
            Data::F32(v) => {
                let raw = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                let c = InferTensorContents {
                    fp32_contents: v,
                    ..Default::default()
                };
                ("FP32", c, raw)
            }
            Data::I64(v) => {
                let raw = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                let c = InferTensorContents {
                    int64_contents: v,
                    ..Default::default()
                };
                ("INT64", c, raw)
            }
        };
        let mut t = InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape,
            ..Default::default()
        };
        match self.mode {
            Mode::Typed => t.contents = Some(contents),
            Mode::Raw => self.request.raw_input_contents.push(raw),
        }
        self.request.inputs.push(t);
        self
    }

    /// A `user_id` BYTES tensor `[N]`.
    pub fn ids(self, ids: &[&str]) -> Call {
        let n = len(ids.len());
        let data = ids.iter().map(|u| u.as_bytes().to_vec()).collect();
        self.tensor("user_id", vec![n], Data::Bytes(data))
    }

    /// A `merchant_id` INT64 tensor `[N]`.
    pub fn merchants(self, ids: &[i64]) -> Call {
        self.tensor("merchant_id", vec![len(ids.len())], Data::I64(ids.to_vec()))
    }

    /// The client's own FP32 `amount` tensor `[N]`.
    pub fn amount(self, n: usize) -> Call {
        self.tensor("amount", vec![len(n)], Data::F32(vec![1.5; n]))
    }

    /// Ferry's three parameters, forged.
    pub fn forged_parameters(mut self) -> Call {
        for (name, value) in [
            ("ferry_statuses", "[]"),
            ("ferry_service", "forged"),
            ("ferry_fingerprint", "forged"),
        ] {
            self.request
                .parameters
                .insert(name.into(), string_param(value));
        }
        self
    }

    /// Tensors under two of Ferry's feature names (of the route's service), FP32 and INT64.
    pub fn forged_tensors(self, [float, int]: [&str; 2]) -> Call {
        self.tensor(float, vec![1], Data::F32(vec![850.0])).tensor(
            int,
            vec![1],
            Data::I64(vec![99]),
        )
    }

    /// The framed body.
    pub fn body(&self) -> Vec<u8> {
        frame(&self.request.encode_to_vec())
    }
}

fn len(n: usize) -> i64 {
    i64::try_from(n).unwrap()
}

fn string_param(s: &str) -> InferParameter {
    InferParameter {
        parameter_choice: Some(ParameterChoice::StringParam(s.into())),
    }
}

/// A typed request of the client's amount and `ids`.
pub fn request(ids: &[&str], mode: Mode) -> Vec<u8> {
    Call::new(mode).amount(ids.len()).ids(ids).body()
}

/// A request for `ids` whose gRPC prefix says `flag` (1: compressed) and a length `extra`
/// bytes over the message's.
pub fn misframed(ids: &[&str], flag: u8, extra: u32) -> Vec<u8> {
    let mut body = request(ids, Mode::Typed);
    body[0] = flag;
    let n = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) + extra;
    body[1..5].copy_from_slice(&n.to_be_bytes());
    body
}

/// A request with one `user_id` tensor per element of `tensors`.
pub fn id_tensors(tensors: &[&[&str]]) -> Vec<u8> {
    tensors
        .iter()
        .fold(Call::new(Mode::Typed), |c, ids| c.ids(ids))
        .body()
}

fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = vec![0];
    out.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    out.extend_from_slice(message);
    out
}

fn unframe(body: &[u8]) -> Result<&[u8], String> {
    let (prefix, message) = body
        .split_first_chunk::<5>()
        .ok_or_else(|| format!("{} bytes: no gRPC message prefix", body.len()))?;
    let n = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    if prefix[0] != 0 || usize::try_from(n).ok() != Some(message.len()) {
        return Err(format!(
            "not one uncompressed message: flag {}, length {n}, {} bytes",
            prefix[0],
            message.len()
        ));
    }
    Ok(message)
}

/// The client's request as a KServe v2 JSON document.
pub fn request_json(body: &[u8]) -> Result<Json, String> {
    let r = ModelInferRequest::decode(unframe(body)?).map_err(|e| e.to_string())?;
    let inputs = r
        .inputs
        .iter()
        .map(|t| (&t.name, &t.datatype, &t.shape, &t.parameters, &t.contents));
    document(
        inputs,
        &r.raw_input_contents,
        &r.parameters,
        (&r.model_name, &r.id),
    )
}

/// What the demo model says it received (its echo: outputs = inputs), as a KServe v2 JSON
/// document.
pub fn echo_json(body: &[u8]) -> Result<Json, String> {
    let r = ModelInferResponse::decode(unframe(body)?).map_err(|e| e.to_string())?;
    let outputs = r
        .outputs
        .iter()
        .map(|t| (&t.name, &t.datatype, &t.shape, &t.parameters, &t.contents));
    document(
        outputs,
        &r.raw_output_contents,
        &r.parameters,
        (&r.model_name, &r.id),
    )
}

type Tensor<'a> = (
    &'a String,
    &'a String,
    &'a Vec<i64>,
    &'a BTreeMap<String, InferParameter>,
    &'a Option<InferTensorContents>,
);

fn document<'a>(
    tensors: impl Iterator<Item = Tensor<'a>>,
    raw: &[Vec<u8>],
    parameters: &BTreeMap<String, InferParameter>,
    (model, id): (&str, &str),
) -> Result<Json, String> {
    let mut inputs = Vec::new();
    for (i, (name, datatype, shape, params, contents)) in tensors.enumerate() {
        let data = match (raw.get(i), contents) {
            (Some(bytes), None) => raw_data(datatype, bytes)?,
            (None, Some(c)) if raw.is_empty() => typed_data(datatype, c)?,
            (None, None) if raw.is_empty() => Vec::new(),
            _ => return Err(format!("tensor {name}: raw and typed contents mixed")),
        };
        inputs.push(json!({
            "name": name, "datatype": datatype, "shape": shape,
            "parameters": params_json(params), "data": data,
        }));
    }
    if !raw.is_empty() && raw.len() != inputs.len() {
        return Err(format!(
            "{} raw contents for {} tensors",
            raw.len(),
            inputs.len()
        ));
    }
    Ok(json!({
        "model_name": model, "id": id, "inputs": inputs, "parameters": params_json(parameters),
    }))
}

fn params_json(p: &BTreeMap<String, InferParameter>) -> Json {
    let map: Map<String, Json> = p
        .iter()
        .map(|(k, v)| {
            let v = match &v.parameter_choice {
                Some(ParameterChoice::BoolParam(b)) => json!(b),
                Some(ParameterChoice::Int64Param(i)) => json!(i),
                Some(ParameterChoice::StringParam(s)) => json!(s),
                Some(ParameterChoice::DoubleParam(d)) => json!(d),
                Some(ParameterChoice::Uint64Param(u)) => json!(u),
                None => Json::Null,
            };
            (k.clone(), v)
        })
        .collect();
    Json::Object(map)
}

fn typed_data(datatype: &str, c: &InferTensorContents) -> Result<Vec<Json>, String> {
    Ok(match datatype {
        "BOOL" => c.bool_contents.iter().map(|b| json!(b)).collect(),
        "INT32" => c.int_contents.iter().map(|i| json!(i)).collect(),
        "INT64" => c.int64_contents.iter().map(|i| json!(i)).collect(),
        "FP32" => c
            .fp32_contents
            .iter()
            .map(|f| json!(f64::from(*f)))
            .collect(),
        "FP64" => c.fp64_contents.iter().map(|f| json!(f)).collect(),
        "BYTES" => c
            .bytes_contents
            .iter()
            .map(|b| json!(String::from_utf8_lossy(b)))
            .collect(),
        other => return Err(format!("datatype {other}")),
    })
}

fn raw_data(datatype: &str, raw: &[u8]) -> Result<Vec<Json>, String> {
    let fixed = |size: usize, f: &dyn Fn(&[u8]) -> Json| -> Result<Vec<Json>, String> {
        if !raw.len().is_multiple_of(size) {
            return Err(format!("{} raw bytes of {datatype}", raw.len()));
        }
        Ok(raw.chunks(size).map(f).collect())
    };
    match datatype {
        "BOOL" => fixed(1, &|b| json!(b[0] != 0)),
        "INT32" => fixed(4, &|b| json!(i32::from_le_bytes(b.try_into().unwrap()))),
        "INT64" => fixed(8, &|b| json!(i64::from_le_bytes(b.try_into().unwrap()))),
        "FP32" => fixed(4, &|b| {
            json!(f64::from(f32::from_le_bytes(b.try_into().unwrap())))
        }),
        "FP64" => fixed(8, &|b| json!(f64::from_le_bytes(b.try_into().unwrap()))),
        "BYTES" => {
            let mut out = Vec::new();
            let mut rest = raw;
            while let Some((len, after)) = rest.split_first_chunk::<4>() {
                let n = u32::from_le_bytes(*len) as usize;
                let (e, after) = after
                    .split_at_checked(n)
                    .ok_or("a BYTES element past the raw contents")?;
                out.push(json!(String::from_utf8_lossy(e)));
                rest = after;
            }
            if !rest.is_empty() {
                return Err("raw BYTES contents end mid-length".into());
            }
            Ok(out)
        }
        other => Err(format!("datatype {other}")),
    }
}
