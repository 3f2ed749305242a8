//! The two request bodies, as Feast 0.67's feature server takes them (`PushFeaturesRequest`,
//! `WriteToFeatureStoreRequest` in `feast/feature_server.py`): `push_source_name` or
//! `feature_view_name`, `df` as columns, and for a push `to` (default `online`). Feast's other
//! fields (`allow_registry_cache`, `transform_on_write`) are accepted and have no effect here.
//! A malformed body is described as FastAPI would (`detail` entries with `loc`, `msg`, `type`).

use serde_json::{json, Map, Value as Json};

use super::answer::WriteError;
use super::bounded::{self, Unread};

/// The write endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /push`: a push source's views.
    Push,
    /// `POST /write-to-online-store`: one view.
    WriteToOnlineStore,
}

pub const PUSH_PATH: &str = "/push";
pub const WRITE_PATH: &str = "/write-to-online-store";

impl Endpoint {
    pub fn from_path(path: &str) -> Option<Endpoint> {
        match path {
            PUSH_PATH => Some(Endpoint::Push),
            WRITE_PATH => Some(Endpoint::WriteToOnlineStore),
            _ => None,
        }
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq)]
pub enum Target {
    PushSource(String),
    View(String),
}

/// A parsed request.
#[derive(Debug)]
pub struct WriteRequest {
    pub target: Target,
    pub df: Map<String, Json>,
}

fn detail(kind: &str, field: &str, msg: &str) -> Json {
    json!({"type": kind, "loc": ["body", field], "msg": msg})
}

/// The body as a JSON object (its `df` read under the write bounds, [`super::bounded`]), or
/// FastAPI's description of why not.
fn object(body: &[u8]) -> Result<Map<String, Json>, WriteError> {
    match bounded::read(body) {
        Ok(Json::Object(m)) => Ok(m),
        Ok(_) => Err(WriteError::Invalid(vec![json!({
            "type": "model_attributes_type", "loc": ["body"],
            "msg": "Input should be a valid dictionary or object to extract fields from"
        })])),
        Err(Unread::Exceeded(e)) => Err(WriteError::Exceeds(e)),
        Err(Unread::Json(e)) => Err(WriteError::Invalid(vec![json!({
            "type": "json_invalid", "loc": ["body", e.column()],
            "msg": format!("JSON decode error: {e}")
        })])),
    }
}

/// A required string field (`optional`: may be absent); a problem is added to `problems`.
fn string(
    doc: &mut Map<String, Json>,
    field: &str,
    optional: bool,
    problems: &mut Vec<Json>,
) -> Option<String> {
    match doc.remove(field) {
        Some(Json::String(s)) => Some(s),
        None if optional => None,
        None => {
            problems.push(detail("missing", field, "Field required"));
            None
        }
        Some(_) => {
            problems.push(detail(
                "string_type",
                field,
                "Input should be a valid string",
            ));
            None
        }
    }
}

/// Parses a body for `endpoint`.
pub fn parse(endpoint: Endpoint, body: &[u8]) -> Result<WriteRequest, WriteError> {
    let mut doc = object(body)?;
    let name_field = match endpoint {
        Endpoint::Push => "push_source_name",
        Endpoint::WriteToOnlineStore => "feature_view_name",
    };
    let mut problems = Vec::new();
    let name = string(&mut doc, name_field, false, &mut problems);
    let df = match doc.remove("df") {
        Some(Json::Object(m)) => Some(m),
        None => {
            problems.push(detail("missing", "df", "Field required"));
            None
        }
        Some(_) => {
            problems.push(detail(
                "dict_type",
                "df",
                "Input should be a valid dictionary",
            ));
            None
        }
    };
    let to = match endpoint {
        Endpoint::Push => string(&mut doc, "to", true, &mut problems),
        Endpoint::WriteToOnlineStore => None,
    };
    let (Some(name), Some(df), true) = (name, df, problems.is_empty()) else {
        return Err(WriteError::Invalid(problems));
    };
    match to.as_deref() {
        None | Some("online") => {}
        Some(t @ ("offline" | "online_and_offline")) => {
            return Err(WriteError::Offline(t.to_owned()))
        }
        Some(t) => return Err(WriteError::UnknownMode(t.to_owned())),
    }
    Ok(WriteRequest {
        target: match endpoint {
            Endpoint::Push => Target::PushSource(name),
            Endpoint::WriteToOnlineStore => Target::View(name),
        },
        df,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feast_shapes_parse_and_offline_is_refused_by_name() {
        let r = parse(
            Endpoint::Push,
            br#"{"push_source_name": "p", "df": {"a": [1]}, "to": "online", "allow_registry_cache": true}"#,
        )
        .unwrap();
        assert_eq!(r.target, Target::PushSource("p".into()));
        assert_eq!(r.df["a"], json!([1]));
        let r = parse(
            Endpoint::WriteToOnlineStore,
            br#"{"feature_view_name": "v", "df": {}}"#,
        )
        .unwrap();
        assert_eq!(r.target, Target::View("v".into()));
        for (to, code) in [
            ("offline", "offline_write_refused"),
            ("online_and_offline", "offline_write_refused"),
            ("sideways", "invalid_request"),
        ] {
            let body = format!(r#"{{"push_source_name": "p", "df": {{}}, "to": "{to}"}}"#);
            assert_eq!(
                parse(Endpoint::Push, body.as_bytes()).unwrap_err().code(),
                code
            );
        }
        let Err(WriteError::Invalid(d)) = parse(Endpoint::Push, br#"{"df": 3}"#) else {
            panic!("expected a validation error");
        };
        assert_eq!(d.len(), 2);
        assert_eq!(d[0]["loc"], json!(["body", "push_source_name"]));
        assert_eq!(d[1]["type"], "dict_type");
        assert!(matches!(
            parse(Endpoint::Push, b"{"),
            Err(WriteError::Invalid(_))
        ));
    }
}
