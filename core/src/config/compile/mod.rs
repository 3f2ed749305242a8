//! A `ferry.v1.Snapshot` compiled into the [`Config`] the request path trusts: every rule
//! checked once (the same rules `ferry apply` checks, from `rules`), names and limits indexed.
//! The snapshot's own fields here; a service in `service.rs`, a route in `route.rs`.

mod error;
mod on_demand;
mod route;
mod service;

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use ferry_protos::v1 as pb;
use prost::Message;

use crate::config::model::{Config, Format, OnDemandView, Route, Service, OWN_HEADER_PREFIX};
use crate::rules;
use error::invalid;
pub use error::ConfigError;
#[cfg(test)]
pub(super) use route::{conditions, route_format};

impl Config {
    pub fn from_bytes(bytes: &[u8]) -> Result<Config, ConfigError> {
        let snap =
            pb::Snapshot::decode(bytes).map_err(|e| ConfigError::Undecodable(e.to_string()))?;
        Config::from_snapshot(snap)
    }

    pub fn from_snapshot(snap: pb::Snapshot) -> Result<Config, ConfigError> {
        if !ferry_protos::is_valid_name(&snap.project) {
            return invalid(
                "snapshot",
                format!("invalid project name '{}'", snap.project),
            );
        }
        if snap.reader_cluster.is_empty() {
            return invalid("snapshot", "reader_cluster is empty");
        }
        // Indexed by name, so that compiling stays linear in services and routes (a pushed
        // snapshot is untrusted, and may be large).
        let stored_views: HashSet<&str> = snap
            .services
            .iter()
            .flat_map(|s| s.views.iter().map(|v| v.name.as_str()))
            .collect();
        let on_demand = on_demand::on_demand_views(snap.on_demand_views, &stored_views)?;
        let mut services: Vec<Rc<Service>> = Vec::with_capacity(snap.services.len());
        let mut by_name: HashMap<String, Rc<Service>> = HashMap::with_capacity(services.capacity());
        for s in snap.services {
            if by_name.contains_key(&s.name) {
                return invalid("snapshot", format!("service '{}' defined twice", s.name));
            }
            let compiled = Rc::new(service::service(s, &on_demand)?);
            by_name.insert(compiled.name.clone(), compiled.clone());
            services.push(compiled);
        }
        let mut routes = Vec::with_capacity(snap.routes.len());
        for r in snap.routes {
            routes.push(route::route(r, &by_name)?);
        }
        rules::near_cache_bytes_in_snapshot(snap.near_cache_max_bytes).map_err(|reason| {
            ConfigError::Invalid {
                part: "snapshot".into(),
                reason,
            }
        })?;
        Ok(Config {
            protected_paths: protected_paths(snap.protected_paths)?,
            owned_headers: owned_headers(&routes),
            project: snap.project,
            version: snap.version,
            reader_authority: if snap.reader_authority.is_empty() {
                snap.reader_cluster.clone()
            } else {
                snap.reader_authority
            },
            reader_cluster: snap.reader_cluster,
            reads_route_metadata: routes.iter().any(|r| r.conditions.by_name_only()),
            routes,
            near_cache_sets: crate::near_cache::sets_for(snap.near_cache_max_bytes),
            headers_held: true,
            services,
            on_demand_views: sorted(on_demand),
        })
    }
}

fn protected_paths(paths: Vec<String>) -> Result<Vec<String>, ConfigError> {
    for p in &paths {
        if !ferry_protos::path::is_protected_prefix(p) {
            return invalid(
                "snapshot",
                format!(
                    "protected path '{p}' must be a normalised, lowercase path starting with /"
                ),
            );
        }
    }
    Ok(paths)
}

fn sorted(views: HashMap<String, Rc<OnDemandView>>) -> Vec<Rc<OnDemandView>> {
    let mut v: Vec<Rc<OnDemandView>> = views.into_values().collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

/// The custom features headers of header-mode routes (`x-ferry-*` is owned anyway), once each.
fn owned_headers(routes: &[Route]) -> Vec<String> {
    let mut owned: Vec<String> = Vec::new();
    for r in routes {
        if let Format::Header {
            features_header, ..
        } = &r.format
        {
            if !features_header.starts_with(OWN_HEADER_PREFIX) && !owned.contains(features_header) {
                owned.push(features_header.clone());
            }
        }
    }
    owned
}

#[cfg(test)]
#[path = "compile_tests.rs"]
mod tests;

#[cfg(test)]
mod on_demand_tests;
