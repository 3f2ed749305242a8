//! Request formats, one module per `format:` word of a route (`kserve_v1`, `kserve_v2`,
//! `kserve_v2_grpc`, `json`, `header`), and this dispatcher, which only dispatches: each format gets its options from its
//! `Format` variant. What formats share lives in `document` (the JSON body), `entity` (ids and
//! batch limits) and `metadata` (the `ferry` field); `raw_json` reads a JSON body without building
//! it (KServe v1).

pub mod declared;
pub mod document;
pub mod entity;
pub mod feast_rest;
pub mod header;
pub mod json;
pub mod kserve_v1;
pub mod kserve_v2;
pub mod kserve_v2_grpc;
pub mod metadata;
pub mod raw_json;
pub mod request_fields;

use crate::config::{Format, Route};
use crate::error::FerryError;
use crate::vector::EntityFeatures;

pub use document::{parse_json, shape};
pub use metadata::METADATA_FIELD;

/// A parsed request of any format: the document to rewrite and the entity keys found in it.
#[derive(Debug)]
pub enum ParsedRequest {
    KserveV1(kserve_v1::ParsedRequest),
    KserveV2(kserve_v2::ParsedRequest),
    KserveV2Grpc(kserve_v2_grpc::ParsedRequest),
    Json(json::ParsedRequest),
    Header(header::ParsedRequest),
    FeastRest(Box<feast_rest::ParsedRequest>),
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
            ParsedRequest::KserveV2Grpc(r) => &r.keys,
            ParsedRequest::Json(r) => &r.keys,
            ParsedRequest::Header(r) => &r.keys,
            ParsedRequest::FeastRest(r) => &r.keys,
        }
    }
}

impl ParsedRequest {
    /// The request fields of every instance, `RouteDerived::fields` per instance in order
    /// (empty when the route reads none).
    pub fn fields(&self) -> &[ferry_expr::Input<'static>] {
        match self {
            ParsedRequest::KserveV1(r) => &r.request_fields,
            ParsedRequest::KserveV2(r) => &r.fields,
            ParsedRequest::KserveV2Grpc(r) => &r.fields,
            ParsedRequest::Json(r) => &r.fields,
            ParsedRequest::Header(r) => &r.fields,
            ParsedRequest::FeastRest(r) => &r.fields,
        }
    }

    /// The `format:` word this request was parsed by.
    pub fn format_name(&self) -> &'static str {
        match self {
            ParsedRequest::KserveV1(_) => "kserve_v1",
            ParsedRequest::KserveV2(_) => "kserve_v2",
            ParsedRequest::KserveV2Grpc(_) => "kserve_v2_grpc",
            ParsedRequest::Json(_) => "json",
            ParsedRequest::Header(_) => "header",
            ParsedRequest::FeastRest(_) => "feast_rest",
        }
    }
}

impl From<kserve_v1::ParsedRequest> for ParsedRequest {
    fn from(r: kserve_v1::ParsedRequest) -> Self {
        ParsedRequest::KserveV1(r)
    }
}

/// A body route's request body, parsed by the route's format. `framing` is the request's
/// `Inference-Header-Content-Length` (KServe v2's binary tensor data extension); only
/// `kserve_v2` reads it: the other formats parse the whole body as theirs (a binary part is
/// then malformed JSON), and the filter removes the header so it cannot describe their
/// rewritten body to the model.
pub fn parse(
    body: &[u8],
    route: &Route,
    framing: Option<&str>,
) -> Result<ParsedRequest, FerryError> {
    Ok(match &route.format {
        Format::KserveV1 => ParsedRequest::KserveV1(kserve_v1::parse(body, route)?),
        Format::KserveV2 { .. } => ParsedRequest::KserveV2(kserve_v2::parse(body, route, framing)?),
        Format::KserveV2Grpc { .. } => {
            ParsedRequest::KserveV2Grpc(kserve_v2_grpc::parse(body, route)?)
        }
        Format::Json { entity_pointer, .. } => {
            ParsedRequest::Json(json::parse(body, route, entity_pointer)?)
        }
        Format::Header { .. } => return Err(shape("this route reads its entity from headers")),
        // Resolved against the whole snapshot: `feast_rest::parse`.
        Format::FeastRest => return Err(shape("a feast_rest request is parsed with the snapshot")),
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
    Ok(match (req, &route.format) {
        (ParsedRequest::KserveV1(r), Format::KserveV1) => {
            body(kserve_v1::rewrite(r, route, features))
        }
        (ParsedRequest::KserveV2(r), Format::KserveV2 { packed }) => {
            let out = kserve_v2::rewrite(r, route, *packed, features)?;
            Rewritten {
                body: Some(out.body),
                headers: out
                    .header_length
                    .map(|n| (kserve_v2::binary::HEADER.to_string(), n.to_string()))
                    .into_iter()
                    .collect(),
            }
        }
        (ParsedRequest::KserveV2Grpc(r), Format::KserveV2Grpc { packed }) => {
            body(kserve_v2_grpc::rewrite(r, route, *packed, features)?)
        }
        (
            ParsedRequest::Json(r),
            Format::Json {
                entity_pointer,
                inject_pointer,
            },
        ) => body(json::rewrite(
            r,
            route,
            (entity_pointer, inject_pointer),
            features,
        )?),
        (
            ParsedRequest::Header(_),
            Format::Header {
                features_header,
                max_header_bytes,
                encoding,
            },
        ) => Rewritten {
            body: None,
            headers: header::render(
                route,
                (features_header, max_header_bytes, encoding),
                features,
            )?,
        },
        (ParsedRequest::FeastRest(r), Format::FeastRest) => {
            body(feast_rest::response::render(&r, &features))
        }
        // A request is parsed and rewritten with the same route; said, not assumed.
        (req, format) => {
            return Err(shape(&format!(
                "a {} request cannot be written for a {format:?} route",
                req.format_name()
            )))
        }
    })
}

#[cfg(test)]
mod hostile_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixture::route_with;
    use crate::vector::FeatureStatus;
    use ferry_protos::v1 as pb;

    /// Numbers as clients send them that an f64 round trip would change or refuse (`1e400`
    /// was a 400 before), and the text the model receives: the same.
    const NUMBERS: [(&str, &str, &str); 7] = [
        ("a", "0.30000000000000004", "0.30000000000000004"),
        ("b", "1e400", "1e400"),
        ("c", "-0", "-0"),
        ("d", "12345678901234567890", "12345678901234567890"),
        ("e", "1.50", "1.50"),
        ("f", "-2.5E-7", "-2.5E-7"),
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
            let parsed = parse(body.as_bytes(), route, None).unwrap();
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
