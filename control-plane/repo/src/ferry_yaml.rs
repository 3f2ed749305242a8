//! `ferry.yaml` as written. Structure is checked by serde (unknown fields are refused); enums,
//! types, units and references stay strings here so that validation can report every bad one
//! at once with its path, instead of stopping at the first.

use serde::{Deserialize, Deserializer};
use serde_norway::Value as Yaml;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRepo {
    pub project: String,
    #[serde(default)]
    pub entities: Vec<RawEntity>,
    #[serde(default)]
    pub feature_views: Vec<RawView>,
    #[serde(default)]
    pub feature_services: Vec<RawService>,
    #[serde(default)]
    pub routes: Vec<RawRoute>,
    #[serde(default)]
    pub reader: RawReader,
    #[serde(default)]
    pub near_cache: RawNearCache,
    /// Path prefixes under which a request that matches no route is refused (404).
    #[serde(default)]
    pub protected_paths: Vec<String>,
    /// Entities, views and services come from this Feast repo's registry instead.
    pub feast: Option<RawFeast>,
    /// Request-time features: computed per instance from the request and stored features.
    #[serde(default)]
    pub on_demand_views: Vec<RawOnDemandView>,
    /// Feature writes: a push source name → the views a push to it writes.
    #[serde(default)]
    pub push_sources: Vec<RawPushSource>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPushSource {
    pub name: String,
    pub views: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOnDemandView {
    pub name: String,
    /// The request fields its expressions read (`request.<name>`).
    #[serde(default)]
    pub request: Vec<RawRequestField>,
    /// The stored views its expressions read (`<view>.<feature>`).
    #[serde(default)]
    pub sources: Vec<String>,
    pub features: Vec<RawDerivedFeature>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRequestField {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    /// Where each instance holds it, when not under `name`.
    pub field: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDerivedFeature {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    /// CEL.
    pub expr: String,
}

/// `feast: {repo: PATH}`: a Feast repo folder (holding `feature_store.yaml`), relative to the
/// Ferry repo.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFeast {
    pub repo: String,
    /// The CEL of the registry's on-demand feature views (`feast/odfv.rs`).
    #[serde(default)]
    pub on_demand: Vec<RawFeastOnDemand>,
}

/// `feast: {on_demand: [{view, features: [{name, expr}]}]}`: one Feast on-demand feature view's
/// features written in CEL; its request fields, sources and types are the registry's.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFeastOnDemand {
    pub view: String,
    pub features: Vec<RawFeastDerived>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFeastDerived {
    pub name: String,
    /// The registry's type; when restated it must match.
    #[serde(rename = "type")]
    pub ty: Option<String>,
    /// CEL.
    pub expr: String,
}

/// The in-proxy near cache; each route opts in with `cache_max_age_ms`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawNearCache {
    #[serde(default = "default_near_cache_bytes")]
    pub max_bytes: u64,
}

impl Default for RawNearCache {
    fn default() -> Self {
        RawNearCache {
            max_bytes: default_near_cache_bytes(),
        }
    }
}

fn default_near_cache_bytes() -> u64 {
    64 << 20
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEntity {
    pub name: String,
    pub join_key: String,
    #[serde(rename = "type")]
    pub ty: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawView {
    pub name: String,
    pub entities: Vec<String>,
    /// `30d`; a bare number is kept so that its missing unit can be reported.
    pub ttl: Option<Yaml>,
    /// Absent only for a view read from a Feast registry (`from_feast`).
    pub source: Option<RawSource>,
    pub features: Vec<RawFeature>,
    /// Set by the Feast reader (`feast/`), never by `ferry.yaml`.
    #[serde(skip)]
    pub from_feast: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSource {
    pub path: String,
    pub timestamp_field: String,
    /// `s`, `ms`, `us` or `ns`: the unit of integer epochs in the timestamp column; absent,
    /// it is detected by magnitude (see `sources::timestamp`).
    pub timestamp_unit: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFeature {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub default: Option<Yaml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawService {
    pub name: String,
    pub features: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRoute {
    pub name: Option<String>,
    /// Absent or empty: the route is selected only by name (Envoy route metadata).
    #[serde(rename = "match", default)]
    pub matcher: RawMatch,
    pub service: String,
    pub format: String,
    /// Absent only for a service of on-demand views over request fields only (no join key).
    #[serde(default)]
    pub entity: RawEntityRef,
    #[serde(default, deserialize_with = "word")]
    pub feature_names: Option<String>,
    #[serde(default, deserialize_with = "word")]
    pub on_missing_entity: Option<String>,
    #[serde(default, deserialize_with = "word")]
    pub on_stale: Option<String>,
    #[serde(default, deserialize_with = "word")]
    pub on_reader_error: Option<String>,
    pub max_body_bytes: Option<u64>,
    pub max_entities: Option<u64>,
    pub reader_timeout_ms: Option<u64>,
    pub cache_max_age_ms: Option<u64>,
    /// kserve_v2, kserve_v2_grpc: one packed FP32 tensor instead of one tensor per feature.
    pub packed: Option<bool>,
    /// json: RFC 6901 pointer to the entity object or array of objects.
    pub entity_pointer: Option<String>,
    /// json: pointer, relative to each entity object, where the features object is written.
    pub inject_pointer: Option<String>,
    /// header: the request header the features are written to.
    pub features_header: Option<String>,
    /// header: bound of that header's value, in bytes.
    pub max_header_bytes: Option<u64>,
    /// header: json (default) or protobuf (base64 of ferry.v1.HeaderFeatures).
    #[serde(default, deserialize_with = "word")]
    pub features_encoding: Option<String>,
    /// More feature services enriched in the same reader call, each with its entity fields.
    #[serde(default)]
    pub extra_services: Vec<RawExtraService>,
    /// feast_rest: the further FeatureServices a request may read (besides `service`).
    #[serde(default)]
    pub feast_services: Vec<String>,
    /// Served-feature logging: `{sample: 0.1, statuses: {partial: 1.0}}`.
    pub log: Option<RawRouteLog>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteLog {
    /// Share of requests logged (0..1), for a status without its own rate.
    #[serde(default)]
    pub sample: f64,
    /// Per `x-ferry-status` (ok, partial, degraded): its own rate.
    #[serde(default)]
    pub statuses: std::collections::BTreeMap<String, f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExtraService {
    pub service: String,
    pub entity: RawEntityRef,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawMatch {
    pub path_prefix: Option<String>,
    pub path_exact: Option<String>,
    pub host: Option<String>,
    pub headers: Vec<RawHeaderMatch>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeaderMatch {
    pub name: String,
    /// Absent: the header must be present, with any value.
    pub exact: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawEntityRef {
    pub field: Option<String>,
    pub fields: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReader {
    #[serde(default = "default_reader_cluster")]
    pub cluster: String,
    #[serde(default = "default_reader_authority")]
    pub authority: String,
}

impl Default for RawReader {
    fn default() -> Self {
        RawReader {
            cluster: default_reader_cluster(),
            authority: default_reader_authority(),
        }
    }
}

fn default_reader_cluster() -> String {
    "ferry_reader".to_owned()
}

fn default_reader_authority() -> String {
    "ferry-reader".to_owned()
}

/// A policy word. YAML reads an unquoted `null` as the null value, not as the word: a user who
/// writes `on_missing_entity: null` means the `null` policy, never "use the default" (which is
/// `reject`), so null is mapped to the word here.
fn word<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Yaml::deserialize(d)? {
        Yaml::Null => Ok(Some("null".to_owned())),
        Yaml::String(s) => Ok(Some(s)),
        Yaml::Bool(b) => Ok(Some(b.to_string())),
        Yaml::Number(n) => Ok(Some(n.to_string())),
        _ => Err(serde::de::Error::custom("expected a word")),
    }
}
