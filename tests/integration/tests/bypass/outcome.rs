//! The two outcomes a bypass case may have, and the invariant behind them: (a) the model was
//! called, and every place Ferry owns in what it received (each `view__feature` output, the
//! `ferry` metadata, every `x-ferry-*` header, a route's features header) holds exactly what
//! the store holds for the request's entities, or is absent where Ferry writes nothing; or
//! (b) the client got a 4xx with a JSON `{"error": CODE, ...}` body and the model was not called.
//! A gRPC call's refusal is a gRPC status instead (HTTP 200, `grpc-status` ≠ 0 in the headers
//! of a trailers-only answer or in the trailers, `grpc-message` starting with the code); a
//! `feast_rest` request's (a) is the filter's own answer from the store, its refusals Feast's
//! bodies with Ferry's code in `x-ferry-error`.

use std::collections::BTreeMap;

use ferry_integration_tests::expected::{Entity, Feature, Service, Store};
use ferry_integration_tests::http::Response;
use serde_json::Value as Json;

use crate::derived::{self, Amount, Derived};
use crate::numbers::number_token;
use crate::places::{check_body, check_feature_object, statuses};

/// Request headers Ferry owns: its prefix, and the features header of every route of the test's
/// snapshot that names its own (`features_header`: routes::CUSTOM).
const OWN_PREFIX: &str = "x-ferry-";
const CUSTOM_FEATURES_HEADERS: [&str; 1] = ["x-features"];
const STATUS_HEADER: &str = "x-ferry-feature-status";

#[derive(Clone, Copy, Debug)]
pub enum Format {
    KserveV1,
    KserveV2,
    /// Triton `ModelInfer` over gRPC (h2c).
    KserveV2Grpc,
    /// The example's `score-json` shape: entities at /batch/users, features at /features.
    Json,
    Header {
        features_header: &'static str,
    },
}

/// A Ferry route of the stack, as far as the checks need it.
#[derive(Clone, Copy, Debug)]
pub struct Route {
    pub name: &'static str,
    pub format: Format,
    pub service: Service,
    /// The on-demand service the route serves instead, if any (`service` then gives its stored
    /// features).
    pub derived: Derived,
}

/// Who answers a refusal: the filter (its replies carry `x-ferry-error`) or Envoy itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refuser {
    Filter,
    Envoy,
}

/// What a case must end in.
#[derive(Clone, Debug)]
pub enum Expect {
    /// (a): the model received the request enriched by `route` for `entities` (in request
    /// order), at `model_path`; `numbers` are client number tokens (field, exact text) that
    /// must reach the model with exactly that text.
    Enriched {
        route: Route,
        entities: Vec<Entity>,
        model_path: String,
        numbers: Vec<(&'static str, &'static str)>,
        /// The request field `amount` of each instance as sent (derived routes; none: absent).
        amounts: Vec<Amount>,
    },
    /// (a) where Ferry writes nothing: the model received the body as sent and no Ferry-owned
    /// header at all.
    Untouched { model_path: String },
    /// (b): a 4xx JSON refusal with this status and error code; the model not called.
    Refused {
        status: u16,
        code: &'static str,
        by: Refuser,
    },
    /// (b) for a gRPC call: the filter's gRPC status, its message starting with `code`.
    GrpcRefused {
        grpc_status: u32,
        code: &'static str,
    },
    /// (a) for `feast_rest`: the filter answered with the store's values for `entities` of
    /// `service` (requested with `feature_service` and full names); the model not called.
    Answered {
        service: Service,
        entities: Vec<Entity>,
    },
}

impl Expect {
    /// The outcome in a few words, for the matrix's printed table.
    pub fn summary(&self) -> String {
        match self {
            Expect::Enriched {
                route, entities, ..
            } => format!("enriched by {} ({} entities)", route.name, entities.len()),
            Expect::Untouched { .. } => "forwarded untouched, no Ferry header".into(),
            Expect::Refused { status, code, by } => {
                let who = match by {
                    Refuser::Filter => "filter",
                    Refuser::Envoy => "Envoy",
                };
                format!("refused {status} {code} by {who}")
            }
            Expect::GrpcRefused { grpc_status, code } => {
                format!("refused, gRPC status {grpc_status} {code}")
            }
            Expect::Answered { entities, .. } => {
                format!("answered by the filter ({} entities)", entities.len())
            }
        }
    }
}

/// How a response ended: the model's echo (it answers with what it received), a refusal, a
/// gRPC status from the filter, or the filter's own 200 answer.
enum Outcome {
    Model,
    Refused { status: u16, error: String },
    Grpc { status: u32, message: String },
    Answer,
}

/// A gRPC answer's status: in the headers (trailers-only) or the trailers.
fn grpc_status(resp: &Response) -> Option<(u32, String)> {
    let get = |name: &str| {
        resp.header(name).map(str::to_string).or_else(|| {
            resp.trailers
                .as_ref()
                .and_then(|t| t.get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
    };
    let status = get("grpc-status")?.parse().ok()?;
    Some((status, get("grpc-message").unwrap_or_default()))
}

/// Classifies a response into the two outcomes; anything else (a 5xx, a 2xx the model did not
/// send, a 4xx without a JSON error) breaks the invariant by itself.
fn classify(resp: &Response) -> Result<Outcome, String> {
    if resp.header("x-echo-headers").is_some() {
        return Ok(Outcome::Model);
    }
    let grpc = resp
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/grpc"));
    if let (true, 200, Some((status, message))) = (grpc, resp.status, grpc_status(resp)) {
        return Ok(Outcome::Grpc { status, message });
    }
    if resp.status == 200 && resp.header("x-ferry-error").is_none() {
        return Ok(Outcome::Answer);
    }
    if !(400..500).contains(&resp.status) {
        return Err(format!(
            "neither outcome: status {} and the model was not called: {}",
            resp.status,
            text(&resp.body)
        ));
    }
    let body: Json = serde_json::from_slice(&resp.body).map_err(|e| {
        format!(
            "a {} refusal whose body is not JSON ({e}): {}",
            resp.status,
            text(&resp.body)
        )
    })?;
    // Feast's refusals (feast_rest) have Feast's bodies; Ferry's code is in x-ferry-error.
    let feast = resp
        .header("x-ferry-error")
        .filter(|c| c.starts_with("feast_") && body.get("error").is_none());
    match body.get("error").and_then(Json::as_str).or(feast) {
        Some(code) => Ok(Outcome::Refused {
            status: resp.status,
            error: code.to_string(),
        }),
        None => Err(format!(
            "a {} refusal without an \"error\" code: {body}",
            resp.status
        )),
    }
}

/// Checks one response against the expected outcome and the invariant. `sent` is the body the
/// client sent.
pub fn check(expect: &Expect, sent: &[u8], resp: &Response, store: &Store) -> Result<(), String> {
    let outcome = classify(resp)?;
    match (outcome, expect) {
        (
            Outcome::Model,
            Expect::Enriched {
                route,
                entities,
                model_path,
                numbers,
                amounts,
            },
        ) => {
            let feats: Vec<Vec<Feature>> = entities
                .iter()
                .enumerate()
                .map(|(i, e)| derived::features(route, e, amounts.get(i).unwrap_or(&None), store))
                .collect();
            let exchange = Exchange { sent, resp, store };
            enriched(route, entities, &feats, model_path, numbers, &exchange)
                .map_err(|e| format!("route {}: {e}", route.name))
        }
        (Outcome::Model, Expect::Untouched { model_path }) => {
            path_is(resp, model_path)?;
            let owned = owned_headers(resp)?;
            if !owned.is_empty() {
                return Err(format!(
                    "Ferry wrote nothing, yet the model received Ferry-owned headers {owned:?}"
                ));
            }
            if resp.body != sent {
                return Err(format!(
                    "Ferry wrote nothing, yet the model received body {} for {}",
                    text(&resp.body),
                    text(sent)
                ));
            }
            Ok(())
        }
        (
            Outcome::Refused { status, error },
            Expect::Refused {
                status: s,
                code,
                by,
            },
        ) => {
            if (status, error.as_str()) != (*s, *code) {
                return Err(format!(
                    "expected {s} {code}, got {status} {error}: {}",
                    text(&resp.body)
                ));
            }
            let marker = resp.header("x-ferry-error");
            match by {
                Refuser::Filter if marker != Some(code) => Err(format!(
                    "the filter's refusal carries x-ferry-error {marker:?}, not {code}"
                )),
                Refuser::Envoy if marker.is_some() => Err(format!(
                    "Envoy's own refusal carries x-ferry-error {marker:?}"
                )),
                _ => Ok(()),
            }
        }
        (Outcome::Grpc { status, message }, Expect::GrpcRefused { grpc_status, code }) => {
            let marker = resp.header("x-ferry-error");
            if status != *grpc_status || !message.starts_with(&format!("{code}: ")) {
                Err(format!(
                    "expected gRPC status {grpc_status} \"{code}: ...\", got {status} {message:?}"
                ))
            } else if marker != Some(code) {
                Err(format!("the gRPC refusal carries x-ferry-error {marker:?}"))
            } else {
                Ok(())
            }
        }
        (Outcome::Answer, Expect::Answered { service, entities }) => {
            crate::feast::check_answer(*service, entities, resp, store)
        }
        (Outcome::Model, Expect::Refused { status, code, .. }) => Err(format!(
            "expected {status} {code}, but the model was called: {}",
            describe_model_call(resp)
        )),
        (Outcome::Model, Expect::GrpcRefused { grpc_status, code }) => Err(format!(
            "expected gRPC status {grpc_status} {code}, but the model was called: {}",
            describe_model_call(resp)
        )),
        (Outcome::Model, Expect::Answered { .. }) => Err(format!(
            "a feast_rest request reached the model: {}",
            describe_model_call(resp)
        )),
        (Outcome::Refused { status, error }, _) => Err(format!(
            "expected {expect:?}, got {status} {error}: {}",
            text(&resp.body)
        )),
        (Outcome::Grpc { status, message }, _) => Err(format!(
            "expected {expect:?}, got gRPC status {status} {message:?}"
        )),
        (Outcome::Answer, _) => Err(format!(
            "expected {expect:?}, got a 200 the model did not send: {}",
            text(&resp.body)
        )),
    }
}

/// One case's request as sent, what the model received, and the store to check it against.
struct Exchange<'a> {
    sent: &'a [u8],
    resp: &'a Response,
    store: &'a Store,
}

/// Outcome (a) on an enriching route: the path, the headers and the body the model received;
/// `feats`: what each entity's features must be.
fn enriched(
    route: &Route,
    entities: &[Entity],
    feats: &[Vec<Feature>],
    model_path: &str,
    numbers: &[(&'static str, &'static str)],
    exchange: &Exchange<'_>,
) -> Result<(), String> {
    let Exchange { sent, resp, store } = *exchange;
    path_is(resp, model_path)?;
    for (field, token) in numbers {
        let got = number_token(&String::from_utf8_lossy(&resp.body), field);
        if got.as_deref() != Some(*token) {
            return Err(format!(
                "client number \"{field}\": sent {token}, the model received {got:?} in \
                 {}",
                text(&resp.body)
            ));
        }
    }
    check_headers(route, entities, feats, resp, store)?;
    check_body(route, feats, sent, numbers, resp, store)?;
    Ok(())
}

pub fn text(b: &[u8]) -> String {
    let t = String::from_utf8_lossy(b);
    if t.len() > 600 {
        let cut = (0..=600)
            .rev()
            .find(|i| t.is_char_boundary(*i))
            .unwrap_or(0);
        format!("{}… ({} bytes)", &t[..cut], b.len())
    } else {
        t.into_owned()
    }
}

fn describe_model_call(resp: &Response) -> String {
    format!(
        "path {:?}, Ferry-owned headers {:?}, body {}",
        resp.header("x-echo-path"),
        owned_headers(resp).unwrap_or_default(),
        text(&resp.body)
    )
}

fn path_is(resp: &Response, want: &str) -> Result<(), String> {
    match resp.header("x-echo-path") {
        Some(p) if p == want => Ok(()),
        got => Err(format!(
            "the model received path {got:?}, expected {want:?}"
        )),
    }
}

/// The Ferry-owned headers the model received, name → value.
fn owned_headers(resp: &Response) -> Result<BTreeMap<String, String>, String> {
    let echoed = resp.header("x-echo-headers").unwrap_or("{}");
    let all: BTreeMap<String, String> = serde_json::from_str(echoed)
        .map_err(|e| format!("x-echo-headers is not a JSON object of strings ({e}): {echoed}"))?;
    Ok(all
        .into_iter()
        .filter(|(n, _)| n.starts_with(OWN_PREFIX) || CUSTOM_FEATURES_HEADERS.contains(&n.as_str()))
        .collect())
}

/// The `x-ferry-*` summary headers, plus a header route's features and status headers: exactly
/// these, and no other Ferry-owned header.
fn check_headers(
    route: &Route,
    entities: &[Entity],
    feats: &[Vec<Feature>],
    resp: &Response,
    store: &Store,
) -> Result<(), String> {
    let mut got = owned_headers(resp)?;
    // A service of request fields only looks nothing up: nothing is missing or stale.
    let stored = route.derived != Derived::ReqOnly;
    let missing = entities
        .iter()
        .filter(|e| stored && store.is_missing(route.service, e))
        .count();
    let stale = entities
        .iter()
        .filter(|e| stored && store.is_stale(route.service, e))
        .count();
    let mut want: BTreeMap<String, String> = [
        ("x-ferry-service", derived::service_name(route).to_string()),
        ("x-ferry-fingerprint", derived::fingerprint(route, store)),
        ("x-ferry-entities", entities.len().to_string()),
        ("x-ferry-missing", missing.to_string()),
        ("x-ferry-stale", stale.to_string()),
        (
            "x-ferry-status",
            if missing + stale > 0 { "partial" } else { "ok" }.to_string(),
        ),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    if let Some(v) = derived::version(route) {
        want.insert("x-ferry-derived-version".to_string(), v);
    }
    if let Format::Header { features_header } = route.format {
        let value = got
            .remove(features_header)
            .ok_or_else(|| format!("the model received no features header {features_header}"))?;
        let object: Json = serde_json::from_str(&value)
            .map_err(|e| format!("{features_header} is not JSON ({e}): {value}"))?;
        check_feature_object(&object, &feats[0], features_header)?;
        let st = statuses(&feats[0]);
        if st.as_object().is_some_and(|m| !m.is_empty()) {
            want.insert(STATUS_HEADER.to_string(), st.to_string());
        }
        if let Some(v) = got.get_mut(STATUS_HEADER) {
            // Compare as JSON, not text.
            *v = serde_json::from_str::<Json>(v)
                .map_err(|e| format!("{STATUS_HEADER} is not JSON ({e}): {v}"))?
                .to_string();
        }
    }
    if got != want {
        return Err(format!(
            "Ferry-owned headers the model received: {got:?}; the store says: {want:?}"
        ));
    }
    Ok(())
}
