//! Feast's on-demand feature views, read from the registry, with the CEL that `ferry.yaml` gives
//! for their features (`feast: {on_demand: [{view, features: [{name, expr}]}]}`). Each becomes an
//! on-demand view as if written under `on_demand_views`: its request fields are its
//! RequestSources' schema, its sources its feature views, its feature types the registry's; the
//! expressions are then checked like any other (`on_demand.rs`). Feast's Python (or pandas,
//! substrait) transformation cannot run in Envoy, so a service selecting a feature of one
//! without CEL is refused by name.

use std::collections::BTreeMap;

use ferry_protos::feast_proto::{self as fp, on_demand_source::Source, ValueType as Fvt};

use super::types::{feature_type, type_name};
use crate::ferry_yaml::{RawDerivedFeature, RawFeastOnDemand, RawOnDemandView, RawRequestField};
use crate::Issue;

/// Where `ferry.yaml` writes them (issue paths of the converted views are renamed to it).
const LIST: &str = "feast.on_demand";

fn issue(path: &str, reason: impl Into<String>) -> Issue {
    Issue {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// The project's on-demand feature views, by name.
pub(super) fn of_project<'r>(
    reg: &'r fp::Registry,
    project: &str,
) -> BTreeMap<&'r str, &'r fp::OnDemandFeatureViewSpec> {
    reg.on_demand_feature_views
        .iter()
        .filter_map(|v| v.spec.as_ref())
        .filter(|s| s.project == project)
        .map(|s| (s.name.as_str(), s))
        .collect()
}

/// A feature service's projection of the on-demand view `name`: its `view:feature` refs, or an
/// issue naming the features ferry.yaml gives no CEL for.
pub(super) fn select(
    name: &str,
    p: &fp::FeatureViewProjection,
    given: &[RawFeastOnDemand],
    path: &str,
    refs: &mut Vec<String>,
) -> Result<(), Issue> {
    let cel = given.iter().find(|g| g.view == name);
    let has_cel = |f: &str| cel.is_some_and(|g| g.features.iter().any(|x| x.name == f));
    let missing: Vec<&str> = p
        .feature_columns
        .iter()
        .map(|c| c.name.as_str())
        .filter(|f| !has_cel(f))
        .collect();
    if let Some(first) = missing.first() {
        let example = format!("[{{view: {name}, features: [{{name: {first}, expr: '...'}}]}}]");
        let example = example.replace('\'', "\"");
        return Err(issue(
            path,
            format!(
                "on-demand feature view without CEL for {}: Feast's transformation cannot run \
                 in Envoy; give its CEL in ferry.yaml (feast: {{on_demand: {example}}})",
                missing.join(", ")
            ),
        ));
    }
    refs.extend(
        p.feature_columns
            .iter()
            .map(|c| format!("{name}:{}", c.name)),
    );
    Ok(())
}

/// What the ODFVs given CEL read of the registry's feature views: view name → feature names
/// (all of a view given whole, the columns of a projection), for the views to include them.
pub(super) type SourceFeatures<'r> = Vec<(&'r str, Vec<&'r str>)>;

/// The on-demand views `given` defines, in its order (so that `feast.on_demand[k]` is
/// `on_demand_views[k]`), and the stored features they may read.
pub(super) fn definitions<'r>(
    given: &[RawFeastOnDemand],
    specs: &BTreeMap<&'r str, &'r fp::OnDemandFeatureViewSpec>,
    batch: &BTreeMap<&'r str, &'r fp::FeatureViewSpec>,
    issues: &mut Vec<Issue>,
) -> (Vec<RawOnDemandView>, SourceFeatures<'r>) {
    let mut out = Vec::with_capacity(given.len());
    let mut read = SourceFeatures::new();
    for (k, g) in given.iter().enumerate() {
        let path = format!("{LIST}[{k}] '{}'", g.view);
        if let Some(first) = given[..k].iter().position(|x| x.view == g.view) {
            issues.push(issue(
                &path,
                format!("listed twice (first at {LIST}[{first}])"),
            ));
            continue;
        }
        let Some(spec) = specs.get(g.view.as_str()) else {
            let known: Vec<&str> = specs.keys().copied().collect();
            issues.push(issue(
                &path,
                format!(
                    "no on-demand feature view '{}' in the Feast registry (it has: {})",
                    g.view,
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
            continue;
        };
        check_kind(spec, &path, issues);
        let (request, sources) = inputs(spec, &path, batch, &mut read, issues);
        let features = g
            .features
            .iter()
            .enumerate()
            .filter_map(|(j, f)| feature(spec, f, &format!("{path}: features[{j}]"), issues))
            .collect();
        out.push(RawOnDemandView {
            name: spec.name.clone(),
            request,
            sources,
            features,
        });
    }
    (out, read)
}

/// What Ferry does not compute from an ODFV's definition.
fn check_kind(spec: &fp::OnDemandFeatureViewSpec, path: &str, issues: &mut Vec<Issue>) {
    if spec.write_to_online_store {
        issues.push(issue(
            path,
            "write_to_online_store=True is not supported (Feast reads such a view's stored \
             values; Ferry would compute them)",
        ));
    }
    if !spec.aggregations.is_empty() {
        issues.push(issue(path, "on-demand aggregations are not supported"));
    }
}

/// An ODFV's request fields (its RequestSources' schemas, sources by name) and its source
/// feature views (by name), adding what those may be read for to `read`.
fn inputs<'r>(
    spec: &'r fp::OnDemandFeatureViewSpec,
    path: &str,
    batch: &BTreeMap<&'r str, &'r fp::FeatureViewSpec>,
    read: &mut SourceFeatures<'r>,
    issues: &mut Vec<Issue>,
) -> (Vec<RawRequestField>, Vec<String>) {
    let mut by_name: Vec<(&String, &fp::OnDemandSource)> = spec.sources.iter().collect();
    by_name.sort_by_key(|(k, _)| *k);
    let (mut request, mut sources) = (Vec::new(), Vec::new());
    for (key, source) in by_name {
        let spath = format!("{path}: source '{key}'");
        let (view, columns): (&str, Option<&[fp::FeatureSpec]>) = match &source.source {
            Some(Source::RequestDataSource(ds)) => {
                let schema = match &ds.options {
                    Some(fp::data_source::Options::RequestDataOptions(o)) => o.schema.as_slice(),
                    None => &[],
                };
                request.extend(
                    schema
                        .iter()
                        .filter_map(|f| request_field(f, &spath, issues)),
                );
                continue;
            }
            Some(Source::FeatureViewProjection(p)) if !p.feature_view_name_alias.is_empty() => {
                issues.push(issue(
                    &spath,
                    "feature view aliases (with_name) are not supported",
                ));
                continue;
            }
            Some(Source::FeatureViewProjection(p)) => (
                p.feature_view_name.as_str(),
                Some(p.feature_columns.as_slice()),
            ),
            Some(Source::FeatureView(v)) => match &v.spec {
                Some(s) => (s.name.as_str(), None),
                None => continue,
            },
            None => {
                issues.push(issue(&spath, "not a feature view or a request source"));
                continue;
            }
        };
        let Some(&v) = batch.get(view) else {
            issues.push(issue(
                &spath,
                format!("'{view}' is not a batch feature view of the registry"),
            ));
            continue;
        };
        let names = columns
            .filter(|c| !c.is_empty())
            .unwrap_or(&v.features)
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        read.push((v.name.as_str(), names));
        sources.push(v.name.clone());
    }
    (request, sources)
}

/// A RequestSource field as a request field: Feast's request data is JSON, so int32 is read as
/// int64 and float as float64.
fn request_field(
    f: &fp::FeatureSpec,
    path: &str,
    issues: &mut Vec<Issue>,
) -> Option<RawRequestField> {
    let ty = match Fvt::try_from(f.value_type).ok() {
        Some(Fvt::Int32 | Fvt::Int64) => "int64",
        Some(Fvt::Float | Fvt::Double) => "float64",
        Some(Fvt::Bool) => "bool",
        Some(Fvt::String) => "string",
        Some(Fvt::FloatList) => "float32_list",
        _ => {
            issues.push(issue(
                &format!("{path}: field '{}'", f.name),
                format!(
                    "Feast type {} is not supported for request data (int32, int64, float, \
                     double, bool, string or float list)",
                    type_name(f.value_type)
                ),
            ));
            return None;
        }
    };
    Some(RawRequestField {
        name: f.name.clone(),
        ty: ty.to_owned(),
        field: None,
    })
}

/// One feature's CEL with the registry's type (a restated type must be it).
fn feature(
    spec: &fp::OnDemandFeatureViewSpec,
    f: &crate::ferry_yaml::RawFeastDerived,
    path: &str,
    issues: &mut Vec<Issue>,
) -> Option<RawDerivedFeature> {
    let path = format!("{path} '{}'", f.name);
    let Some(registered) = spec.features.iter().find(|x| x.name == f.name) else {
        let names: Vec<&str> = spec.features.iter().map(|x| x.name.as_str()).collect();
        issues.push(issue(
            &path,
            format!(
                "on-demand feature view '{}' has no feature '{}' (it has: {})",
                spec.name,
                f.name,
                names.join(", ")
            ),
        ));
        return None;
    };
    let Some(ty) = feature_type(registered.value_type) else {
        issues.push(issue(
            &path,
            format!(
                "Feast type {} cannot be computed",
                type_name(registered.value_type)
            ),
        ));
        return None;
    };
    if let Some(written) = f.ty.as_deref().filter(|w| *w != ty) {
        issues.push(issue(
            &path,
            format!(
                "type '{written}' differs from the registry's '{ty}' (the type may be left out)"
            ),
        ));
        return None;
    }
    Some(RawDerivedFeature {
        name: f.name.clone(),
        ty: ty.to_owned(),
        expr: f.expr.clone(),
    })
}

/// The converted views' issues under the names `ferry.yaml` uses for them.
pub(crate) fn rename_paths(issues: &mut [Issue]) {
    for i in issues {
        if let Some(rest) = i.path.strip_prefix("on_demand_views[") {
            i.path = format!("{LIST}[{rest}");
        }
    }
}
