//! On-demand views compiled: their request fields and stored inputs (the slot layout the
//! request path fills per instance), their features' expressions checked again and compiled
//! (`ferry-expr`), and a service's listing of them bound to its stored vector.

use std::collections::{HashMap, HashSet};
use std::rc::Rc;

use ferry_protos::v1::{self as pb, ValueType};

use super::error::{invalid, ConfigError};
use crate::config::model::{
    DerivedBinding, DerivedFeature, DerivedPart, OnDemandView, RequestField, RouteDerived,
    RouteField, RoutePart, StoredInput, View,
};
use ferry_expr::{cost, Program, Type};

/// Most request fields, stored inputs and features of one on-demand view.
pub const MAX_VIEW_ITEMS: usize = 256;

/// The snapshot's on-demand views by name; `stored_views`: the names of every stored view of
/// the snapshot (an on-demand view may not take one, or full feature names would collide).
pub(super) fn on_demand_views(
    views: Vec<pb::OnDemandView>,
    stored_views: &HashSet<&str>,
) -> Result<HashMap<String, Rc<OnDemandView>>, ConfigError> {
    let mut out = HashMap::with_capacity(views.len());
    for v in views {
        let ctx = format!("on-demand view '{}'", v.name);
        if !ferry_protos::is_valid_name(&v.name) {
            return invalid(&ctx, "invalid name");
        }
        if stored_views.contains(v.name.as_str()) {
            return invalid(&ctx, "a stored view has the same name");
        }
        if out.contains_key(&v.name) {
            return invalid(
                "snapshot",
                format!("on-demand view '{}' defined twice", v.name),
            );
        }
        let compiled = view(v, &ctx)?;
        out.insert(compiled.name.clone(), Rc::new(compiled));
    }
    Ok(out)
}

fn view(v: pb::OnDemandView, ctx: &str) -> Result<OnDemandView, ConfigError> {
    if v.request.len() > MAX_VIEW_ITEMS
        || v.stored.len() > MAX_VIEW_ITEMS
        || v.features.len() > MAX_VIEW_ITEMS
    {
        return invalid(
            ctx,
            format!("more than {MAX_VIEW_ITEMS} request fields, inputs or features"),
        );
    }
    let mut slots = Vec::with_capacity(v.request.len() + 1 + v.stored.len());
    let request = request_fields(v.request, &mut slots, ctx)?;
    slots.push(Type::Int);
    let mut stored: Vec<StoredInput> = Vec::with_capacity(v.stored.len());
    for s in v.stored {
        let Some(t) = value_type(s.r#type) else {
            return invalid(ctx, format!("input '{}.{}' has no type", s.view, s.feature));
        };
        if stored
            .iter()
            .any(|x| x.view == s.view && x.feature == s.feature)
        {
            return invalid(ctx, format!("input '{}.{}' twice", s.view, s.feature));
        }
        slots.push(expr_type(t, ctx)?);
        stored.push(StoredInput {
            view: s.view,
            feature: s.feature,
            value_type: t,
        });
    }
    let mut features: Vec<DerivedFeature> = Vec::with_capacity(v.features.len());
    for f in v.features {
        features.push(feature(f, &slots, ctx)?);
    }
    features.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = features.windows(2).find(|w| w[0].name == w[1].name) {
        return invalid(ctx, format!("feature '{}' twice", w[0].name));
    }
    if features.is_empty() {
        return invalid(ctx, "no features");
    }
    Ok(OnDemandView {
        name: v.name,
        request,
        stored,
        features,
    })
}

/// The request fields, their slot types pushed onto `slots`.
fn request_fields(
    fields: Vec<pb::RequestField>,
    slots: &mut Vec<Type>,
    ctx: &str,
) -> Result<Vec<RequestField>, ConfigError> {
    let mut request = Vec::with_capacity(fields.len());
    for r in fields {
        let t = value_type(r.r#type);
        let allowed = matches!(
            t,
            Some(ValueType::Int64 | ValueType::Float64 | ValueType::Bool | ValueType::String)
                | Some(ValueType::Float32List)
        );
        let (Some(t), true) = (t, allowed) else {
            return invalid(
                ctx,
                format!(
                    "request field '{}': type must be int64, float64, bool, string or float32_list",
                    r.name
                ),
            );
        };
        if !ferry_protos::is_valid_name(&r.name) || r.name == "time" || r.field.is_empty() {
            return invalid(
                ctx,
                format!("request field '{}': invalid name or field", r.name),
            );
        }
        if request.iter().any(|x: &RequestField| x.name == r.name) {
            return invalid(ctx, format!("request field '{}' twice", r.name));
        }
        slots.push(expr_type(t, ctx)?);
        request.push(RequestField {
            name: r.name,
            field: r.field,
            value_type: t,
        });
    }
    Ok(request)
}

fn feature(
    f: pb::DerivedFeature,
    slots: &[Type],
    ctx: &str,
) -> Result<DerivedFeature, ConfigError> {
    let fctx = format!("{ctx}: feature '{}'", f.name);
    if !ferry_protos::is_valid_name(&f.name) {
        return invalid(&fctx, "invalid name");
    }
    if f.text.len() > cost::MAX_TEXT_BYTES {
        return invalid(
            &fctx,
            format!("expression over {} bytes", cost::MAX_TEXT_BYTES),
        );
    }
    let Some(t) = value_type(f.r#type) else {
        return invalid(&fctx, "no type");
    };
    let Some(expr) = &f.expr else {
        return invalid(&fctx, "no expression");
    };
    let program = Program::compile(expr, slots, t).map_err(|e| ConfigError::Invalid {
        part: fctx.clone(),
        reason: format!("at offset {}: {}", e.offset, e.message),
    })?;
    Ok(DerivedFeature {
        name: f.name,
        value_type: t,
        text: f.text,
        program,
    })
}

fn value_type(t: i32) -> Option<ValueType> {
    match ValueType::try_from(t) {
        Ok(ValueType::Unspecified) | Err(_) => None,
        Ok(t) => Some(t),
    }
}

fn expr_type(t: ValueType, ctx: &str) -> Result<Type, ConfigError> {
    match Type::of_value_type(t) {
        Some(t) => Ok(t),
        None => invalid(ctx, "an input has no type"),
    }
}

/// A service's listing of on-demand views bound to its stored vector: every input a view
/// reads must be a feature of the service's vector, of the same type.
pub(super) fn derived_parts(
    listed: Vec<pb::ServiceDerived>,
    on_demand: &HashMap<String, Rc<OnDemandView>>,
    views: &[View],
    ctx: &str,
) -> Result<Vec<DerivedPart>, ConfigError> {
    let mut parts: Vec<DerivedPart> = Vec::with_capacity(listed.len());
    for d in listed {
        let dctx = format!("{ctx}: on-demand view '{}'", d.view);
        let Some(view) = on_demand.get(&d.view) else {
            return invalid(&dctx, "not in the snapshot");
        };
        if parts.last().is_some_and(|p| p.view.name >= d.view) {
            return invalid(&dctx, "listed twice or out of order");
        }
        let mut features = Vec::with_capacity(d.features.len());
        for name in &d.features {
            let Some(i) = view.features.iter().position(|f| &f.name == name) else {
                return invalid(&dctx, format!("has no feature '{name}'"));
            };
            if features.last().is_some_and(|&last| last >= i) {
                return invalid(&dctx, "features listed twice or out of order");
            }
            features.push(i);
        }
        if features.is_empty() {
            return invalid(&dctx, "no features listed");
        }
        let stored_index = view
            .stored
            .iter()
            .map(|s| stored_index(s, views, &dctx))
            .collect::<Result<Vec<usize>, ConfigError>>()?;
        parts.push(DerivedPart {
            view: view.clone(),
            features,
            stored_index,
        });
    }
    Ok(parts)
}

/// Where the service's flattened stored vector holds an input.
fn stored_index(s: &StoredInput, views: &[View], ctx: &str) -> Result<usize, ConfigError> {
    let mut at = 0;
    for v in views {
        if v.name == s.view {
            if let Some(i) = v.features.iter().position(|f| f.name == s.feature) {
                if v.features[i].value_type != s.value_type {
                    return invalid(
                        ctx,
                        format!(
                            "input '{}.{}' has another type in the service",
                            s.view, s.feature
                        ),
                    );
                }
                return Ok(at + i);
            }
        }
        at += v.features.len();
    }
    invalid(
        ctx,
        format!(
            "reads '{}.{}', which the service does not hold",
            s.view, s.feature
        ),
    )
}

/// A route's on-demand features over its parts: each part's views bound to the entity's
/// flattened stored vector (the part's offset added), and the request fields they read, once
/// per (field, type).
pub(super) fn route_derived(parts: &[RoutePart]) -> RouteDerived {
    let mut out = RouteDerived::default();
    let mut offset = 0;
    let mut versions = Vec::new();
    for p in parts {
        for d in &p.service.derived {
            let mut request = Vec::with_capacity(d.view.request.len());
            for r in &d.view.request {
                let want = RouteField {
                    field: r.field.clone(),
                    value_type: r.value_type,
                };
                let at = match out.fields.iter().position(|f| *f == want) {
                    Some(at) => at,
                    None => {
                        out.fields.push(want);
                        out.fields.len() - 1
                    }
                };
                request.push(at);
            }
            out.count += d.features.len();
            out.bindings.push(DerivedBinding {
                view: d.view.clone(),
                features: d.features.clone(),
                stored: d.stored_index.iter().map(|i| offset + i).collect(),
                request,
            });
        }
        if !p.service.derived_version.is_empty() {
            versions.push(p.service.derived_version.as_str());
        }
        offset += p.service.feature_count;
    }
    out.version_label = versions.join(",");
    out
}
