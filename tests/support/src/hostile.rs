//! Issue #31's hostile shapes, one table for the format tests (core) and the matrix through
//! real Envoy (integration): row counts a keyless tensor may claim with no data behind them, and
//! the gRPC request that claims one.

use ferry_protos::inference::model_infer_request::InferInputTensor;
use ferry_protos::inference::{InferTensorContents, ModelInferRequest};
use prost::Message;

/// Row counts a tensor claims (with a label for case names): 2^32-1 (past `u32`), 2^35 and
/// 2^62 (past any memory). Each must be refused before anything of that size is allocated.
pub const HUGE_ROWS: [(&str, i64); 3] = [
    ("2^32-1", (1 << 32) - 1),
    ("2^35", 1 << 35),
    ("2^62", 1 << 62),
];

/// A `ModelInferRequest` for `model` whose one FP64 tensor `field` claims `shape` and carries
/// no contents, encoded (not yet gRPC-framed).
pub fn shape_without_contents(model: &str, field: &str, shape: Vec<i64>) -> Vec<u8> {
    ModelInferRequest {
        model_name: model.into(),
        inputs: vec![InferInputTensor {
            name: field.into(),
            datatype: "FP64".into(),
            shape,
            contents: Some(InferTensorContents::default()),
            ..Default::default()
        }],
        ..Default::default()
    }
    .encode_to_vec()
}
