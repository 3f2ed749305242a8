//! Generic JSON: the entities are the object, or the array of objects, at the route's
//! `entity_pointer` (RFC 6901); each entity's features are written as one object at its
//! `inject_pointer` (replacing whatever the client put there), or into the entity object itself
//! when that pointer is empty (overwriting fields of the same names). When the document is an
//! object, the metadata goes to its `ferry` field.

use serde_json::{Map, Value as Json};

use super::document::{self, shape};
use super::entity;
use super::metadata::{self, METADATA_FIELD};
use super::request_fields;
use crate::config::Route;
use crate::error::FerryError;
use crate::values;
use crate::vector::EntityFeatures;

#[derive(Debug)]
pub struct ParsedRequest {
    /// How the client spelled numbers the reader respells (see `document`).
    spellings: document::Spellings,
    doc: Json,
    pub keys: Vec<String>,
    /// The request fields of each entity object (`request_fields`).
    pub fields: request_fields::Fields,
}

/// The entities at `at` (the route's `entity_pointer`).
pub fn parse(body: &[u8], route: &Route, at: &str) -> Result<ParsedRequest, FerryError> {
    let document::Document {
        json: doc,
        spellings,
    } = document::parse_json(body)?;
    let target = doc
        .pointer(at)
        .ok_or_else(|| shape(&format!("nothing at JSON pointer '{at}'")))?;
    let mut fields = Vec::new();
    let keys = match target {
        Json::Object(obj) => {
            entity::check_count(1, route)?;
            let mut keys = Vec::with_capacity(route.parts.len());
            let place = if at.is_empty() { "the body" } else { at };
            entity::keys_of_object(obj, route, place, &mut keys)?;
            object_fields(obj, route, place, &mut fields)?;
            keys
        }
        Json::Array(items) => {
            entity::check_count(items.len(), route)?;
            let mut keys = Vec::with_capacity(items.len() * route.parts.len());
            for (i, item) in items.iter().enumerate() {
                let place = format!("{at}/{i}");
                let Json::Object(obj) = item else {
                    return Err(shape(&format!("{place} must be a JSON object")));
                };
                entity::keys_of_object(obj, route, &place, &mut keys)?;
                object_fields(obj, route, &place, &mut fields)?;
            }
            keys
        }
        other => {
            return Err(shape(&format!(
                "'{at}' must point to an object or an array of objects, not {}",
                entity::type_name(other)
            )))
        }
    };
    Ok(ParsedRequest {
        doc,
        keys,
        fields,
        spellings,
    })
}

/// The request fields of one entity object, if the route reads any.
fn object_fields(
    obj: &Map<String, Json>,
    route: &Route,
    place: &str,
    out: &mut request_fields::Fields,
) -> Result<(), FerryError> {
    if !request_fields::wanted(route) {
        return Ok(());
    }
    let member = |name: &str| Ok(obj.get(name).map(std::borrow::Cow::Borrowed));
    request_fields::of_members(member, route, &|| place.to_string(), out)
}

/// Writes `value` at `pointer` inside `obj`, creating (or replacing non-object) intermediate
/// members: the injection path is Ferry's.
fn put(obj: &mut Map<String, Json>, pointer: &str, value: Json) {
    let tokens: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let Some((last, path)) = tokens.split_last() else {
        return;
    };
    let mut cur = obj;
    for t in path {
        let next = cur
            .entry(t.clone())
            .or_insert_with(|| Json::Object(Map::new()));
        if !next.is_object() {
            *next = Json::Object(Map::new());
        }
        let Json::Object(m) = next else { return };
        cur = m;
    }
    cur.insert(last.clone(), value);
}

/// Each entity's features written at `inject` (the route's `inject_pointer`) of the entity
/// objects at `at`, and the metadata at the root.
pub fn rewrite(
    mut req: ParsedRequest,
    route: &Route,
    (at, inject): (&str, &str),
    features: Vec<EntityFeatures>,
) -> Result<Vec<u8>, FerryError> {
    let statuses: Vec<Json> = features
        .iter()
        .map(|f| Json::Object(metadata::not_present(route, f)))
        .collect();
    let write = |obj: &mut Map<String, Json>, f: EntityFeatures| {
        let pairs = route
            .output_names
            .iter()
            .cloned()
            .zip(f.values.iter().map(values::to_json));
        if inject.is_empty() {
            obj.extend(pairs);
        } else {
            put(obj, inject, Json::Object(pairs.collect()));
        }
    };
    match req.doc.pointer_mut(at) {
        Some(Json::Object(obj)) => {
            if let Some(f) = features.into_iter().next() {
                write(obj, f);
            }
        }
        Some(Json::Array(items)) => {
            for (item, f) in items.iter_mut().zip(features) {
                if let Json::Object(obj) = item {
                    write(obj, f);
                }
            }
        }
        _ => {}
    }
    if let Json::Object(root) = &mut req.doc {
        root.insert(METADATA_FIELD.into(), metadata::metadata(route, statuses));
    }
    document::write_document(&req.doc, req.spellings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixture::snapshot;
    use crate::config::Config;
    use crate::vector::FeatureStatus;
    use ferry_protos::v1 as pb;
    use serde_json::json;

    /// The route's pointers, as the dispatcher hands them over.
    fn pointers(r: &Route) -> (&str, &str) {
        match &r.format {
            crate::config::Format::Json {
                entity_pointer,
                inject_pointer,
            } => (entity_pointer, inject_pointer),
            other => panic!("not a json route: {other:?}"),
        }
    }

    fn parse(body: &[u8], r: &Route) -> Result<ParsedRequest, FerryError> {
        super::parse(body, r, pointers(r).0)
    }

    fn rewrite(
        req: ParsedRequest,
        r: &Route,
        f: Vec<EntityFeatures>,
    ) -> Result<Vec<u8>, FerryError> {
        super::rewrite(req, r, pointers(r), f)
    }

    fn json_route(entity_pointer: &str, inject_pointer: &str) -> Config {
        let mut s = snapshot();
        s.routes[0].format = pb::Format::Json as i32;
        s.routes[0].entity_pointer = entity_pointer.into();
        s.routes[0].inject_pointer = inject_pointer.into();
        Config::from_snapshot(s).unwrap()
    }

    fn feats(age: i64) -> EntityFeatures {
        EntityFeatures {
            values: crate::values::fvs(&[json!(age), json!(0.5), Json::Null]),
            statuses: vec![
                FeatureStatus::Present,
                FeatureStatus::Present,
                FeatureStatus::OutsideMaxAge,
            ],
        }
    }

    #[test]
    fn array_of_entities_with_a_features_object() {
        let c = json_route("/payload/users", "/features");
        let r = &c.routes[0];
        let body = br#"{"payload":{"users":[{"user_id":"u1","features":{"forged":1}},{"user_id":"u2"}]},"k":1}"#;
        let req = parse(body, r).unwrap();
        assert_eq!(req.keys, ["u1", "u2"]);
        let v: Json =
            serde_json::from_slice(&rewrite(req, r, vec![feats(1), feats(2)]).unwrap()).unwrap();
        assert_eq!(
            v["payload"]["users"][0],
            json!({"user_id": "u1", "features": {"profile__age": 1, "profile__score": 0.5, "txn__count": null}})
        );
        assert_eq!(v["payload"]["users"][1]["features"]["profile__age"], 2);
        assert_eq!(v["k"], 1);
        assert_eq!(
            v["ferry"]["statuses"][1],
            json!({"txn__count": "OUTSIDE_MAX_AGE"})
        );
    }

    #[test]
    fn single_object_at_the_root_merged_in_place() {
        let c = json_route("", "");
        let r = &c.routes[0];
        let req = parse(br#"{"user_id":"u1","profile__age":999}"#, r).unwrap();
        let v: Json = serde_json::from_slice(&rewrite(req, r, vec![feats(5)]).unwrap()).unwrap();
        assert_eq!(v["profile__age"], 5, "forged field overwritten");
        assert_eq!(v["user_id"], "u1");
    }

    #[test]
    fn nested_inject_pointer_is_created() {
        let c = json_route("/u", "/ctx/feat~1v1");
        let r = &c.routes[0];
        let req = parse(br#"{"u":{"user_id":"u1","ctx":"not an object"}}"#, r).unwrap();
        let v: Json = serde_json::from_slice(&rewrite(req, r, vec![feats(5)]).unwrap()).unwrap();
        assert_eq!(v["u"]["ctx"]["feat/v1"]["profile__age"], 5);
    }

    #[test]
    fn bad_documents_are_named() {
        let c = json_route("/users", "/features");
        let r = &c.routes[0];
        let msg = |b: &[u8]| parse(b, r).unwrap_err().message();
        assert_eq!(msg(br#"{"people":[]}"#), "nothing at JSON pointer '/users'");
        assert_eq!(
            msg(br#"{"users":"u1"}"#),
            "'/users' must point to an object or an array of objects, not a string"
        );
        assert_eq!(
            msg(br#"{"users":[{"user_id":"u1"},3]}"#),
            "/users/1 must be a JSON object"
        );
        assert_eq!(
            msg(br#"{"users":[{"uid":"u1"}]}"#),
            "/users/0 has no entity id field 'user_id'"
        );
        assert_eq!(
            parse(br#"{"users":[]}"#, r).unwrap_err().code(),
            "no_entities"
        );
        let mut s = snapshot();
        s.routes[0].format = pb::Format::Json as i32;
        s.routes[0].entity_pointer = "users".into();
        assert!(Config::from_snapshot(s)
            .unwrap_err()
            .to_string()
            .contains("not a JSON pointer"));
    }
}
