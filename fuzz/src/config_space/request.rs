//! A request drawn from the input against the drawn configuration: a path (one of a route's,
//! or under the root but no route's, or outside it), a method, headers (pseudo-headers, the
//! route's id and request-field headers, forged Ferry-owned ones, a content-length right or
//! wrong), a body in the route's format (ids of the right or wrong type, request-field values
//! of any JSON type, client-declared sizes — shapes, binary lengths — up to 2^62, duplicate
//! tensors, forged values under every Ferry-owned name), split into data frames, and trailers.
//!
//! Forged values are the canaries `FORGED` and `FORGED_NUMBER`; nothing else a run produces
//! spells them (ids, request fields and the reader's values come from other tables), so
//! finding one under a Ferry-owned name upstream means a client value got through.

use ferry_core::config::{Config, Format, KeyKind, Route};
use ferry_core::format::kserve_v2::PACKED_TENSOR;
use ferry_protos::inference::infer_parameter::ParameterChoice;
use ferry_protos::inference::model_infer_request::InferInputTensor;
use ferry_protos::inference::{InferTensorContents, ModelInferRequest};
use ferry_protos::v1::ValueType as T;
use serde_json::{json, Map, Value as Json};

use crate::bypass::scenario::{chunks_at, feast_extras, id_fields};

use super::pick::Pick;
use super::snapshot::{route_prefix, ROOT, TENANT};

pub const FORGED: &str = "forged";
pub const FORGED_NUMBER: i64 = 987_654_321;

/// Where the drawn path leads (the drawn routes have distinct prefixes and no other condition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Route(usize),
    /// Under the root but no route's prefix.
    NoRoute,
    /// Outside the root.
    Outside,
}

#[derive(Debug, Clone)]
pub struct Request {
    pub target: Target,
    /// The route the body is shaped for (the target's, or any for a path no route takes).
    pub shape: usize,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub chunks: Vec<Vec<u8>>,
    pub trailers: Vec<(String, String)>,
    /// Some size the client declares is over every limit (see `Pick::hostile_size`).
    pub hostile_size: bool,
    /// Some value under a Ferry-owned name (body, header or trailer) is forged.
    pub forged: bool,
}

/// Client-declared row counts for a tensor, over every limit and none (issue #31).
const HUGE: [u64; 5] = [4_294_967_295, 1 << 35, 1 << 62, 4_294_967_296, 65_536];

pub fn request(p: &mut Pick<'_>, config: &Config) -> Request {
    let routes = config.routes.len();
    let shape = p.below(routes);
    let target = match p.below(12) {
        10 => Target::NoRoute,
        11 => Target::Outside,
        _ => Target::Route(shape),
    };
    let path = match target {
        Target::Route(i) => format!("{}{}", route_prefix(i), p.of(&["infer", "", "a/b?x=1"])),
        Target::NoRoute => format!("{ROOT}none/infer"),
        Target::Outside => "/open/infer".to_string(),
    };
    let route = &config.routes[shape];
    // The host and tenant header, and whether the route's conditions hold for them (worked out
    // here from what was drawn, not by the filter's matcher): when they do not, the route's
    // path leads nowhere (the drawn routes have distinct prefixes).
    let (authority, host_ok) = p.of(&[
        ("models.example", [true, true]),
        ("MODELS.example:8080", [true, true]),
        ("other.test", [false, false]),
        ("example", [false, false]),
    ]);
    let tenant = p.of(&[Some("a"), None, Some("b")]);
    let target = match target {
        Target::Route(i) if !conditions_hold(&config.routes[i], host_ok, tenant) => Target::NoRoute,
        t => t,
    };
    let method = p.of(&["POST", "POST", "PUT", "GET", "HEAD"]);
    let grpc = matches!(route.format, Format::KserveV2Grpc { .. });
    let mut headers: Vec<(String, String)> = vec![
        (":method".into(), method.into()),
        (":path".into(), path),
        (":authority".into(), authority.into()),
    ];
    if let Some(t) = tenant {
        headers.push((TENANT.into(), t.into()));
    }
    // Envoy's connection manager gives every request an `x-request-id` before any filter runs
    // (the served-feature log picks requests by it): without one no log record is ever written.
    // Not drawn, so the kept corpus decodes as before.
    headers.push((
        "x-request-id".into(),
        format!(
            "{authority}-{method}-{n_routes}",
            n_routes = config.routes.len()
        ),
    ));
    if grpc && !p.one_in(8) {
        headers.push(("content-type".into(), "application/grpc".into()));
    }
    let n = p.of(&[1usize, 2, 3, 0, 65, 4]);
    let mut body = match p.below(10) {
        8 => p.bytes(96),
        9 => Vec::new(),
        _ => body(p, route, n, &mut headers),
    };
    if p.one_in(10) && !body.is_empty() {
        // Cut short.
        let at = p.below(body.len());
        body.truncate(at);
    }
    if matches!(route.format, Format::Header { .. }) {
        header_ids(p, route, &mut headers);
    }
    match p.below(4) {
        1 => headers.push(("content-length".into(), body.len().to_string())),
        2 => headers.push(("content-length".into(), "3".into())),
        3 => headers.push(("content-length".into(), "99999999999".into())),
        _ => {}
    }
    for _ in 0..p.below(5) {
        let name = p.of(&[
            "x-ferry-status",
            "x-ferry-features",
            "x-ferry-service",
            "x-ferry-fingerprint",
            "x-ferry-feature-status",
            "x-ferry-derived-version",
            "model-features",
        ]);
        let value = p.of(&[FORGED.to_string(), FORGED_NUMBER.to_string()]);
        headers.push((name.into(), value));
    }
    let chunks = if !body.is_empty() || p.one_in(6) {
        let cuts: Vec<usize> = (0..p.below(4)).map(|_| p.below(body.len() + 1)).collect();
        chunks_at(&body, cuts)
    } else {
        Vec::new()
    };
    let trailers = if p.one_in(4) {
        vec![("x-ferry-status".into(), FORGED.into())]
    } else {
        vec![]
    };
    let forged =
        spells(&body) || headers.iter().any(|(_, v)| spells(v.as_bytes())) || !trailers.is_empty();
    Request {
        target,
        shape,
        headers,
        body,
        chunks,
        trailers,
        hostile_size: p.hostile_size,
        forged,
    }
}

/// Whether route `r`'s host and header conditions hold for the drawn authority (whether it is
/// `models.example` or a subdomain of `example`: [exact, subdomain]) and tenant header.
fn conditions_hold(r: &Route, host_ok: [bool; 2], tenant: Option<&str>) -> bool {
    use ferry_core::config::HostMatch;
    let host = match &r.conditions.host {
        None => true,
        Some(HostMatch::Exact(_)) => host_ok[0],
        Some(HostMatch::Subdomain(_)) => host_ok[1],
    };
    let header = r
        .conditions
        .headers
        .iter()
        .all(|m| match (tenant, &m.exact) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(v), Some(want)) => v == want,
        });
    host && header
}

/// A forged value for a Ferry-owned name.
fn forged(p: &mut Pick<'_>) -> Json {
    p.of(&[
        json!(FORGED_NUMBER),
        json!(FORGED),
        json!({ "v": FORGED }),
        json!([FORGED_NUMBER]),
    ])
}

fn id(p: &mut Pick<'_>, int: bool) -> Json {
    if int {
        p.of(&[
            json!(1),
            json!(2),
            json!(i64::MAX),
            json!(-1),
            json!("7"),
            json!(1.5),
        ])
    } else {
        p.of(&[
            json!("u1"),
            json!("u2"),
            json!(""),
            json!("a".repeat(ferry_protos::limits::MAX_KEY_PART_BYTES + 1)),
            json!(5),
            json!("é"),
        ])
    }
}

/// A request field's value: mostly of its type, else absent (None), null, or another type.
fn field_value(p: &mut Pick<'_>, t: T) -> Option<Json> {
    let typed = match t {
        T::Float64 => p.of(&[json!(12.5), json!(-0.25), json!(7), json!(1e300)]),
        T::Int64 => p.of(&[json!(3), json!(-1), json!(i64::MAX), json!(0)]),
        T::Bool => p.of(&[json!(true), json!(false)]),
        T::String => p.of(&[json!("FR"), json!("DE"), json!(""), json!("é\u{1}")]),
        _ => p.of(&[json!([0.5, 1.5]), json!([]), json!([1e300])]),
    };
    match p.below(10) {
        0 => None,
        1 => Some(Json::Null),
        2 => Some(p.of(&[json!("12.5"), json!(true), json!({ "v": 1 }), json!([1])])),
        _ => Some(typed),
    }
}

/// One entity object: ids (one sometimes missing), request fields, forged Ferry names.
fn entity(p: &mut Pick<'_>, route: &Route, inject: &str) -> Map<String, Json> {
    let mut obj = Map::new();
    for (field, int) in id_fields(route) {
        if !p.one_in(16) {
            obj.insert(field, id(p, int));
        }
    }
    for f in &route.derived.fields {
        if let Some(v) = field_value(p, f.value_type) {
            obj.insert(f.field.clone(), v);
        }
    }
    if !route.output_names.is_empty() {
        for _ in 0..p.below(3) {
            let name = p.of(&route.output_names);
            let v = forged(p);
            if inject.is_empty() {
                obj.insert(name, v);
            } else {
                let key = inject.trim_start_matches('/').to_string();
                let slot = obj.entry(key).or_insert_with(|| json!({}));
                if let Json::Object(m) = slot {
                    m.insert(name, v);
                }
            }
        }
    }
    obj
}

fn body(p: &mut Pick<'_>, route: &Route, n: usize, headers: &mut Vec<(String, String)>) -> Vec<u8> {
    let mut doc = match &route.format {
        Format::KserveV1 | Format::Header { .. } => {
            let instances: Vec<Json> = (0..n).map(|_| Json::Object(entity(p, route, ""))).collect();
            json!({ "instances": instances })
        }
        Format::Json {
            entity_pointer,
            inject_pointer,
        } => {
            let entities: Vec<Json> = (0..n)
                .map(|_| Json::Object(entity(p, route, inject_pointer)))
                .collect();
            let target = match (p.one_in(3), entities.first()) {
                (true, Some(e)) => e.clone(),
                _ => Json::Array(entities),
            };
            let mut doc = target;
            for seg in entity_pointer
                .split('/')
                .skip(1)
                .collect::<Vec<_>>()
                .iter()
                .rev()
            {
                let mut m = Map::new();
                m.insert(seg.to_string(), doc);
                doc = Json::Object(m);
            }
            doc
        }
        Format::KserveV2 { .. } | Format::KserveV2Grpc { .. } => kserve_v2(p, route, n),
        Format::FeastRest => feast(p, route, n),
    };
    let is_header = matches!(route.format, Format::Header { .. });
    if let Json::Object(m) = &mut doc {
        if p.one_in(2) && !is_header {
            m.insert("ferry".into(), forged(p));
        }
    }
    match route.format {
        Format::KserveV2Grpc { .. } => grpc(p, &doc),
        Format::KserveV2 { .. } if p.one_in(4) => binary(p, doc, headers),
        _ => doc.to_string().into_bytes(),
    }
}

/// A tensor's shape: mostly the rows it holds, sometimes a size the client made up.
fn shape(p: &mut Pick<'_>, rows: usize, width: Option<usize>) -> Json {
    let declared = if p.one_in(4) {
        p.hostile_size = true;
        p.of(&HUGE)
    } else {
        rows as u64
    };
    match width {
        Some(w) => json!([declared, w]),
        None if p.one_in(4) => json!([declared, 1]),
        None => json!([declared]),
    }
}

fn datatype(t: T) -> &'static str {
    match t {
        T::Float64 => "FP64",
        T::Int64 => "INT64",
        T::Bool => "BOOL",
        T::String => "BYTES",
        _ => "FP32",
    }
}

fn kserve_v2(p: &mut Pick<'_>, route: &Route, n: usize) -> Json {
    let mut inputs = Vec::new();
    for (field, int) in id_fields(route) {
        if p.one_in(16) {
            continue;
        }
        let data: Vec<Json> = (0..n).map(|_| id(p, int)).collect();
        let t = json!({"name": field, "shape": shape(p, n, None),
            "datatype": if int { "INT64" } else { "BYTES" }, "data": data});
        if p.one_in(16) {
            inputs.push(t.clone());
        }
        inputs.push(t);
    }
    for f in &route.derived.fields {
        if p.one_in(8) {
            continue;
        }
        let list = f.value_type == T::Float32List;
        let empty = p.one_in(3);
        let data: Vec<Json> = if empty {
            Vec::new()
        } else {
            (0..n)
                .map(|_| field_value(p, f.value_type).unwrap_or(Json::Null))
                .collect()
        };
        let width = list.then_some(2);
        let t = json!({"name": f.field, "shape": shape(p, n, width),
            "datatype": p.of(&[datatype(f.value_type), "BYTES", "FP32"]), "data": data});
        if p.one_in(8) {
            // The same request field twice: the model might read the other one.
            inputs.push(t.clone());
        }
        inputs.push(t);
    }
    inputs.push(json!({"name": "x", "shape": [n], "datatype": "FP32", "data": vec![0.5; n]}));
    for _ in 0..p.below(3) {
        let name = if p.one_in(3) || route.output_names.is_empty() {
            PACKED_TENSOR.to_string()
        } else {
            p.of(&route.output_names)
        };
        let t = p.of(&[
            json!({"name": name, "shape": [1], "datatype": "INT64", "data": [FORGED_NUMBER]}),
            json!({"name": name, "shape": [1], "datatype": "BYTES", "data": [FORGED]}),
        ]);
        inputs.push(t);
    }
    let mut doc = json!({ "inputs": inputs });
    if p.one_in(2) {
        doc["parameters"] = json!({"ferry_statuses": FORGED, "ferry_service": FORGED,
            "ferry_fingerprint": FORGED, "temperature": 0.5});
    }
    doc
}

/// The binary tensor data extension: the last tensor's data moved after the JSON header,
/// declared by a `binary_data_size` that may not add up.
fn binary(p: &mut Pick<'_>, mut doc: Json, headers: &mut Vec<(String, String)>) -> Vec<u8> {
    let bytes = p.bytes(24);
    if let Some(t) = doc["inputs"].as_array_mut().and_then(|i| i.first_mut()) {
        if let Some(m) = t.as_object_mut() {
            m.remove("data");
            let size = p.of(&[bytes.len() as u64, 1 << 40, 4_294_967_295, 0]);
            p.hostile_size |= size > 1 << 20;
            m.insert("parameters".into(), json!({ "binary_data_size": size }));
        }
    }
    let header = doc.to_string().into_bytes();
    let declared = p.of(&[header.len().to_string(), "4294967295".into(), "0".into()]);
    p.hostile_size |= declared == "4294967295";
    headers.push(("inference-header-content-length".into(), declared));
    let mut out = header;
    out.extend(bytes);
    out
}

fn feast(p: &mut Pick<'_>, route: &Route, n: usize) -> Json {
    let mut entities = Map::new();
    let services: Vec<_> = route.feast_services.iter().collect();
    for s in &services {
        for k in &s.entity_keys {
            if !p.one_in(6) && !entities.contains_key(&k.join_key) {
                let int = k.kind == KeyKind::Int64;
                let ids: Vec<Json> = (0..n).map(|_| id(p, int)).collect();
                entities.insert(k.join_key.clone(), Json::Array(ids));
            }
        }
    }
    for f in &route.derived.fields {
        let vals: Vec<Json> = (0..n)
            .map(|_| field_value(p, f.value_type).unwrap_or(Json::Null))
            .collect();
        entities.insert(f.field.clone(), Json::Array(vals));
    }
    let mut doc = json!({ "entities": entities });
    let s = p.of(&services);
    if p.one_in(2) {
        doc["feature_service"] = json!(s.name);
    } else {
        let mut refs: Vec<String> = s
            .views
            .iter()
            .flat_map(|v| {
                v.features
                    .iter()
                    .map(move |f| format!("{}:{}", v.name, f.name))
            })
            .collect();
        refs.push("nope:x".into());
        let take = 1 + p.below(refs.len());
        doc["features"] = json!(refs[..take]);
    }
    let (full, forge) = (p.one_in(2), p.one_in(2));
    feast_extras(&mut doc, full, forge);
    doc
}

/// Header mode: each id field (and request field) in a header of its name; sometimes one twice
/// or missing.
fn header_ids(p: &mut Pick<'_>, route: &Route, headers: &mut Vec<(String, String)>) {
    let text = |v: Json| match v {
        Json::String(s) => s,
        other => other.to_string(),
    };
    for (field, int) in id_fields(route) {
        if p.one_in(10) {
            continue;
        }
        let v = text(id(p, int));
        if p.one_in(10) {
            headers.push((field.clone(), v.clone()));
        }
        headers.push((field, v));
    }
    for f in &route.derived.fields {
        if let Some(v) = field_value(p, f.value_type) {
            headers.push((f.field.clone(), text(v)));
        }
    }
}

/// The KServe v2 document as a framed `ModelInferRequest`: typed contents, or raw contents;
/// shapes as the client wrote them, or -1 (gRPC's shapes are signed).
fn grpc(p: &mut Pick<'_>, doc: &Json) -> Vec<u8> {
    let raw = p.one_in(3);
    let mut r = ModelInferRequest {
        model_name: "m".into(),
        ..Default::default()
    };
    for t in doc["inputs"].as_array().into_iter().flatten() {
        let datatype = t["datatype"].as_str().unwrap_or("BYTES").to_string();
        let data = crate::grpc::tensor_data(t);
        let mut shape: Vec<i64> = t["shape"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(Json::as_u64)
                    .map(|d| d as i64)
                    .collect()
            })
            .unwrap_or_default();
        if p.one_in(10) && !shape.is_empty() {
            p.hostile_size = true;
            shape[0] = -1;
        }
        let mut c = InferTensorContents::default();
        let mut bytes = Vec::new();
        let f = |v: &&Json| v.as_f64().unwrap_or(0.0);
        match datatype.as_str() {
            "INT64" => {
                c.int64_contents = data.iter().map(|v| v.as_i64().unwrap_or(0)).collect();
                c.int64_contents
                    .iter()
                    .for_each(|x| bytes.extend(x.to_le_bytes()));
            }
            "FP64" => {
                c.fp64_contents = data.iter().map(f).collect();
                c.fp64_contents
                    .iter()
                    .for_each(|x| bytes.extend(x.to_le_bytes()));
            }
            "FP32" => {
                c.fp32_contents = data.iter().map(|v| f(v) as f32).collect();
                c.fp32_contents
                    .iter()
                    .for_each(|x| bytes.extend(x.to_le_bytes()));
            }
            "BOOL" => {
                c.bool_contents = data.iter().map(|v| v.as_bool().unwrap_or(false)).collect();
                c.bool_contents
                    .iter()
                    .for_each(|x| bytes.push(u8::from(*x)));
            }
            _ => {
                c.bytes_contents = data
                    .iter()
                    .map(|v| match v {
                        Json::String(s) => s.clone().into_bytes(),
                        other => other.to_string().into_bytes(),
                    })
                    .collect();
                for b in &c.bytes_contents {
                    // A raw BYTES element is a u32le length then the bytes; sometimes a length
                    // the client made up.
                    let len = if p.one_in(8) {
                        p.hostile_size = true;
                        u32::MAX
                    } else {
                        b.len() as u32
                    };
                    bytes.extend(len.to_le_bytes());
                    bytes.extend(b);
                }
            }
        }
        let mut input = InferInputTensor {
            name: t["name"].as_str().unwrap_or("").into(),
            datatype,
            shape,
            ..Default::default()
        };
        if raw {
            r.raw_input_contents.push(bytes);
        } else {
            input.contents = Some(c);
        }
        r.inputs.push(input);
    }
    crate::grpc::set_parameters(&mut r, doc, |v| match v {
        Json::String(s) => ParameterChoice::StringParam(s.clone()),
        other => ParameterChoice::DoubleParam(other.as_f64().unwrap_or(0.0)),
    });
    crate::grpc::framed(&r)
}

/// Whether these bytes spell a canary (a value only the client's forged fields hold).
pub fn spells(bytes: &[u8]) -> bool {
    let has = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    has(FORGED.as_bytes()) || has(FORGED_NUMBER.to_string().as_bytes())
}
