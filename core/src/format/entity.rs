//! Entity ids in a request, for every format: the id rules (one definition with the reader's,
//! `ferry_protos::key_part_problem`), the batch limit, and the keys of an object whose fields hold
//! the join keys.

use std::borrow::Cow;

use serde_json::{Map, Value as Json};

use crate::config::{KeyKind, Route};
use crate::error::FerryError;

/// Refuses empty batches and batches over the route's limit (the one rule,
/// [`super::declared::entities`]).
pub fn check_count(n: usize, route: &Route) -> Result<(), FerryError> {
    super::declared::entities(u64::try_from(n).unwrap_or(u64::MAX), route).map(|_| ())
}

/// The entity keys of one object whose fields hold the join keys (JSON entity objects), one
/// per route part, pushed onto `keys`; `place` names the object in errors (e.g. `/users/3`).
pub fn keys_of_object(
    obj: &Map<String, Json>,
    route: &Route,
    place: &str,
    keys: &mut Vec<String>,
) -> Result<(), FerryError> {
    let place = || place.to_string();
    keys_of_fields(|f| Ok(obj.get(f).map(Cow::Borrowed)), route, place, keys)
}

/// The entity keys of one entity, one per route part, pushed onto `keys`: `field(name)` is
/// the value of the entity's field of that name, if it has one; `place()` names the entity in
/// errors (e.g. `instances[3]`; only written when there is an error).
pub fn keys_of_fields<'v>(
    field: impl Fn(&str) -> Result<Option<Cow<'v, Json>>, FerryError>,
    route: &Route,
    place: impl Fn() -> String,
    keys: &mut Vec<String>,
) -> Result<(), FerryError> {
    for p in &route.parts {
        if let ([name], [key]) = (p.entity_fields.as_slice(), p.service.entity_keys.as_slice()) {
            // One join key (most services): the key is its part, taken as it is.
            let v = field(name)?.ok_or_else(|| FerryError::MissingEntityId {
                place: place(),
                field: name.clone(),
            })?;
            let part = owned_part(v, key.kind).map_err(|reason| FerryError::InvalidEntityId {
                place: format!("{}.{name}", place()),
                reason,
            })?;
            keys.push(part);
            continue;
        }
        let mut parts: Vec<String> = Vec::with_capacity(p.entity_fields.len());
        for (name, key) in p.entity_fields.iter().zip(&p.service.entity_keys) {
            let v = field(name)?.ok_or_else(|| FerryError::MissingEntityId {
                place: place(),
                field: name.clone(),
            })?;
            let part = entity_part(&v, key.kind).map_err(|reason| FerryError::InvalidEntityId {
                place: format!("{}.{name}", place()),
                reason,
            })?;
            parts.push(part);
        }
        keys.push(ferry_protos::entity_key(&parts));
    }
    Ok(())
}

/// [`entity_part`] of a value that may be owned: an owned string id is moved, not copied.
fn owned_part(v: Cow<'_, Json>, kind: KeyKind) -> Result<String, String> {
    match (kind, v) {
        (KeyKind::String, Cow::Owned(Json::String(s))) => {
            string_part_problem(&s).map_or(Ok(s), Err)
        }
        (kind, v) => entity_part(&v, kind),
    }
}

/// Why a string id cannot be a key part, if it cannot.
fn string_part_problem(s: &str) -> Option<String> {
    // The rule the reader applies too: a client's id can never become a reader error.
    if let Some(why) = ferry_protos::key_part_problem(s) {
        return Some(why);
    }
    if s.contains(char::REPLACEMENT_CHARACTER) {
        return Some("id is not valid UTF-8 (or holds U+FFFD)".into());
    }
    None
}

/// The canonical string form of one join key value, checked against its type and the id rules.
pub fn entity_part(v: &Json, kind: KeyKind) -> Result<String, String> {
    match (kind, v) {
        (KeyKind::String, Json::String(s)) => string_part_problem(s).map_or(Ok(s.clone()), Err),
        (KeyKind::Int64, Json::Number(n)) => n
            .as_i64()
            .map(|i| i.to_string())
            .ok_or_else(|| format!("expected a 64-bit integer id, got {n}")),
        (KeyKind::String, other) => Err(format!("expected a string id, got {}", type_name(other))),
        (KeyKind::Int64, other) => Err(format!("expected an integer id, got {}", type_name(other))),
    }
}

pub fn type_name(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "an array",
        Json::Object(_) => "an object",
    }
}
