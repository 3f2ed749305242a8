//! `on_demand_views` checked: names, request fields, sources (stored views only), and each
//! feature's CEL compiled (`crate::cel`) against them, every problem with its view, feature
//! and line:column. A view's stored inputs are numbered once all its features are read: the
//! union of what they read, sorted by (view, feature).

use std::collections::HashSet;

use ferry_expr::Type;

use super::ferry_yaml::{RawOnDemandView, RawRepo};
use super::issues::{Issues, Seen};
use super::views::{Listed, Views};
use super::{DerivedFeature, OnDemandView, RequestField};
use crate::cel::{self, Scope};
use crate::types::FeatureType;

/// Request field types: what an instance can carry.
const REQUEST_TYPES: [FeatureType; 5] = [
    FeatureType::Int64,
    FeatureType::Float64,
    FeatureType::Bool,
    FeatureType::String,
    FeatureType::Float32List,
];

/// The repo's on-demand views.
pub(super) type OnDemand<'a> = Listed<'a, OnDemandView>;

pub(super) fn on_demand_views<'a>(
    raw: &'a RawRepo,
    views: &Views,
    issues: &mut Issues,
) -> OnDemand<'a> {
    let mut seen = Seen::new("on-demand view name", "on_demand_views");
    let on_demand_names: HashSet<&str> = raw
        .on_demand_views
        .iter()
        .map(|v| v.name.as_str())
        .collect();
    let mut list = Vec::with_capacity(raw.on_demand_views.len());
    for (i, rv) in raw.on_demand_views.iter().enumerate() {
        let path = format!("on_demand_views[{i}] '{}'", rv.name);
        issues.name(&path, "name", &rv.name);
        seen.add(issues, &rv.name, i, &path);
        if views.seen.first.contains_key(rv.name.as_str()) {
            issues.add(
                &path,
                format!("'{}' is also the name of a feature view", rv.name),
            );
        }
        list.push(view(rv, &path, views, &on_demand_names, issues));
    }
    let declared = raw
        .on_demand_views
        .iter()
        .map(|v| v.features.iter().map(|f| f.name.as_str()).collect())
        .collect();
    OnDemand {
        list,
        seen,
        declared,
    }
}

fn view(
    rv: &RawOnDemandView,
    path: &str,
    views: &Views,
    on_demand_names: &HashSet<&str>,
    issues: &mut Issues,
) -> OnDemandView {
    let request = request_fields(rv, path, issues);
    let sources = sources(rv, path, views, on_demand_names, issues);
    if rv.features.is_empty() {
        issues.add(path, "has no features");
    }
    let request_types: Vec<(&str, Type)> = request
        .iter()
        .map(|r| (r.name.as_str(), expr_type(r.ty)))
        .collect();
    let source_features: Vec<(&str, Vec<(&str, Type)>)> = sources
        .iter()
        .map(|&vi| {
            let v = &views.list[vi];
            let fs = v
                .features
                .iter()
                .map(|f| (f.name.as_str(), expr_type(f.ty)))
                .collect();
            (v.name.as_str(), fs)
        })
        .collect();
    let all_views: Vec<&str> = views
        .list
        .iter()
        .map(|v| v.name.as_str())
        .chain(on_demand_names.iter().copied())
        .collect();
    let scope = Scope {
        request: &request_types,
        sources: &source_features,
        views: &all_views,
    };
    let converted = convert_features(rv, path, &scope, issues);
    let inputs = Inputs {
        sources: &sources,
        source_features: &source_features,
        request_types: &request_types,
    };
    let (stored, features) = finish(rv, path, &inputs, converted, views, issues);
    OnDemandView {
        name: rv.name.clone(),
        request,
        sources,
        stored,
        features,
    }
}

/// Each feature's name and type checked and its expression converted (slots provisional).
fn convert_features(
    rv: &RawOnDemandView,
    path: &str,
    scope: &Scope,
    issues: &mut Issues,
) -> Vec<Converted> {
    let mut seen = Seen::new("feature name", "features");
    let mut converted = Vec::with_capacity(rv.features.len());
    for (j, f) in rv.features.iter().enumerate() {
        let fpath = format!("{path}: features[{j}] '{}'", f.name);
        issues.name(&fpath, "name", &f.name);
        seen.add(issues, &f.name, j, &fpath);
        let ty = match FeatureType::parse(&f.ty) {
            Some(FeatureType::Bytes) => {
                issues.add(&fpath, "type bytes cannot be computed");
                None
            }
            Some(t) => Some(t),
            None => {
                let expected = FeatureType::expected_list();
                issues.add(
                    &fpath,
                    format!("unknown type '{}' (expected {expected})", f.ty),
                );
                None
            }
        };
        match cel::convert(&f.expr, scope) {
            Ok(expr) => converted.push(Converted { index: j, ty, expr }),
            Err(problems) => {
                for p in problems {
                    issues.add(&format!("{fpath}: expr"), p.to_string());
                }
            }
        }
    }
    converted
}

/// One feature's expression converted (its stored inputs' slots still provisional).
struct Converted {
    /// Index into the view's features.
    index: usize,
    /// None when the declared type was refused (the expression is still numbered).
    ty: Option<FeatureType>,
    expr: cel::Converted,
}

/// What a view's expressions may read: its sources with their features, and its request
/// fields, each with its expression type.
struct Inputs<'a> {
    /// Indexes into the repo's feature views.
    sources: &'a [usize],
    /// Per source: its name and its features.
    source_features: &'a [(&'a str, Vec<(&'a str, Type)>)],
    request_types: &'a [(&'a str, Type)],
}

/// Numbers the view's stored inputs (sorted by view, feature) and checks every feature with
/// its final slot types.
fn finish(
    rv: &RawOnDemandView,
    path: &str,
    inputs: &Inputs,
    converted: Vec<Converted>,
    views: &Views,
    issues: &mut Issues,
) -> (Vec<(usize, usize)>, Vec<DerivedFeature>) {
    let Inputs {
        sources,
        source_features,
        request_types,
    } = *inputs;
    let mut refs: Vec<(usize, usize)> = converted
        .iter()
        .flat_map(|c| c.expr.stored.iter().copied())
        .collect();
    let key = |&(s, f): &(usize, usize)| (source_features[s].0, source_features[s].1[f].0);
    refs.sort_by(|a, b| key(a).cmp(&key(b)));
    refs.dedup();
    let mut slots: Vec<Type> = request_types.iter().map(|r| r.1).collect();
    slots.push(Type::Int);
    slots.extend(refs.iter().map(|&(s, f)| source_features[s].1[f].1));
    let request_len = request_types.len() as u32;
    let mut features = Vec::with_capacity(converted.len());
    for Converted {
        index: j,
        ty,
        expr: mut c,
    } in converted
    {
        let f = &rv.features[j];
        let order: Vec<u32> = c
            .stored
            .iter()
            .map(|r| refs.iter().position(|x| x == r).unwrap_or(0) as u32)
            .collect();
        cel::renumber(&mut c.expr, request_len, &order);
        let Some(ty) = ty else { continue };
        match cel::check(&f.expr, &c.expr, &slots, ty.to_proto()) {
            Ok(program) => features.push(DerivedFeature {
                name: f.name.clone(),
                ty,
                text: f.expr.clone(),
                expr: c.expr,
                cost: program.cost(),
            }),
            Err(p) => issues.add(
                &format!("{path}: features[{j}] '{}': expr", f.name),
                p.to_string(),
            ),
        }
    }
    let stored = refs
        .iter()
        .map(|&(s, f)| {
            let vi = sources[s];
            let fname = source_features[s].1[f].0;
            let fi = views.list[vi]
                .features
                .iter()
                .position(|x| x.name == fname)
                .unwrap_or(0);
            (vi, fi)
        })
        .collect();
    (stored, features)
}

fn request_fields(rv: &RawOnDemandView, path: &str, issues: &mut Issues) -> Vec<RequestField> {
    let mut seen = Seen::new("request field", "request");
    let mut out = Vec::with_capacity(rv.request.len());
    for (k, r) in rv.request.iter().enumerate() {
        let rpath = format!("{path}: request[{k}] '{}'", r.name);
        issues.name(&rpath, "name", &r.name);
        seen.add(issues, &r.name, k, &rpath);
        if r.name == "time" {
            issues.add(
                &rpath,
                "'time' is request.time, the request's time; name the field otherwise",
            );
        }
        let field = r.field.clone().unwrap_or_else(|| r.name.clone());
        if field.is_empty() || field.chars().any(char::is_control) {
            issues.add(&rpath, format!("invalid field '{field}'"));
        }
        let ty = FeatureType::parse(&r.ty).filter(|t| REQUEST_TYPES.contains(t));
        let Some(ty) = ty else {
            issues.add(
                &rpath,
                format!(
                    "type '{}' (expected int64, float64, bool, string or float32_list)",
                    r.ty
                ),
            );
            continue;
        };
        out.push(RequestField {
            name: r.name.clone(),
            field,
            ty,
        });
    }
    out
}

fn sources(
    rv: &RawOnDemandView,
    path: &str,
    views: &Views,
    on_demand_names: &HashSet<&str>,
    issues: &mut Issues,
) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(rv.sources.len());
    for s in &rv.sources {
        match views.seen.first.get(s.as_str()) {
            Some(&vi) if out.contains(&vi) => {
                issues.add(path, format!("source '{s}' listed twice"))
            }
            Some(&vi) => out.push(vi),
            None if on_demand_names.contains(s.as_str()) => issues.add(
                path,
                format!("source '{s}' is an on-demand view; sources are stored feature views"),
            ),
            None => issues.add(path, format!("unknown source '{s}' (not a feature view)")),
        }
    }
    out
}

/// The expression type of a repo type.
pub(super) fn expr_type(t: FeatureType) -> Type {
    Type::of_value_type(t.to_proto()).unwrap_or(Type::Bytes)
}
