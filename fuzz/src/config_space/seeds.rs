//! The seeds of `config_space` (`corpus/config_space/CASE`): one input per case of the bypass
//! matrix's kinds, per request format — a plain enriched request, forged Ferry names, a keyless
//! route, a composite key, several services, on-demand features, trailers, a reader failure
//! forwarded degraded, a reader refusal, a request field of the wrong type, a refused request —
//! and the cases across formats (no route under the protected prefix, an unprotected path with
//! forged headers, near cache, logging, packed tensors, binary framing).
//!
//! An input cannot be written by hand (its bytes are choices), so `find` draws inputs from a
//! fixed pseudo-random stream and keeps the first that is each case; `case_holds` checks that a
//! committed seed still is the case its file is named after (a change to the generator that
//! shifts the choices shows there, and the seeds are written again with
//! `cargo run --example config_space_seeds`). No seed declares an over-limit size or reaches a
//! known open bug: those inputs live in `regressions/` and `found/`.

use ferry_core::config::{Format, OnReaderError, Route};

use super::reader::Plan;
use super::request::Target;
use super::{draw, known_open, play_drawn, stream, Drawn, Outcome};

/// What an input is, as the cases ask.
struct Facts {
    format: Option<&'static str>,
    keyless: bool,
    composite: bool,
    services: usize,
    request_fields: bool,
    forged: bool,
    trailers: bool,
    target: Target,
    plan: Plan,
    method: String,
    forward_policy: bool,
    near_cache: bool,
    logged: bool,
    packed: bool,
    framed: bool,
    protected: bool,
}

fn format_name(route: &Route) -> &'static str {
    match route.format {
        Format::KserveV1 => "kserve_v1",
        Format::KserveV2 { .. } => "kserve_v2",
        Format::KserveV2Grpc { .. } => "grpc",
        Format::Json { .. } => "json",
        Format::Header { .. } => "header",
        Format::FeastRest => "feast_rest",
    }
}

fn facts(d: &Drawn<'_>) -> Facts {
    let route = match d.req.target {
        Target::Route(i) => Some(&d.config.routes[i]),
        _ => None,
    };
    let header = |n: &str| d.req.headers.iter().any(|(k, _)| k == n);
    let method = d
        .req
        .headers
        .iter()
        .find(|(k, _)| k == ":method")
        .map_or(String::new(), |(_, v)| v.clone());
    Facts {
        format: route.map(format_name),
        keyless: route.is_some_and(|r| r.parts.iter().all(|p| p.entity_fields.is_empty())),
        composite: route.is_some_and(|r| r.parts.iter().any(|p| p.entity_fields.len() > 1)),
        services: route.map_or(0, |r| r.parts.len().max(r.feast_services.len())),
        request_fields: route.is_some_and(|r| !r.derived.fields.is_empty()),
        forged: d.req.forged,
        trailers: !d.req.trailers.is_empty(),
        target: d.req.target,
        plan: d.plan.clone(),
        method,
        forward_policy: route.is_some_and(|r| r.on_reader_error == OnReaderError::Forward),
        near_cache: route.is_some_and(|r| r.cache_max_age_ms > 0),
        logged: route.is_some_and(|r| r.log.is_some()),
        packed: route.is_some_and(|r| {
            matches!(
                r.format,
                Format::KserveV2 { packed: true } | Format::KserveV2Grpc { packed: true }
            )
        }),
        framed: header("inference-header-content-length"),
        protected: !d.config.protected_paths.is_empty(),
    }
}

const FORMATS: [&str; 6] = [
    "kserve_v1",
    "kserve_v2",
    "grpc",
    "json",
    "header",
    "feast_rest",
];

/// Every case's name: per format, then across formats.
pub fn cases() -> Vec<String> {
    const PER_FORMAT: [&str; 11] = [
        "control",
        "forged",
        "keyless",
        "keyless-forged",
        "composite",
        "services",
        "on-demand",
        "trailers",
        "reader-failure",
        "reader-refusal",
        "refused",
    ];
    let mut out: Vec<String> = FORMATS
        .iter()
        .flat_map(|f| PER_FORMAT.iter().map(move |c| format!("{f}-{c}")))
        .collect();
    out.extend(
        [
            "no-route",
            "outside-forged",
            "near-cache",
            "logged",
            "packed",
            "binary-framed",
            "request-field-type",
            "get-with-body",
        ]
        .iter()
        .map(|c| c.to_string()),
    );
    out
}

/// Whether an input with these facts and this outcome is the case `name`.
fn is_case(name: &str, f: &Facts, o: &Outcome) -> bool {
    let post = f.method == "POST";
    // Served: enriched and forwarded, or Feast's answer.
    let served = match f.format {
        Some("feast_rest") => matches!(o, Outcome::Replied(200, _)),
        Some(_) => *o == Outcome::Forwarded,
        None => false,
    };
    let plain = post && f.plan == Plan::Vectors && !f.trailers;
    let (format, case) = match FORMATS.iter().find(|x| name.starts_with(&format!("{x}-"))) {
        Some(x) => (Some(*x), &name[x.len() + 1..]),
        None => (None, name),
    };
    if format.is_some() && f.format != format {
        return false;
    }
    match case {
        "control" => served && plain && !f.forged && f.services == 1,
        "forged" => served && post && f.forged && !f.keyless,
        "keyless" => served && plain && f.keyless && !f.forged,
        "keyless-forged" => served && post && f.keyless && f.forged,
        "composite" => served && post && f.composite,
        "services" => served && post && f.services > 1,
        "on-demand" => served && post && f.request_fields && !f.keyless,
        "trailers" => served && f.trailers,
        "reader-failure" => {
            served
                && f.forward_policy
                && matches!(
                    f.plan,
                    Plan::NoResponse | Plan::DispatchFails | Plan::Status(500.., _)
                )
        }
        "reader-refusal" => {
            matches!(f.plan, Plan::Status(400..=499, _)) && matches!(o, Outcome::Replied(..))
        }
        "refused" => post && matches!(o, Outcome::Replied(400..=499, _)),
        "no-route" => f.target == Target::NoRoute && f.protected,
        "outside-forged" => f.target == Target::Outside && f.forged && *o == Outcome::Forwarded,
        "near-cache" => served && f.near_cache,
        "logged" => served && f.logged,
        "packed" => served && f.packed,
        "binary-framed" => served && f.framed,
        "request-field-type" => {
            matches!(o, Outcome::Replied(400, c) if c == "invalid_request_field")
        }
        "get-with-body" => f.method == "GET" && f.format.is_some() && !f.forged,
        _ => false,
    }
}

/// Whether `data` is the case `name`: drawn without an over-limit size or a known open bug,
/// and run (panics on a broken property, as the target does).
pub fn case_holds(name: &str, data: &[u8]) -> bool {
    let Ok(d) = draw(data) else { return false };
    if d.req.hostile_size || known_open(&d).is_some() {
        return false;
    }
    let f = facts(&d);
    let o = play_drawn(d);
    is_case(name, &f, &o)
}

/// The first input of a fixed pseudo-random stream for each case (within `budget` inputs);
/// cases none of them is are left out.
pub fn find(budget: usize) -> Vec<(String, Vec<u8>)> {
    let names = cases();
    let mut found: Vec<Option<Vec<u8>>> = vec![None; names.len()];
    for data in stream(0x853c_49e6_748f_ea9b, budget) {
        let Ok(d) = draw(&data) else { continue };
        if d.req.hostile_size || known_open(&d).is_some() {
            continue;
        }
        let f = facts(&d);
        let o = play_drawn(d);
        for (i, name) in names.iter().enumerate() {
            if found[i].is_none() && is_case(name, &f, &o) {
                found[i] = Some(data.clone());
            }
        }
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    names
        .into_iter()
        .zip(found)
        .filter_map(|(n, d)| d.map(|d| (n, d)))
        .collect()
}
