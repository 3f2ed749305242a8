//! The request body checked as Feast's request model (pydantic) checks it: a refusal names the
//! field (`loc`), the type expected and what was sent, as FastAPI's 422 does.

use serde_json::{Map, Value as Json};

use super::errors;
use crate::error::FerryError;

/// The request's fields, type-checked.
pub(super) struct Fields<'a> {
    pub entities: &'a Map<String, Json>,
    pub feature_service: Option<&'a str>,
    pub features: Vec<&'a str>,
    pub full_feature_names: bool,
}

pub(super) fn fields(doc: &Json) -> Result<Fields<'_>, FerryError> {
    let Json::Object(obj) = doc else {
        return Err(wrong(
            "model_attributes_type",
            &[],
            "Input should be a valid dictionary or object to extract fields from",
            doc,
        ));
    };
    // In the model's field order: with several faults, the first is the one pydantic lists
    // first (Ferry names only that one).
    let entities = entities(doc, obj)?;
    let feature_service = match obj.get("feature_service") {
        None | Some(Json::Null) => None,
        Some(Json::String(s)) => Some(s.as_str()),
        Some(other) => return Err(not_a_string(&[Json::from("feature_service")], other)),
    };
    let features = features(obj)?;
    let full_feature_names = match obj.get("full_feature_names").map(|v| (v, lax_bool(v))) {
        None => false,
        Some((_, Some(b))) => b,
        Some((other, None)) => return Err(not_a_bool(other)),
    };
    Ok(Fields {
        entities,
        feature_service,
        features,
        full_feature_names,
    })
}

/// `entities`: an object of lists.
fn entities<'a>(
    doc: &Json,
    obj: &'a Map<String, Json>,
) -> Result<&'a Map<String, Json>, FerryError> {
    let here = [Json::from("entities")];
    let entities = match obj.get("entities") {
        Some(Json::Object(m)) => m,
        Some(other) => {
            return Err(wrong(
                "dict_type",
                &here,
                "Input should be a valid dictionary",
                other,
            ))
        }
        None => return Err(wrong("missing", &here, "Field required", doc)),
    };
    for (name, v) in entities {
        if !v.is_array() {
            let loc = [Json::from("entities"), Json::from(name.as_str())];
            return Err(wrong("list_type", &loc, "Input should be a valid list", v));
        }
    }
    Ok(entities)
}

/// `features`: a list of strings (absent: none).
fn features(obj: &Map<String, Json>) -> Result<Vec<&str>, FerryError> {
    let items = match obj.get("features") {
        None => return Ok(Vec::new()),
        Some(Json::Array(items)) => items,
        Some(other) => {
            let loc = [Json::from("features")];
            return Err(wrong(
                "list_type",
                &loc,
                "Input should be a valid list",
                other,
            ));
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            item.as_str()
                .ok_or_else(|| not_a_string(&[Json::from("features"), Json::from(i)], item))
        })
        .collect()
}

/// A boolean as pydantic reads one in lax mode (Feast's model): JSON booleans, 0 and 1, and
/// the strings it knows (`"yes"`, `"off"`, ..., any case).
fn lax_bool(v: &Json) -> Option<bool> {
    match v {
        Json::Bool(b) => Some(*b),
        Json::Number(n) => match n.as_f64() {
            Some(0.0) => Some(false),
            Some(1.0) => Some(true),
            _ => None,
        },
        Json::String(s) => match s.to_ascii_lowercase().as_str() {
            "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
            "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// Pydantic's refusal of a boolean: a number or string it cannot read, or another type.
fn not_a_bool(v: &Json) -> FerryError {
    let loc = [Json::from("full_feature_names")];
    match v {
        Json::Number(_) | Json::String(_) => wrong(
            "bool_parsing",
            &loc,
            "Input should be a valid boolean, unable to interpret input",
            v,
        ),
        _ => wrong("bool_type", &loc, "Input should be a valid boolean", v),
    }
}

fn wrong(kind: &str, loc: &[Json], msg: &str, input: &Json) -> FerryError {
    errors::invalid(kind, loc, msg, input.clone())
}

fn not_a_string(loc: &[Json], input: &Json) -> FerryError {
    wrong("string_type", loc, "Input should be a valid string", input)
}
