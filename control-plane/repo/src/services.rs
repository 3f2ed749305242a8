//! Feature services checked: their feature refs resolved into the canonical layout (by view,
//! then feature name), one entity key shared by all their views, and the fingerprint.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::ferry_yaml::RawRepo;
use super::issues::{Issues, Seen};
use super::on_demand::OnDemand;
use super::views::Views;
use super::{
    Entity, FeatureService, FeatureView, OnDemandView, ServiceDerived, ServiceKey, ServiceView,
};
use crate::fingerprint::{derived_version, fingerprint};
use crate::types::{FeatureType, KeyType};

/// A service's selection: view name → (view index, feature name → feature index), sorted.
type Selected<'v> = BTreeMap<&'v str, (usize, BTreeMap<&'v str, usize>)>;

pub(super) fn services<'a>(
    raw: &'a RawRepo,
    views: &Views,
    on_demand: &OnDemand,
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
        let (selected, derived) = selected_features(&rs.features, &path, views, on_demand, issues);
        let mut s = service(&rs.name, &path, &selected, &views.list, entities, issues);
        check_derived(
            &path,
            &selected,
            &derived,
            &on_demand.list,
            &views.list,
            issues,
        );
        s.derived_version = version(&derived, &on_demand.list, &views.list);
        s.derived = derived
            .values()
            .map(|(vi, fs)| ServiceDerived {
                view: *vi,
                features: fs.values().copied().collect(),
            })
            .collect();
        services.push(s);
    }
    (services, service_seen.first)
}

/// A service's feature refs (`view` or `view:feature`) resolved, sorted by view name, then
/// feature name: the canonical layout.
/// On-demand views are selected the same way (`view` or `view:feature`) into a second map.
fn selected_features<'v>(
    refs: &[String],
    path: &str,
    views: &'v Views,
    on_demand: &'v OnDemand,
    issues: &mut Issues,
) -> (Selected<'v>, Selected<'v>) {
    let mut selected = Selected::new();
    let mut derived = Selected::new();
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
        let on_demand_view = on_demand
            .seen
            .first
            .get(view_name)
            .filter(|_| !views.seen.first.contains_key(view_name));
        if let Some(&oi) = on_demand_view {
            let v = &on_demand.list[oi];
            let view = Selectable {
                what: "on-demand view",
                name: &v.name,
                index: oi,
                features: v.features.iter().map(|f| f.name.as_str()).collect(),
                declared: &on_demand.declared[oi],
            };
            select(&mut derived, &view, feature, &rpath, issues);
            continue;
        }
        let Some(&vi) = views.seen.first.get(view_name) else {
            issues.add(&rpath, format!("unknown feature view '{view_name}'"));
            continue;
        };
        let v = &views.list[vi];
        let view = Selectable {
            what: "feature view",
            name: &v.name,
            index: vi,
            features: v.features.iter().map(|f| f.name.as_str()).collect(),
            declared: &views.declared[vi],
        };
        select(&mut selected, &view, feature, &rpath, issues);
    }
    (selected, derived)
}

/// A view a feature ref may name, stored or on-demand.
struct Selectable<'v, 'd> {
    /// "feature view" or "on-demand view", for the message.
    what: &'static str,
    name: &'v str,
    /// Index into its list (`Registry::views` or `Registry::on_demand_views`).
    index: usize,
    /// Its features' names, in declared order.
    features: Vec<&'v str>,
    /// Every declared feature name, valid or not: a feature whose own definition was refused
    /// is not reported again.
    declared: &'d HashSet<&'d str>,
}

/// A view (`feature` None) or one of its features selected by a service.
fn select<'v>(
    into: &mut Selected<'v>,
    v: &Selectable<'v, '_>,
    feature: Option<&str>,
    rpath: &str,
    issues: &mut Issues,
) {
    let entry = into.entry(v.name).or_insert((v.index, BTreeMap::new()));
    match feature {
        None => entry
            .1
            .extend(v.features.iter().enumerate().map(|(fi, &f)| (f, fi))),
        Some(f) => match v.features.iter().position(|&x| x == f) {
            Some(fi) => {
                entry.1.insert(v.features[fi], fi);
            }
            None if v.declared.contains(f) => {}
            None => issues.add(
                rpath,
                format!("{} '{}' has no feature '{f}'", v.what, v.name),
            ),
        },
    }
}

/// Every source of a listed on-demand view must be a stored view of the service, and every
/// stored feature it reads selected by the service: the one lookup then holds them all.
fn check_derived(
    path: &str,
    selected: &Selected,
    derived: &Selected,
    on_demand: &[OnDemandView],
    views: &[FeatureView],
    issues: &mut Issues,
) {
    for (&name, (oi, _)) in derived {
        let v = &on_demand[*oi];
        for &src in &v.sources {
            let sname = views[src].name.as_str();
            if !selected.contains_key(sname) {
                issues.add(
                    path,
                    format!(
                        "on-demand view '{name}' reads view '{sname}', which is not a stored \
                         view of this feature service; list it (or the features read) too"
                    ),
                );
            }
        }
        for &(vi, fi) in &v.stored {
            let (vname, fname) = (
                views[vi].name.as_str(),
                views[vi].features[fi].name.as_str(),
            );
            let held = selected
                .get(vname)
                .is_some_and(|(_, fs)| fs.contains_key(fname));
            if selected.contains_key(vname) && !held {
                issues.add(
                    path,
                    format!("on-demand view '{name}' reads '{vname}:{fname}', which this feature service does not select"),
                );
            }
        }
    }
}

/// The derived version: a hash of the definitions of the on-demand features a service lists.
fn version(derived: &Selected, on_demand: &[OnDemandView], views: &[FeatureView]) -> String {
    if derived.is_empty() {
        return String::new();
    }
    let mut text = String::new();
    for (oi, fs) in derived.values() {
        let v = &on_demand[*oi];
        text.push_str(&format!("view {}\n", v.name));
        for r in &v.request {
            text.push_str(&format!(
                "request {} {} {}\n",
                r.name,
                r.field,
                r.ty.as_str()
            ));
        }
        for &s in &v.sources {
            text.push_str(&format!("source {}\n", views[s].name));
        }
        for &fi in fs.values() {
            if let Some(f) = v.features.get(fi) {
                text.push_str(&format!(
                    "feature {} {} {}\n",
                    f.name,
                    f.ty.as_str(),
                    f.text
                ));
            }
        }
    }
    derived_version(&text)
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
        derived: Vec::new(),
        derived_version: String::new(),
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
