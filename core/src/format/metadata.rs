//! What Ferry reports in the body: the `ferry` field with the services, their fingerprints and
//! each entity's features that are not PRESENT, and the derived version when the route computes
//! on-demand features.

use serde_json::{Map, Value as Json};

use crate::config::Route;
use crate::vector::{EntityFeatures, FeatureStatus};

/// Field (body formats) where Ferry reports what it did; a client's own value is replaced.
pub const METADATA_FIELD: &str = "ferry";

/// One entity's features that are not PRESENT, by output name.
pub fn not_present(route: &Route, f: &EntityFeatures) -> Map<String, Json> {
    let mut m = Map::new();
    for (name, status) in route.output_names.iter().zip(&f.statuses) {
        if *status != FeatureStatus::Present {
            m.insert(name.clone(), Json::from(status.as_str()));
        }
    }
    m
}

/// `{"service", "fingerprint", "statuses": [one object per entity]}`.
pub fn metadata(route: &Route, statuses: Vec<Json>) -> Json {
    let mut meta = Map::new();
    meta.insert("service".into(), Json::from(route.services_label.as_str()));
    meta.insert(
        "fingerprint".into(),
        Json::from(route.fingerprints_label.as_str()),
    );
    if !route.derived.version_label.is_empty() {
        meta.insert(
            "derived_version".into(),
            Json::from(route.derived.version_label.as_str()),
        );
    }
    meta.insert("statuses".into(), Json::Array(statuses));
    Json::Object(meta)
}
