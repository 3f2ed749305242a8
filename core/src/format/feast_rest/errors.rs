//! The errors of Feast's REST server, as `feast serve` (Feast 0.67) answers them: a body that
//! does not validate as its request model is a 422 with FastAPI's `{"detail": [...]}`; a Feast
//! error is its status with the JSON *string* of `{"module", "class", "message"}`; any other
//! exception is a 500 with the JSON string of its message. Texts are Feast's where a client
//! could match on them.

use serde_json::{json, Value as Json};

use crate::error::FerryError;

fn feast(status: u16, code: &'static str, body: &Json) -> FerryError {
    FerryError::FeastRest {
        status,
        code,
        body: body.to_string(),
    }
}

/// FastAPI's request validation error (422): `kind` is pydantic's error type.
pub fn invalid(kind: &str, loc: &[Json], msg: &str, input: Json) -> FerryError {
    let mut path = vec![json!("body")];
    path.extend_from_slice(loc);
    feast(
        422,
        "feast_invalid_request",
        &json!({"detail": [{"type": kind, "loc": path, "msg": msg, "input": input}]}),
    )
}

/// The body is not JSON (FastAPI's `json_invalid`; `error` is Ferry's parser's message).
pub fn json_invalid(offset: usize, error: &str) -> FerryError {
    feast(
        422,
        "feast_invalid_json",
        &json!({"detail": [{"type": "json_invalid", "loc": ["body", offset], "msg": "JSON decode error", "input": {}, "ctx": {"error": error}}]}),
    )
}

/// A `FeastError` subclass: `{"module": "feast.errors", "class", "message"}` as a JSON string.
fn feast_error(status: u16, code: &'static str, class: &str, message: &str) -> FerryError {
    // Written with Python's json.dumps separators, so the string is byte for byte Feast's.
    let text = format!(
        "{{\"module\": \"feast.errors\", \"class\": {}, \"message\": {}}}",
        Json::from(class),
        Json::from(message)
    );
    feast(status, code, &Json::String(text))
}

/// Any other exception: a 500 with its message as a JSON string.
fn exception(code: &'static str, message: String) -> FerryError {
    feast(500, code, &Json::String(message))
}

pub fn unknown_service(name: &str, project: &str) -> FerryError {
    feast_error(
        404,
        "feast_unknown_feature_service",
        "FeatureServiceNotFoundException",
        &format!("Feature service {name} does not exist in project {project}"),
    )
}

pub fn unknown_view(name: &str, project: &str) -> FerryError {
    feast_error(
        404,
        "feast_unknown_feature_view",
        "FeatureViewNotFoundException",
        &format!("Feature view {name} does not exist in project {project}"),
    )
}

pub fn unknown_feature(view: &str, feature: &str) -> FerryError {
    exception(
        "feast_unknown_feature",
        format!("'Feature {feature} not found in projection {view}'"),
    )
}

pub fn bad_reference(reference: &str) -> FerryError {
    exception(
        "feast_bad_feature_reference",
        format!(
            "Invalid feature reference '{reference}'. Expected format: '<feature_view>:<feature>' \
             or '<feature_view>@<version>:<feature>'"
        ),
    )
}

pub fn no_features() -> FerryError {
    exception(
        "feast_no_features",
        "No features specified for retrieval".into(),
    )
}

/// `entities` is `{}`: Feast 0.67 fails inside its own code, and says so as any exception.
pub fn no_entity_columns() -> FerryError {
    exception("feast_no_entities", "'pop from an empty set'".into())
}

pub fn uneven_entities() -> FerryError {
    exception(
        "feast_uneven_entities",
        "All entity rows must have the same columns.".into(),
    )
}

/// Python's `repr` of a list of strings.
fn py_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("'{s}'")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Join keys absent (`missing`), or given without values (`empty`), among the ones the
/// features need; `provided` are the needed ones the request has.
pub fn missing_join_keys(missing: &[&str], empty: &[&str], provided: &[&str]) -> FerryError {
    exception(
        "feast_missing_join_key",
        format!(
            "\"Missing join key values for keys: {}. No values provided for keys: {}. \
             Provided join_key_values: {}\"",
            py_list(missing),
            py_list(empty),
            py_list(provided)
        ),
    )
}

pub fn name_collision(name: &str, full_feature_names: bool) -> FerryError {
    let fix = if full_feature_names {
        "To resolve this collision, please ensure that the feature views or their own features \
         have different names. If you're intentionally joining the same feature view twice on \
         different sets of entities, please rename one of the feature views with '.with_name'."
    } else {
        "To resolve this collision, either use the full feature name by setting \
         'full_feature_names=True', or ensure that the features in question have different names."
    };
    feast_error(
        500,
        "feast_feature_name_collision",
        "FeatureNameCollisionError",
        &format!("Duplicate features named {name} found.\n{fix}"),
    )
}
