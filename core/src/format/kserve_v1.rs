//! KServe v1 (`{"instances": [{...}, ...]}`): find each instance's entity id, and write the
//! features into every instance. Whatever the client put under a feature's name is dropped and
//! written again by Ferry.
//!
//! The rewrite writes the output JSON text directly (features straight from the decoded stored
//! values), instead of inserting them into the parsed document and serializing it: on a batch of
//! 100 instances of 30 features that is most of the filter's per-request work.

use serde_json::{Map, Value as Json};

use super::document::{self, shape, Spellings};
use super::entity;
use super::metadata::METADATA_FIELD;
use crate::config::Route;
use crate::error::FerryError;
use crate::values;
use crate::vector::{EntityFeatures, FeatureStatus};

#[derive(Debug)]
pub struct ParsedRequest {
    doc: Map<String, Json>,
    /// How the client spelled numbers the reader respells (see `document`).
    spellings: Spellings,
    body_len: usize,
    /// Canonical entity keys of each instance (one per route part), in order.
    pub keys: Vec<String>,
}

pub fn parse(body: &[u8], route: &Route) -> Result<ParsedRequest, FerryError> {
    let parsed = document::parse_json(body)?;
    let Json::Object(doc) = parsed.json else {
        return Err(shape(
            "the body must be a JSON object with an \"instances\" array",
        ));
    };
    let instances = match doc.get("instances") {
        Some(Json::Array(a)) => a,
        Some(_) => return Err(shape("\"instances\" must be an array of objects")),
        None => return Err(shape("the body has no \"instances\" array (KServe v1)")),
    };
    entity::check_count(instances.len(), route)?;
    let mut keys = Vec::with_capacity(instances.len() * route.parts.len());
    for (index, inst) in instances.iter().enumerate() {
        let Json::Object(inst) = inst else {
            return Err(shape(&format!("instances[{index}] must be a JSON object")));
        };
        entity::keys_of_object(inst, route, &format!("instances[{index}]"), &mut keys)?;
    }
    Ok(ParsedRequest {
        doc,
        spellings: parsed.spellings,
        body_len: body.len(),
        keys,
    })
}

/// The body with each instance's features (`features[i]` for instance i) and the metadata
/// field: the client's fields keep their order, the features follow them, and `"ferry"` comes
/// last (a client's own `"ferry"` is dropped).
pub fn rewrite(req: ParsedRequest, route: &Route, features: Vec<EntityFeatures>) -> Vec<u8> {
    let per_entity: usize = route.output_keys.iter().map(|k| k.len() + 12).sum();
    let mut out = Vec::with_capacity(req.body_len + features.len() * per_entity + 128);
    out.push(b'{');
    for (name, value) in &req.doc {
        if name == METADATA_FIELD {
            continue;
        }
        values::write_str(&mut out, name);
        out.push(b':');
        match (name.as_str(), value) {
            ("instances", Json::Array(instances)) => {
                write_instances(&mut out, instances, route, &features)
            }
            _ => write_value(&mut out, value),
        }
        out.push(b',');
    }
    values::write_str(&mut out, METADATA_FIELD);
    out.push(b':');
    write_metadata(&mut out, route, &features);
    out.push(b'}');
    req.spellings.restore(out)
}

fn write_value(out: &mut Vec<u8>, value: &Json) {
    // Writing a JSON value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

fn write_instances(
    out: &mut Vec<u8>,
    instances: &[Json],
    route: &Route,
    features: &[EntityFeatures],
) {
    out.push(b'[');
    for (i, inst) in instances.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let (Json::Object(fields), Some(f)) = (inst, features.get(i)) else {
            write_value(out, inst);
            continue;
        };
        out.push(b'{');
        let mut first = true;
        for (name, value) in fields {
            if route.output_names.iter().any(|o| o == name) {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            values::write_str(out, name);
            out.push(b':');
            write_value(out, value);
        }
        for (key, value) in route.output_keys.iter().zip(&f.values) {
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(key);
            values::write_json(out, value);
        }
        out.push(b'}');
    }
    out.push(b']');
}

/// `{"service", "fingerprint", "statuses": [per instance: {feature: status} of the features
/// that are not PRESENT]}`, the same object `format::metadata` builds for the other formats.
fn write_metadata(out: &mut Vec<u8>, route: &Route, features: &[EntityFeatures]) {
    out.extend_from_slice(b"{\"service\":");
    values::write_str(out, &route.services_label);
    out.extend_from_slice(b",\"fingerprint\":\"");
    out.extend_from_slice(route.fingerprints_label.as_bytes());
    out.extend_from_slice(b"\",\"statuses\":[");
    for (i, f) in features.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'{');
        let mut first = true;
        for (key, status) in route.output_keys.iter().zip(&f.statuses) {
            if *status == FeatureStatus::Present {
                continue;
            }
            if !first {
                out.push(b',');
            }
            first = false;
            out.extend_from_slice(key);
            out.push(b'"');
            out.extend_from_slice(status.as_str().as_bytes());
            out.push(b'"');
        }
        out.push(b'}');
    }
    out.extend_from_slice(b"]}");
}

#[cfg(test)]
mod tests {
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
        let mut s = crate::config::fixture::snapshot();
        s.services[0].entity_keys[0].r#type = pb::ValueType::Int64 as i32;
        let c = crate::config::Config::from_snapshot(s).unwrap();
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
}
