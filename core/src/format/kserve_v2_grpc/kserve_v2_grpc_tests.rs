//! Tests of the gRPC ModelInfer format: framing, both data representations, the rewrite.

use super::*;
use crate::config::fixture::snapshot;
use crate::config::Config;
use crate::error::grpc;
use ferry_protos::inference::InferTensorContents;
use ferry_protos::v1 as pb;
use serde_json::json;

fn route(packed: bool) -> Config {
    let mut s = snapshot();
    s.routes[0].format = pb::Format::KserveV2Grpc as i32;
    s.routes[0].packed = packed;
    Config::from_snapshot(s).unwrap()
}

fn input(
    name: &str,
    datatype: &str,
    shape: &[i64],
    contents: Option<InferTensorContents>,
) -> InferInputTensor {
    InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: shape.to_vec(),
        contents,
        ..Default::default()
    }
}

fn bytes(ids: &[&str]) -> Option<InferTensorContents> {
    Some(InferTensorContents {
        bytes_contents: ids.iter().map(|s| s.as_bytes().to_vec()).collect(),
        ..Default::default()
    })
}

fn body(req: &ModelInferRequest) -> Vec<u8> {
    frame(&req.encode_to_vec())
}

fn decoded(out: &[u8]) -> ModelInferRequest {
    ModelInferRequest::decode(unframe(out).unwrap()).unwrap()
}

/// Entity 0 has every feature; entity 1 has only the third (age and score NOT_FOUND).
fn two_entities() -> Vec<EntityFeatures> {
    let f = |values: [Json; 3]| EntityFeatures::of_json(&values);
    vec![
        f([json!(30), json!(0.5), json!(2)]),
        f([Json::Null, Json::Null, json!(7)]),
    ]
}

fn element(s: &[u8]) -> Vec<u8> {
    let mut v = (s.len() as u32).to_le_bytes().to_vec();
    v.extend_from_slice(s);
    v
}

#[test]
fn the_length_prefix_must_frame_exactly_one_uncompressed_message() {
    let msg = b"\x0a\x01m";
    let framed = frame(msg);
    assert_eq!(framed[..5], [0, 0, 0, 0, 3]);
    assert_eq!(unframe(&framed).unwrap(), msg);
    let err = |b: &[u8]| unframe(b).unwrap_err();
    assert!(err(&framed[..4])
        .message()
        .contains("shorter than a gRPC message prefix"));
    let mut compressed = framed.clone();
    compressed[0] = 1;
    assert!(err(&compressed).message().contains("compressed"));
    let mut two = framed.clone();
    two.extend(frame(msg));
    let e = err(&two);
    assert_eq!(
        e.message(),
        "the gRPC message prefix says 3 bytes, the body holds 11 after it (ModelInfer is \
         unary: exactly one message)"
    );
    assert_eq!(
        (e.code(), e.grpc_status()),
        ("bad_binary_framing", grpc::INVALID_ARGUMENT)
    );
}

#[test]
fn a_body_that_is_not_a_model_infer_request_is_invalid_argument() {
    let c = route(false);
    let e = parse(&frame(b"\xff\xff\xff"), &c.routes[0]).unwrap_err();
    assert_eq!((e.status(), e.code()), (400, "malformed_protobuf"));
    assert_eq!(e.grpc_status(), grpc::INVALID_ARGUMENT);
    assert!(
        e.message()
            .starts_with("request body is not a valid protobuf message: ModelInferRequest"),
        "{e}"
    );
}

#[test]
fn ids_from_typed_contents_and_from_raw_contents() {
    let c = route(false);
    let r = &c.routes[0];
    let typed = ModelInferRequest {
        inputs: vec![input("user_id", "BYTES", &[2, 1], bytes(&["u1", "u2"]))],
        ..Default::default()
    };
    assert_eq!(parse(&body(&typed), r).unwrap().keys, ["u1", "u2"]);
    let raw = ModelInferRequest {
        inputs: vec![
            input("amount", "FP32", &[2], None),
            input("user_id", "BYTES", &[2], None),
        ],
        raw_input_contents: vec![vec![0; 8], [element(b"u1"), element(b"u2")].concat()],
        ..Default::default()
    };
    assert_eq!(parse(&body(&raw), r).unwrap().keys, ["u1", "u2"]);
}

#[test]
fn int64_ids_in_both_representations() {
    let c = crate::config::fixture::int64_ids(pb::Format::KserveV2Grpc);
    let r = &c.routes[0];
    let typed = ModelInferRequest {
        inputs: vec![input(
            "user_id",
            "INT64",
            &[2],
            Some(InferTensorContents {
                int64_contents: vec![7, -2],
                ..Default::default()
            }),
        )],
        ..Default::default()
    };
    assert_eq!(parse(&body(&typed), r).unwrap().keys, ["7", "-2"]);
    let raw = ModelInferRequest {
        inputs: vec![input("user_id", "INT64", &[2], None)],
        raw_input_contents: vec![[7i64, -2].iter().flat_map(|i| i.to_le_bytes()).collect()],
        ..Default::default()
    };
    assert_eq!(parse(&body(&raw), r).unwrap().keys, ["7", "-2"]);
}

#[test]
fn bad_entity_tensors_are_named() {
    let c = route(false);
    let r = &c.routes[0];
    let msg = |req: ModelInferRequest| parse(&body(&req), r).unwrap_err().message();
    let with = |inputs, raw| ModelInferRequest {
        inputs,
        raw_input_contents: raw,
        ..Default::default()
    };
    assert_eq!(
        msg(with(vec![], vec![])),
        "no input tensor named 'user_id' (it must hold the entity ids)"
    );
    assert_eq!(
        msg(with(vec![input("user_id", "FP32", &[1], None)], vec![])),
        "input tensor 'user_id': datatype must be BYTES, got 'FP32'"
    );
    assert_eq!(
        msg(with(vec![input("user_id", "BYTES", &[-1], None)], vec![])),
        "input tensor 'user_id': shape must be non-negative integers"
    );
    assert_eq!(
        msg(with(
            vec![input("user_id", "BYTES", &[3], bytes(&["u1"]))],
            vec![]
        )),
        "input tensor 'user_id': shape says 3 ids, contents has 1 BYTES values"
    );
    assert_eq!(
        msg(with(
            vec![input("user_id", "BYTES", &[1], None)],
            vec![vec![9, 0, 0, 0, b'u']]
        )),
        "input tensor 'user_id': BYTES element 0 of 9 bytes runs past the end of its tensor \
         (1 bytes left)"
    );
    assert_eq!(
        msg(with(
            vec![
                input("user_id", "BYTES", &[1], None),
                input("x", "FP32", &[1], None)
            ],
            vec![element(b"u1")]
        )),
        "raw_input_contents has 1 entries for 2 inputs: it needs one per input"
    );
    assert!(msg(with(
        vec![input("user_id", "BYTES", &[1], bytes(&["u1"]))],
        vec![element(b"u1")]
    ))
    .contains("one representation for all inputs"));
    let twice = parse(
        &body(&with(
            vec![
                input("user_id", "BYTES", &[1], bytes(&["u1"])),
                input("user_id", "BYTES", &[1], bytes(&["u2"])),
            ],
            vec![],
        )),
        r,
    )
    .unwrap_err();
    assert_eq!(twice.code(), "duplicate_entity_id");
    let many = parse(
        &body(&with(vec![input("user_id", "BYTES", &[11], None)], vec![])),
        r,
    )
    .unwrap_err();
    assert_eq!(
        (many.code(), many.grpc_status()),
        ("too_many_entities", grpc::RESOURCE_EXHAUSTED)
    );
}

#[test]
fn typed_mode_appends_one_typed_tensor_per_feature_and_the_statuses() {
    let c = route(false);
    let r = &c.routes[0];
    let mut params = std::collections::BTreeMap::new();
    params.insert(
        "client".to_string(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::Int64Param(5)),
        },
    );
    let req = ModelInferRequest {
        model_name: "fraud".into(),
        id: "r1".into(),
        parameters: params,
        inputs: vec![
            input("user_id", "BYTES", &[2], bytes(&["u1", "u2"])),
            // Forged: never reaches the model.
            input(
                &r.output_names[0],
                "INT64",
                &[2],
                Some(InferTensorContents {
                    int64_contents: vec![99, 99],
                    ..Default::default()
                }),
            ),
        ],
        ..Default::default()
    };
    let parsed = parse(&body(&req), r).unwrap();
    let out = decoded(&rewrite(parsed, r, false, two_entities()).unwrap());
    let names: Vec<&str> = out.inputs.iter().map(|t| t.name.as_str()).collect();
    let mut want = vec!["user_id"];
    want.extend(r.output_names.iter().map(String::as_str));
    assert_eq!(names, want);
    assert!(out.raw_input_contents.is_empty());
    let c = |i: usize| out.inputs[i].contents.clone().unwrap();
    assert_eq!(
        (
            out.inputs[1].datatype.as_str(),
            out.inputs[1].shape.as_slice()
        ),
        ("INT64", &[2][..])
    );
    assert_eq!(c(1).int64_contents, [30, 0]);
    assert_eq!(out.inputs[2].datatype, "FP32");
    assert_eq!(c(2).fp32_contents, [0.5, 0.0]);
    assert_eq!(c(3).int64_contents, [2, 7]);
    assert_eq!((out.model_name.as_str(), out.id.as_str()), ("fraud", "r1"));
    let p = |k: &str| match &out.parameters[k].parameter_choice {
        Some(ParameterChoice::StringParam(s)) => s.clone(),
        other => format!("{other:?}"),
    };
    assert_eq!(p("client"), "Some(Int64Param(5))");
    assert_eq!(p("ferry_fingerprint"), "123456789abcdef0");
    let statuses: Json = serde_json::from_str(&p("ferry_statuses")).unwrap();
    let (age, score) = (&r.output_names[0], &r.output_names[1]);
    assert_eq!(
        statuses,
        json!([{}, {age: "NOT_FOUND", score: "NOT_FOUND"}])
    );
}

#[test]
fn raw_mode_appends_raw_tensors_and_keeps_the_clients_raw_data_aligned() {
    for packed in [false, true] {
        let c = route(packed);
        let r = &c.routes[0];
        let ids = [element(b"u1"), element(b"u2")].concat();
        let amount: Vec<u8> = [1.5f32, 2.5].iter().flat_map(|f| f.to_le_bytes()).collect();
        let req = ModelInferRequest {
            inputs: vec![
                input("ferry_features", "FP32", &[2, 3], None),
                input("user_id", "BYTES", &[2], None),
                input(&r.output_names[1], "FP32", &[2], None),
                input("amount", "FP32", &[2], None),
            ],
            raw_input_contents: vec![vec![0xAB; 24], ids.clone(), vec![0xCD; 8], amount.clone()],
            ..Default::default()
        };
        let parsed = parse(&body(&req), r).unwrap();
        let out = decoded(&rewrite(parsed, r, packed, two_entities()).unwrap());
        assert_eq!(out.inputs.len(), out.raw_input_contents.len());
        assert!(out.inputs.iter().all(|t| t.contents.is_none()));
        assert_eq!(out.inputs[0].name, "user_id");
        assert_eq!(out.raw_input_contents[0], ids);
        assert_eq!(out.inputs[1].name, "amount");
        assert_eq!(out.raw_input_contents[1], amount);
        let le = |fs: &[f32]| fs.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
        if packed {
            assert_eq!(out.inputs.len(), 3, "packed={packed}");
            assert_eq!(
                (out.inputs[2].name.as_str(), out.inputs[2].shape.as_slice()),
                ("ferry_features", &[2, 3][..])
            );
            assert_eq!(
                out.raw_input_contents[2],
                le(&[30.0, 0.5, 2.0, 0.0, 0.0, 7.0])
            );
        } else {
            assert_eq!(out.inputs.len(), 5, "packed={packed}");
            let longs = |is: &[i64]| is.iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<u8>>();
            assert_eq!(out.raw_input_contents[2], longs(&[30, 0]));
            assert_eq!(out.raw_input_contents[3], le(&[0.5, 0.0]));
            assert_eq!(out.raw_input_contents[4], longs(&[2, 7]));
        }
    }
}

#[test]
fn strings_bools_and_embeddings_in_both_representations() {
    use tensors::Column;
    let strings = Column::Bytes(vec![b"ab".to_vec(), Vec::new()]);
    let (t, raw) = tensors::Tensor {
        name: "s".into(),
        shape: vec![2],
        data: strings,
    }
    .into_input(true);
    assert_eq!(
        (t.datatype.as_str(), raw.unwrap()),
        ("BYTES", [element(b"ab"), element(b"")].concat())
    );
    let (t, raw) = tensors::Tensor {
        name: "b".into(),
        shape: vec![2],
        data: Column::Bool(vec![true, false]),
    }
    .into_input(false);
    assert!(raw.is_none());
    assert_eq!(
        (t.datatype.as_str(), t.contents.unwrap().bool_contents),
        ("BOOL", vec![true, false])
    );
}

#[test]
fn every_error_has_a_grpc_status() {
    use FerryError as E;
    let d = || "x".to_string();
    for (e, want) in [
        (E::MalformedProtobuf(d()), grpc::INVALID_ARGUMENT),
        (
            E::BodyTooLarge { limit: 1, size: 2 },
            grpc::RESOURCE_EXHAUSTED,
        ),
        (E::EntitiesNotFound { ids: vec![d()] }, grpc::NOT_FOUND),
        (
            E::StaleFeatures { ids: vec![d()] },
            grpc::FAILED_PRECONDITION,
        ),
        (E::ReaderUnavailable { detail: d() }, grpc::UNAVAILABLE),
        (E::RedisUnavailable { detail: d() }, grpc::UNAVAILABLE),
        (
            E::ReaderError {
                status: 500,
                detail: d(),
            },
            grpc::UNAVAILABLE,
        ),
        (E::RedisTimeout { detail: d() }, grpc::DEADLINE_EXCEEDED),
        (E::BadVector { detail: d() }, grpc::INTERNAL),
    ] {
        assert_eq!(e.grpc_status(), want, "{e:?}");
    }
}
