//! A fuzz input decoded into one request as Envoy would deliver it: the path (a spelling of
//! one of the fixture's routes, or of no route), method, headers (with forged Ferry-owned ones
//! and duplicate ids), a body split into data frames (with forged feature fields), whether
//! trailers end the stream, and what the reader will answer. Every choice reads one byte; an
//! exhausted input reads zeros, so any input is a valid scenario and short inputs are the
//! plain ones (POST of a well-formed request on a route, the reader finds everything).

use ferry_core::config::{Config, Format, KeyKind, Route};
use serde_json::{json, Map, Value as Json};

use super::input::Bytes;
use super::path::Expect;

/// The number a forged field holds; synthesized features never produce it.
pub const FORGED_NUMBER: i64 = 987_654_321;
/// The string a forged field or header holds; synthesized features never produce it.
pub const FORGED: &str = "forged";

/// What the reader does with the one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReaderPlan {
    /// 200 with a vector (or none) for each key asked, synthesized when the call is answered.
    Vectors,
    /// An error status, with the reader's JSON error (`Some(code)`) or a plain body.
    Status(u16, Option<&'static str>),
    /// The call fails without a response (reset, timeout): no headers, no body.
    NoResponse,
    /// 200 whose body is not a VectorResponse.
    Garbage,
    /// 200 with one vector too few.
    WrongCount,
    /// The call never comes back (the request stays paused).
    Never,
    /// `dispatch_http_call` itself fails (unknown cluster).
    DispatchFails,
}

impl ReaderPlan {
    /// Whether the filter may forward the request unenriched after this answer (under
    /// `on_reader_error: forward`): only a failure of the reader path, never a reader refusal
    /// (4xx) nor an unusable answer.
    pub fn may_fail_open(&self) -> bool {
        match self {
            ReaderPlan::Status(s, _) => !(400..500).contains(s),
            ReaderPlan::NoResponse | ReaderPlan::DispatchFails => true,
            _ => false,
        }
    }
}

pub struct Scenario {
    pub path: String,
    pub expect: Expect,
    pub method: String,
    pub headers: Vec<(String, String)>,
    /// The whole body as the client sent it, and its data frames (their concatenation).
    pub body: Vec<u8>,
    pub chunks: Vec<Vec<u8>>,
    pub trailers: bool,
    pub reader: ReaderPlan,
    /// After which stream callback the reader answers, if its call is out by then (0 = the
    /// headers, i = data frame i, chunks + 1 = the trailers); later than all: at the end.
    pub answer_after: usize,
    /// An answer with a token that is not the call's is delivered first.
    pub stray_answer: bool,
    /// The answer is delivered a second time afterwards (must be ignored).
    pub late_answer: bool,
}

const METHODS: [&str; 9] = [
    "POST", "POST", "POST", "PUT", "PATCH", "GET", "DELETE", "HEAD", "post",
];

impl Scenario {
    pub fn decode(b: &mut Bytes<'_>, config: &Config) -> Scenario {
        let (path, expect, base) = super::path::path(b, config);
        let shape = match expect {
            Expect::Route(r) => r,
            _ => base,
        };
        let shape = if b.one_in(8) {
            b.below(config.routes.len())
        } else {
            shape
        };
        let method = METHODS[b.below(METHODS.len())].to_string();
        let route = &config.routes[shape];
        let body = match b.below(8) {
            6 => b.raw(64),
            7 => Vec::new(),
            _ => {
                let doc = body(b, route);
                match route.format {
                    Format::KserveV2Grpc { .. } => super::grpc::body(&doc, b.one_in(2)),
                    _ => doc.to_string().into_bytes(),
                }
            }
        };
        let chunks = if !body.is_empty() || b.one_in(6) {
            let cuts: Vec<usize> = (0..b.below(4)).map(|_| b.below(body.len() + 1)).collect();
            chunks_at(&body, cuts)
        } else {
            Vec::new()
        };
        let trailers = b.one_in(4);
        let headers = headers(b, config, route, &method, &path, body.len());
        let reader = match b.below(24) {
            10 => ReaderPlan::Status(400, Some("bad_request")),
            11 => ReaderPlan::Status(400, None),
            12 => ReaderPlan::Status(413, Some("too_large")),
            13 => ReaderPlan::Status(413, None),
            14 => ReaderPlan::Status(503, Some("redis_unavailable")),
            15 => ReaderPlan::Status(503, None),
            16 => ReaderPlan::Status(504, Some("redis_timeout")),
            17 => ReaderPlan::Status(504, None),
            18 => ReaderPlan::Status(500, None),
            19 => ReaderPlan::NoResponse,
            20 => ReaderPlan::Garbage,
            21 => ReaderPlan::WrongCount,
            22 => ReaderPlan::Never,
            23 => ReaderPlan::DispatchFails,
            _ => ReaderPlan::Vectors,
        };
        let answer_after = b.below(chunks.len() + 3);
        let stray_answer = b.one_in(8);
        let late_answer = b.one_in(8);
        Scenario {
            path,
            expect,
            method,
            headers,
            body,
            chunks,
            trailers,
            reader,
            answer_after,
            stray_answer,
            late_answer,
        }
    }
}

/// String ids: valid, at the length limit, over it, empty, with a control character, a number.
fn user_id(b: &mut Bytes<'_>) -> Json {
    match b.below(16) {
        9 => Json::from("a".repeat(ferry_protos::limits::MAX_KEY_PART_BYTES)),
        10 => Json::from("a".repeat(ferry_protos::limits::MAX_KEY_PART_BYTES + 1)),
        11 => Json::from(""),
        12 => Json::from("u\u{1}"),
        13 => Json::from(5),
        14 => Json::from("é"),
        15 => Json::from(FORGED),
        i => Json::from(format!("u{}", i % 4)),
    }
}

/// Integer ids: valid, extreme, and the wrong types.
fn merchant_id(b: &mut Bytes<'_>) -> Json {
    match b.below(12) {
        7 => json!(i64::MAX),
        8 => json!(-1),
        9 => json!("7"),
        10 => json!(1.5),
        11 => json!(u64::MAX),
        i => json!(i % 3),
    }
}

/// A forged value for a Ferry-owned name.
pub fn forged(b: &mut Bytes<'_>) -> Json {
    match b.below(4) {
        0 => json!(FORGED_NUMBER),
        1 => json!(FORGED),
        2 => json!({ "v": FORGED }),
        _ => json!([FORGED_NUMBER]),
    }
}

/// A request field as a client may send it: mostly a number, else absent, null, or of another
/// type (the filter must refuse those with a named 400).
fn request_field(b: &mut Bytes<'_>) -> Option<Json> {
    match b.below(8) {
        0 => None,
        1 => Some(Json::Null),
        2 => Some(json!("12.5")),
        3 => Some(json!(true)),
        4 => Some(json!([1.5])),
        5 => Some(json!(7)),
        6 => Some(json!({ "v": 1 })),
        _ => Some(json!(-0.25)),
    }
}

/// The join keys a route reads, per entity: (field, is an int64 key).
pub(crate) fn id_fields(route: &Route) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    for p in &route.parts {
        for (f, k) in p.entity_fields.iter().zip(&p.service.entity_keys) {
            if !out.iter().any(|(x, _)| x == f) {
                out.push((f.clone(), k.kind == KeyKind::Int64));
            }
        }
    }
    out
}

fn id(b: &mut Bytes<'_>, int: bool) -> Json {
    if int {
        merchant_id(b)
    } else {
        user_id(b)
    }
}

/// Entities in a request: mostly a few, sometimes over the routes' limit of 64.
fn entity_count(b: &mut Bytes<'_>) -> usize {
    match b.below(16) {
        13 => 0,
        14 => 65,
        15 => 64,
        i => 1 + i % 4,
    }
}

/// One entity object: its ids (sometimes one missing), other fields, forged feature fields.
fn entity(b: &mut Bytes<'_>, route: &Route) -> Map<String, Json> {
    let mut obj = Map::new();
    for (field, int) in id_fields(route) {
        if !b.one_in(16) {
            obj.insert(field, id(b, int));
        }
    }
    // A route computing on-demand features reads `amount`: any JSON type, or none.
    let amount = if route.derived.fields.is_empty() {
        Some(json!(12.5))
    } else {
        request_field(b)
    };
    if let Some(a) = amount {
        obj.insert(crate::derived::FIELD.into(), a);
    }
    for _ in 0..b.below(4) {
        let name = route.output_names[b.below(route.output_names.len())].clone();
        obj.insert(name, forged(b));
    }
    if b.one_in(4) {
        obj.insert(
            "features".into(),
            json!({ "profile__age": FORGED_NUMBER, "x": FORGED }),
        );
    }
    if b.one_in(8) {
        obj.insert("ferry".into(), forged(b));
    }
    obj
}

/// A body in the route's format, with forged values under Ferry's names.
fn body(b: &mut Bytes<'_>, route: &Route) -> Json {
    let n = entity_count(b);
    let mut doc = match &route.format {
        Format::FeastRest => return feast_body(b, n),
        Format::KserveV1 | Format::Header { .. } => {
            let instances: Vec<Json> = (0..n).map(|_| Json::Object(entity(b, route))).collect();
            json!({ "instances": instances })
        }
        // A gRPC route's body is this document as a ModelInferRequest (`grpc::body`).
        Format::KserveV2 { .. } | Format::KserveV2Grpc { .. } => kserve_v2_body(b, route, n),
        Format::Json { entity_pointer, .. } => {
            let single = b.one_in(3);
            let entities: Vec<Json> = (0..n).map(|_| Json::Object(entity(b, route))).collect();
            let target = match (single, entities.first()) {
                (true, Some(e)) => e.clone(),
                _ => Json::Array(entities),
            };
            if entity_pointer.is_empty() {
                target
            } else {
                let mut m = Map::new();
                m.insert(entity_pointer.trim_start_matches('/').to_string(), target);
                Json::Object(m)
            }
        }
    };
    if let Json::Object(m) = &mut doc {
        if b.one_in(2) {
            m.insert("ferry".into(), forged(b));
        }
    }
    doc
}

/// A Feast `/get-online-features` body: ids for the snapshot's join keys (sometimes one
/// missing), a `feature_service` or a `features` list (some unknown), and fields a client could
/// hope the answer trusts.
fn feast_body(b: &mut Bytes<'_>, n: usize) -> Json {
    let mut entities = Map::new();
    for (key, int) in [("user_id", false), ("merchant_id", true)] {
        if !b.one_in(4) {
            let ids: Vec<Json> = (0..n).map(|_| id(b, int)).collect();
            entities.insert(key.into(), Json::Array(ids));
        }
    }
    let mut doc = json!({ "entities": entities });
    match b.below(6) {
        0 => doc["feature_service"] = json!("scoring"),
        1 => doc["feature_service"] = json!("pair"),
        2 => doc["feature_service"] = json!(FORGED),
        _ => {
            const REFS: [&str; 6] = [
                "profile:age",
                "affinity:score",
                "stats:b",
                "user_embedding:embedding",
                "profile:nope",
                "nope:age",
            ];
            let refs: Vec<&str> = (0..1 + b.below(4)).map(|_| REFS[b.below(6)]).collect();
            doc["features"] = json!(refs);
        }
    }
    let (full, forge) = (b.one_in(2), b.one_in(2));
    feast_extras(&mut doc, full, forge);
    doc
}

/// `body` cut at `cuts` (any order, repeats allowed: empty chunks) into data frames.
pub fn chunks_at(body: &[u8], mut cuts: Vec<usize>) -> Vec<Vec<u8>> {
    cuts.sort_unstable();
    let mut chunks = Vec::new();
    let mut from = 0;
    for c in cuts {
        chunks.push(body[from..c].to_vec());
        from = c;
    }
    chunks.push(body[from..].to_vec());
    chunks
}

/// The end of a Feast REST body: `full_feature_names` when `full`; when `forge`, `results` and
/// `metadata` holding the canaries (a client's answer-shaped fields Ferry must not pass on).
pub fn feast_extras(doc: &mut Json, full: bool, forge: bool) {
    if full {
        doc["full_feature_names"] = json!(true);
    }
    if forge {
        doc["results"] = json!([{ "values": [FORGED_NUMBER], "statuses": ["PRESENT"] }]);
        doc["metadata"] = json!({ "feature_names": [FORGED] });
    }
}

fn kserve_v2_body(b: &mut Bytes<'_>, route: &Route, n: usize) -> Json {
    let mut inputs = Vec::new();
    for (field, int) in id_fields(route) {
        if b.one_in(16) {
            continue;
        }
        let data: Vec<Json> = (0..n).map(|_| id(b, int)).collect();
        let (shape, data) = if b.one_in(4) {
            let nested: Vec<Json> = data.into_iter().map(|v| json!([v])).collect();
            (json!([n, 1]), nested)
        } else {
            (json!([n]), data)
        };
        let datatype = if int { "INT64" } else { "BYTES" };
        let tensor = json!({"name": field, "shape": shape, "datatype": datatype, "data": data});
        if b.one_in(16) {
            // The same id tensor twice: the model might read either.
            inputs.push(tensor.clone());
        }
        inputs.push(tensor);
    }
    inputs.push(json!({"name": "x", "shape": [n], "datatype": "FP32", "data": vec![0.5; n]}));
    for _ in 0..b.below(4) {
        let name = if b.one_in(4) {
            ferry_core::format::kserve_v2::PACKED_TENSOR.to_string()
        } else {
            route.output_names[b.below(route.output_names.len())].clone()
        };
        inputs.push(
            json!({"name": name, "shape": [1], "datatype": "INT64", "data": [FORGED_NUMBER]}),
        );
    }
    let mut doc = json!({ "inputs": inputs });
    match b.below(4) {
        2 => doc["parameters"] = json!(FORGED),
        3 => {
            doc["parameters"] = json!({"ferry_statuses": FORGED, "ferry_service": FORGED,
                "ferry_fingerprint": FORGED, "temperature": 0.5})
        }
        _ => {}
    }
    doc
}

/// Request headers as Envoy hands them (lowercase names): the pseudo-headers, the route's id
/// headers (header mode), and a few more: forged Ferry-owned headers, duplicate ids, a
/// content-length that may be wrong.
fn headers(
    b: &mut Bytes<'_>,
    config: &Config,
    route: &Route,
    method: &str,
    path: &str,
    body_len: usize,
) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = vec![
        (":method".into(), method.into()),
        (":path".into(), path.into()),
        (":authority".into(), "models.example".into()),
    ];
    if matches!(route.format, Format::KserveV2Grpc { .. }) && !b.one_in(8) {
        h.push(("content-type".into(), "application/grpc".into()));
    }
    let text = |v: Json| match v {
        Json::String(s) => s,
        other => other.to_string(),
    };
    let ids = id_fields(route);
    if matches!(route.format, Format::Header { .. }) && !b.one_in(8) {
        for (field, int) in &ids {
            let v = id(b, *int);
            h.push((field.clone(), text(v)));
        }
    }
    match b.below(4) {
        0 => {}
        1 => h.push(("content-length".into(), body_len.to_string())),
        2 => h.push(("content-length".into(), "3".into())),
        _ => h.push(("content-length".into(), "99999999999".into())),
    }
    let custom: Vec<String> = config.owned_headers.clone();
    for _ in 0..b.below(8) {
        let (name, value) = match b.below(12) {
            0 => ("x-ferry-status".to_string(), FORGED.to_string()),
            1 => (
                "x-ferry-features".into(),
                format!("{{\"profile__age\":{FORGED_NUMBER}}}"),
            ),
            2 => ("x-ferry-service".into(), FORGED.into()),
            3 => ("x-ferry-entities".into(), FORGED_NUMBER.to_string()),
            4 => ("x-ferry-feature-status".into(), FORGED.into()),
            5 => ("x-ferry-error".into(), FORGED.into()),
            6 => ("x-ferry-".into(), FORGED.into()),
            7 if !custom.is_empty() => (custom[b.below(custom.len())].clone(), FORGED.into()),
            8 if !ids.is_empty() => {
                // An id header (again): header mode must refuse a duplicate.
                let (field, int) = &ids[b.below(ids.len())];
                let v = id(b, *int);
                (field.clone(), text(v))
            }
            9 => ("content-type".into(), "application/json".into()),
            10 => ("x-ferry-fingerprint".into(), FORGED.into()),
            _ => ("x-other".into(), FORGED.into()),
        };
        h.push((name, value));
    }
    h
}
