//! The invariant, on what reached the model: every Ferry-owned place (each route output name
//! in the body, the `ferry` metadata, KServe v2's `ferry_*` parameters and feature tensors,
//! `x-ferry-*` headers, a route's features header) holds exactly what Ferry wrote from the
//! reader's vectors, or is absent where Ferry wrote nothing.

use base64::Engine;
use ferry_core::config::{Config, Format, HeaderEncoding, Route};
use ferry_core::format::kserve_v2::PACKED_TENSOR;
use ferry_protos::v1 as pb;
use prost::Message;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{json, Value as Json};

use super::expected::{json_of, same, Expected};

pub type Headers = Vec<(String, String)>;

/// Whether Ferry owns this request header: `x-ferry-*`, or a route's features header.
pub fn owned_header(config: &Config, name: &str) -> bool {
    name.starts_with("x-ferry-")
        || config.routes.iter().any(|r| {
            matches!(&r.format, Format::Header { features_header, .. } if features_header == name)
        })
}

/// The owned headers of a request, by name; a name sent twice is a failure.
fn owned_headers(config: &Config, headers: &Headers) -> Vec<(String, String)> {
    let owned: Vec<(String, String)> = headers
        .iter()
        .filter(|(n, _)| owned_header(config, n))
        .cloned()
        .collect();
    for (i, (n, _)) in owned.iter().enumerate() {
        assert!(
            !owned[..i].iter().any(|(m, _)| m == n),
            "owned header {n} reaches the model twice: {owned:?}"
        );
    }
    owned
}

/// A check of one owned header's value by meaning (JSON, protobuf) rather than text.
pub type ValueCheck<'a> = (&'a str, &'a dyn Fn(&str));

/// Exactly these owned headers reach the model: `exact` with these values, `checked` with
/// values their check accepts; no other owned header.
pub fn assert_owned_headers(
    config: &Config,
    headers: &Headers,
    exact: &[(String, String)],
    checked: &[ValueCheck<'_>],
) {
    let got = owned_headers(config, headers);
    for (name, value) in &got {
        if let Some((_, check)) = checked.iter().find(|(n, _)| n == name) {
            check(value);
            continue;
        }
        match exact.iter().find(|(n, _)| n == name) {
            Some((_, w)) => assert_eq!(value, w, "owned header {name}"),
            None => panic!("owned header {name}: {value:?} reaches the model; Ferry wrote none"),
        }
    }
    let wanted = exact.iter().map(|(n, _)| n.as_str());
    for name in wanted.chain(checked.iter().map(|(n, _)| *n)) {
        assert!(
            got.iter().any(|(n, _)| n == name),
            "owned header {name} is missing: {got:?}"
        );
    }
}

/// A JSON document that refuses duplicate object keys (a model's parser might read the other
/// one): only whether it parses matters.
struct Strict;

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Strict, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_str<E>(self, _: &str) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Strict, A::Error> {
        while s.next_element::<Strict>()?.is_some() {}
        Ok(Strict)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Strict, A::Error> {
        let mut keys: Vec<String> = Vec::new();
        while let Some(k) = m.next_key::<String>()? {
            if keys.contains(&k) {
                return Err(de::Error::custom(format!("duplicate key {k:?}")));
            }
            m.next_value::<Strict>()?;
            keys.push(k);
        }
        Ok(Strict)
    }
}

/// Why `body` is not JSON without duplicate keys, if it is not.
pub(crate) fn strict_problem(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<Strict>(body)
        .err()
        .map(|e| e.to_string())
}

/// The body the model receives, parsed; it must be JSON without duplicate keys.
pub fn parse_body(body: &[u8]) -> Json {
    if let Err(e) = serde_json::from_slice::<Strict>(body) {
        panic!(
            "the body Ferry forwarded is not strict JSON ({e}): {}",
            String::from_utf8_lossy(body)
        );
    }
    serde_json::from_slice(body).unwrap_or(Json::Null)
}

fn assert_same(what: &str, got: Option<&Json>, want: &Json) {
    match got {
        Some(g) if same(g, want) => {}
        Some(g) => panic!("{what} is {g}, Ferry wrote {want}"),
        None => panic!("{what} is missing, Ferry wrote {want}"),
    }
}

/// The entity objects of a JSON route's document (the object or the objects of the array at
/// its entity pointer).
fn json_entities<'a>(route: &Route, doc: &'a Json) -> Vec<&'a Json> {
    let Format::Json { entity_pointer, .. } = &route.format else {
        return Vec::new();
    };
    match doc.pointer(entity_pointer) {
        Some(Json::Array(items)) => items.iter().collect(),
        Some(obj @ Json::Object(_)) => vec![obj],
        _ => Vec::new(),
    }
}

/// An instance that went upstream on a route computing on-demand features held each request
/// field as declared (absent, null or a finite number for the fixture's float64 field): one of
/// another type is the client's 400 `invalid_request_field`, never converted.
fn assert_request_fields(route: &Route, instance: &Json) {
    for f in &route.derived.fields {
        match instance.get(&f.field) {
            None | Some(Json::Null) => {}
            Some(Json::Number(n)) if n.as_f64().is_some_and(f64::is_finite) => {}
            Some(other) => panic!("request field {} was {other}, yet forwarded", f.field),
        }
    }
}

/// The features header's value is what Ferry wrote for the one entity.
pub fn check_features_header(route: &Route, want: &Expected, value: &str) {
    let Format::Header { encoding, .. } = &route.format else {
        return;
    };
    let e = &want.entities[0];
    match encoding {
        HeaderEncoding::Json => {
            let got: Json = serde_json::from_str(value)
                .unwrap_or_else(|err| panic!("features header is not JSON ({err}): {value}"));
            assert_same("the features header", Some(&got), &e.object(route));
        }
        HeaderEncoding::ProtobufBase64 => {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(value)
                .unwrap_or_else(|err| panic!("features header is not base64 ({err})"));
            let m = pb::HeaderFeatures::decode(raw.as_slice())
                .unwrap_or_else(|err| panic!("features header is not HeaderFeatures ({err})"));
            assert_eq!(m.names, route.output_names);
            assert_eq!(m.service, route.services_label);
            assert_eq!(m.fingerprint, route.fingerprints_label);
            let values: Vec<Option<pb::value::Kind>> =
                m.values.into_iter().map(|v| v.kind).collect();
            assert_eq!(values, e.values, "features header values");
            let statuses: Vec<&str> = m
                .statuses
                .iter()
                .map(|s| match pb::FeatureStatus::try_from(*s) {
                    Ok(pb::FeatureStatus::Present) => "PRESENT",
                    Ok(pb::FeatureStatus::NotFound) => "NOT_FOUND",
                    Ok(pb::FeatureStatus::OutsideMaxAge) => "OUTSIDE_MAX_AGE",
                    Ok(pb::FeatureStatus::NullValue) => "NULL_VALUE",
                    _ => "?",
                })
                .collect();
            let want: Vec<&str> = e.statuses.iter().map(|s| s.as_str()).collect();
            assert_eq!(statuses, want, "features header statuses");
        }
    }
}

/// Every Ferry-owned place of an enriched body holds what Ferry wrote.
pub fn check_enriched_body(route: &Route, want: &Expected, doc: &Json) {
    let n = want.entities.len();
    match &route.format {
        Format::KserveV1 => {
            let instances = doc["instances"].as_array().map_or(&[][..], Vec::as_slice);
            assert_eq!(instances.len(), n, "instances forwarded vs looked up");
            for (i, (inst, e)) in instances.iter().zip(&want.entities).enumerate() {
                assert_request_fields(route, inst);
                for (name, v) in route.output_names.iter().zip(&e.values) {
                    assert_same(
                        &format!("instances[{i}].{name}"),
                        inst.get(name),
                        &json_of(v),
                    );
                }
            }
            assert_same("ferry", doc.get("ferry"), &want.metadata(route));
        }
        Format::KserveV2 { packed } => {
            let inputs = doc["inputs"].as_array().map_or(&[][..], Vec::as_slice);
            let named = |name: &str| -> Vec<&Json> {
                inputs.iter().filter(|t| t["name"] == name).collect()
            };
            let packed_tensors = named(PACKED_TENSOR);
            if *packed {
                assert_eq!(packed_tensors.len(), 1, "{PACKED_TENSOR} tensors");
                let t = packed_tensors[0];
                let f = route.output_names.len();
                assert_same("the packed tensor's shape", t.get("shape"), &json!([n, f]));
                assert_same(
                    "the packed tensor",
                    t.get("data"),
                    &Json::Array(want.packed()),
                );
                for name in &route.output_names {
                    assert!(named(name).is_empty(), "a tensor {name} on a packed route");
                }
            } else {
                assert!(
                    packed_tensors.is_empty(),
                    "{PACKED_TENSOR} on a typed route"
                );
                let tensors = want
                    .tensors(route)
                    .unwrap_or_else(|why| panic!("forwarded although {why}"));
                for (name, (shape, data)) in route.output_names.iter().zip(tensors) {
                    let got = named(name);
                    assert_eq!(got.len(), 1, "tensors named {name}");
                    assert_same(
                        &format!("tensor {name}'s shape"),
                        got[0].get("shape"),
                        &shape,
                    );
                    assert_same(
                        &format!("tensor {name}"),
                        got[0].get("data"),
                        &Json::Array(data),
                    );
                }
            }
            let p = &doc["parameters"];
            assert_same(
                "ferry_service",
                p.get("ferry_service"),
                &json!(route.services_label),
            );
            assert_same(
                "ferry_fingerprint",
                p.get("ferry_fingerprint"),
                &json!(route.fingerprints_label),
            );
            let statuses: Json = p["ferry_statuses"]
                .as_str()
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or(Json::Null);
            assert_same(
                "ferry_statuses",
                Some(&statuses),
                &want.metadata(route)["statuses"],
            );
        }
        Format::Json { inject_pointer, .. } => {
            let entities = json_entities(route, doc);
            assert_eq!(entities.len(), n, "entities forwarded vs looked up");
            for (i, (obj, e)) in entities.iter().zip(&want.entities).enumerate() {
                assert_request_fields(route, obj);
                if inject_pointer.is_empty() {
                    for (name, v) in route.output_names.iter().zip(&e.values) {
                        assert_same(&format!("entity {i}'s {name}"), obj.get(name), &json_of(v));
                    }
                } else {
                    let what = format!("entity {i}'s {inject_pointer}");
                    assert_same(&what, obj.pointer(inject_pointer), &e.object(route));
                }
            }
            if doc.is_object() {
                assert_same("ferry", doc.get("ferry"), &want.metadata(route));
            }
        }
        // A feast_rest request is answered by the filter, never forwarded; a kserve_v2_grpc body
        // is checked as protobuf (`grpc::check_enriched`).
        Format::Header { .. } | Format::FeastRest | Format::KserveV2Grpc { .. } => {}
    }
}

/// One id as the filter turns it into a key part (strings as they are, integers in decimal).
fn id_text(v: &Json, int: bool) -> String {
    match (v, int) {
        (Json::String(s), false) => s.clone(),
        (Json::Number(n), true) => n
            .as_i64()
            .map_or_else(|| format!("?{n}"), |i| i.to_string()),
        (other, _) => format!("?{other}"),
    }
}

/// The entity keys the model sees in what reached it (one per service of the route for each
/// entity, as the filter orders them): the features Ferry wrote must be those of these keys.
/// An id header or tensor that reached the model twice is a failure (the model may read the
/// other one).
pub fn model_keys(route: &Route, headers: &Headers, doc: &Json) -> Vec<String> {
    let mut per_entity: Vec<Vec<Vec<String>>> = Vec::new();
    let fields = |p: usize| {
        let part = &route.parts[p];
        part.entity_fields
            .iter()
            .zip(&part.service.entity_keys)
            .map(|(f, k)| (f.as_str(), k.kind == ferry_core::config::KeyKind::Int64))
            .collect::<Vec<_>>()
    };
    let objects: Vec<&Json> = match &route.format {
        Format::KserveV1 => doc["instances"]
            .as_array()
            .map_or(Vec::new(), |a| a.iter().collect()),
        Format::Json { .. } => json_entities(route, doc),
        _ => Vec::new(),
    };
    match &route.format {
        Format::Header { .. } => {
            let mut parts = Vec::new();
            for p in 0..route.parts.len() {
                let mut ids = Vec::new();
                for (f, int) in fields(p) {
                    let values: Vec<&String> = headers
                        .iter()
                        .filter(|(n, _)| n == f)
                        .map(|(_, v)| v)
                        .collect();
                    assert_eq!(
                        values.len(),
                        1,
                        "id header {f} reaches the model as {values:?}"
                    );
                    let v = values[0];
                    ids.push(if int {
                        v.trim()
                            .parse::<i64>()
                            .map_or(format!("?{v}"), |i| i.to_string())
                    } else {
                        v.clone()
                    });
                }
                parts.push(ids);
            }
            per_entity.push(parts);
        }
        Format::KserveV2 { .. } | Format::KserveV2Grpc { .. } => {
            let inputs = doc["inputs"].as_array().map_or(&[][..], Vec::as_slice);
            let mut columns: Vec<Vec<Vec<String>>> = Vec::new();
            for p in 0..route.parts.len() {
                let mut cols = Vec::new();
                for (f, int) in fields(p) {
                    let named: Vec<&Json> = inputs.iter().filter(|t| t["name"] == f).collect();
                    assert_eq!(
                        named.len(),
                        1,
                        "id tensor {f} reaches the model {} times",
                        named.len()
                    );
                    let data = named[0]["data"].as_array().map_or(&[][..], Vec::as_slice);
                    let flat: Vec<String> = data
                        .iter()
                        .flat_map(|v| match v {
                            Json::Array(inner) => inner.iter().collect::<Vec<_>>(),
                            other => vec![other],
                        })
                        .map(|v| id_text(v, int))
                        .collect();
                    cols.push(flat);
                }
                columns.push(cols);
            }
            let n = columns.first().and_then(|c| c.first()).map_or(0, Vec::len);
            for i in 0..n {
                per_entity.push(
                    columns
                        .iter()
                        .map(|cols| {
                            cols.iter()
                                .map(|c| c.get(i).cloned().unwrap_or_default())
                                .collect()
                        })
                        .collect(),
                );
            }
        }
        _ => {
            for obj in objects {
                per_entity.push(
                    (0..route.parts.len())
                        .map(|p| {
                            fields(p)
                                .into_iter()
                                .map(|(f, int)| obj.get(f).map_or("?".into(), |v| id_text(v, int)))
                                .collect()
                        })
                        .collect(),
                );
            }
        }
    }
    per_entity
        .into_iter()
        .flat_map(|parts| parts.into_iter().map(|ids| ferry_protos::entity_key(&ids)))
        .collect()
}
