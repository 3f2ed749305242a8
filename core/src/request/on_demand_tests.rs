//! On-demand features through the executor: every value and status of the `risk` view per
//! instance (null, missing, stale and guarded inputs, division by zero, an int overflow,
//! `request.time`), client values under derived names replaced, a service of request fields
//! only served without a reader call, the budget, and the request fields of every format.

use std::rc::Rc;

use serde_json::{json, Value as Json};

use super::testing::*;
use super::Action;
use crate::config::Config;
use crate::format::{self, ParsedRequest};
use crate::host::Host;
use crate::metrics::{Metric, Metrics, ALL};
use crate::vector::{EntityFeatures, FeatureStatus};
use ferry_expr::{Absence, Budget, Input, Val};
use ferry_protos::v1::{self as pb, value::Kind};
use ferry_test_support::on_demand::with_risk;
use ferry_test_support::snapshot::FP;
use ferry_test_support::vector::{scoring, vector, NOW_US as NOW};

const NOW_S: i64 = NOW / 1_000_000;

fn risk_config() -> Config {
    Config::from_snapshot(with_risk()).unwrap()
}

/// Metrics whose host ids are their index in [`ALL`], so each can be read back.
fn metrics() -> Rc<Metrics> {
    let mut next = 0;
    Rc::new(Metrics::define(|_, _| {
        next += 1;
        Some(next - 1)
    }))
}

fn counted(f: &super::HttpFilter<crate::host::testing::FakeHost>, m: Metric) -> i64 {
    let id = ALL.iter().position(|(x, _, _)| *x == m).unwrap() as u32;
    f.host().metrics.borrow().get(&id).copied().unwrap_or(0)
}

fn with_metrics(
    mut f: super::HttpFilter<crate::host::testing::FakeHost>,
) -> super::HttpFilter<crate::host::testing::FakeHost> {
    f.metrics = metrics();
    f
}

#[test]
fn every_instance_gets_its_derived_features_and_their_statuses() {
    let body = r#"{"instances":[
        {"user_id":"u1","amount":500,"country":"FR"},
        {"user_id":"u2","amount":1500.5,"country":null},
        {"user_id":"u3","country":"DE"},
        {"user_id":"u4","amount":10.0,"country":"FR","risk__ratio":99,"risk__big":true}]}"#;
    let mut f = with_metrics(filter(risk_config(), "POST", "/v1/models/fraud", body));
    f.on_request_headers(false);
    f.on_request_body(body.len(), true);
    let day = 86_400_000_000;
    let stale = vector(
        FP,
        vec![
            (
                NOW,
                vec![Some(Kind::Int64Val(40)), Some(Kind::FloatVal(4.0))],
            ),
            (NOW - 2 * day, vec![Some(Kind::Int64Val(1))]),
        ],
    );
    reader_ok(
        &f,
        vec![
            scoring(NOW, Some(30), Some(2.0), Some(1)),
            scoring(NOW, Some(31), Some(0.0), Some(2)),
            stale,
            scoring(NOW, Some(33), None, None),
        ],
    );
    let size = f.host().call_body.borrow().len();
    f.on_call_response(7, 3, size);
    let out: Json = serde_json::from_slice(&f.host().body.borrow()).unwrap();
    let i = &out["instances"];
    let st = &out["ferry"]["statuses"];
    // u1: everything present.
    assert_eq!(i[0]["risk__ratio"], json!(250.0));
    assert_eq!(i[0]["risk__big"], json!(false));
    assert_eq!(i[0]["risk__abroad"], json!(false));
    assert_eq!(i[0]["risk__age_at"], json!(NOW_S - 30));
    assert_eq!(i[0]["risk__count_or_zero"], json!(1));
    assert_eq!(i[0]["risk__huge"], json!(1_i64 << 62));
    assert_eq!(st[0], json!({}));
    // u2: a division by zero and an int overflow are INVALID; a null request field NULL_VALUE.
    assert_eq!(i[1]["risk__ratio"], Json::Null);
    assert_eq!(st[1]["risk__ratio"], "INVALID");
    assert_eq!(st[1]["risk__huge"], "INVALID");
    assert_eq!(st[1]["risk__abroad"], "NULL_VALUE");
    assert_eq!(i[1]["risk__big"], json!(true));
    // u3: a missing request field is NOT_FOUND; a stale input OUTSIDE_MAX_AGE, unless guarded.
    assert_eq!(st[2]["risk__ratio"], "NOT_FOUND");
    assert_eq!(st[2]["risk__big"], "NOT_FOUND");
    assert_eq!(st[2]["risk__huge"], "OUTSIDE_MAX_AGE");
    assert_eq!(
        i[2]["risk__count_or_zero"],
        json!(0),
        "has() gives its default"
    );
    assert_eq!(i[2]["risk__abroad"], json!(true));
    // u4: a null stored input is NULL_VALUE; the client's values under derived names are gone.
    assert_eq!(i[3]["risk__ratio"], Json::Null);
    assert_eq!(st[3]["risk__ratio"], "NULL_VALUE");
    assert_eq!(i[3]["risk__big"], json!(false));
    assert_eq!(
        out.to_string().matches("risk__ratio").count(),
        7,
        "once per instance, and in the statuses of u2, u3 and u4"
    );
    assert_eq!(out["ferry"]["derived_version"], "00000000000000aa");
    assert_eq!(out["ferry"]["fingerprint"], "123456789abcdef0");
    assert_eq!(
        f.host().request_header("x-ferry-derived-version"),
        Some("00000000000000aa".into())
    );
    assert_eq!(counted(&f, Metric::DerivedInvalid), 2);
    assert_eq!(counted(&f, Metric::DerivedValues), 6 + 3 + 3 + 4);
    assert_eq!(counted(&f, Metric::DerivedBudgetExhausted), 0);
}

#[test]
fn a_service_of_request_fields_only_makes_no_reader_call() {
    let body = r#"{"instances":[{"amount":2.5},{"amount":null},{"double_amount":7}]}"#;
    let mut f = filter(risk_config(), "POST", "/req", body);
    assert_eq!(f.on_request_headers(false), Action::Pause);
    assert_eq!(f.on_request_body(body.len(), true), Action::Continue);
    assert!(f.host().dispatched.borrow().is_empty(), "no reader call");
    let out: Json = serde_json::from_slice(&f.host().body.borrow()).unwrap();
    assert_eq!(out["instances"][0]["req__double_amount"], json!(5.0));
    assert_eq!(out["instances"][1]["req__double_amount"], Json::Null);
    assert_eq!(out["instances"][2]["req__double_amount"], Json::Null);
    assert_eq!(
        out["ferry"]["statuses"][1]["req__double_amount"],
        "NULL_VALUE"
    );
    assert_eq!(
        out["ferry"]["statuses"][2]["req__double_amount"],
        "NOT_FOUND"
    );
    assert_eq!(
        f.host().request_header("x-ferry-derived-version"),
        Some("00000000000000bb".into())
    );
    assert_eq!(f.host().request_header("x-ferry-missing"), Some("0".into()));

    let body = r#"{"instances":[{"amount":2.5},{"amount":"2.5"}]}"#;
    let mut f = filter(risk_config(), "POST", "/req", body);
    f.on_request_headers(false);
    f.on_request_body(body.len(), true);
    let (status, reply) = sent(&f);
    assert_eq!(status, 400);
    assert_eq!(reply["error"], "invalid_request_field");
    assert_eq!(
        reply["message"],
        "instances[1]: request field 'amount': expected a finite number (float64), got a string"
    );
}

#[test]
fn a_spent_budget_makes_the_rest_invalid() {
    let c = risk_config();
    let route = &c.routes[0];
    let body = r#"{"instances":[{"user_id":"u1","amount":1.0,"country":"FR"},
                                {"user_id":"u2","amount":1.0,"country":"FR"}]}"#;
    let req: ParsedRequest = format::parse(body.as_bytes(), route, None).unwrap();
    let entity = || EntityFeatures {
        values: vec![Some(Kind::Int64Val(1)), Some(Kind::FloatVal(2.0)), None],
        statuses: vec![
            FeatureStatus::Present,
            FeatureStatus::Present,
            FeatureStatus::NotFound,
        ],
    };
    let mut features = vec![entity(), entity()];
    // Enough for the first entity's six features, not for the second's.
    let mut budget = Budget::new(20);
    let counts = super::on_demand::evaluate(route, req.fields(), &mut features, NOW_S, &mut budget);
    assert!(counts.budget_spent);
    assert_eq!(
        features[0].statuses[3..]
            .iter()
            .filter(|s| **s == FeatureStatus::Invalid)
            .count(),
        0
    );
    assert_eq!(features[1].statuses.last(), Some(&FeatureStatus::Invalid));
    assert_eq!(
        counts.invalid + counts.values + 2,
        12,
        "two NOT_FOUND (txn.count)"
    );
}

/// The request fields a route in `format` reads from `body` (or the headers).
fn fields_of(format: pb::Format, body: &str, headers: &[(&str, &str)]) -> Vec<Input<'static>> {
    let mut s = with_risk();
    s.routes[0].format = format as i32;
    let c = Config::from_snapshot(s).unwrap();
    let route = &c.routes[0];
    let parsed = match format {
        pb::Format::Header => format::header::parse(
            |n| headers.iter().find(|h| h.0 == n).map(|h| h.1.to_string()),
            |n| headers.iter().filter(|h| h.0 == n).count(),
            route,
        )
        .map(ParsedRequest::Header),
        pb::Format::FeastRest => format::feast_rest::parse(body.as_bytes(), route, &c)
            .map(|r| ParsedRequest::FeastRest(Box::new(r))),
        _ => format::parse(body.as_bytes(), route, None),
    }
    .unwrap();
    parsed.fields().to_vec()
}

fn amount(x: f64) -> Input<'static> {
    Input::Present(Val::Double(x))
}

fn country(c: &str) -> Input<'static> {
    Input::Present(Val::Str(c.to_string().into()))
}

#[test]
fn every_format_reads_request_fields_where_it_finds_entity_ids() {
    let two = vec![
        amount(1.5),
        country("FR"),
        Input::Absent(Absence::NullValue),
        Input::Absent(Absence::NotFound),
    ];
    let json = r#"[{"user_id":"u1","amount":1.5,"country":"FR"},{"user_id":"u2","amount":null}]"#;
    assert_eq!(fields_of(pb::Format::Json, json, &[]), two);
    let v2 = r#"{"inputs":[{"name":"user_id","shape":[2],"datatype":"BYTES","data":["u1","u2"]},
        {"name":"amount","shape":[2,1],"datatype":"FP64","data":[[1.5],[2]]}]}"#;
    assert_eq!(
        fields_of(pb::Format::KserveV2, v2, &[]),
        [
            amount(1.5),
            Input::Absent(Absence::NotFound),
            amount(2.0),
            Input::Absent(Absence::NotFound)
        ]
    );
    let headers = [("user_id", "u1"), ("amount", "12.5"), ("country", "FR")];
    assert_eq!(
        fields_of(pb::Format::Header, "", &headers),
        [amount(12.5), country("FR")]
    );
    let feast = r#"{"feature_service":"scoring","entities":{"user_id":["u1","u2"],
        "amount":[3,null],"country":["FR","DE"]}}"#;
    assert_eq!(
        fields_of(pb::Format::FeastRest, feast, &[]),
        [
            amount(3.0),
            country("FR"),
            Input::Absent(Absence::NullValue),
            country("DE")
        ]
    );
}

#[test]
fn request_fields_of_the_wrong_type_are_refused_by_name() {
    let refused = |format: pb::Format, body: &str| {
        let mut s = with_risk();
        s.routes[0].format = format as i32;
        let c = Config::from_snapshot(s).unwrap();
        let e = match format {
            pb::Format::FeastRest => format::feast_rest::parse(body.as_bytes(), &c.routes[0], &c)
                .map(|_| ())
                .unwrap_err(),
            _ => format::parse(body.as_bytes(), &c.routes[0], None)
                .map(|_| ())
                .unwrap_err(),
        };
        assert_eq!(e.code(), "invalid_request_field", "{e}");
        e.message()
    };
    assert_eq!(
        refused(pb::Format::Json, r#"{"user_id":"u1","amount":"12"}"#),
        "the body: request field 'amount': expected a finite number (float64), got a string"
    );
    let v2 = r#"{"inputs":[{"name":"user_id","shape":[1],"datatype":"BYTES","data":["u1"]},
        {"name":"amount","shape":[1],"datatype":"BYTES","data":["1.5"]}]}"#;
    assert!(refused(pb::Format::KserveV2, v2).contains("got datatype 'BYTES'"));
    let v2 = r#"{"inputs":[{"name":"user_id","shape":[1],"datatype":"BYTES","data":["u1"]},
        {"name":"amount","shape":[2],"datatype":"FP64","data":[1.5, 2]}]}"#;
    assert!(refused(pb::Format::KserveV2, v2).contains("2 elements for shape [2] and 1 instances"));
    let feast = r#"{"feature_service":"scoring","entities":{"user_id":["u1"],"country":[7]}}"#;
    assert_eq!(
        refused(pb::Format::FeastRest, feast),
        "entities.country[0]: request field 'country': expected a string (string), got the number 7"
    );
    assert!(refused(
        pb::Format::KserveV1,
        r#"{"instances":[{"user_id":"u1","amount":1,"amount":2}]}"#
    )
    .contains("given more than once"));
}

#[test]
fn grpc_reads_typed_contents_and_refuses_raw_ones_by_name() {
    use ferry_protos::inference::{model_infer_request::InferInputTensor, InferTensorContents};
    use prost::Message;
    let mut s = with_risk();
    s.routes[0].format = pb::Format::KserveV2Grpc as i32;
    let c = Config::from_snapshot(s).unwrap();
    let mut m = model_infer("u1");
    m.inputs.push(InferInputTensor {
        name: "amount".into(),
        datatype: "FP64".into(),
        shape: vec![1],
        contents: Some(InferTensorContents {
            fp64_contents: vec![4.5],
            ..Default::default()
        }),
        ..Default::default()
    });
    let body = format::kserve_v2_grpc::frame(&m.encode_to_vec());
    let parsed = format::parse(&body, &c.routes[0], None).unwrap();
    assert_eq!(
        parsed.fields(),
        [amount(4.5), Input::Absent(Absence::NotFound)]
    );

    let mut raw = model_infer("u1");
    raw.inputs[0].contents = None;
    raw.raw_input_contents = vec![
        [2u32.to_le_bytes().as_slice(), b"u1"].concat(),
        4.5f64.to_le_bytes().to_vec(),
    ];
    raw.inputs.push(InferInputTensor {
        name: "amount".into(),
        datatype: "FP64".into(),
        shape: vec![1],
        ..Default::default()
    });
    let body = format::kserve_v2_grpc::frame(&raw.encode_to_vec());
    let e = format::parse(&body, &c.routes[0], None).unwrap_err();
    assert_eq!(e.code(), "invalid_request_field");
    assert!(e.message().contains("raw_input_contents"), "{e}");
}
