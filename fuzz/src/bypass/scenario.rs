//! A fuzz input decoded into one request as Envoy would deliver it: the path (a spelling of
//! one of the fixture's routes, or of no route), method, headers (with forged Ferry-owned ones
//! and duplicate ids), a body split into data frames (with forged feature fields), whether
//! trailers end the stream, and what the reader will answer. Every choice reads one byte; an
//! exhausted input reads zeros, so any input is a valid scenario and short inputs are the
//! plain ones (POST of a well-formed request on a route, the reader finds everything).

use ferry_filter::config::{Config, Format, KeyKind, Route};
use serde_json::{json, Map, Value as Json};

/// The number a forged field holds; synthesized features never produce it.
pub const FORGED_NUMBER: i64 = 987_654_321;
/// The string a forged field or header holds; synthesized features never produce it.
pub const FORGED: &str = "forged";

/// The input, read one choice at a time.
pub struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data, at: 0 }
    }

    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    /// A choice among `n` (0 when the input is exhausted).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n.max(1)
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == n - 1
    }

    /// Up to `max` raw bytes: a length byte, then that many bytes.
    pub fn raw(&mut self, max: usize) -> Vec<u8> {
        let len = self.below(max + 1);
        (0..len).map(|_| self.byte()).collect()
    }
}

/// Where the path leads, as the generator built it (not as the filter computes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// A spelling of this route's path (percent-encoded unreserved characters, `//`, `.`,
    /// `..`, a query): the filter must handle the request on this route.
    Route(usize),
    /// Under the protected prefix but no route's path (case changed, `%2F` for a `/`): 404.
    NoRoute,
    /// Outside every protected prefix and route: the request passes, untouched but for
    /// Ferry-owned headers, which are removed.
    Pass,
}

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
        let (path, expect, base) = path(b, config);
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
            _ => body(b, route).to_string().into_bytes(),
        };
        let mut chunks = Vec::new();
        if !body.is_empty() || b.one_in(6) {
            let mut cuts: Vec<usize> = (0..b.below(4)).map(|_| b.below(body.len() + 1)).collect();
            cuts.sort_unstable();
            let mut from = 0;
            for c in cuts {
                chunks.push(body[from..c].to_vec());
                from = c;
            }
            chunks.push(body[from..].to_vec());
        }
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

/// A path segment and what it is to the route match.
#[derive(Clone, PartialEq, Eq)]
enum Role {
    Protected,
    /// The route's name segment (the last one of the route's prefix `/protected/NAME/`).
    Name,
    Tail,
    /// Removed by normalisation (`.`, empty, a segment and its `..`), or a dead route name.
    Noise,
    /// Two segments joined by `%2F` (one segment to a server that does not decode it).
    Joined,
}

const UNPROTECTED: [&str; 4] = ["open", "protectedx", "protecte", "v1"];
const TAILS: [&[&str]; 5] = [&["infer"], &[], &["v1:predict"], &["a", "b"], &["x"]];
const DOT: [&str; 3] = [".", "%2e", "%2E"];
const DOTDOT: [&str; 4] = ["..", "%2e%2e", ".%2E", "%2E."];

/// The path: a route's path `/protected/NAME/TAIL` put through changes whose effect on
/// matching is known by construction (see [`Expect`]). Returns it, its expectation, and the
/// route it started from.
fn path(b: &mut Bytes<'_>, config: &Config) -> (String, Expect, usize) {
    let n = config.routes.len();
    let base = b.below(n);
    let mut segs: Vec<(String, Role)> = vec![
        ("protected".into(), Role::Protected),
        (config.routes[base].name.clone(), Role::Name),
    ];
    for t in TAILS[b.below(TAILS.len())] {
        segs.push((t.to_string(), Role::Tail));
    }
    let mut target = base;
    let (mut pass, mut no_route) = (false, false);
    // `/protected/A/../B/tail` is B's path.
    let swap = b.one_in(6);
    if swap {
        target = b.below(n);
        segs[1].1 = Role::Noise;
        segs.insert(2, (DOTDOT[b.below(4)].into(), Role::Noise));
        segs.insert(3, (config.routes[target].name.clone(), Role::Name));
    }
    if b.one_in(10) {
        segs[0].0 = UNPROTECTED[b.below(UNPROTECTED.len())].into();
        pass = true;
    }
    if b.one_in(8) {
        // A case change: `/Protected/...` is still under the prefix (compared without case),
        // but matches no route (route paths are compared exactly).
        let live: Vec<usize> = (0..segs.len())
            .filter(|i| matches!(segs[*i].1, Role::Protected | Role::Name))
            .collect();
        let i = live[b.below(live.len())];
        let letters: Vec<usize> = segs[i]
            .0
            .char_indices()
            .filter(|(_, c)| c.is_ascii_alphabetic())
            .map(|(k, _)| k)
            .collect();
        if !letters.is_empty() {
            let k = letters[b.below(letters.len())];
            let mut s = segs[i].0.clone().into_bytes();
            s[k] ^= 0x20;
            segs[i].0 = String::from_utf8_lossy(&s).into_owned();
            no_route = true;
        }
    }
    if !swap && b.one_in(10) {
        // `%2F` is not a `/` to the route match: `/protected%2FNAME/` is outside the prefix,
        // `/protected/NAME%2Ftail` under it but no route's.
        let slash = ["%2F", "%2f"][b.below(2)];
        let at = b.below(2);
        let joined = match segs.get(at + 1) {
            Some((next, _)) => format!("{}{slash}{next}", segs[at].0),
            None => format!("{}{slash}", segs[at].0),
        };
        segs[at] = (joined, Role::Joined);
        if at + 1 < segs.len() {
            segs.remove(at + 1);
        }
        if at == 0 {
            pass = true;
        } else {
            no_route = true;
        }
    }
    for _ in 0..b.below(4) {
        let at = b.below(segs.len() + 1);
        match b.below(5) {
            0 => segs.insert(at, (String::new(), Role::Noise)),
            1 => segs.insert(at, (DOT[b.below(3)].into(), Role::Noise)),
            2 if at == 0 => segs.insert(0, (DOTDOT[b.below(4)].into(), Role::Noise)),
            _ => {
                segs.insert(at, (DOTDOT[b.below(4)].into(), Role::Noise));
                segs.insert(at, ("zz".into(), Role::Noise));
            }
        }
    }
    for _ in 0..b.below(4) {
        // Percent-encode one unreserved character (any hex case): the same path.
        let i = b.below(segs.len());
        let s = &segs[i].0;
        if s.is_empty() || s.contains('%') {
            continue;
        }
        let k = b.below(s.len());
        let c = s.as_bytes()[k];
        if !(c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~')) {
            continue;
        }
        let enc = if b.one_in(2) {
            format!("%{c:02x}")
        } else {
            format!("%{c:02X}")
        };
        segs[i].0 = format!("{}{enc}{}", &s[..k], &s[k + 1..]);
    }
    let mut raw = String::new();
    for (s, _) in &segs {
        raw.push('/');
        raw.push_str(s);
    }
    // A route's prefix ends with `/`: with no tail the path must too.
    if segs.last().is_some_and(|(_, r)| *r == Role::Name) {
        raw.push('/');
    }
    if b.one_in(4) {
        raw.push_str(["?a=b", "?x=/../../y", "#frag", "?"][b.below(4)]);
    }
    let expect = if pass {
        Expect::Pass
    } else if no_route {
        Expect::NoRoute
    } else {
        Expect::Route(target)
    };
    (raw, expect, base)
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

/// The join keys a route reads, per entity: (field, is an int64 key).
fn id_fields(route: &Route) -> Vec<(String, bool)> {
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
    obj.insert("amount".into(), json!(12.5));
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
        Format::KserveV1 | Format::Header { .. } => {
            let instances: Vec<Json> = (0..n).map(|_| Json::Object(entity(b, route))).collect();
            json!({ "instances": instances })
        }
        Format::KserveV2 { .. } => kserve_v2_body(b, route, n),
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
            ferry_filter::kserve_v2::PACKED_TENSOR.to_string()
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
