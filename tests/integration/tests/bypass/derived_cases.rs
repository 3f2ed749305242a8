//! Rows for derived (on-demand) features: each format's control, a client's values under the
//! derived names (in the body, and in the features header where the format has one), a request
//! field of the wrong type, and the service of request fields only (no reader call).

use ferry_integration_tests::expected::Entity;
use serde_json::{json, Value as Json};

use crate::case::{get, post, users, Case, FORGED_HEADERS};
use crate::derived::Amount;
use crate::routes::{OD_HEADER, OD_JSON, OD_REQ, OD_V1, OD_V2};

const V1: &str = "/v1/models/od-v1:predict";
const V2: &str = "/v2/models/od-v2/infer";
const JSON_PATH: &str = "/v1/models/od-json";
const HEADER_PATH: &str = "/v1/models/od-header/x";
const REQ: &str = "/v1/models/od-req:predict";

/// Fresh, stale (transactions), without transactions, and unknown to the store.
const USERS: [&str; 4] = ["u000001", "u000007", "u000042", "u999999"];

/// What a client may put under the derived names (and the features header, forged).
fn forged_derived() -> Json {
    json!({"risk__ratio": 999.0, "risk__big": "forged", "req__doubled": 7})
}

fn some(x: f64) -> Amount {
    Some(json!(x))
}

/// The amounts of [`USERS`]' instances: a big one, an integer (a valid float64), small ones.
fn amounts() -> Vec<Amount> {
    vec![some(250.5), some(20.0), some(3.25), some(0.5)]
}

fn v1(ids: &[&str], amounts: &[Amount], extra: &Json) -> String {
    let instances: Vec<Json> = ids
        .iter()
        .zip(amounts)
        .map(|(u, a)| {
            let mut inst = json!({"user_id": u});
            if let Some(a) = a {
                inst["amount"] = a.clone();
            }
            for (k, v) in extra.as_object().into_iter().flatten() {
                inst[k] = v.clone();
            }
            inst
        })
        .collect();
    json!({"instances": instances, "ferry": {"derived_version": "forged"}}).to_string()
}

fn v2(ids: &[&str], amounts: &[f64], forged: bool) -> String {
    let n = ids.len();
    let mut inputs = vec![
        json!({"name": "user_id", "shape": [n], "datatype": "BYTES", "data": ids}),
        json!({"name": "amount", "shape": [n], "datatype": "FP64", "data": amounts}),
    ];
    if forged {
        inputs.push(
            json!({"name": "risk__ratio", "shape": [n], "datatype": "FP64",
                           "data": vec![999.0; n]}),
        );
        inputs.push(
            json!({"name": "risk__big", "shape": [n], "datatype": "BOOL",
                           "data": vec![true; n]}),
        );
    }
    json!({"inputs": inputs, "parameters": {"ferry_derived_version": "forged", "client": 1}})
        .to_string()
}

fn json_body(ids: &[&str], amounts: &[f64], forged: bool) -> String {
    let entities: Vec<Json> = ids
        .iter()
        .zip(amounts)
        .map(|(u, a)| {
            let mut e = json!({"user_id": u, "amount": a});
            if forged {
                e["features"] = forged_derived();
            }
            e
        })
        .collect();
    json!({"batch": {"users": entities}, "ferry": {"derived_version": "forged"}}).to_string()
}

pub fn all() -> Vec<Case> {
    let amounts = amounts();
    let numbers: Vec<f64> = amounts
        .iter()
        .map(|a| a.clone().unwrap().as_f64().unwrap())
        .collect();
    let forged = forged_derived();
    let none = json!({});
    let header_forged = forged_derived().to_string();
    vec![
        post("od v1 control", V1, v1(&USERS, &amounts, &none))
            .enriched(OD_V1, users(&USERS))
            .amounts(amounts.clone()),
        post(
            "od v1 forged derived names",
            V1,
            v1(&USERS, &amounts, &forged),
        )
        .forged_headers()
        .enriched(OD_V1, users(&USERS))
        .amounts(amounts.clone()),
        // A missing and a null request field on users with a fresh average: the derived
        // features are absent with the field's status, whatever the client put under them.
        post(
            "od v1 absent request field, forged",
            V1,
            v1(&["u000001", "u000003"], &[None, Some(Json::Null)], &forged),
        )
        .enriched(OD_V1, users(&["u000001", "u000003"]))
        .amounts(vec![None, Some(Json::Null)]),
        post("od v2 control", V2, v2(&USERS, &numbers, false))
            .enriched(OD_V2, users(&USERS))
            .amounts(amounts.clone()),
        post(
            "od v2 forged derived tensors",
            V2,
            v2(&USERS, &numbers, true),
        )
        .forged_headers()
        .enriched(OD_V2, users(&USERS))
        .amounts(amounts.clone()),
        post(
            "od json forged derived names",
            JSON_PATH,
            json_body(&USERS, &numbers, true),
        )
        .forged_headers()
        .enriched(OD_JSON, users(&USERS))
        .amounts(amounts.clone()),
        get("od header control", HEADER_PATH)
            .header("x-user-id", "u000001")
            .header("amount", "250.5")
            .enriched(OD_HEADER, users(&["u000001"]))
            .amounts(vec![some(250.5)]),
        get("od header forged derived names", HEADER_PATH)
            .header("x-user-id", "u000007")
            .header("amount", "12")
            .header("x-ferry-features", &header_forged)
            .header("x-ferry-derived-version", "forged")
            .enriched(OD_HEADER, users(&["u000007"]))
            .amounts(vec![some(12.0)]),
        // A request field of another type is the client's 400, the model not called.
        post(
            "od v1 request field of the wrong type",
            V1,
            v1(
                &["u000001", "u000003"],
                &[some(1.0), Some(json!("12.5"))],
                &forged,
            ),
        )
        .refused(400, "invalid_request_field"),
        post(
            "od v2 request field tensor of the wrong type",
            V2,
            json!({"inputs": [
                {"name": "user_id", "shape": [1], "datatype": "BYTES", "data": ["u000001"]},
                {"name": "amount", "shape": [1], "datatype": "BYTES", "data": ["12.5"]},
            ]})
            .to_string(),
        )
        .refused(400, "invalid_request_field"),
        post(
            "od json request field of the wrong type",
            JSON_PATH,
            json!({"batch": {"users": [{"user_id": "u000001", "amount": true}]}}).to_string(),
        )
        .refused(400, "invalid_request_field"),
        get("od header request field that is not JSON", HEADER_PATH)
            .header("x-user-id", "u000001")
            .header("amount", "abc")
            .refused(400, "invalid_request_field"),
        req_only(),
        post(
            "od req-only wrong type",
            REQ,
            r#"{"instances":[{"amount":[1.5]}]}"#,
        )
        .no_reader_call()
        .refused(400, "invalid_request_field"),
    ]
    .into_iter()
    .chain(forged_header_variants())
    .collect()
}

/// The service of request fields only: values right, forged names replaced, no reader call.
fn req_only() -> Case {
    let sent = vec![some(2.5), Some(Json::Null), None, some(1e308)];
    let body = json!({"instances": [
        {"amount": 2.5, "req__doubled": 7},
        {"amount": null, "req__doubled": 7},
        {"req__doubled": "forged"},
        {"amount": 1e308},
    ], "ferry": "forged"})
    .to_string();
    // No entity: the instances are counted from the body.
    let entities: Vec<Entity> = (0..sent.len())
        .map(|_| Entity::User(String::new()))
        .collect();
    post("od req-only forged, no reader call", REQ, body)
        .forged_headers()
        .no_reader_call()
        .enriched(OD_REQ, entities)
        .amounts(sent)
}

/// The matrix's forged headers on a derived header route too.
fn forged_header_variants() -> Vec<Case> {
    assert!(FORGED_HEADERS.iter().any(|(n, _)| *n == "x-ferry-features"));
    vec![get("od header route forged headers", HEADER_PATH)
        .header("x-user-id", "u000042")
        .header("amount", "101")
        .forged_headers()
        .enriched(OD_HEADER, users(&["u000042"]))
        .amounts(vec![some(101.0)])]
}
