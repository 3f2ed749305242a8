//! ABI tests of the generic JSON format: entities are the object, or the array of objects, at
//! the route's `entity_pointer`; each entity's features are written as one object at its
//! `inject_pointer` (replacing what the client put there) or merged into the entity itself;
//! the metadata goes to the document's `ferry` field. Policies: `format_policies`.

use ferry_protos::v1 as pb;
use ferry_test_support::snapshot::key;
use ferry_wasm_host::{Action, Host, Stream};
use prost::Message;
use serde_json::{json, Value as Json};

use super::support::*;

pub const JSON_PATH: &str = "/score/fraud";

/// The fixture's route, speaking generic JSON on `/score/fraud` with these pointers.
pub fn json_route(entity_pointer: &str, inject_pointer: &str) -> impl FnOnce(&mut pb::Route) {
    let (at, inject) = (entity_pointer.to_string(), inject_pointer.to_string());
    move |r: &mut pb::Route| {
        r.format = pb::Format::Json as i32;
        r.r#match = Some(pb::RouteMatch {
            path_prefix: JSON_PATH.into(),
            path_exact: String::new(),
            ..Default::default()
        });
        r.entity_pointer = at;
        r.inject_pointer = inject;
    }
}

fn send(host: &Host, body: &Json) -> Stream {
    let s = host.stream();
    let bytes = serde_json::to_vec(body).unwrap();
    assert_eq!(
        post(&s, JSON_PATH, &bytes),
        (Action::Pause, Action::Pause),
        "log:\n{}",
        host.log_text()
    );
    s
}

fn features(age: i64) -> Json {
    json!({"profile__age": age, "profile__score": 0.25, "txn__count": 9})
}

fn metadata(statuses: Json) -> Json {
    json!({"service": "scoring", "fingerprint": FP_HEX, "statuses": statuses})
}

#[test]
fn json_array_of_entities_gets_a_features_object_each() {
    let host = host_with(&snapshot_with(json_route("/payload/users", "/features")));
    let body = json!({
        "payload": {
            "users": [
                {"user_id": "u1", "x": 1, "features": {"forged": 1, "profile__age": 999}},
                {"user_id": "u2", "features": "not an object"},
                {"user_id": "u3"},
            ],
            "k": "kept",
        },
        "ferry": "forged",
        "other": [1, 2],
    });
    let s = send(&host, &body);
    assert_eq!(asked_keys(&host, &s), ["u1", "u2", "u3"]);
    answer(
        &host,
        &s,
        vec![
            good_vector(30, NOW_US),
            good_vector(41, NOW_US),
            good_vector(52, NOW_US),
        ],
    );
    assert!(s.resumed(), "log:\n{}", host.log_text());
    let v = body_json(&s);
    assert_eq!(
        v,
        json!({
            "payload": {
                "users": [
                    {"user_id": "u1", "x": 1, "features": features(30)},
                    {"user_id": "u2", "features": features(41)},
                    {"user_id": "u3", "features": features(52)},
                ],
                "k": "kept",
            },
            "ferry": metadata(json!([{}, {}, {}])),
            "other": [1, 2],
        }),
        "the client's features objects and ferry field are replaced whole, the rest kept"
    );
    assert_summary(&s, 3, 0, 0, "ok");
    assert_clean(&host);
}

#[test]
fn json_single_object_at_the_root_is_merged_in_place() {
    let host = host_with(&snapshot_with(json_route("", "")));
    let body = json!({"user_id": "u1", "amount": 12.5, "profile__age": 999, "txn__count": "x"});
    let s = send(&host, &body);
    assert_eq!(asked_keys(&host, &s), ["u1"]);
    answer(&host, &s, vec![good_vector(30, NOW_US)]);
    let v = body_json(&s);
    assert_eq!(
        v,
        json!({
            "user_id": "u1",
            "amount": 12.5,
            "profile__age": 30,
            "profile__score": 0.25,
            "txn__count": 9,
            "ferry": metadata(json!([{}])),
        }),
        "the client's fields under feature names are overwritten"
    );
    assert_summary(&s, 1, 0, 0, "ok");
    assert_clean(&host);
}

#[test]
fn json_single_object_at_a_pointer_with_a_nested_inject_pointer() {
    let host = host_with(&snapshot_with(json_route("/request/user", "/ctx/feat~1v1")));
    let body = json!({
        "request": {"user": {"user_id": "u1", "ctx": "not an object"}, "n": 1},
        "model": "m",
    });
    let s = send(&host, &body);
    assert_eq!(asked_keys(&host, &s), ["u1"]);
    answer(&host, &s, vec![good_vector(7, NOW_US)]);
    let v = body_json(&s);
    assert_eq!(
        v,
        json!({
            "request": {
                "user": {"user_id": "u1", "ctx": {"feat/v1": features(7)}},
                "n": 1,
            },
            "model": "m",
            "ferry": metadata(json!([{}])),
        }),
        "intermediate members are created (replacing a non-object), ~1 is /"
    );
    assert_clean(&host);
}

#[test]
fn json_array_at_the_root_is_enriched_without_metadata() {
    let host = host_with(&snapshot_with(json_route("", "/f")));
    let body = json!([{"user_id": "u1"}, {"user_id": "u2", "f": {"forged": true}}]);
    let s = send(&host, &body);
    answer(
        &host,
        &s,
        vec![good_vector(1, NOW_US), good_vector(2, NOW_US)],
    );
    assert_eq!(
        body_json(&s),
        json!([
            {"user_id": "u1", "f": features(1)},
            {"user_id": "u2", "f": features(2)},
        ]),
        "a root array has no place for the metadata"
    );
    assert_summary(&s, 2, 0, 0, "ok");
    assert_clean(&host);
}

#[test]
fn json_composite_entity_keys_from_two_fields() {
    let mut snap = snapshot_with(json_route("/users", "/features"));
    snap.services[0]
        .entity_keys
        .push(key("merchant_id", pb::ValueType::Int64));
    snap.routes[0].entity_fields = vec!["uid".into(), "merchant".into()];
    let host = host_with(&snap);
    let body = json!({"users": [{"uid": "u1", "merchant": 42}, {"uid": "u2", "merchant": -7}]});
    let s = send(&host, &body);
    let sep = ferry_protos::ENTITY_KEY_SEPARATOR;
    assert_eq!(
        asked_keys(&host, &s),
        [format!("u1{sep}42"), format!("u2{sep}-7")]
    );
    answer(
        &host,
        &s,
        vec![good_vector(1, NOW_US), good_vector(2, NOW_US)],
    );
    assert_eq!(body_json(&s)["users"][1]["features"], features(2));

    for (body, code) in [
        (json!({"users": [{"uid": "u1"}]}), "missing_entity_id"),
        (
            json!({"users": [{"uid": "u1", "merchant": "42"}]}),
            "invalid_entity_id",
        ),
        (
            json!({"users": [{"uid": "u1", "merchant": 4.2}]}),
            "invalid_entity_id",
        ),
    ] {
        let s = host.stream();
        post(&s, JSON_PATH, body.to_string().as_bytes());
        let err = assert_error(&s, 400, code, "fraud");
        assert_says(&err, "/users/0");
    }
    assert_eq!(host.dispatched_calls().len(), 1);
    assert_clean(&host);
}

#[test]
fn json_bad_documents_are_answered_without_a_reader_call() {
    let host = host_with(&snapshot_with(json_route("/users", "/features")));
    let many: Vec<Json> = (0..11)
        .map(|i| json!({"user_id": format!("u{i}")}))
        .collect();
    let cases: Vec<(String, u32, &str)> = vec![
        ("{\"users\": [".into(), 400, "malformed_json"),
        (r#"{"people": []}"#.into(), 400, "bad_request_shape"),
        (r#"{"users": "u1"}"#.into(), 400, "bad_request_shape"),
        (
            r#"{"users": [{"user_id": "u1"}, 3]}"#.into(),
            400,
            "bad_request_shape",
        ),
        (r#"[{"user_id": "u1"}]"#.into(), 400, "bad_request_shape"),
        (
            r#"{"users": [{"uid": "u1"}]}"#.into(),
            400,
            "missing_entity_id",
        ),
        (
            r#"{"users": [{"user_id": 7}]}"#.into(),
            400,
            "invalid_entity_id",
        ),
        (
            r#"{"users": [{"user_id": ""}]}"#.into(),
            400,
            "invalid_entity_id",
        ),
        (r#"{"users": []}"#.into(), 400, "no_entities"),
        (json!({"users": many}).to_string(), 413, "too_many_entities"),
    ];
    for (body, status, code) in cases {
        host.note(format!("body: {body}"));
        let s = host.stream();
        assert_eq!(
            post(&s, JSON_PATH, body.as_bytes()),
            (Action::Pause, Action::Pause),
            "{body}"
        );
        assert_error(&s, status, code, "fraud");
    }
    assert!(host.dispatched_calls().is_empty());
    assert_clean(&host);
}

#[test]
fn json_route_with_a_pointer_that_is_not_one_is_refused_at_configure() {
    let host = Host::load_filter();
    for (at, inject) in [("users", "/f"), ("/users", "features")] {
        let snap = snapshot_with(json_route(at, inject));
        assert!(!host.configure(&snap.encode_to_vec()), "{at:?} {inject:?}");
    }
    assert!(
        host.log_text().contains("is not a JSON pointer"),
        "{}",
        host.log_text()
    );
    assert_clean(&host);
}
