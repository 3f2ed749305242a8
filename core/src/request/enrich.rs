//! The enrichment step after the reader call (`reader.rs`) and before the rewrite: decodes the
//! stored vectors, applies the route's policies, computes the on-demand features
//! (`on_demand.rs`), and produces the new body and the headers that tell the model what
//! happened.

use crate::config::log_policy::ServedStatus;
use crate::config::{OnMissing, OnStale, Route};
use crate::error::FerryError;
use crate::format::kserve_v1::{self, Rendered};
use crate::format::{self, ParsedRequest, Rewritten};
use crate::log::record::Served as Logged;
use crate::metrics::{DerivedCounts, Served};
use crate::request::on_demand;
use crate::values::{FeatureValue, ValueRef};
use crate::vector::{self, EntityFeatures, FeatureStatus, Sink};
use ferry_expr::{cost::DEFAULT_REQUEST_BUDGET, Budget};

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

/// The request's on-demand features (`on_demand.rs`), under one budget.
fn compute(
    route: &Route,
    req: &ParsedRequest,
    features: &mut [EntityFeatures],
    received_us: i64,
) -> DerivedCounts {
    let mut budget = Budget::new(DEFAULT_REQUEST_BUDGET);
    let received_s = received_us.div_euclid(1_000_000);
    on_demand::evaluate(route, req.fields(), features, received_s, &mut budget)
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
#[path = "enrich_tests.rs"]
mod tests;
