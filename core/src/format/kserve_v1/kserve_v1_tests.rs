use super::*;
use crate::config::fixture::{config, route_with};
use ferry_protos::v1 as pb;
use serde_json::json;

fn features(vals: [Json; 3]) -> EntityFeatures {
    EntityFeatures {
        values: crate::values::fvs(&vals),
        statuses: vec![FeatureStatus::Present; 3],
    }
}

#[test]
fn parses_ids_in_order() {
    let c = config();
    let body = br#"{"instances": [{"user_id": "u1", "x": 1}, {"user_id": "u2"}]}"#;
    let p = parse(body, &c.routes[0]).unwrap();
    assert_eq!(p.keys, ["u1", "u2"]);
}

#[test]
fn bad_bodies_are_named() {
    let c = config();
    let r = &c.routes[0];
    let code = |b: &[u8]| parse(b, r).unwrap_err();
    assert!(matches!(code(b"{not json"), FerryError::MalformedJson(_)));
    assert!(matches!(code(b"[1]"), FerryError::BadShape(_)));
    assert!(matches!(
        code(br#"{"inputs": []}"#),
        FerryError::BadShape(_)
    ));
    assert!(matches!(
        code(br#"{"instances": {}}"#),
        FerryError::BadShape(_)
    ));
    assert!(matches!(
        code(br#"{"instances": [1]}"#),
        FerryError::BadShape(_)
    ));
    assert_eq!(code(br#"{"instances": []}"#), FerryError::NoEntities);
    assert_eq!(
        code(br#"{"instances": [{"user_id": "a"}, {"uid": "b"}]}"#),
        FerryError::MissingEntityId {
            place: "instances[1]".into(),
            field: "user_id".into()
        }
    );
    let e = code(br#"{"instances": [{"user_id": 5}]}"#);
    assert_eq!(
        e.message(),
        "instances[0].user_id: expected a string id, got a number"
    );
    let e = code(br#"{"instances": [{"user_id": "a\nb"}]}"#);
    assert_eq!(
        e.message(),
        "instances[0].user_id: id contains the control character U+000A"
    );
    let long = format!(r#"{{"instances": [{{"user_id": "{}"}}]}}"#, "x".repeat(300));
    assert!(matches!(
        code(long.as_bytes()),
        FerryError::InvalidEntityId { .. }
    ));
    let many = format!(
        r#"{{"instances": [{}]}}"#,
        [r#"{"user_id":"u"}"#; 11].join(",")
    );
    assert_eq!(
        code(many.as_bytes()),
        FerryError::TooManyEntities {
            limit: 10,
            count: 11
        }
    );
}

#[test]
fn int64_keys_are_canonical_decimal() {
    let c = crate::config::fixture::int64_ids(pb::Format::KserveV1);
    let p = parse(
        br#"{"instances": [{"user_id": 7}, {"user_id": -3}]}"#,
        &c.routes[0],
    )
    .unwrap();
    assert_eq!(p.keys, ["7", "-3"]);
    let e = parse(br#"{"instances": [{"user_id": 1.5}]}"#, &c.routes[0]).unwrap_err();
    assert!(
        e.message().contains("expected a 64-bit integer id"),
        "{}",
        e.message()
    );
    let e = parse(br#"{"instances": [{"user_id": "7"}]}"#, &c.routes[0]).unwrap_err();
    assert!(e.message().contains("expected an integer id, got a string"));
}

#[test]
fn rewrite_adds_features_keeps_fields_and_overwrites_forgeries() {
    let c = config();
    let r = &c.routes[0];
    let body = br#"{"instances": [{"user_id": "u1", "amount": 12.5, "profile__age": 999}], "ferry": "forged"}"#;
    let p = parse(body, r).unwrap();
    let out = rewrite(p, r, vec![features([json!(42), json!(0.5), json!(3)])]);
    let v: Json = serde_json::from_slice(&out).unwrap();
    assert_eq!(
        v["instances"][0],
        json!({"user_id": "u1", "amount": 12.5, "profile__age": 42, "profile__score": 0.5, "txn__count": 3})
    );
    assert_eq!(
        v["ferry"],
        json!({"service": "scoring", "fingerprint": "123456789abcdef0", "statuses": [{}]})
    );
    // Client field order is kept.
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.starts_with(r#"{"instances":[{"user_id":"u1","amount":12.5,"profile__age":42"#),
        "{s}"
    );
}

#[test]
fn rewrite_reports_non_present_statuses_and_short_names() {
    let c = route_with(|r| r.feature_names = pb::FeatureNames::Short as i32);
    let r = &c.routes[0];
    let p = parse(br#"{"instances": [{"user_id": "u1"}]}"#, r).unwrap();
    let f = EntityFeatures {
        values: crate::values::fvs(&[json!(1), json!(null), json!(null)]),
        statuses: vec![
            FeatureStatus::Present,
            FeatureStatus::NullValue,
            FeatureStatus::OutsideMaxAge,
        ],
    };
    let v: Json = serde_json::from_slice(&rewrite(p, r, vec![f])).unwrap();
    assert_eq!(
        v["instances"][0],
        json!({"user_id": "u1", "age": 1, "score": null, "count": null})
    );
    assert_eq!(
        v["ferry"]["statuses"],
        json!([{"score": "NULL_VALUE", "count": "OUTSIDE_MAX_AGE"}])
    );
}

fn rewritten(body: &str, r: &Route) -> String {
    let p = parse(body.as_bytes(), r).unwrap();
    let n = p.ends.len();
    let f = (0..n)
        .map(|i| features([json!(i), json!(0.5), json!(null)]))
        .collect();
    String::from_utf8(rewrite(p, r, f)).unwrap()
}

#[test]
fn members_ferry_does_not_own_arrive_as_sent() {
    let c = config();
    let r = &c.routes[0];
    let kept = r#""x":1e400,"y":[ -0, 12345678901234567890, 0.30000000000000004 ],"s":"é \"q\" \\ \u00e9 \ud83d\ude00 \/","n":{"a" : {"b":[1.50, 2E5, null, true]}}"#;
    let body = format!(
        r#"{{ "params" : {{"t": 1E5, "k" : "v"}}, "instances": [ {{"user_id":"u1", {kept}}} ], "id":-0.0 }}"#
    );
    let out = rewritten(&body, r);
    let features = r#""profile__age":0,"profile__score":0.5,"txn__count":null"#;
    assert_eq!(
        out,
        format!(
            r#"{{"params":{{"t": 1E5, "k" : "v"}},"instances":[{{"user_id":"u1",{kept},{features}}}],"id":-0.0,"ferry":{{"service":"scoring","fingerprint":"123456789abcdef0","statuses":[{{}}]}}}}"#
        )
    );
}

#[test]
fn escaped_names_are_compared_unescaped() {
    let c = config();
    let r = &c.routes[0];
    // `user\u005fid` is `user_id`; `profile\u005f_age` is a feature's name, `\u0066erry` is
    // `ferry`: dropped like their plain spellings, the other escaped name kept (re-escaped).
    let body =
        r#"{"instances":[{"user\u005fid":"u7","profile\u005f_age":999,"a\"b":1}],"\u0066erry":1}"#;
    let p = parse(body.as_bytes(), r).unwrap();
    assert_eq!(p.keys, ["u7"]);
    let out = rewritten(body, r);
    assert!(
        out.starts_with(r#"{"instances":[{"user_id":"u7","a\"b":1,"profile__age":0,"#),
        "{out}"
    );
    assert_eq!(out.matches("ferry").count(), 1, "{out}");
    assert!(!out.contains("999"), "{out}");
}

#[test]
fn duplicate_members() {
    let c = config();
    let r = &c.routes[0];
    let err = |b: &str| parse(b.as_bytes(), r).unwrap_err();
    // An id given twice: the model might read the other one.
    let e = err(r#"{"instances":[{"user_id":"u1"},{"user_id":"u2","user_id":"u3"}]}"#);
    assert_eq!((e.status(), e.code()), (400, "duplicate_entity_id"));
    assert_eq!(
        e.message(),
        "entity id 'instances[1].user_id' is given more than once; send it exactly once"
    );
    // Escaped or not, it is the same name.
    let e = err(r#"{"instances":[{"user_id":"u1","user\u005fid":"u1"}]}"#);
    assert_eq!(e.code(), "duplicate_entity_id");
    let e = err(r#"{"instances":[{"user_id":"u1"}],"instances":[{"user_id":"u2"}]}"#);
    assert_eq!(
        (e.code(), e.message().as_str()),
        (
            "bad_request_shape",
            "the body has \"instances\" more than once; send it exactly once"
        )
    );
    // Other duplicates go on as sent; forged features and "ferry" are dropped every time.
    let out = rewritten(
        r#"{"k":1,"instances":[{"x":1,"user_id":"u1","x":2,"txn__count":5,"txn__count":6}],"k":2,"ferry":1,"ferry":2}"#,
        r,
    );
    assert!(
        out.starts_with(r#"{"k":1,"instances":[{"x":1,"user_id":"u1","x":2,"profile__age":0,"profile__score":0.5,"txn__count":null}],"k":2,"ferry":{"#),
        "{out}"
    );
}

#[test]
fn malformed_bodies_stay_malformed_json_whatever_their_shape() {
    let c = config();
    let r = &c.routes[0];
    for body in [
        r#"{"instances":[{"user_id":"u1"}], "x": [1,}"#,
        r#"{"instances":[3, {"a":tru}]}"#,
        r#"{"instances":[{"user_id":"u1","x":"\udd00"}]}"#,
        r#"[1, 2"#,
        "{\"instances\":[{\"user_id\":\"u1\",\"x\":\"\u{1}\"}]}",
    ] {
        let e = parse(body.as_bytes(), r).unwrap_err();
        assert_eq!(e.code(), "malformed_json", "{body}: {}", e.message());
    }
    let e = parse(br#"{"instances":[{"user_id":"u1"}, 3]}"#, r).unwrap_err();
    assert_eq!(e.message(), "instances[1] must be a JSON object");
}

/// Instances read in one pass (all objects) or element by element (any other element): the
/// first instance in error is reported, whatever is wrong with the others.
#[test]
fn the_first_instance_in_error_is_reported() {
    let c = config();
    let r = &c.routes[0];
    let message = |body: &str| parse(body.as_bytes(), r).unwrap_err().message();
    assert_eq!(
        message(r#"{"instances":[{"user_id":"u1"},{"x":1},"u3"]}"#),
        "instances[1] has no entity id field 'user_id'",
    );
    assert_eq!(
        message(r#"{"instances":[{"user_id":"u1"},[1],{"x":1}]}"#),
        "instances[1] must be a JSON object",
    );
    assert_eq!(
        message(r#"{"instances":[{"user_id":"u1"},{"user_id":2.5}, 3]}"#),
        "instances[1].user_id: expected a string id, got a number",
    );
    let ok = parse(br#"{"instances":[{"user_id":"u1"},{"user_id":"u2"}]}"#, r).unwrap();
    assert_eq!(ok.keys, ["u1", "u2"]);
}
