//! Feature views checked: their entities, TTL, features with types and defaults, and source
//! (the file exists and has every column the view reads).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use super::ferry_yaml::{RawRepo, RawSource, RawView};
use super::issues::{Issues, Seen};
use super::scalars::{default_value, parse_ttl};
use super::{Entity, Feature, FeatureView, Source};
use crate::sources::{read_header, SourceFormat, TimeUnit};
use crate::types::FeatureType;

/// A repo's views of one kind (stored or on-demand), with what feature refs are resolved
/// against.
pub(super) struct Listed<'a, T> {
    /// In declared order.
    pub(super) list: Vec<T>,
    /// View name → index (first definition).
    pub(super) seen: Seen<'a>,
    /// Every declared feature name per view, valid or not, so refs to a feature whose own
    /// definition is broken are not reported a second time.
    pub(super) declared: Vec<HashSet<&'a str>>,
}

/// The repo's feature views.
pub(super) type Views<'a> = Listed<'a, FeatureView>;

pub(super) fn views<'a>(
    raw: &'a RawRepo,
    root: &Path,
    entities: &[Entity],
    issues: &mut Issues,
) -> Views<'a> {
    let entity_index: HashMap<&str, usize> = entities
        .iter()
        .enumerate()
        .rev()
        .map(|(i, e)| (e.name.as_str(), i))
        .collect();
    let mut out = Views {
        list: Vec::with_capacity(raw.feature_views.len()),
        seen: Seen::new("feature view name", "feature_views"),
        declared: Vec::new(),
    };
    for (i, rv) in raw.feature_views.iter().enumerate() {
        let path = format!("feature_views[{i}] '{}'", rv.name);
        out.seen.add(issues, &rv.name, i, &path);
        out.list
            .push(view(rv, &path, root, entities, &entity_index, issues));
        out.declared
            .push(rv.features.iter().map(|f| f.name.as_str()).collect());
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
