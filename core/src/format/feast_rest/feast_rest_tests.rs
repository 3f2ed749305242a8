use super::response::rfc3339;
use super::*;
use crate::request::enrich;
use ferry_protos::v1::{self as pb, ValueType};
use ferry_test_support::snapshot::{merchant, snapshot};
use ferry_test_support::vector::{self as vectors, NOW_US as NOW};
use serde_json::json;

/// The standard snapshot plus `merchant`, its route in `feast_rest` (missing entities null)
/// and reading `scoring` (its service) and `merchant`.
fn feast_config() -> Config {
    let mut s = feast_snapshot();
    s.routes[0].feast_services = vec!["merchant".into()];
    Config::from_snapshot(s).unwrap()
}

/// The same route listing no further service: it reads `scoring` only.
fn feast_snapshot() -> pb::Snapshot {
    let mut s = snapshot();
    s.services.push(merchant(ValueType::String));
    s.routes[0].format = pb::Format::FeastRest as i32;
    s.routes[0].on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
    s
}

#[test]
fn a_service_the_route_does_not_list_is_answered_as_unknown() {
    let c = Config::from_snapshot(feast_snapshot()).unwrap();
    let by_service = r#"{"feature_service":"merchant","entities":{"merchant_id":["m1"]}}"#;
    let (status, body) = err(&c, by_service);
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("FeatureServiceNotFoundException"), "{body}");
    let by_feature = r#"{"features":["mprofile:risk"],"entities":{"merchant_id":["m1"]}}"#;
    let (status, body) = err(&c, by_feature);
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("FeatureViewNotFoundException"), "{body}");
    // Listed, both are served.
    let c = feast_config();
    assert!(parse_str(&c, by_service).is_ok());
}

#[test]
fn feast_services_are_checked_when_the_snapshot_is_compiled() {
    let mut s = feast_snapshot();
    s.routes[0].feast_services = vec!["nope".into()];
    let e = Config::from_snapshot(s).unwrap_err().to_string();
    assert!(e.contains("feast_services: unknown service 'nope'"), "{e}");
    let mut s = feast_snapshot();
    s.routes[0].feast_services = vec!["scoring".into()];
    let e = Config::from_snapshot(s).unwrap_err().to_string();
    assert!(e.contains("listed twice"), "{e}");
    let mut s = snapshot();
    s.services.push(merchant(ValueType::String));
    s.routes[0].feast_services = vec!["merchant".into()];
    let e = Config::from_snapshot(s).unwrap_err().to_string();
    assert!(e.contains("only for a feast_rest route"), "{e}");
}

fn parse_str(c: &Config, body: &str) -> Result<ParsedRequest, FerryError> {
    parse(body.as_bytes(), &c.routes[0], c)
}

/// The answer for `body` given the reader's vectors, as JSON.
fn answer(c: &Config, body: &str, vectors: Vec<Vec<u8>>) -> Json {
    let req = parse_str(c, body).unwrap();
    let route = req.route.clone();
    let out = enrich::enrich(
        &route,
        crate::format::ParsedRequest::FeastRest(Box::new(req)),
        &vectors,
        NOW,
    )
    .unwrap();
    serde_json::from_slice(&out.rewritten.body.unwrap()).unwrap()
}

fn err(c: &Config, body: &str) -> (u16, String) {
    let e = parse_str(c, body).unwrap_err();
    (e.status(), String::from_utf8(e.body("feast")).unwrap())
}

#[test]
fn a_feature_service_answers_column_major_with_the_join_keys_first() {
    let c = feast_config();
    let found = vectors::scoring(NOW - 1_500, Some(30), Some(0.1), Some(4));
    let v = answer(
        &c,
        r#"{"feature_service":"scoring","entities":{"user_id":["u1","nobody"]}}"#,
        vec![found, Vec::new()],
    );
    assert_eq!(
        v["metadata"],
        json!({"feature_names": ["user_id", "age", "score", "count"]})
    );
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert_eq!(
        results[0],
        json!({"values": ["u1", "nobody"], "statuses": ["PRESENT", "PRESENT"],
               "event_timestamps": ["1970-01-01T00:00:00Z", "1970-01-01T00:00:00Z"]})
    );
    // A float32 is the double it widens to, as Feast's JSON writes it.
    assert_eq!(results[2]["values"], json!([0.10000000149011612, null]));
    assert_eq!(results[1]["statuses"], json!(["PRESENT", "NOT_FOUND"]));
    assert_eq!(
        results[3]["event_timestamps"],
        json!([rfc3339(NOW - 1_500), "1970-01-01T00:00:00Z"])
    );
    assert_eq!(
        String::from_utf8(serde_json::to_vec(&v).unwrap()).unwrap()[..11],
        *r#"{"results":"#,
        "Feast's field order"
    );
}

#[test]
fn a_features_list_reads_each_service_once_in_the_order_asked() {
    let c = feast_config();
    let body = r#"{"features":["mprofile:risk","txn:count","profile:age"],
        "entities":{"merchant_id":["m1"],"user_id":["u1"],"other":[5]},"full_feature_names":true}"#;
    let req = parse_str(&c, body).unwrap();
    assert_eq!(req.route.services_label, "merchant,scoring");
    assert_eq!(req.keys, ["m1", "u1"]);
    let v = answer(
        &c,
        body,
        vec![
            vectors::merchant(NOW, 0.5),
            vectors::scoring(NOW, Some(7), Some(1.0), Some(3)),
        ],
    );
    assert_eq!(
        v["metadata"]["feature_names"],
        json!([
            "merchant_id",
            "user_id",
            "mprofile__risk",
            "txn__count",
            "profile__age"
        ]),
        "join keys in the request's order, a column the features do not need left out"
    );
    let values: Vec<&Json> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["values"][0])
        .collect();
    assert_eq!(
        values,
        [
            &json!("m1"),
            &json!("u1"),
            &json!(0.5),
            &json!(3),
            &json!(7)
        ]
    );
}

#[test]
fn event_times_are_written_as_protobuf_json_timestamps() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(
        rfc3339(1_795_921_980_735_877),
        "2026-11-29T03:13:00.735877Z"
    );
    assert_eq!(rfc3339(1_795_921_980_735_000), "2026-11-29T03:13:00.735Z");
    assert_eq!(rfc3339(951_782_400_000_000), "2000-02-29T00:00:00Z");
    assert_eq!(rfc3339(-1), "1969-12-31T23:59:59.999999Z");
}

/// Each refusal with Feast 0.67's status and body (`feast serve`'s own, recorded).
#[test]
fn refusals_are_feasts() {
    let c = feast_config();
    let e = |b: &str| err(&c, b);
    let one = r#""entities":{"user_id":["u1"]}"#;
    assert_eq!(
        e(&format!(r#"{{"feature_service":"nope",{one}}}"#)),
        (404, r#""{\"module\": \"feast.errors\", \"class\": \"FeatureServiceNotFoundException\", \"message\": \"Feature service nope does not exist in project banking\"}""#.into())
    );
    assert_eq!(
        e(&format!(r#"{{"features":["nope:x"],{one}}}"#)),
        (404, r#""{\"module\": \"feast.errors\", \"class\": \"FeatureViewNotFoundException\", \"message\": \"Feature view nope does not exist in project banking\"}""#.into())
    );
    assert_eq!(
        e(&format!(r#"{{"features":["profile:nope"],{one}}}"#)),
        (
            500,
            r#""'Feature nope not found in projection profile'""#.into()
        )
    );
    assert_eq!(
        e(&format!(r#"{{"features":["profile"],{one}}}"#)),
        (500, r#""Invalid feature reference 'profile'. Expected format: '<feature_view>:<feature>' or '<feature_view>@<version>:<feature>'""#.into())
    );
    assert_eq!(
        e(&format!("{{{one}}}")),
        (500, r#""No features specified for retrieval""#.into())
    );
    assert_eq!(
        e(r#"{"feature_service":"scoring","entities":{"uid":["u1"]}}"#),
        (500, r#""\"Missing join key values for keys: ['user_id']. No values provided for keys: ['user_id']. Provided join_key_values: []\"""#.into())
    );
    assert_eq!(
        e(r#"{"feature_service":"scoring","entities":{"user_id":["u1"],"x":[1,2]}}"#),
        (
            500,
            r#""All entity rows must have the same columns.""#.into()
        )
    );
    assert_eq!(
        e(&format!(r#"{{"features":["profile:age","profile:age"],{one}}}"#)),
        (500, r#""{\"module\": \"feast.errors\", \"class\": \"FeatureNameCollisionError\", \"message\": \"Duplicate features named age found.\\nTo resolve this collision, either use the full feature name by setting 'full_feature_names=True', or ensure that the features in question have different names.\"}""#.into())
    );
    assert_eq!(
        e(r#"{"feature_service":"scoring","#),
        (422, r#"{"detail":[{"type":"json_invalid","loc":["body",29],"msg":"JSON decode error","input":{},"ctx":{"error":"EOF while parsing a value at line 1 column 29"}}]}"#.into())
    );
    assert_eq!(
        e("[1]"),
        (422, r#"{"detail":[{"type":"model_attributes_type","loc":["body"],"msg":"Input should be a valid dictionary or object to extract fields from","input":[1]}]}"#.into())
    );
    assert_eq!(
        e(r#"{"feature_service":"scoring","entities":{"user_id":"u1"}}"#),
        (422, r#"{"detail":[{"type":"list_type","loc":["body","entities","user_id"],"msg":"Input should be a valid list","input":"u1"}]}"#.into())
    );
    assert_eq!(
        e(r#"{"feature_service":5,"entities":{"user_id":["u1"]}}"#),
        (422, r#"{"detail":[{"type":"string_type","loc":["body","feature_service"],"msg":"Input should be a valid string","input":5}]}"#.into())
    );
    assert_eq!(
        e(r#"{"a":x}"#),
        (422, r#"{"detail":[{"type":"json_invalid","loc":["body",5],"msg":"JSON decode error","input":{},"ctx":{"error":"expected value at line 1 column 6"}}]}"#.into()),
        "the offset FastAPI reports; the message is Ferry's parser's"
    );
    assert_eq!(
        e(r#"{"feature_service":"scoring","entities":{}}"#),
        (500, r#""'pop from an empty set'""#.into())
    );
    assert_eq!(
        e(r#"{"feature_service":"scoring","entities":{"user_id":[]}}"#),
        (500, r#""\"Missing join key values for keys: []. No values provided for keys: ['user_id']. Provided join_key_values: ['user_id']\"""#.into())
    );
    assert_eq!(e(r#"{"feature_service":"scoring"}"#).0, 422);
    assert_eq!(e(r#"{"feature_service":"scoring","entities":[]}"#).0, 422);
    assert_eq!(
        e(r#"{"feature_service":"scoring","full_feature_names":2,"entities":{}}"#),
        (422, r#"{"detail":[{"type":"bool_parsing","loc":["body","full_feature_names"],"msg":"Input should be a valid boolean, unable to interpret input","input":2}]}"#.into())
    );
    assert_eq!(
        e(r#"{"feature_service":"scoring","full_feature_names":null,"entities":{}}"#),
        (422, r#"{"detail":[{"type":"bool_type","loc":["body","full_feature_names"],"msg":"Input should be a valid boolean","input":null}]}"#.into())
    );
    for lax in [r#""YES""#, "1.0", r#""t""#] {
        let body = format!(
            r#"{{"feature_service":"scoring","full_feature_names":{lax},"entities":{{"user_id":["u1"]}}}}"#
        );
        assert!(
            parse_str(&c, &body).is_ok(),
            "{lax} is a boolean to pydantic"
        );
    }
    assert_eq!(e(r#"{"features":"profile:age","entities":{}}"#).0, 422);
}

/// What Ferry bounds or refuses on its own, with its own errors.
#[test]
fn ferrys_own_limits_hold() {
    let c = feast_config();
    let ids: Vec<String> = (0..=c.routes[0].max_entities)
        .map(|i| format!("u{i}"))
        .collect();
    let body = json!({"feature_service": "scoring", "entities": {"user_id": ids}}).to_string();
    let e = parse_str(&c, &body).unwrap_err();
    assert_eq!((e.status(), e.code()), (413, "too_many_entities"));
    let e = parse_str(
        &c,
        r#"{"feature_service":"scoring","entities":{"user_id":[7]}}"#,
    )
    .unwrap_err();
    assert_eq!((e.status(), e.code()), (400, "invalid_entity_id"));
    assert!(
        e.message().contains("entities.user_id[0]"),
        "{}",
        e.message()
    );
}

/// Every prefix of a valid request, and the request with each byte replaced by a few others, is
/// answered with a status (never a panic).
#[test]
fn any_body_gets_an_answer_or_a_refusal() {
    let c = feast_config();
    let body = br#"{"features":["mprofile:risk","txn:count"],"entities":{"merchant_id":["m1"],"user_id":["u1"]},"full_feature_names":true}"#;
    let mut seen = 0;
    for end in 0..body.len() {
        if let Err(e) = parse(&body[..end], &c.routes[0], &c) {
            assert!(e.status() >= 400);
            seen += 1;
        }
    }
    assert_eq!(seen, body.len(), "every strict prefix is refused");
    for i in 0..body.len() {
        for b in [b'"', b'{', b']', b':', b'0', b'x', 0xff] {
            let mut mutated = body.to_vec();
            mutated[i] = b;
            if let Err(e) = parse(&mutated, &c.routes[0], &c) {
                assert!(e.status() >= 400 && !e.body("feast").is_empty());
            }
        }
    }
}

/// A service keyed by two join keys: both columns come first, in the request's order, and each
/// entity's key joins its parts in the service's key order.
#[test]
fn a_composite_key_takes_each_join_key_column() {
    use ferry_test_support::snapshot::{feature, key, view};
    let mut s = snapshot();
    s.services.push(pb::FeatureService {
        name: "pair".into(),
        fingerprint: 77,
        entity_keys: vec![
            key("merchant_id", ValueType::Int64),
            key("user_id", ValueType::String),
        ],
        views: vec![view("pv", 0, vec![feature("n", ValueType::Int64, None)])],
        feast: None,
        derived: vec![],
        derived_version: String::new(),
    });
    s.routes[0].format = pb::Format::FeastRest as i32;
    s.routes[0].feast_services = vec!["pair".into()];
    let c = Config::from_snapshot(s).unwrap();
    let req = parse_str(
        &c,
        r#"{"features":["pv:n"],"entities":{"user_id":["u1","u2"],"merchant_id":[7,8]}}"#,
    )
    .unwrap();
    let parts = |i: usize| ferry_protos::entity_key(&[["7", "u1"], ["8", "u2"]][i]);
    assert_eq!(req.keys, [parts(0), parts(1)]);
    let names: Vec<&str> = req.join_keys.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["user_id", "merchant_id"]);
    // Feast's wording as recorded for one key, here with two (not compared with Feast).
    let e = parse_str(&c, r#"{"features":["pv:n"],"entities":{"user_id":["u1"]}}"#).unwrap_err();
    assert_eq!(
        String::from_utf8(e.body("feast")).unwrap(),
        r#""\"Missing join key values for keys: ['merchant_id']. No values provided for keys: ['merchant_id']. Provided join_key_values: ['user_id']\"""#
    );
}
