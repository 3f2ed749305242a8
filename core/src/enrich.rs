//! The enrichment step between the reader call and the rewrite: builds the one reader request
//! for a batch, judges the reader's answer, applies the route's policies, and produces the new
//! body and the headers that tell the model what happened.

use ferry_protos::v1::{Lookup, VectorRequest, VectorResponse};
use prost::Message;
use serde_json::Value as Json;

use crate::config::{Config, OnMissing, OnStale, Route};
use crate::error::FerryError;
use crate::format::kserve_v1::{self, Rendered};
use crate::format::{self, ParsedRequest, Rewritten};
use crate::log::{record::Served as Logged, ServedStatus};
use crate::metrics::Served;
use crate::request::derived::{self, DerivedCounts};
use crate::values::{FeatureValue, ValueRef};
use crate::vector::{self, EntityFeatures, FeatureStatus, Sink};
use ferry_expr::{cost::DEFAULT_REQUEST_BUDGET, Budget};

/// Longest reader error message copied into Ferry's own error.
const MAX_DETAIL: usize = 300;

/// What to forward upstream.
#[derive(Debug)]
pub struct Enriched {
    /// The new body and feature headers.
    pub rewritten: format::Rewritten,
    /// Request headers set for the model (`x-ferry-*`).
    pub headers: Vec<(&'static str, String)>,
    /// Entity counts, for metrics.
    pub found: usize,
    pub missing: usize,
    pub stale: usize,
    /// What computing the on-demand features gave, for metrics.
    pub derived: DerivedCounts,
    /// Per (service, view): values by status and row ages, for metrics.
    pub served: Served,
    /// What the model received, kept only when the caller's `keep` wanted it (served-feature
    /// logging picked the request).
    pub logged: Option<Logged>,
}

/// Whether to keep what the model receives, asked once the request's outcome is known.
pub type Keep<'a> = &'a dyn Fn(ServedStatus) -> bool;

/// Keeps nothing.
pub fn keep_none(_: ServedStatus) -> bool {
    false
}

/// The single reader call for a request.
#[derive(Debug)]
pub struct ReaderCall {
    pub body: Vec<u8>,
    /// The indices (into the request's keys) of the vectors the answer holds, in its order.
    pub order: Vec<usize>,
    /// How many vectors each lookup of the answer holds.
    pub lookup_sizes: Vec<usize>,
}

/// The one reader call for the keys at `wanted` (indices into `keys`, the request's keys: one
/// per route part for each entity): one lookup per part that has any, in part order.
pub fn reader_request(
    config: &Config,
    route: &Route,
    keys: &[String],
    wanted: &[usize],
) -> ReaderCall {
    let parts = route.keys_per_entity();
    let mut lookups = Vec::with_capacity(parts);
    let mut order = Vec::with_capacity(wanted.len());
    let mut lookup_sizes = Vec::with_capacity(parts);
    for (p, part) in route.parts.iter().enumerate() {
        let start = order.len();
        order.extend(wanted.iter().copied().filter(|j| j % parts == p));
        if order.len() == start {
            continue;
        }
        lookup_sizes.push(order.len() - start);
        lookups.push(Lookup {
            service: part.service.name.clone(),
            fingerprint: part.service.fingerprint,
            entity_keys: order[start..].iter().map(|j| keys[*j].clone()).collect(),
            feast: part.service.feast.clone(),
        });
    }
    let body = VectorRequest {
        project: config.project.clone(),
        lookups,
    }
    .encode_to_vec();
    ReaderCall {
        body,
        order,
        lookup_sizes,
    }
}

/// Judges the reader's answer: `status` is None when the call failed without a response.
/// The reader's own errors carry a JSON code; a 503/504 without one is Envoy's own reply (the
/// reader cluster is unreachable, reset, or timed out).
pub fn check_reader_status(
    status: Option<u16>,
    body: &[u8],
    timeout_ms: u32,
) -> Result<(), FerryError> {
    let Some(status) = status else {
        return Err(FerryError::ReaderUnavailable {
            detail: format!(
                "no response (connection failure, reset, or no answer within {timeout_ms} ms)"
            ),
        });
    };
    if status == 200 {
        return Ok(());
    }
    let (code, detail) = reader_error(body);
    use ferry_protos::reader_error::{REDIS_TIMEOUT, REDIS_UNAVAILABLE};
    Err(match (code.as_deref(), status) {
        (Some(REDIS_UNAVAILABLE), _) => FerryError::RedisUnavailable { detail },
        (Some(REDIS_TIMEOUT), _) => FerryError::RedisTimeout { detail },
        // The reader refused what the filter sent (malformed, over a limit): a Ferry bug or a
        // request the filter should have refused, never a reason to forward unenriched.
        (Some(_), 400..=499) => FerryError::ReaderRejected { status, detail },
        (Some(_), _) => FerryError::ReaderError { status, detail },
        // A 4xx without the reader's JSON (e.g. another server at the reader's address) is a
        // refusal too: only an unreachable or failing reader path may fail open.
        (None, 400..=499) => FerryError::ReaderRejected { status, detail },
        (None, 504) => FerryError::ReaderTimeout {
            detail: format!("no answer within {timeout_ms} ms"),
        },
        (None, 503) => FerryError::ReaderUnavailable { detail },
        (None, _) => FerryError::ReaderError { status, detail },
    })
}

/// The reader's `{"error": code, "message": ...}`, or (None, the start of the body).
fn reader_error(body: &[u8]) -> (Option<String>, String) {
    if let Ok(Json::Object(m)) = serde_json::from_slice::<Json>(body) {
        if let (Some(Json::String(code)), Some(Json::String(msg))) =
            (m.get("error"), m.get("message"))
        {
            return (Some(code.clone()), msg.chars().take(MAX_DETAIL).collect());
        }
    }
    (
        None,
        String::from_utf8_lossy(body)
            .chars()
            .take(MAX_DETAIL)
            .collect(),
    )
}

/// The vectors of a reader answer, one per requested key, lookup after lookup (empty = not
/// found); `lookup_sizes` is what was asked.
pub fn reader_vectors(
    reader_body: &[u8],
    lookup_sizes: &[usize],
) -> Result<Vec<Vec<u8>>, FerryError> {
    let bad = |detail: String| FerryError::BadVector { detail };
    let resp = VectorResponse::decode(reader_body)
        .map_err(|e| bad(format!("undecodable reader response: {e}")))?;
    if resp.results.len() != lookup_sizes.len() {
        return Err(bad(format!(
            "reader answered {} lookups for {}",
            resp.results.len(),
            lookup_sizes.len()
        )));
    }
    let mut out = Vec::with_capacity(lookup_sizes.iter().sum());
    for (result, expected) in resp.results.into_iter().zip(lookup_sizes) {
        if result.vectors.len() != *expected {
            return Err(bad(format!(
                "reader answered {} vectors for {expected} entities",
                result.vectors.len()
            )));
        }
        out.extend(result.vectors);
    }
    Ok(out)
}

/// Enriches the request with one stored vector per entity (`vectors[i]` for entity i; empty =
/// not found), applying the route's missing and stale policies, and computes its on-demand
/// features with `request.time` the current time (see [`enrich_at`]).
pub fn enrich(
    route: &Route,
    req: ParsedRequest,
    vectors: &[Vec<u8>],
    now_us: i64,
) -> Result<Enriched, FerryError> {
    enrich_at(route, req, vectors, now_us, now_us, &keep_none)
}

/// [`enrich`] with `request.time` taken from `received_us`, when Envoy received the request
/// (its whole seconds); what the model receives is kept in `logged` when `keep` says so.
///
/// A KServe v1 request on a route without on-demand features and without served-feature
/// logging (both read the typed values) is written as it is decoded (`kserve_v1::Rendered`):
/// no typed value per feature; the same body.
pub fn enrich_at(
    route: &Route,
    req: ParsedRequest,
    vectors: &[Vec<u8>],
    now_us: i64,
    received_us: i64,
    keep: Keep<'_>,
) -> Result<Enriched, FerryError> {
    if vectors.len() != req.keys().len() {
        return Err(FerryError::BadVector {
            detail: format!(
                "{} vectors for {} entities",
                vectors.len(),
                req.keys().len()
            ),
        });
    }
    let entities = req.keys().len();
    let req = match req {
        ParsedRequest::KserveV1(r) if route.derived.count == 0 && route.log.is_none() => {
            return rendered(route, r, vectors, now_us, keep)
        }
        other => other,
    };
    let mut features = Typed::new(route, entities);
    let tally = decode(route, req.keys(), vectors, now_us, &mut features)?;
    let status = tally.judge(route)?;
    let mut features = features.done;
    if route.on_missing == OnMissing::Default {
        apply_defaults(route, &mut features);
    }
    let derived = compute(route, &req, &mut features, received_us);
    let mut req = req;
    if let ParsedRequest::FeastRest(r) = &mut req {
        r.event_times_us = event_times(route, vectors);
    }
    let logged = keep(status).then(|| logged(status, req.keys(), &features, vectors));
    let rewritten = format::rewrite(req, route, features)?;
    Ok(tally.enriched(route, entities, rewritten, derived, logged))
}

/// [`enrich_at`] of a KServe v1 request on a route without on-demand features or logging:
/// the body written as the vectors are decoded. Should `keep` want the record all the same,
/// the typed features are built for it.
fn rendered(
    route: &Route,
    req: kserve_v1::ParsedRequest,
    vectors: &[Vec<u8>],
    now_us: i64,
    keep: Keep<'_>,
) -> Result<Enriched, FerryError> {
    let entities = req.keys.len();
    let mut features = Rendered::new(route, entities / route.keys_per_entity());
    let tally = decode(route, &req.keys, vectors, now_us, &mut features)?;
    let status = tally.judge(route)?;
    let logged = keep(status)
        .then(|| typed(route, &req.keys, vectors, now_us).ok())
        .flatten()
        .map(|mut typed| {
            if route.on_missing == OnMissing::Default {
                apply_defaults(route, &mut typed);
            }
            logged(status, &req.keys, &typed, vectors)
        });
    let body = kserve_v1::rewrite_rendered(req, route, &features);
    let rewritten = Rewritten {
        body: Some(body),
        headers: Vec::new(),
    };
    Ok(tally.enriched(route, entities, rewritten, DerivedCounts::default(), logged))
}

/// A copy of what the model receives, for the served-feature log (only for a picked request).
fn logged(
    status: ServedStatus,
    keys: &[String],
    features: &[EntityFeatures],
    vectors: &[Vec<u8>],
) -> Logged {
    Logged {
        status,
        keys: keys.to_vec(),
        features: features
            .iter()
            .map(|f| EntityFeatures {
                values: f.values.clone(),
                statuses: f.statuses.clone(),
            })
            .collect(),
        vectors: vectors.to_vec(),
    }
}

/// The request's on-demand features (`request::derived`), under one budget.
fn compute(
    route: &Route,
    req: &ParsedRequest,
    features: &mut [EntityFeatures],
    received_us: i64,
) -> DerivedCounts {
    let mut budget = Budget::new(DEFAULT_REQUEST_BUDGET);
    let received_s = received_us.div_euclid(1_000_000);
    derived::evaluate(route, req.fields(), features, received_s, &mut budget)
}

/// Where `decode` puts the entities' features: a `vector::Sink` told where each entity ends.
trait Entities: Sink {
    fn end_entity(&mut self);
}

impl Entities for Rendered<'_> {
    fn end_entity(&mut self) {
        Rendered::end_entity(self);
    }
}

/// The typed features of every entity.
struct Typed {
    done: Vec<EntityFeatures>,
    entity: EntityFeatures,
    count: usize,
}

impl Typed {
    fn new(route: &Route, keys: usize) -> Typed {
        let count = route.feature_count;
        Typed {
            done: Vec::with_capacity(keys / route.keys_per_entity()),
            entity: EntityFeatures {
                values: Vec::with_capacity(count),
                statuses: Vec::with_capacity(count),
            },
            count,
        }
    }
}

impl Sink for Typed {
    fn not_found(&mut self, n: usize) {
        self.entity.push_not_found(n);
    }

    #[inline]
    fn push(&mut self, value: Option<ValueRef<'_>>, status: FeatureStatus) {
        Sink::push(&mut self.entity, value, status);
    }

    fn statuses(&self) -> &[FeatureStatus] {
        &self.entity.statuses
    }
}

impl Entities for Typed {
    fn end_entity(&mut self) {
        let next = EntityFeatures {
            values: Vec::with_capacity(self.count),
            statuses: Vec::with_capacity(self.count),
        };
        self.done.push(std::mem::replace(&mut self.entity, next));
    }
}

/// Every entity's typed features (the route's policies not applied).
fn typed(
    route: &Route,
    keys: &[String],
    vectors: &[Vec<u8>],
    now_us: i64,
) -> Result<Vec<EntityFeatures>, FerryError> {
    let mut features = Typed::new(route, keys.len());
    decode(route, keys, vectors, now_us, &mut features)?;
    Ok(features.done)
}

/// The keys found missing or with a feature past its view's TTL, and what was served.
struct Tally {
    missing: Vec<String>,
    stale: Vec<String>,
    served: Served,
}

impl Tally {
    /// The route's missing and stale policies: refused, or the request's status.
    fn judge(&self, route: &Route) -> Result<ServedStatus, FerryError> {
        if route.on_missing == OnMissing::Reject && !self.missing.is_empty() {
            return Err(FerryError::EntitiesNotFound {
                ids: self.missing.clone(),
            });
        }
        if route.on_stale == OnStale::Reject && !self.stale.is_empty() {
            return Err(FerryError::StaleFeatures {
                ids: self.stale.clone(),
            });
        }
        Ok(if self.missing.is_empty() && self.stale.is_empty() {
            ServedStatus::Ok
        } else {
            ServedStatus::Partial
        })
    }

    fn enriched(
        self,
        route: &Route,
        entities: usize,
        rewritten: format::Rewritten,
        derived: DerivedCounts,
        logged: Option<Logged>,
    ) -> Enriched {
        // Entity keys looked up: one per service of the route for each entity.
        let (missing, stale) = (self.missing.len(), self.stale.len());
        Enriched {
            rewritten,
            headers: summary(route, entities, missing, stale),
            found: entities - missing,
            missing,
            stale,
            derived,
            served: self.served,
            logged,
        }
    }
}

/// Decodes each entity's vectors (one per route part, in part order) into `out`.
fn decode<S: Entities>(
    route: &Route,
    keys: &[String],
    vectors: &[Vec<u8>],
    now_us: i64,
    out: &mut S,
) -> Result<Tally, FerryError> {
    let parts = route.keys_per_entity();
    let (mut missing, mut stale) = (Vec::new(), Vec::new());
    let (mut served, mut times) = (Served::new(route), Vec::new());
    for (keys, vectors) in keys.chunks(parts).zip(vectors.chunks(parts)) {
        let mut first = 0;
        for ((part, key), bytes) in route.parts.iter().zip(keys).zip(vectors) {
            let from = out.statuses().len();
            let cells = first;
            first += part.service.views.len();
            if part.service.feature_count == 0 {
                // On-demand views over request fields only: nothing stored, nothing looked up.
                continue;
            }
            times.clear();
            if bytes.is_empty() {
                missing.push(key.clone());
                out.not_found(part.service.feature_count);
            } else {
                let service = &part.service;
                vector::decode_into(bytes, service, key, now_us, out, &mut times)?;
            }
            let statuses = out.statuses().get(from..).unwrap_or_default();
            served.add(cells, &part.service, statuses, &times, now_us);
            if statuses.contains(&FeatureStatus::OutsideMaxAge) {
                stale.push(key.clone());
            }
        }
        out.end_entity();
    }
    Ok(Tally {
        missing,
        stale,
        served,
    })
}

/// `x-ferry-*` of an enriched request: the services and fingerprints, the counts, and the
/// status (`partial` when an entity was missing or stale).
fn summary(
    route: &Route,
    entities: usize,
    missing: usize,
    stale: usize,
) -> Vec<(&'static str, String)> {
    let partial = missing > 0 || stale > 0;
    let mut out = vec![
        ("x-ferry-service", route.services_label.clone()),
        ("x-ferry-fingerprint", route.fingerprints_label.clone()),
        ("x-ferry-entities", entities.to_string()),
        ("x-ferry-missing", missing.to_string()),
        ("x-ferry-stale", stale.to_string()),
        (
            "x-ferry-status",
            if partial { "partial" } else { "ok" }.to_string(),
        ),
    ];
    derived_version(route, &mut out);
    out
}

/// `x-ferry-derived-version`, when the route computes on-demand features.
fn derived_version(route: &Route, headers: &mut Vec<(&'static str, String)>) {
    if !route.derived.version_label.is_empty() {
        headers.push((
            "x-ferry-derived-version",
            route.derived.version_label.clone(),
        ));
    }
}

/// Per entity, the event time of each feature of its flattened vector (0 = none): Feast's
/// REST answer reports them.
fn event_times(route: &Route, vectors: &[Vec<u8>]) -> Vec<Vec<i64>> {
    vectors
        .chunks(route.keys_per_entity())
        .map(|entity| {
            route
                .parts
                .iter()
                .zip(entity)
                .flat_map(|(part, bytes)| vector::event_times_us(bytes, &part.service))
                .collect()
        })
        .collect()
}

/// Under `on_missing_entity: default`, NOT_FOUND features take the repo's default (or stay null).
fn apply_defaults(route: &Route, features: &mut [EntityFeatures]) {
    let defaults: Vec<&FeatureValue> = route.features().map(|f| &f.default).collect();
    for f in features {
        for ((value, status), default) in f.values.iter_mut().zip(&f.statuses).zip(&defaults) {
            if *status == FeatureStatus::NotFound {
                value.clone_from(default);
            }
        }
    }
}

/// A request forwarded under `on_reader_error: forward` after a reader failure: every stored
/// feature null (or the repo's default under `on_missing_entity: default`) with status
/// NOT_FOUND, so nothing a client sent under Ferry's names goes on, and the on-demand features
/// computed over that (`received_us`: when Envoy received the request);
/// `x-ferry-status: degraded` and `x-ferry-error` say why.
pub fn degraded(
    route: &Route,
    req: ParsedRequest,
    error: &FerryError,
    received_us: i64,
    keep: Keep<'_>,
) -> Result<Enriched, FerryError> {
    let entities = req.keys().len() / route.keys_per_entity();
    let mut features: Vec<EntityFeatures> = (0..entities)
        .map(|_| EntityFeatures {
            values: vec![None; route.stored_count],
            statuses: vec![FeatureStatus::NotFound; route.stored_count],
        })
        .collect();
    if route.on_missing == OnMissing::Default {
        apply_defaults(route, &mut features);
    }
    let derived = compute(route, &req, &mut features, received_us);
    let status = ServedStatus::Degraded;
    let logged = keep(status).then(|| logged(status, req.keys(), &features, &[]));
    Ok(Enriched {
        rewritten: format::rewrite(req, route, features)?,
        headers: degraded_headers(route, error),
        found: 0,
        missing: 0,
        stale: 0,
        derived,
        // A reader failure, not a value served: counted by ferry_requests_degraded.
        served: Served::default(),
        logged,
    })
}

/// `x-ferry-*` of a request forwarded unenriched under `on_reader_error: forward`.
fn degraded_headers(route: &Route, error: &FerryError) -> Vec<(&'static str, String)> {
    let mut out = vec![
        ("x-ferry-service", route.services_label.clone()),
        ("x-ferry-status", "degraded".to_string()),
        ("x-ferry-error", error.code().to_string()),
    ];
    derived_version(route, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixture::{config, route_with, FP};
    use ferry_protos::v1::{self as pb, value::Kind};
    use ferry_test_support::reader::response;
    use ferry_test_support::vector::{scoring, vector, NOW_US as NOW};
    use serde_json::json;
    use std::collections::HashMap;

    fn good(age: i64) -> Vec<u8> {
        scoring(NOW, Some(age), Some(0.25), Some(9))
    }

    type Headers = Vec<(&'static str, String)>;

    fn run(c: &Config, body: &str, vectors: Vec<Vec<u8>>) -> Result<(Json, Headers), FerryError> {
        let r = &c.routes[0];
        let req: ParsedRequest = crate::format::kserve_v1::parse(body.as_bytes(), r)
            .unwrap()
            .into();
        let n = req.keys().len();
        let e = enrich(r, req, &reader_vectors(&response(vectors), &[n])?, NOW)?;
        Ok((
            serde_json::from_slice(&e.rewritten.body.unwrap()).unwrap(),
            e.headers,
        ))
    }

    fn header<'a>(h: &'a [(&'static str, String)], name: &str) -> &'a str {
        h.iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .unwrap()
    }

    #[test]
    fn one_request_for_the_whole_batch() {
        let c = config();
        let keys = ["u1".to_string(), "u2".to_string()];
        let call = reader_request(&c, &c.routes[0], &keys, &[0, 1]);
        assert_eq!((call.order, call.lookup_sizes), (vec![0, 1], vec![2]));
        let req = VectorRequest::decode(call.body.as_slice()).unwrap();
        assert_eq!(req.project, "banking");
        assert_eq!(req.lookups.len(), 1);
        assert_eq!(req.lookups[0].fingerprint, FP);
        assert_eq!(req.lookups[0].entity_keys, ["u1", "u2"]);
    }

    #[test]
    fn enriches_every_instance() {
        let c = config();
        let (v, h) = run(
            &c,
            r#"{"instances":[{"user_id":"a"},{"user_id":"b"}]}"#,
            vec![good(1), good(2)],
        )
        .unwrap();
        assert_eq!(v["instances"][1]["profile__age"], json!(2));
        assert_eq!(v["instances"][0]["txn__count"], json!(9));
        assert_eq!(header(&h, "x-ferry-status"), "ok");
        assert_eq!(header(&h, "x-ferry-entities"), "2");
    }

    #[test]
    fn missing_entity_policies() {
        let body = r#"{"instances":[{"user_id":"a"},{"user_id":"ghost"}]}"#;
        let e = run(&config(), body, vec![good(1), vec![]]).unwrap_err();
        assert_eq!(
            e,
            FerryError::EntitiesNotFound {
                ids: vec!["ghost".into()]
            }
        );

        let c = route_with(|r| r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32);
        let (v, h) = run(&c, body, vec![good(1), vec![]]).unwrap();
        assert_eq!(v["instances"][1]["profile__age"], Json::Null);
        assert_eq!(v["ferry"]["statuses"][1]["profile__age"], "NOT_FOUND");
        assert_eq!(header(&h, "x-ferry-missing"), "1");
        assert_eq!(header(&h, "x-ferry-status"), "partial");

        let c =
            route_with(|r| r.on_missing_entity = pb::MissingEntityPolicy::MissingDefault as i32);
        let (v, _) = run(&c, body, vec![good(1), vec![]]).unwrap();
        assert_eq!(v["instances"][1]["profile__age"], json!(-1), "repo default");
        assert_eq!(
            v["instances"][1]["profile__score"],
            Json::Null,
            "no default: null"
        );
        assert_eq!(v["instances"][0]["profile__age"], json!(1));
    }

    #[test]
    fn stale_policies() {
        let day = 86_400_000_000;
        let stale = vector(
            FP,
            vec![
                (NOW, vec![Some(Kind::Int64Val(1)), None]),
                (NOW - 2 * day, vec![Some(Kind::Int64Val(9))]),
            ],
        );
        let body = r#"{"instances":[{"user_id":"a"}]}"#;
        let (v, h) = run(&config(), body, vec![stale.clone()]).unwrap();
        assert_eq!(v["instances"][0]["txn__count"], Json::Null);
        assert_eq!(v["ferry"]["statuses"][0]["txn__count"], "OUTSIDE_MAX_AGE");
        assert_eq!(header(&h, "x-ferry-stale"), "1");
        let c = route_with(|r| r.on_stale = pb::StalePolicy::StaleReject as i32);
        let e = run(&c, body, vec![stale]).unwrap_err();
        assert_eq!((e.status(), e.code()), (422, "stale_features"));
    }

    #[test]
    fn reader_answers_are_judged() {
        assert!(check_reader_status(Some(200), b"", 100).is_ok());
        let judge = |status, body: &[u8]| {
            let e = check_reader_status(status, body, 100).unwrap_err();
            (e.status(), e.code(), e.message())
        };
        assert_eq!(judge(None, b"").1, "reader_unavailable");
        let redis_down = br#"{"error":"redis_unavailable","message":"connection refused"}"#;
        assert_eq!(
            judge(Some(503), redis_down),
            (
                503,
                "redis_unavailable",
                "feature store (Redis) unavailable: connection refused".into()
            )
        );
        let redis_slow = br#"{"error":"redis_timeout","message":"no answer in 50 ms"}"#;
        assert_eq!(judge(Some(504), redis_slow).1, "redis_timeout");
        // Envoy's own replies when the reader cluster is down or slow carry no reader JSON.
        let envoy_503 = b"upstream connect error or disconnect/reset before headers";
        assert_eq!(judge(Some(503), envoy_503).0, 503);
        assert_eq!(judge(Some(503), envoy_503).1, "reader_unavailable");
        assert_eq!(
            judge(Some(504), b"upstream request timeout").1,
            "reader_timeout"
        );
        let refused = br#"{"error":"batch_too_large","message":"1001 keys"}"#;
        assert_eq!(
            judge(Some(413), refused),
            (
                502,
                "reader_rejected",
                "feature reader refused the call (413): 1001 keys".into()
            )
        );
        let c = config();
        let e = run(&c, r#"{"instances":[{"user_id":"a"}]}"#, vec![]).unwrap_err();
        assert_eq!(
            e.message(),
            "unusable feature vector: reader answered 0 vectors for 1 entities"
        );
        let e = run(
            &c,
            r#"{"instances":[{"user_id":"a"}]}"#,
            vec![vector(FP + 1, vec![])],
        )
        .unwrap_err();
        assert_eq!(e.code(), "fingerprint_mismatch");
    }

    /// The body written as the vectors are decoded (`rendered`) is, byte for byte, the body of
    /// the typed path (`format::rewrite` of the typed features after the same policies), over
    /// every policy, missing and stale entities, nulls, non-finite floats and two services.
    #[test]
    fn rendered_body_is_the_typed_body() {
        use ferry_test_support::snapshot::{with_merchant, DAY_US};
        use ferry_test_support::vector::merchant;
        let stale = scoring(NOW - 2 * DAY_US, Some(5), Some(1.5), Some(6));
        let odd = vector(
            FP,
            vec![
                (NOW, vec![None, Some(Kind::FloatVal(f32::NAN))]),
                (0, vec![]),
            ],
        );
        let cases: Vec<(Config, &str, Vec<Vec<u8>>)> = vec![
            (
                route_with(|r| r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32),
                r#"{"x":1,"instances":[{"user_id":"a","n":"\u00e9"},{"user_id":"b"},{"user_id":"c","profile__age":3}],"ferry":2}"#,
                vec![good(1), vec![], stale.clone()],
            ),
            (
                route_with(|r| {
                    r.on_missing_entity = pb::MissingEntityPolicy::MissingDefault as i32
                }),
                r#"{"instances":[{"user_id":"a"},{"user_id":"b"},{"user_id":"c"}]}"#,
                vec![odd.clone(), vec![], stale],
            ),
            (
                Config::from_snapshot(with_merchant(pb::ValueType::String)).unwrap(),
                r#"{"instances":[{"user_id":"a","merchant_id":"m"},{"merchant_id":"n","user_id":"b"}]}"#,
                vec![good(1), merchant(NOW, 0.1), odd, vec![]],
            ),
        ];
        for (c, body, vectors) in cases {
            let r = &c.routes[0];
            let parse = || -> ParsedRequest {
                crate::format::kserve_v1::parse(body.as_bytes(), r)
                    .unwrap()
                    .into()
            };
            let keep_all = |_: ServedStatus| true;
            let e = enrich_at(r, parse(), &vectors, NOW, NOW, &keep_all).unwrap();
            let req = parse();
            let mut features = typed(r, req.keys(), &vectors, NOW).unwrap();
            if r.on_missing == OnMissing::Default {
                apply_defaults(r, &mut features);
            }
            let logged = e.logged.unwrap();
            assert_eq!(logged.features, features, "{body}");
            let want = format::rewrite(req, r, features).unwrap().body.unwrap();
            let got = e.rewritten.body.unwrap();
            assert_eq!(
                String::from_utf8(got).unwrap(),
                String::from_utf8(want).unwrap()
            );
        }
    }

    /// Every (service, view) metric name defined, by host id, for `served_values_are_counted`.
    fn view_metrics(c: &Config) -> (crate::metrics::Metrics, HashMap<u32, String>) {
        use crate::metrics::{Metrics, ViewMetrics};
        let mut names = HashMap::new();
        let mut next = 100;
        let base = Metrics::define(|_, _| None);
        let views = ViewMetrics::define(c, &ViewMetrics::default(), |_, name| {
            next += 1;
            names.insert(next, name.to_owned());
            Some(next)
        });
        (base.with_views(views), names)
    }

    #[test]
    fn served_values_are_counted_by_view_status_and_age() {
        use crate::host::testing::FakeHost;
        use ferry_test_support::snapshot::DAY_US;
        let c = route_with(|r| r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32);
        let r = &c.routes[0];
        let body = r#"{"instances": [{"user_id": "a"}, {"user_id": "b"}, {"user_id": "c"}]}"#;
        let req: ParsedRequest = crate::format::kserve_v1::parse(body.as_bytes(), r)
            .unwrap()
            .into();
        // a: fresh, 10 s old, score null; b: 2 days old (txn stale under its 1-day TTL);
        // c: not found.
        let fresh = scoring(NOW - 10_000_000, Some(1), None, Some(3));
        let old = scoring(NOW - 2 * DAY_US, Some(2), Some(0.5), Some(4));
        let e = enrich(r, req, &[fresh, old, vec![]], NOW).unwrap();
        let (m, names) = view_metrics(&c);
        let host = FakeHost::default();
        m.count_served(&host, r, &e.served);
        let count = |name: &str| {
            let id = names.iter().find(|(_, n)| n.as_str() == name).unwrap().0;
            host.metrics.borrow().get(id).copied().unwrap_or(0)
        };
        let p = "ferry_view_values.service.scoring.view";
        assert_eq!(count(&format!("{p}.profile.status.present")), 3);
        assert_eq!(count(&format!("{p}.profile.status.null")), 1);
        assert_eq!(count(&format!("{p}.profile.status.missing")), 2);
        assert_eq!(count(&format!("{p}.profile.status.stale")), 0);
        assert_eq!(count(&format!("{p}.txn.status.present")), 1);
        assert_eq!(count(&format!("{p}.txn.status.stale")), 1);
        assert_eq!(count(&format!("{p}.txn.status.missing")), 1);
        let mut ages: Vec<(String, u64)> = host
            .recorded
            .borrow()
            .iter()
            .map(|(id, v)| (names[id].clone(), *v))
            .collect();
        ages.sort();
        let age = |v: &str| format!("ferry_view_age_seconds.service.scoring.view.{v}");
        assert_eq!(
            ages,
            [
                (age("profile"), 10),
                (age("profile"), 172_800),
                (age("txn"), 10),
                (age("txn"), 172_800)
            ],
            "one age per row found, stale ones included"
        );
    }

    #[test]
    fn view_series_are_bounded_and_kept_across_snapshots() {
        use crate::metrics::{views::MAX_VIEW_SERIES, ViewMetrics};
        let c = config();
        let mut defined = 0;
        let all = ViewMetrics::define(&c, &ViewMetrics::default(), |_, _| {
            defined += 1;
            Some(defined)
        });
        let pairs: usize = c.services.iter().map(|s| s.views.len()).sum();
        assert!((2..=MAX_VIEW_SERIES).contains(&pairs));
        assert_eq!((all.pairs(), defined), (pairs, pairs as u32 * 5));
        let one = ViewMetrics::define_at_most(&c, &ViewMetrics::default(), 1, |_, _| Some(1));
        assert_eq!(one.pairs(), 1, "past the bound: no series");
        let again = ViewMetrics::define(&c, &all, |_, _| panic!("already defined"));
        assert_eq!(again.ids("scoring"), all.ids("scoring"));
    }
}
