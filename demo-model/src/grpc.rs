//! The demo model's gRPC side: `inference.GRPCInferenceService/ModelInfer` (KServe v2 / Triton)
//! over h2c, on the same port as the HTTP echo. It answers with what it received: one output
//! per input (name, datatype, shape, parameters, contents), the raw input contents as raw output
//! contents, and the request's parameters, so a gRPC client sees the request Ferry enriched.

use std::convert::Infallible;

use bytes::Bytes;
use ferry_protos::inference::model_infer_response::InferOutputTensor;
use ferry_protos::inference::{ModelInferRequest, ModelInferResponse};
use http_body_util::combinators::WithTrailers;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{HeaderMap, Response};
use prost::Message;

/// The path gRPC clients call ModelInfer at.
pub const MODEL_INFER_PATH: &str = "/inference.GRPCInferenceService/ModelInfer";

/// A gRPC answer: the framed message (or nothing), then trailers with the status.
pub type GrpcBody =
    WithTrailers<Full<Bytes>, std::future::Ready<Option<Result<HeaderMap, Infallible>>>>;

/// The echo of one ModelInfer call.
pub async fn model_infer(body: Incoming) -> Response<GrpcBody> {
    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return status(13, &format!("reading the request: {e}"), Bytes::new()),
    };
    match decode(&bytes) {
        Ok(request) => status(0, "", frame(&echo(request).encode_to_vec())),
        Err(why) => status(3, &why, Bytes::new()),
    }
}

/// The one message of a unary, uncompressed gRPC request.
fn decode(body: &[u8]) -> Result<ModelInferRequest, String> {
    let Some(([flag, l0, l1, l2, l3], message)) = body.split_first_chunk::<5>() else {
        return Err("no gRPC message prefix".into());
    };
    let len = u32::from_be_bytes([*l0, *l1, *l2, *l3]);
    if *flag != 0 || usize::try_from(len).ok() != Some(message.len()) {
        return Err(format!(
            "expected one uncompressed message, got flag {flag}, length {len}, {} bytes",
            message.len()
        ));
    }
    ModelInferRequest::decode(message).map_err(|e| format!("not a ModelInferRequest: {e}"))
}

/// Outputs = the inputs, raw outputs = the raw inputs, parameters = the request's.
pub fn echo(request: ModelInferRequest) -> ModelInferResponse {
    ModelInferResponse {
        model_name: request.model_name,
        model_version: request.model_version,
        id: request.id,
        parameters: request.parameters,
        outputs: request
            .inputs
            .into_iter()
            .map(|t| InferOutputTensor {
                name: t.name,
                datatype: t.datatype,
                shape: t.shape,
                parameters: t.parameters,
                contents: t.contents,
            })
            .collect(),
        raw_output_contents: request.raw_input_contents,
    }
}

fn frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(
        &u32::try_from(message.len())
            .unwrap_or(u32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(message);
    Bytes::from(out)
}

fn status(code: u32, message: &str, body: Bytes) -> Response<GrpcBody> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from(code));
    if let Ok(m) = HeaderValue::from_str(message) {
        if !message.is_empty() {
            trailers.insert("grpc-message", m);
        }
    }
    let body = Full::new(body).with_trailers(std::future::ready(Some(Ok(trailers))));
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}
