//! Request formats: which one a route speaks, and what they share — entity id rules, batch
//! limits, and the metadata that reports each feature's status.

use serde_json::{Map, Value as Json};

use crate::config::{Format, KeyKind, Route};
use crate::error::FerryError;
use crate::vector::{EntityFeatures, FeatureStatus};
use crate::{header_mode, json_body, kserve_v1, kserve_v2};

/// Field (body formats) where Ferry reports what it did; a client's own value is replaced.
pub const METADATA_FIELD: &str = "ferry";

/// A parsed request of any format: the document to rewrite and the entity keys found in it.
#[derive(Debug)]
pub enum ParsedRequest {
    KserveV1(kserve_v1::ParsedRequest),
    KserveV2(kserve_v2::ParsedRequest),
    Json(json_body::ParsedRequest),
    Header(header_mode::ParsedRequest),
}

/// What a rewrite produces: a new body (body formats) and request headers to set.
#[derive(Debug)]
pub struct Rewritten {
    pub body: Option<Vec<u8>>,
    pub headers: Vec<(String, String)>,
}

impl ParsedRequest {
    /// Canonical entity keys in request order: one per route part for each entity
    /// (`keys[i * parts + p]` is entity i's key for part p).
    pub fn keys(&self) -> &[String] {
        match self {
            ParsedRequest::KserveV1(r) => &r.keys,
            ParsedRequest::KserveV2(r) => &r.keys,
            ParsedRequest::Json(r) => &r.keys,
            ParsedRequest::Header(r) => &r.keys,
        }
    }
}

impl From<kserve_v1::ParsedRequest> for ParsedRequest {
    fn from(r: kserve_v1::ParsedRequest) -> Self {
        ParsedRequest::KserveV1(r)
    }
}

pub fn parse(body: &[u8], route: &Route) -> Result<ParsedRequest, FerryError> {
    Ok(match route.format {
        Format::KserveV1 => ParsedRequest::KserveV1(kserve_v1::parse(body, route)?),
        Format::KserveV2 { .. } => ParsedRequest::KserveV2(kserve_v2::parse(body, route)?),
        Format::Json { .. } => ParsedRequest::Json(json_body::parse(body, route)?),
        Format::Header { .. } => return Err(shape("this route reads its entity from headers")),
    })
}

/// The new body: `features[i]` written for entity i, plus the metadata.
pub fn rewrite(
    req: ParsedRequest,
    route: &Route,
    features: Vec<EntityFeatures>,
) -> Result<Rewritten, FerryError> {
    let body = |b: Vec<u8>| Rewritten {
        body: Some(b),
        headers: Vec::new(),
    };
    Ok(match req {
        ParsedRequest::KserveV1(r) => body(kserve_v1::rewrite(r, route, features)),
        ParsedRequest::KserveV2(r) => body(kserve_v2::rewrite(r, route, features)?),
        ParsedRequest::Json(r) => body(json_body::rewrite(r, route, features)?),
        ParsedRequest::Header(_) => Rewritten {
            body: None,
            headers: header_mode::render(route, features)?,
        },
    })
}

/// The rewritten document as the new body. Writing a `serde_json::Value` cannot fail (its keys
/// are strings, its numbers finite); should it, the request is refused rather than sent on
/// with an empty body.
pub fn write_document(doc: &Json) -> Result<Vec<u8>, FerryError> {
    serde_json::to_vec(doc)
        .map_err(|e| FerryError::BadShape(format!("cannot write the enriched body: {e}")))
}

pub fn parse_json(body: &[u8]) -> Result<Json, FerryError> {
    serde_json::from_slice(body).map_err(|e| FerryError::MalformedJson(e.to_string()))
}

pub fn shape(msg: &str) -> FerryError {
    FerryError::BadShape(msg.to_string())
}

/// Refuses empty batches and batches over the route's limit.
pub fn check_count(n: usize, route: &Route) -> Result<(), FerryError> {
    if n == 0 {
        return Err(FerryError::NoEntities);
    }
    if n > route.max_entities as usize {
        return Err(FerryError::TooManyEntities {
            limit: route.max_entities,
            count: n,
        });
    }
    Ok(())
}

/// The entity keys of one object whose fields hold the join keys (KServe v1 instances, JSON
/// entity objects), one per route part, pushed onto `keys`; `place` names the object in
/// errors (e.g. `instances[3]`).
pub fn keys_of_object(
    obj: &Map<String, Json>,
    route: &Route,
    place: &str,
    keys: &mut Vec<String>,
) -> Result<(), FerryError> {
    for p in &route.parts {
        let mut parts: Vec<String> = Vec::with_capacity(p.entity_fields.len());
        for (field, key) in p.entity_fields.iter().zip(&p.service.entity_keys) {
            let v = obj.get(field).ok_or_else(|| FerryError::MissingEntityId {
                place: place.to_string(),
                field: field.clone(),
            })?;
            let part = entity_part(v, key.kind).map_err(|reason| FerryError::InvalidEntityId {
                place: format!("{place}.{field}"),
                reason,
            })?;
            parts.push(part);
        }
        keys.push(ferry_protos::entity_key(&parts));
    }
    Ok(())
}

/// The canonical string form of one join key value, checked against its type and the id rules.
pub fn entity_part(v: &Json, kind: KeyKind) -> Result<String, String> {
    match (kind, v) {
        (KeyKind::String, Json::String(s)) => {
            // The rule the reader applies too: a client's id can never become a reader error.
            if let Some(why) = ferry_protos::key_part_problem(s) {
                return Err(why);
            }
            if s.contains(char::REPLACEMENT_CHARACTER) {
                return Err("id is not valid UTF-8 (or holds U+FFFD)".into());
            }
            Ok(s.clone())
        }
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

/// One entity's features that are not PRESENT, by output name.
pub fn not_present(route: &Route, f: &EntityFeatures) -> Map<String, Json> {
    let mut m = Map::new();
    for (name, status) in route.output_names.iter().zip(&f.statuses) {
        if *status != FeatureStatus::Present {
            m.insert(name.clone(), Json::from(status.as_str()));
        }
    }
    m
}

/// `{"service", "fingerprint", "statuses": [one object per entity]}`.
pub fn metadata(route: &Route, statuses: Vec<Json>) -> Json {
    let mut meta = Map::new();
    meta.insert("service".into(), Json::from(route.services_label.as_str()));
    meta.insert(
        "fingerprint".into(),
        Json::from(route.fingerprints_label.as_str()),
    );
    meta.insert("statuses".into(), Json::Array(statuses));
    Json::Object(meta)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixture::route_with;
    use crate::vector::FeatureStatus;
    use ferry_protos::v1 as pb;

    /// Numbers as clients send them that an f64 round trip would change or refuse (`1e400`
    /// was a 400 before), and the text the model receives: digits, sign and decimals exact; an
    /// exponent is spelled `e` with its sign (serde_json's `arbitrary_precision` scanner).
    const NUMBERS: [(&str, &str, &str); 7] = [
        ("a", "0.30000000000000004", "0.30000000000000004"),
        ("b", "1e400", "1e+400"),
        ("c", "-0", "-0"),
        ("d", "12345678901234567890", "12345678901234567890"),
        ("e", "1.50", "1.50"),
        ("f", "-2.5E-7", "-2.5e-7"),
        (
            "g",
            "123456789012345678901234567890.000001",
            "123456789012345678901234567890.000001",
        ),
    ];

    fn fields() -> String {
        NUMBERS
            .iter()
            .map(|(k, v, _)| format!(r#""{k}":{v}"#))
            .collect::<Vec<_>>()
            .join(",")
    }

    #[test]
    fn client_numbers_keep_their_exact_text_in_every_body_format() {
        let cases = [
            (
                pb::Format::KserveV1,
                format!(r#"{{"instances":[{{"user_id":"u1",{}}}]}}"#, fields()),
            ),
            (
                pb::Format::KserveV2,
                format!(
                    r#"{{"inputs":[{{"name":"user_id","shape":[1],"datatype":"BYTES","data":["u1"]}},
                    {{"name":"x","shape":[1],"datatype":"FP64","data":[0.30000000000000004]}}],
                    "parameters":{{{}}}}}"#,
                    fields()
                ),
            ),
            (
                pb::Format::Json,
                format!(r#"{{"user_id":"u1",{}}}"#, fields()),
            ),
        ];
        for (format, body) in cases {
            let c = route_with(|r| {
                r.format = format as i32;
                r.inject_pointer = "/features".into();
            });
            let route = &c.routes[0];
            let parsed = parse(body.as_bytes(), route).unwrap();
            let features = vec![EntityFeatures {
                values: vec![None; route.feature_count],
                statuses: vec![FeatureStatus::NotFound; route.feature_count],
            }];
            let out = rewrite(parsed, route, features).unwrap().body.unwrap();
            let text = String::from_utf8(out).unwrap();
            for (k, sent, received) in NUMBERS {
                assert!(
                    text.contains(&format!(r#""{k}":{received}"#)),
                    "{format:?}: {k}={sent} did not arrive as {received} in {text}"
                );
            }
        }
    }
}
