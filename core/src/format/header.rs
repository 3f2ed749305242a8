//! Header mode, for GET and gRPC traffic whose body must not be touched: one entity whose ids
//! are request headers; its features go to one request header as compact JSON, or as a
//! base64-encoded `ferry.v1.HeaderFeatures` protobuf. The JSON value is ASCII only (non-ASCII
//! escaped as \uXXXX, control characters escaped by JSON), so no CR/LF or raw bytes can reach
//! the header, and over the route's size bound either is an error, never cut.

use serde_json::{Map, Value as Json};

use base64::Engine;
use prost::Message;

use super::entity;
use super::metadata;
use super::request_fields;
use crate::config::{HeaderEncoding, KeyKind, Route, RoutePart};
use crate::error::FerryError;
use crate::values;
use crate::vector::{EntityFeatures, FeatureStatus};

/// Header listing the features that are not PRESENT, as compact JSON, when there are any.
pub const STATUS_HEADER: &str = "x-ferry-feature-status";

#[derive(Debug)]
pub struct ParsedRequest {
    pub keys: Vec<String>,
    /// The request fields, each from the header of its name (`request_fields::of_header`).
    pub fields: request_fields::Fields,
}

/// The entity key from the request headers named by the route (`header(name)` reads one,
/// `count(name)` says how often it was sent: an id header sent twice is refused, as the model
/// might read the other value).
pub fn parse(
    header: impl Fn(&str) -> Option<String>,
    count: impl Fn(&str) -> usize,
    route: &Route,
) -> Result<ParsedRequest, FerryError> {
    let mut keys = Vec::with_capacity(route.parts.len());
    for p in &route.parts {
        if let Some(field) = p.entity_fields.iter().find(|f| count(f) > 1) {
            return Err(FerryError::DuplicateEntityId {
                field: field.clone(),
            });
        }
        keys.push(key_from_headers(&header, p)?);
    }
    let mut fields = Vec::with_capacity(route.derived.fields.len());
    let place = || "the request".to_string();
    for f in &route.derived.fields {
        if count(&f.field) > 1 {
            let reason = "header sent more than once; send it exactly once".into();
            return Err(request_fields::invalid(&place, f, reason));
        }
        fields.push(request_fields::of_header(
            header(&f.field).as_deref(),
            f,
            &place,
        )?);
    }
    Ok(ParsedRequest { keys, fields })
}

/// One part's entity key from the request headers its entity fields name.
fn key_from_headers(
    header: &impl Fn(&str) -> Option<String>,
    p: &RoutePart,
) -> Result<String, FerryError> {
    let mut parts = Vec::with_capacity(p.entity_fields.len());
    for (name, key) in p.entity_fields.iter().zip(&p.service.entity_keys) {
        let raw = header(name).ok_or_else(|| FerryError::MissingEntityId {
            place: "the request".into(),
            field: name.clone(),
        })?;
        let value = match key.kind {
            KeyKind::String => Json::String(raw),
            KeyKind::Int64 => raw
                .trim()
                .parse::<i64>()
                .map(Json::from)
                .unwrap_or(Json::String(raw)),
        };
        let part = entity::entity_part(&value, key.kind).map_err(|reason| {
            FerryError::InvalidEntityId {
                place: format!("header {name}"),
                reason,
            }
        })?;
        parts.push(part);
    }
    Ok(ferry_protos::entity_key(&parts))
}

/// The features as a base64-encoded `ferry.v1.HeaderFeatures`.
fn protobuf_base64(route: &Route, f: EntityFeatures) -> String {
    use ferry_protos::v1 as pb;
    let statuses = f
        .statuses
        .iter()
        .map(|s| {
            (match s {
                FeatureStatus::Present => pb::FeatureStatus::Present,
                FeatureStatus::NotFound => pb::FeatureStatus::NotFound,
                FeatureStatus::OutsideMaxAge => pb::FeatureStatus::OutsideMaxAge,
                FeatureStatus::NullValue => pb::FeatureStatus::NullValue,
                FeatureStatus::Invalid => pb::FeatureStatus::Invalid,
            }) as i32
        })
        .collect();
    let message = pb::HeaderFeatures {
        service: route.services_label.clone(),
        fingerprint: route.fingerprints_label.clone(),
        names: route.output_names.clone(),
        values: f
            .values
            .into_iter()
            .map(|kind| pb::Value { kind })
            .collect(),
        statuses,
    };
    base64::engine::general_purpose::STANDARD.encode(message.encode_to_vec())
}

/// JSON text with every non-ASCII character escaped, so it is a valid header value.
fn ascii_json(v: &Json) -> String {
    let text = v.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        // DEL is ASCII but not allowed in a field value (RFC 9110 field-vchar): escape it too.
        if c.is_ascii() && c != '\x7f' {
            out.push(c);
        } else {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// The headers to set: the features header, and the status header when some feature is not
/// PRESENT.
pub fn render(
    route: &Route,
    (features_header, max_header_bytes, encoding): (&str, &u32, &HeaderEncoding),
    features: Vec<EntityFeatures>,
) -> Result<Vec<(String, String)>, FerryError> {
    let Some(f) = features.into_iter().next() else {
        return Ok(Vec::new());
    };
    if *encoding == HeaderEncoding::ProtobufBase64 {
        let value = protobuf_base64(route, f);
        if value.len() > *max_header_bytes as usize {
            return Err(FerryError::FeaturesTooLarge {
                size: value.len(),
                limit: *max_header_bytes,
            });
        }
        return Ok(vec![(features_header.to_string(), value)]);
    }
    let statuses = metadata::not_present(route, &f);
    let values: Map<String, Json> = route
        .output_names
        .iter()
        .cloned()
        .zip(f.values.iter().map(values::to_json))
        .collect();
    let value = ascii_json(&Json::Object(values));
    if value.len() > *max_header_bytes as usize {
        return Err(FerryError::FeaturesTooLarge {
            size: value.len(),
            limit: *max_header_bytes,
        });
    }
    let mut out = vec![(features_header.to_string(), value)];
    if !statuses.is_empty() {
        out.push((
            STATUS_HEADER.to_string(),
            ascii_json(&Json::Object(statuses)),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Format;

    /// `render` with the route's own options, as the dispatcher calls it.
    fn render(r: &Route, f: Vec<EntityFeatures>) -> Result<Vec<(String, String)>, FerryError> {
        let Format::Header {
            features_header,
            max_header_bytes,
            encoding,
        } = &r.format
        else {
            panic!("not a header route");
        };
        super::render(r, (features_header, max_header_bytes, encoding), f)
    }
    use crate::config::fixture::route_with;
    use crate::config::Config;
    use crate::vector::FeatureStatus;
    use ferry_protos::v1 as pb;
    use ferry_test_support::snapshot::header_format;
    use serde_json::json;

    fn header_route(limit: u32) -> Config {
        route_with(|r| {
            header_format(r);
            r.max_header_bytes = limit;
        })
    }

    #[test]
    fn id_from_a_header() {
        let c = header_route(0);
        let r = &c.routes[0];
        let once = |_: &str| 1;
        let p = parse(|n| (n == "x-user-id").then(|| "u1".to_string()), once, r).unwrap();
        assert_eq!(p.keys, ["u1"]);
        let e = parse(|_| Some("u1".into()), |_| 2, r).unwrap_err();
        assert_eq!(
            (e.status(), e.code()),
            (400, "duplicate_entity_id"),
            "an id header sent twice"
        );
        let e = parse(|_| None, |_| 0, r).unwrap_err();
        assert_eq!(
            (e.status(), e.message().as_str()),
            (400, "the request has no entity id field 'x-user-id'")
        );
        let e = parse(|_| Some("a\rb".into()), once, r).unwrap_err();
        assert_eq!(
            e.message(),
            "header x-user-id: id contains the control character U+000D"
        );
        // What the adapter hands over for a header value that was not UTF-8.
        let lossy = String::from_utf8_lossy(b"Z\xfcrich").into_owned();
        let e = parse(|_| Some(lossy.clone()), once, r).unwrap_err();
        assert_eq!(
            e.message(),
            "header x-user-id: id is not valid UTF-8 (or holds U+FFFD)"
        );
    }

    /// An entity with these three features, the last one stale.
    fn last_stale(values: &[Json]) -> EntityFeatures {
        EntityFeatures {
            values: crate::values::fvs(values),
            statuses: vec![
                FeatureStatus::Present,
                FeatureStatus::Present,
                FeatureStatus::OutsideMaxAge,
            ],
        }
    }

    #[test]
    fn features_are_ascii_json_and_bounded() {
        let c = header_route(0);
        let r = &c.routes[0];
        let f = last_stale(&[json!(1), json!("é\r\n\u{7f}"), Json::Null]);
        let h = render(r, vec![f]).unwrap();
        assert_eq!(h[0].0, "x-ferry-features");
        assert_eq!(
            h[0].1,
            r#"{"profile__age":1,"profile__score":"\u00e9\r\n\u007f","txn__count":null}"#
        );
        assert!(h[0]
            .1
            .bytes()
            .all(|b| b.is_ascii() && b != b'\r' && b != b'\n' && b != 0x7f));
        assert_eq!(
            h[1],
            (
                STATUS_HEADER.into(),
                r#"{"txn__count":"OUTSIDE_MAX_AGE"}"#.into()
            )
        );
        let small = header_route(10);
        let f = EntityFeatures {
            values: crate::values::fvs(&[json!(1), json!(2), json!(3)]),
            statuses: vec![FeatureStatus::Present; 3],
        };
        let e = render(&small.routes[0], vec![f]).unwrap_err();
        assert_eq!((e.status(), e.code()), (502, "features_too_large"));
    }

    #[test]
    fn features_can_be_a_base64_protobuf() {
        let c = route_with(|r| {
            header_format(r);
            r.features_encoding = pb::FeaturesEncoding::ProtobufBase64 as i32;
        });
        let r = &c.routes[0];
        let f = last_stale(&[json!(1), json!("é\r\n"), Json::Null]);
        let h = render(r, vec![f]).unwrap();
        assert_eq!(h.len(), 1, "statuses travel inside the message: {h:?}");
        assert_eq!(h[0].0, "x-ferry-features");
        assert!(h[0]
            .1
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b)));
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(&h[0].1)
            .unwrap();
        let m = pb::HeaderFeatures::decode(bytes.as_slice()).unwrap();
        assert_eq!(m.service, "scoring");
        assert_eq!(m.fingerprint, "123456789abcdef0");
        assert_eq!(m.names, ["profile__age", "profile__score", "txn__count"]);
        assert_eq!(m.values[0].kind, Some(pb::value::Kind::Int64Val(1)));
        assert_eq!(
            m.values[1].kind,
            Some(pb::value::Kind::StringVal("é\r\n".into()))
        );
        assert_eq!(m.values[2].kind, None);
        assert_eq!(
            m.statuses,
            [
                pb::FeatureStatus::Present as i32,
                pb::FeatureStatus::Present as i32,
                pb::FeatureStatus::OutsideMaxAge as i32
            ]
        );

        let c = route_with(|r| {
            header_format(r);
            r.features_encoding = pb::FeaturesEncoding::ProtobufBase64 as i32;
            r.max_header_bytes = 16;
        });
        let f = EntityFeatures {
            values: crate::values::fvs(&[json!(1), json!(2), json!(3)]),
            statuses: vec![FeatureStatus::Present; 3],
        };
        assert!(matches!(
            render(&c.routes[0], vec![f]),
            Err(FerryError::FeaturesTooLarge { limit: 16, .. })
        ));
    }
}
