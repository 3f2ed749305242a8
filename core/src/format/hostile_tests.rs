//! Issue #31's requests at the format level: sizes a client declares on a keyless route (no
//! entity key: only the request field tensors count the instances), and a value given twice.
//! Each is a 4xx with Ferry's error, never an allocation of what the shape claims.

use ferry_protos::inference::model_infer_request::InferInputTensor;
use ferry_protos::inference::{InferTensorContents, ModelInferRequest};
use ferry_protos::v1 as pb;
use prost::Message;
use serde_json::json;

use super::kserve_v2_grpc;
use crate::config::Config;
use crate::error::FerryError;
use ferry_test_support::hostile::{shape_without_contents, HUGE_ROWS};
use ferry_test_support::on_demand::with_risk;

/// The snapshot's keyless route `req` (the view `req` over the request field `amount`, no
/// entity key) in `format`.
fn keyless(format: pb::Format) -> Config {
    let mut s = with_risk();
    s.routes[1].format = format as i32;
    Config::from_snapshot(s).unwrap()
}

/// The keyed route (`user_id`, and the view `risk` reading the request field `amount`).
fn keyed(format: pb::Format) -> Config {
    let mut s = with_risk();
    s.routes[0].format = format as i32;
    Config::from_snapshot(s).unwrap()
}

fn refused(c: &Config, route: usize, body: &[u8]) -> FerryError {
    super::parse(body, &c.routes[route], None).unwrap_err()
}

/// The row counts of the issue ([`HUGE_ROWS`]: 2^32-1, 2^35, 2^62), sent with empty data.
fn huge_rows() -> impl Iterator<Item = i64> {
    HUGE_ROWS.iter().map(|&(_, rows)| rows)
}

#[test]
fn a_keyless_v2_tensor_claiming_huge_rows_with_no_data_is_413_before_any_allocation() {
    let c = keyless(pb::Format::KserveV2);
    for rows in huge_rows().map(i64::unsigned_abs).chain([u64::MAX]) {
        for shape in [json!([rows]), json!([rows, 1])] {
            let body = json!({"inputs": [
                {"name": "amount", "datatype": "FP64", "shape": shape, "data": []}
            ]});
            let e = refused(&c, 1, body.to_string().as_bytes());
            assert_eq!(
                (e.status(), e.code()),
                (413, "too_many_entities"),
                "{shape}: {e}"
            );
        }
    }
    // Within the limit the rows must still be sent: 3 rows claimed, none given.
    let body =
        json!({"inputs": [{"name": "amount", "datatype": "FP64", "shape": [3], "data": []}]});
    let e = refused(&c, 1, body.to_string().as_bytes());
    assert_eq!(
        (e.status(), e.code()),
        (400, "invalid_request_field"),
        "{e}"
    );
    assert!(e.message().contains("0 elements for shape [3]"), "{e}");
    // And what is right is taken.
    let body =
        json!({"inputs": [{"name": "amount", "datatype": "FP64", "shape": [2], "data": [1.5, 2]}]});
    let parsed = super::parse(body.to_string().as_bytes(), &c.routes[1], None).unwrap();
    assert_eq!(parsed.fields().len(), 2);
    assert_eq!(parsed.keys().len(), 2);
}

#[test]
fn a_keyless_grpc_tensor_claiming_huge_or_negative_rows_is_4xx() {
    let c = keyless(pb::Format::KserveV2Grpc);
    let body =
        |shape: Vec<i64>| kserve_v2_grpc::frame(&shape_without_contents("m", "amount", shape));
    for rows in huge_rows().chain([i64::MAX]) {
        let e = refused(&c, 1, &body(vec![rows]));
        assert_eq!((e.status(), e.code()), (413, "too_many_entities"), "{rows}");
    }
    for shape in [vec![-1], vec![-1, 1], vec![i64::MIN], vec![2, -1]] {
        let e = refused(&c, 1, &body(shape.clone()));
        assert_eq!(
            (e.status(), e.code()),
            (400, "bad_request_shape"),
            "{shape:?}: {e}"
        );
        assert!(e.message().contains("non-negative"), "{e}");
    }
}

#[test]
fn a_list_fields_row_width_is_bounded_before_it_is_used() {
    // `[N, D]` for a float32_list field: D over the list limit, or 0, refused by name.
    let mut s = with_risk();
    s.routes[1].format = pb::Format::KserveV2 as i32;
    s.on_demand_views[0].request[0].r#type = pb::ValueType::Float32List as i32;
    s.on_demand_views[0].features[0].expr = Some(ferry_test_support::on_demand::dbl(1.0));
    let c = Config::from_snapshot(s).unwrap();
    for (shape, code) in [
        (json!([1, 1u64 << 40]), "declared_size_too_large"),
        (json!([1, u64::MAX]), "declared_size_too_large"),
        (json!([u64::MAX, u64::MAX]), "too_many_entities"),
        (json!([2, 0]), "invalid_request_field"),
    ] {
        let body = json!({"inputs": [
            {"name": "amount", "datatype": "FP32", "shape": shape, "data": []}
        ]});
        let e = refused(&c, 1, body.to_string().as_bytes());
        assert_eq!(e.code(), code, "{shape}: {e}");
    }
}

#[test]
fn a_request_field_sent_twice_is_400_in_every_tensor_format() {
    let c = keyed(pb::Format::KserveV2);
    let body = json!({"inputs": [
        {"name": "user_id", "datatype": "BYTES", "shape": [1], "data": ["u1"]},
        {"name": "amount", "datatype": "FP64", "shape": [1], "data": [1]},
        {"name": "amount", "datatype": "FP64", "shape": [1], "data": [5000]}
    ]});
    let e = refused(&c, 0, body.to_string().as_bytes());
    assert_eq!((e.status(), e.code()), (400, "duplicate_field"), "{e}");
    assert!(
        e.message().contains("'amount' is given more than once"),
        "{e}"
    );
    // The keyless route too, where the tensors are all there is.
    let c = keyless(pb::Format::KserveV2);
    let body = json!({"inputs": [
        {"name": "amount", "datatype": "FP64", "shape": [1], "data": [1]},
        {"name": "amount", "datatype": "FP64", "shape": [1], "data": [5000]}
    ]});
    let e = refused(&c, 1, body.to_string().as_bytes());
    assert_eq!(e.code(), "duplicate_field");

    let c = keyed(pb::Format::KserveV2Grpc);
    let tensor = |name: &str, contents: InferTensorContents, datatype: &str| InferInputTensor {
        name: name.into(),
        datatype: datatype.into(),
        shape: vec![1],
        contents: Some(contents),
        ..Default::default()
    };
    let amount = |x: f64| {
        tensor(
            "amount",
            InferTensorContents {
                fp64_contents: vec![x],
                ..Default::default()
            },
            "FP64",
        )
    };
    let id = tensor(
        "user_id",
        InferTensorContents {
            bytes_contents: vec![b"u1".to_vec()],
            ..Default::default()
        },
        "BYTES",
    );
    let m = ModelInferRequest {
        model_name: "m".into(),
        inputs: vec![id, amount(1.0), amount(5000.0)],
        ..Default::default()
    };
    let e = refused(&c, 0, &kserve_v2_grpc::frame(&m.encode_to_vec()));
    assert_eq!((e.status(), e.code()), (400, "duplicate_field"), "{e}");
}

#[test]
fn a_member_given_twice_on_a_json_route_is_400() {
    let c = keyed(pb::Format::Json);
    for body in [
        r#"{"user_id":"u1","user_id":"u2","amount":1}"#,
        r#"{"user_id":"u1","amount":1,"amount":5000}"#,
        r#"{"user_id":"u1","amount":1,"other":{"x":1,"x":2}}"#,
    ] {
        let e = refused(&c, 0, body.as_bytes());
        assert_eq!((e.status(), e.code()), (400, "duplicate_field"), "{body}");
    }
    let ok = super::parse(br#"{"user_id":"u1","amount":1}"#, &c.routes[0], None).unwrap();
    assert_eq!(ok.keys().len(), 1);
}

#[test]
fn a_keyless_main_service_beside_a_keyed_extra_one_counts_by_the_keyed_tensors() {
    // Found by the config-space fuzz target: the keyless part's key list was empty and the
    // keyed part's count indexed into it (a panic: a VM crash in the Wasm build).
    for format in [pb::Format::KserveV2, pb::Format::KserveV2Grpc] {
        let mut s = with_risk();
        s.routes[1].format = format as i32;
        s.routes[1].extra_services = vec![pb::ExtraService {
            service: "scoring".into(),
            entity_fields: vec!["user_id".into()],
        }];
        let c = Config::from_snapshot(s).unwrap();
        let route = &c.routes[1];
        let body = match format {
            pb::Format::KserveV2 => json!({"inputs": [
                {"name": "user_id", "datatype": "BYTES", "shape": [2], "data": ["u1", "u2"]},
                {"name": "amount", "datatype": "FP64", "shape": [2], "data": [1.5, 2.5]}
            ]})
            .to_string()
            .into_bytes(),
            _ => {
                let tensor = |name: &str, datatype: &str, contents| InferInputTensor {
                    name: name.into(),
                    datatype: datatype.into(),
                    shape: vec![2],
                    contents: Some(contents),
                    ..Default::default()
                };
                let m = ModelInferRequest {
                    model_name: "m".into(),
                    inputs: vec![
                        tensor(
                            "user_id",
                            "BYTES",
                            InferTensorContents {
                                bytes_contents: vec![b"u1".to_vec(), b"u2".to_vec()],
                                ..Default::default()
                            },
                        ),
                        tensor(
                            "amount",
                            "FP64",
                            InferTensorContents {
                                fp64_contents: vec![1.5, 2.5],
                                ..Default::default()
                            },
                        ),
                    ],
                    ..Default::default()
                };
                kserve_v2_grpc::frame(&m.encode_to_vec())
            }
        };
        let parsed = super::parse(&body, route, None).unwrap();
        // Two entities, two parts each: the keyless part's key empty, the keyed one's the id.
        assert_eq!(parsed.keys(), ["", "u1", "", "u2"], "{format:?}");
        assert_eq!(
            parsed.fields().len(),
            2 * route.derived.fields.len(),
            "{format:?}"
        );
    }
}
