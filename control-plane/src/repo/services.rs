//! Feature services checked: their feature refs resolved into the canonical layout (by view,
//! then feature name), one entity key shared by all their views, and the fingerprint.

use std::collections::{BTreeMap, HashMap};

use super::issues::{Issues, Seen};
use super::raw::RawRepo;
use super::views::Views;
use super::{Entity, FeatureService, FeatureView, ServiceKey, ServiceView};
use crate::fingerprint::fingerprint;
use crate::types::{FeatureType, KeyType};

/// A service's selection: view name → (view index, feature name → feature index), sorted.
type Selected<'v> = BTreeMap<&'v str, (usize, BTreeMap<&'v str, usize>)>;

pub(super) fn services<'a>(
    raw: &'a RawRepo,
    views: &Views,
    entities: &[Entity],
    issues: &mut Issues,
) -> (Vec<FeatureService>, HashMap<&'a str, usize>) {
    let mut services = Vec::with_capacity(raw.feature_services.len());
    let mut service_seen = Seen::new("feature service name", "feature_services");
    for (i, rs) in raw.feature_services.iter().enumerate() {
        let path = format!("feature_services[{i}] '{}'", rs.name);
        issues.name(&path, "name", &rs.name);
        service_seen.add(issues, &rs.name, i, &path);
        if rs.features.is_empty() {
            issues.add(&path, "selects no features");
        }
        let selected = selected_features(&rs.features, &path, views, issues);
        services.push(service(
            &rs.name,
            &path,
            &selected,
            &views.list,
            entities,
            issues,
        ));
    }
    (services, service_seen.first)
}

/// A service's feature refs (`view` or `view:feature`) resolved, sorted by view name, then
/// feature name: the canonical layout.
fn selected_features<'v>(
    refs: &[String],
    path: &str,
    views: &'v Views,
    issues: &mut Issues,
) -> Selected<'v> {
    let mut selected = Selected::new();
    for r in refs {
        let rpath = format!("{path}: feature ref '{r}'");
        let (view_name, feature) = match r.split_once(':') {
            Some((v, f)) if !v.is_empty() && !f.is_empty() && !f.contains(':') => (v, Some(f)),
            Some(_) => {
                issues.add(&rpath, "expected 'view' or 'view:feature'");
                continue;
            }
            None => (r.as_str(), None),
        };
        let Some(&vi) = views.seen.first.get(view_name) else {
            issues.add(&rpath, format!("unknown feature view '{view_name}'"));
            continue;
        };
        let v = &views.list[vi];
        let entry = selected
            .entry(v.name.as_str())
            .or_insert((vi, BTreeMap::new()));
        match feature {
            None => entry.1.extend(
                v.features
                    .iter()
                    .enumerate()
                    .map(|(fi, f)| (f.name.as_str(), fi)),
            ),
            Some(f) => match v.features.iter().position(|x| x.name == f) {
                Some(fi) => {
                    entry.1.insert(&v.features[fi].name, fi);
                }
                None if views.declared[vi].contains(f) => {}
                None => issues.add(
                    &rpath,
                    format!("feature view '{view_name}' has no feature '{f}'"),
                ),
            },
        }
    }
    selected
}

fn entity_names(view: &FeatureView, entities: &[Entity]) -> Vec<String> {
    let mut names: Vec<String> = view
        .entities
        .iter()
        .map(|&e| entities[e].name.clone())
        .collect();
    names.sort();
    names
}

fn service(
    name: &str,
    path: &str,
    selected: &Selected,
    views: &[FeatureView],
    entities: &[Entity],
    issues: &mut Issues,
) -> FeatureService {
    check_same_entities(path, selected, views, entities, issues);
    let keys = service_keys(selected, views, entities);
    let service_views: Vec<ServiceView> = selected
        .values()
        .map(|(vi, fs)| ServiceView {
            view: *vi,
            features: fs.values().copied().collect(),
        })
        .collect();
    let key_spec: Vec<(&str, KeyType)> = keys
        .iter()
        .map(|k| (k.join_key.as_str(), k.key_type))
        .collect();
    let feature_spec: Vec<(&str, &str, FeatureType)> = service_views
        .iter()
        .flat_map(|sv| {
            let v = &views[sv.view];
            sv.features.iter().map(move |&fi| {
                (
                    v.name.as_str(),
                    v.features[fi].name.as_str(),
                    v.features[fi].ty,
                )
            })
        })
        .collect();
    FeatureService {
        name: name.to_owned(),
        fingerprint: fingerprint(&key_spec, &feature_spec),
        keys,
        views: service_views,
    }
}

/// One key per entity per service: every view must be keyed by the same entities.
fn check_same_entities(
    path: &str,
    selected: &Selected,
    views: &[FeatureView],
    entities: &[Entity],
    issues: &mut Issues,
) {
    let mut first: Option<(&str, Vec<String>)> = None;
    for (&vname, (vi, _)) in selected {
        let names = entity_names(&views[*vi], entities);
        match &first {
            None => first = Some((vname, names)),
            Some((fname, fnames)) if *fnames != names => issues.add(
                path,
                format!(
                    "views '{fname}' (entities: {}) and '{vname}' (entities: {}) differ; all views \
                     of a feature service must have the same entities",
                    fnames.join(", "),
                    names.join(", ")
                ),
            ),
            Some(_) => {}
        }
    }
}

/// The service's entity key: the first view's entities, sorted by join key.
fn service_keys(
    selected: &Selected,
    views: &[FeatureView],
    entities: &[Entity],
) -> Vec<ServiceKey> {
    let mut keys: Vec<ServiceKey> = selected
        .values()
        .next()
        .map(|(vi, _)| {
            views[*vi]
                .entities
                .iter()
                .map(|&e| ServiceKey {
                    entity: entities[e].name.clone(),
                    join_key: entities[e].join_key.clone(),
                    key_type: entities[e].key_type,
                })
                .collect()
        })
        .unwrap_or_default();
    keys.sort_by(|a, b| a.join_key.cmp(&b.join_key));
    keys
}
