//! Turns the raw repo into a [`Registry`], collecting every problem with its path. Later checks
//! run on whatever resolved, so one mistake is reported once, not again by everything that
//! refers to it; placeholders fill the gaps, and a registry with any issue is never returned.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use ferry_protos::is_valid_name;

use super::raw::{RawRepo, RawSource, RawView};
use super::routes::{route, shadowed_by};
use super::scalars::{default_value, parse_ttl};
use super::*;
use crate::fingerprint::fingerprint;
use crate::sources::{read_header, SourceFormat, TimeUnit};

const NAME_RULE: &str = "use 1-128 of A-Z a-z 0-9 _ -, not starting with '-'";

#[derive(Default)]
pub(super) struct Issues(Vec<Issue>);

impl Issues {
    pub(super) fn add(&mut self, path: &str, reason: impl Into<String>) {
        self.0.push(Issue {
            path: path.to_owned(),
            reason: reason.into(),
        });
    }

    pub(super) fn name(&mut self, path: &str, what: &str, name: &str) {
        if !is_valid_name(name) {
            self.add(path, format!("invalid {what} '{name}' ({NAME_RULE})"));
        }
    }
}

/// First index of each name; later duplicates are reported.
pub(super) fn first_seen<'a>(
    issues: &mut Issues,
    seen: &mut HashMap<&'a str, usize>,
    name: &'a str,
    index: usize,
    path: &str,
    what: &str,
    list: &str,
) {
    if let Some(first) = seen.get(name) {
        issues.add(
            path,
            format!("duplicate {what} '{name}' (first at {list}[{first}])"),
        );
    } else {
        seen.insert(name, index);
    }
}

pub(super) fn validate(raw: RawRepo, root: &Path) -> Result<Registry, Vec<Issue>> {
    let mut issues = Issues::default();
    issues.name("project", "project name", &raw.project);
    let entities = entities(&raw, &mut issues);
    let views = views(&raw, root, &entities, &mut issues);
    let (services, service_seen) = services(&raw, &views, &entities, &mut issues);
    let routes = routes(&raw, &service_seen, &services, &views.list, &mut issues);
    check_reader_and_cache(&raw, &mut issues);
    let protected_paths = protected_paths(&raw, &mut issues);
    if !issues.0.is_empty() {
        return Err(issues.0);
    }
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
    })
}

/// The repo's feature views, with what feature refs are resolved against.
struct Views<'a> {
    list: Vec<FeatureView>,
    /// View name → index (first definition).
    seen: HashMap<&'a str, usize>,
    /// Every declared feature name per view, valid or not, so refs to a feature whose own
    /// definition is broken are not reported a second time.
    declared: Vec<HashSet<&'a str>>,
}

fn views<'a>(raw: &'a RawRepo, root: &Path, entities: &[Entity], issues: &mut Issues) -> Views<'a> {
    let entity_index: HashMap<&str, usize> = entities
        .iter()
        .enumerate()
        .rev()
        .map(|(i, e)| (e.name.as_str(), i))
        .collect();
    let mut out = Views {
        list: Vec::with_capacity(raw.feature_views.len()),
        seen: HashMap::new(),
        declared: Vec::new(),
    };
    for (i, rv) in raw.feature_views.iter().enumerate() {
        let path = format!("feature_views[{i}] '{}'", rv.name);
        first_seen(
            issues,
            &mut out.seen,
            &rv.name,
            i,
            &path,
            "feature view name",
            "feature_views",
        );
        out.list
            .push(view(rv, &path, root, entities, &entity_index, issues));
        out.declared
            .push(rv.features.iter().map(|f| f.name.as_str()).collect());
    }
    out
}

fn services<'a>(
    raw: &'a RawRepo,
    views: &Views,
    entities: &[Entity],
    issues: &mut Issues,
) -> (Vec<FeatureService>, HashMap<&'a str, usize>) {
    let mut services = Vec::with_capacity(raw.feature_services.len());
    let mut service_seen = HashMap::new();
    for (i, rs) in raw.feature_services.iter().enumerate() {
        let path = format!("feature_services[{i}] '{}'", rs.name);
        issues.name(&path, "name", &rs.name);
        first_seen(
            issues,
            &mut service_seen,
            &rs.name,
            i,
            &path,
            "feature service name",
            "feature_services",
        );
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
    (services, service_seen)
}

/// A service's feature refs (`view` or `view:feature`) resolved, sorted by view name, then
/// feature name: the canonical layout.
fn selected_features<'v>(
    refs: &[String],
    path: &str,
    views: &'v Views,
    issues: &mut Issues,
) -> BTreeMap<&'v str, (usize, BTreeMap<&'v str, usize>)> {
    let mut selected: BTreeMap<&str, (usize, BTreeMap<&str, usize>)> = BTreeMap::new();
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
        let Some(&vi) = views.seen.get(view_name) else {
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

/// The routes, each checked (`routes::route`) and against the earlier ones: a route that an
/// earlier one always matches first is never reached.
fn routes(
    raw: &RawRepo,
    service_seen: &HashMap<&str, usize>,
    services: &[FeatureService],
    views: &[FeatureView],
    issues: &mut Issues,
) -> Vec<Route> {
    let mut routes = Vec::with_capacity(raw.routes.len());
    let mut route_seen = HashMap::new();
    let mut match_seen: HashMap<RouteConditions, usize> = HashMap::new();
    let names: Vec<String> = raw
        .routes
        .iter()
        .enumerate()
        .map(|(i, r)| r.name.clone().unwrap_or_else(|| format!("route-{i}")))
        .collect();
    for (i, rr) in raw.routes.iter().enumerate() {
        let path = format!("routes[{i}] '{}'", names[i]);
        issues.name(&path, "name", &names[i]);
        first_seen(
            issues,
            &mut route_seen,
            &names[i],
            i,
            &path,
            "route name",
            "routes",
        );
        let r = route(rr, &names[i], &path, service_seen, services, views, issues);
        if r.matcher.by_name_only() {
            // Selected by name from Envoy route metadata: no match to compare.
        } else if let Some(first) = match_seen.get(&r.matcher) {
            issues.add(&path, format!("same match as routes[{first}]"));
        } else {
            match_seen.insert(r.matcher.clone(), i);
            if let Some(j) = shadowed_by(&routes, &r.matcher) {
                issues.add(
                    &path,
                    format!("never matched: routes[{j}] matches its requests first (routes are tried in order)"),
                );
            }
        }
        routes.push(r);
    }
    routes
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
    if !(1 << 20..=1 << 30).contains(&raw.near_cache.max_bytes) {
        issues.add(
            "near_cache",
            format!(
                "max_bytes {} is outside 1 MiB..=1 GiB",
                raw.near_cache.max_bytes
            ),
        );
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
    let mut seen = HashMap::new();
    let mut keys_seen = HashMap::new();
    let mut out = Vec::with_capacity(raw.entities.len());
    for (i, e) in raw.entities.iter().enumerate() {
        let path = format!("entities[{i}] '{}'", e.name);
        issues.name(&path, "name", &e.name);
        first_seen(
            issues,
            &mut seen,
            &e.name,
            i,
            &path,
            "entity name",
            "entities",
        );
        issues.name(&path, "join_key", &e.join_key);
        first_seen(
            issues,
            &mut keys_seen,
            &e.join_key,
            i,
            &path,
            "join_key",
            "entities",
        );
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

fn view(
    rv: &RawView,
    path: &str,
    root: &Path,
    entities: &[Entity],
    entity_index: &HashMap<&str, usize>,
    issues: &mut Issues,
) -> FeatureView {
    issues.name(path, "name", &rv.name);
    let view_entities = view_entities(rv, path, entity_index, issues);
    let ttl_seconds = match &rv.ttl {
        None => 0,
        Some(t) => parse_ttl(t).unwrap_or_else(|reason| {
            issues.add(path, reason);
            0
        }),
    };
    let join_keys: Vec<&str> = view_entities
        .iter()
        .map(|&e| entities[e].join_key.as_str())
        .collect();
    let features = view_features(rv, path, &join_keys, issues);
    let source = match &rv.source {
        Some(src) => Some(view_source_checked(rv, src, path, root, &join_keys, issues)),
        // A view from a Feast registry: Feast materializes it, Ferry only reads it.
        None if rv.from_feast => None,
        None => {
            issues.add(path, "has no source");
            None
        }
    };
    FeatureView {
        name: rv.name.clone(),
        entities: view_entities,
        ttl_seconds,
        source,
        features,
    }
}

/// The view's entities, each known and listed once, at most `MAX_JOIN_KEYS` of them.
fn view_entities(
    rv: &RawView,
    path: &str,
    entity_index: &HashMap<&str, usize>,
    issues: &mut Issues,
) -> Vec<usize> {
    let mut out = Vec::new();
    if rv.entities.is_empty() {
        issues.add(path, "has no entities");
    }
    for e in &rv.entities {
        match entity_index.get(e.as_str()) {
            Some(&ei) if out.contains(&ei) => {
                issues.add(path, format!("entity '{e}' listed twice"))
            }
            Some(&ei) => out.push(ei),
            None => issues.add(path, format!("unknown entity '{e}'")),
        }
    }
    if out.len() > ferry_protos::limits::MAX_JOIN_KEYS {
        issues.add(
            path,
            format!(
                "has {} entities; an entity key has at most {} join keys",
                out.len(),
                ferry_protos::limits::MAX_JOIN_KEYS
            ),
        );
    }
    out
}

/// The view's features: named once, not a join key or the timestamp, of a known type, with a
/// default of that type.
fn view_features(
    rv: &RawView,
    path: &str,
    join_keys: &[&str],
    issues: &mut Issues,
) -> Vec<Feature> {
    let ts = rv
        .source
        .as_ref()
        .map_or("", |s| s.timestamp_field.as_str());
    if rv.features.is_empty() {
        issues.add(path, "has no features");
    }
    let mut features = Vec::with_capacity(rv.features.len());
    let mut seen = HashSet::new();
    for f in &rv.features {
        let fpath = format!("{path}: feature '{}'", f.name);
        issues.name(&fpath, "name", &f.name);
        if !seen.insert(f.name.as_str()) {
            issues.add(&fpath, "duplicate feature name");
            continue;
        }
        if join_keys.contains(&f.name.as_str()) || (!ts.is_empty() && f.name == ts) {
            issues.add(
                &fpath,
                "clashes with a join key or the timestamp field of the view",
            );
        }
        let Some(ty) = FeatureType::parse(&f.ty) else {
            let expected = FeatureType::expected_list();
            issues.add(
                &fpath,
                format!("unknown type '{}' (expected one of {expected})", f.ty),
            );
            continue;
        };
        let default = f.default.as_ref().and_then(|d| {
            default_value(ty, d)
                .map_err(|reason| issues.add(&fpath, reason))
                .ok()
        });
        features.push(Feature {
            name: f.name.clone(),
            ty,
            default,
        });
    }
    features
}

/// The view's source: its timestamp field, file and unit checked.
fn view_source_checked(
    rv: &RawView,
    src: &RawSource,
    path: &str,
    root: &Path,
    join_keys: &[&str],
    issues: &mut Issues,
) -> Source {
    let ts = src.timestamp_field.as_str();
    issues.name(path, "timestamp_field", ts);
    let columns: Vec<&str> = std::iter::once(ts)
        .chain(join_keys.iter().copied())
        .chain(rv.features.iter().map(|f| f.name.as_str()))
        .collect();
    let (file, format) = view_source(src, path, root, &columns, issues);
    let timestamp_unit = src.timestamp_unit.as_deref().and_then(|u| {
        let unit = TimeUnit::parse(u);
        if unit.is_none() {
            issues.add(
                &format!("{path}: source '{}'", src.path),
                format!("unknown timestamp_unit '{u}' (expected s, ms, us or ns)"),
            );
        }
        unit
    });
    Source {
        path: src.path.clone(),
        file,
        format,
        timestamp_field: ts.to_owned(),
        timestamp_unit,
    }
}

/// The view's source file and format; checked cheaply: it exists and its header has every
/// column the view reads.
fn view_source(
    src: &RawSource,
    path: &str,
    root: &Path,
    columns: &[&str],
    issues: &mut Issues,
) -> (PathBuf, SourceFormat) {
    let spath = format!("{path}: source '{}'", src.path);
    let file = root.join(&src.path);
    let format = match SourceFormat::from_path(&src.path) {
        Ok(format) => format,
        Err(reason) => {
            issues.add(&spath, reason);
            return (file, SourceFormat::Csv);
        }
    };
    if !file.is_file() {
        issues.add(&spath, format!("file not found ({})", file.display()));
        return (file, format);
    }
    match read_header(&file, format) {
        Ok(header) => {
            let missing: Vec<&str> = columns
                .iter()
                .copied()
                .filter(|c| !header.iter().any(|h| h == c))
                .collect();
            if !missing.is_empty() {
                issues.add(&spath, format!("missing column(s) {}", missing.join(", ")));
            }
        }
        Err(e) => issues.add(&spath, format!("cannot read header: {e}")),
    }
    (file, format)
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
    selected: &BTreeMap<&str, (usize, BTreeMap<&str, usize>)>,
    views: &[FeatureView],
    entities: &[Entity],
    issues: &mut Issues,
) -> FeatureService {
    // One key per entity per service: every view must be keyed by the same entities.
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
