//! Turns the raw repo into a [`Registry`], collecting every problem with its path. Later checks
//! run on whatever resolved, so one mistake is reported once, not again by everything that
//! refers to it; placeholders fill the gaps, and a registry with any issue is never returned.

use std::path::Path;

use super::ferry_yaml::RawRepo;
use super::issues::{Issues, Seen};
use super::on_demand::on_demand_views;
use super::push_sources::push_sources;
use super::routes::{routes, Catalog};
use super::services::services;
use super::views::views;
use super::{Entity, Issue, Reader, Registry};
use crate::types::KeyType;

pub(super) fn validate(raw: RawRepo, root: &Path) -> Result<Registry, Vec<Issue>> {
    let mut issues = Issues::default();
    issues.name("project", "project name", &raw.project);
    let entities = entities(&raw, &mut issues);
    let views = views(&raw, root, &entities, &mut issues);
    let on_demand = on_demand_views(&raw, &views, &mut issues);
    let (services, service_seen) = services(&raw, &views, &on_demand, &entities, &mut issues);
    let catalog = Catalog {
        service_seen: &service_seen,
        services: &services,
        views: &views.list,
        on_demand: &on_demand.list,
    };
    let routes = routes(&raw, &catalog, &mut issues);
    let push_sources = push_sources(&raw, &views, &mut issues);
    check_reader_and_cache(&raw, &mut issues);
    let protected_paths = protected_paths(&raw, &mut issues);
    issues.finish()?;
    Ok(Registry {
        protected_paths,
        project: raw.project.clone(),
        root: root.to_path_buf(),
        entities,
        views: views.list,
        services,
        routes,
        reader: Reader {
            cluster: raw.reader.cluster.clone(),
            authority: raw.reader.authority.clone(),
        },
        near_cache_max_bytes: raw.near_cache.max_bytes,
        feast: None,
        on_demand_views: on_demand.list,
        push_sources,
    })
}

fn check_reader_and_cache(raw: &RawRepo, issues: &mut Issues) {
    for (what, v) in [
        ("cluster", &raw.reader.cluster),
        ("authority", &raw.reader.authority),
    ] {
        if v.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()) {
            issues.add(
                "reader",
                format!("{what} '{v}' must be non-empty, without spaces"),
            );
        }
    }
    if let Err(reason) = ferry_core::rules::near_cache_bytes(raw.near_cache.max_bytes) {
        issues.add("near_cache", reason);
    }
}

/// Protected prefixes, lowercase: they are compared case-insensitively with the normalised
/// request path.
fn protected_paths(raw: &RawRepo, issues: &mut Issues) -> Vec<String> {
    let mut out = Vec::with_capacity(raw.protected_paths.len());
    for (i, p) in raw.protected_paths.iter().enumerate() {
        let lower = p.to_ascii_lowercase();
        let at = format!("protected_paths[{i}]");
        if !ferry_protos::path::is_protected_prefix(&lower) {
            issues.add(
                &at,
                format!(
                    "'{p}' must be a normalised path starting with / (e.g. /v1/models/), not '{}'",
                    ferry_protos::path::normalize(p)
                ),
            );
        } else if out.contains(&lower) {
            issues.add(&at, format!("'{p}' listed twice"));
        } else {
            out.push(lower);
        }
    }
    out
}

fn entities(raw: &RawRepo, issues: &mut Issues) -> Vec<Entity> {
    let mut seen = Seen::new("entity name", "entities");
    let mut keys_seen = Seen::new("join_key", "entities");
    let mut out = Vec::with_capacity(raw.entities.len());
    for (i, e) in raw.entities.iter().enumerate() {
        let path = format!("entities[{i}] '{}'", e.name);
        issues.name(&path, "name", &e.name);
        seen.add(issues, &e.name, i, &path);
        issues.name(&path, "join_key", &e.join_key);
        keys_seen.add(issues, &e.join_key, i, &path);
        let key_type = KeyType::parse(&e.ty).unwrap_or_else(|| {
            issues.add(
                &path,
                format!("unknown type '{}' (expected string or int64)", e.ty),
            );
            KeyType::String
        });
        out.push(Entity {
            name: e.name.clone(),
            join_key: e.join_key.clone(),
            key_type,
        });
    }
    out
}
