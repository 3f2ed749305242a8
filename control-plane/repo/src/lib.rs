//! `ferry-repo`: everything from a feature repo on disk to the registry snapshot. A feature repo
//! is a folder holding `ferry.yaml` and the views' source files. Loading validates everything and
//! yields a [`Registry`], the resolved model the snapshot and the vectors are built from; a repo
//! with any problem yields every problem instead.
//!
//! Crate map:
//! - `ferry_yaml`: `ferry.yaml` as written (the serde model).
//! - `validate`: resolves it in order (entities, then `views`, `on_demand`, `services`,
//!   `routes`), each check adding to the `issues` found.
//! - [`scalars`]: TTLs and typed defaults; `push_sources`: the push sources.
//! - [`feast`]: a Feast registry turned into the same raw model (`feast::odfv` its on-demand
//!   feature views, with the CEL `ferry.yaml` gives them).
//! - [`report`]: the registry as `ferry apply` prints it.
//! - [`types`]: value and key types of the repo language, and their proto counterparts.
//! - [`fingerprint`]: the stable hash of a FeatureService's schema (pins the vector layout),
//!   and the derived version of its on-demand views.
//! - [`cel`]: on-demand views' CEL text into Ferry's checked expression tree.
//! - [`snapshot`]: the registry snapshot (`ferry.v1.Snapshot`) delivered to the filter.
//! - [`sources`]: reading feature view sources (CSV; Parquet) into typed values.
//! - [`tables`]: the latest row per entity of every view a service uses, read from its source.
//! - `test_support` (tests, and the `test-support` feature): small repos in temp folders.

pub mod cel;
pub mod feast;
mod ferry_yaml;
mod issues;
mod on_demand;
mod push_sources;
pub mod report;
mod routes;
pub mod scalars;
mod services;
mod validate;
mod views;

pub mod fingerprint;
pub mod snapshot;
pub mod sources;
pub mod tables;
pub mod types;

#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

use std::fmt;
use std::path::{Path, PathBuf};

use ferry_protos::v1::{FeatureNames, MissingEntityPolicy, ReaderErrorPolicy, StalePolicy, Value};

pub use ferry_core::config::{HeaderMatch, HostMatch, PathMatch, RouteConditions};

use crate::sources::{SourceFormat, TimeUnit};
use crate::types::{FeatureType, KeyType};

/// The repo definition file inside the repo folder.
pub const REPO_FILE: &str = "ferry.yaml";

/// A validated feature repo.
#[derive(Clone, Debug)]
pub struct Registry {
    pub project: String,
    /// The repo folder; sources are relative to it.
    pub root: PathBuf,
    pub entities: Vec<Entity>,
    /// In declared order.
    pub views: Vec<FeatureView>,
    /// In declared order.
    pub services: Vec<FeatureService>,
    /// In declared order: the filter tries them in this order.
    pub routes: Vec<Route>,
    pub reader: Reader,
    /// Bound of the near cache in each Envoy, in bytes.
    pub near_cache_max_bytes: u64,
    /// Normalised, lowercase path prefixes under which a request matching no route is refused.
    pub protected_paths: Vec<String>,
    /// Set when entities, views and services come from a Feast registry: every service is
    /// then read from Feast's Redis layout, and nothing is materialized by Ferry.
    pub feast: Option<feast::FeastRepo>,
    /// In declared order.
    pub on_demand_views: Vec<OnDemandView>,
    /// In declared order.
    pub push_sources: Vec<PushSource>,
}

/// A push source (`push_sources` of ferry.yaml): `POST /push` naming it writes its views.
#[derive(Clone, Debug)]
pub struct PushSource {
    pub name: String,
    /// Indexes into `Registry::views`, as listed.
    pub views: Vec<usize>,
}

/// An on-demand view: features computed per instance from request fields and stored features.
#[derive(Clone, Debug)]
pub struct OnDemandView {
    pub name: String,
    /// Slots `0..request.len()` of its expressions; `request.time` is the next.
    pub request: Vec<RequestField>,
    /// Indexes into `Registry::views`, as listed.
    pub sources: Vec<usize>,
    /// The stored features its expressions read, as (view, feature) indexes into
    /// `Registry::views`, sorted by (view name, feature name): the slots after `request.time`.
    pub stored: Vec<(usize, usize)>,
    /// In declared order.
    pub features: Vec<DerivedFeature>,
}

#[derive(Clone, Debug)]
pub struct RequestField {
    pub name: String,
    /// Where each instance holds it (`name` unless `field:` says otherwise).
    pub field: String,
    pub ty: FeatureType,
}

#[derive(Clone, Debug)]
pub struct DerivedFeature {
    pub name: String,
    pub ty: FeatureType,
    /// The CEL text as written.
    pub text: String,
    /// The checked tree the snapshot carries.
    pub expr: ferry_protos::v1::Expr,
    /// Its static cost bound.
    pub cost: u64,
}

/// The features of one on-demand view a service lists.
#[derive(Clone, Debug)]
pub struct ServiceDerived {
    /// Index into `Registry::on_demand_views`.
    pub view: usize,
    /// Indexes into its `features`, sorted by feature name.
    pub features: Vec<usize>,
}

#[derive(Clone, Debug)]
pub struct Entity {
    pub name: String,
    pub join_key: String,
    pub key_type: KeyType,
}

#[derive(Clone, Debug)]
pub struct FeatureView {
    pub name: String,
    /// Indexes into `Registry::entities`.
    pub entities: Vec<usize>,
    /// 0 = never stale.
    pub ttl_seconds: i64,
    /// None for a view read from a Feast registry: Feast materializes it.
    pub source: Option<Source>,
    /// In declared order (the source's values are read in this order).
    pub features: Vec<Feature>,
}

#[derive(Clone, Debug)]
pub struct Source {
    /// As written in the repo (for messages).
    pub path: String,
    /// Resolved against the repo folder.
    pub file: PathBuf,
    pub format: SourceFormat,
    pub timestamp_field: String,
    /// The declared unit of integer epochs; `None`: detected by magnitude.
    pub timestamp_unit: Option<TimeUnit>,
}

#[derive(Clone, Debug)]
pub struct Feature {
    pub name: String,
    pub ty: FeatureType,
    pub default: Option<Value>,
}

/// One join key of a service's entity key schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceKey {
    pub entity: String,
    pub join_key: String,
    pub key_type: KeyType,
}

#[derive(Clone, Debug)]
pub struct FeatureService {
    pub name: String,
    /// Sorted by join key: the order of an entity key's parts.
    pub keys: Vec<ServiceKey>,
    /// Sorted by view name: the stored vector's layout.
    pub views: Vec<ServiceView>,
    /// Of the stored vector only: on-demand views are not stored.
    pub fingerprint: u64,
    /// On-demand views it lists, sorted by view name: their features follow the stored ones.
    pub derived: Vec<ServiceDerived>,
    /// Hash of the definitions of `derived` (16 hex digits); empty when there is none.
    pub derived_version: String,
}

/// The part of a service that comes from one view.
#[derive(Clone, Debug)]
pub struct ServiceView {
    /// Index into `Registry::views`.
    pub view: usize,
    /// Selected features as indexes into the view's `features`, sorted by feature name.
    pub features: Vec<usize>,
}

/// A further feature service a route enriches from, in the same reader call.
#[derive(Clone, Debug)]
pub struct ExtraService {
    /// Index into `Registry::services`.
    pub service: usize,
    /// Request field per join key, in that service's key order.
    pub entity_fields: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct Route {
    pub name: String,
    /// The filter's own model of a route's conditions.
    pub matcher: RouteConditions,
    /// Services enriched after the main one, in this order.
    pub extra_services: Vec<ExtraService>,
    /// Index into `Registry::services`.
    pub service: usize,
    /// feast_rest: the services a request may read besides `service` (indexes into
    /// `Registry::services`); empty on other formats.
    pub feast_services: Vec<usize>,
    /// The request format with its own options (the filter's model, one shape for both).
    pub format: ferry_core::config::Format,
    /// Request field per join key, in the service's key order.
    pub entity_fields: Vec<String>,
    pub feature_names: FeatureNames,
    pub on_missing_entity: MissingEntityPolicy,
    pub on_stale: StalePolicy,
    pub on_reader_error: ReaderErrorPolicy,
    pub max_body_bytes: u32,
    pub max_entities: u32,
    pub reader_timeout_ms: u32,
    /// Near cache maximum age; 0 = the route does not use the near cache.
    pub cache_max_age_ms: u32,
    /// Served-feature logging (`log:`), checked by the filter's own rule; None = off.
    pub log: Option<ferry_protos::v1::RouteLog>,
}

#[derive(Clone, Debug)]
pub struct Reader {
    pub cluster: String,
    pub authority: String,
}

impl Registry {
    /// The (join key, type) list of a service, in key order, as sources need it.
    pub fn key_spec(&self, service: &FeatureService) -> Vec<(String, KeyType)> {
        service
            .keys
            .iter()
            .map(|k| (k.join_key.clone(), k.key_type))
            .collect()
    }

    pub fn service(&self, name: &str) -> Option<&FeatureService> {
        self.services.iter().find(|s| s.name == name)
    }

    /// A service's views in its layout order, each with its selected features in order.
    pub fn selected<'a>(
        &'a self,
        s: &'a FeatureService,
    ) -> impl Iterator<Item = (&'a FeatureView, impl Iterator<Item = &'a Feature>)> {
        s.views.iter().map(move |sv| {
            let view = &self.views[sv.view];
            (view, sv.features.iter().map(move |&fi| &view.features[fi]))
        })
    }
}

/// One problem in a repo: where (entity / view / feature / service / route) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    pub path: String,
    pub reason: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("{file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: {reason}")]
    Parse { file: String, reason: String },
    #[error("{}", lines(.file, .issues))]
    Invalid { file: String, issues: Vec<Issue> },
}

fn lines(file: &str, issues: &[Issue]) -> String {
    issues
        .iter()
        .map(|i| format!("{file}: {i}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads and validates the repo in folder `root`.
pub fn load(root: &Path) -> Result<Registry, RepoError> {
    let path = root.join(REPO_FILE);
    let file = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|source| RepoError::Read {
        file: file.clone(),
        source,
    })?;
    load_str(root, &file, &text)
}

/// Validates repo text as if it were `file` inside folder `root`.
pub fn load_str(root: &Path, file: &str, text: &str) -> Result<Registry, RepoError> {
    let mut raw: ferry_yaml::RawRepo =
        serde_norway::from_str(text).map_err(|e| RepoError::Parse {
            file: file.to_owned(),
            reason: e.to_string(),
        })?;
    let invalid = |issues| RepoError::Invalid {
        file: file.to_owned(),
        issues,
    };
    let feast = feast::merge(&mut raw, root).map_err(invalid)?;
    let mut reg = validate::validate(raw, root).map_err(|mut issues| {
        if feast.is_some() {
            feast::odfv::rename_paths(&mut issues);
        }
        invalid(issues)
    })?;
    reg.feast = feast;
    Ok(reg)
}

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;

#[cfg(test)]
mod on_demand_tests;

#[cfg(test)]
mod reference_tests;
