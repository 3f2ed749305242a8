//! A FeatureService compiled: its entity keys, its views with TTLs in microseconds and
//! typed defaults, and its Feast layout checked against it.

use ferry_protos::limits;
use ferry_protos::v1 as pb;

use std::collections::HashMap;
use std::rc::Rc;

use super::error::{invalid, ConfigError};
use super::on_demand;
use crate::config::model::{EntityKey, Feature, KeyKind, OnDemandView, Service, View};
use crate::values;

pub(super) fn service(
    s: pb::FeatureService,
    on_demand: &HashMap<String, Rc<OnDemandView>>,
) -> Result<Service, ConfigError> {
    let ctx = format!("service '{}'", s.name);
    if !ferry_protos::is_valid_name(&s.name) {
        return invalid(&ctx, "invalid name");
    }
    if s.fingerprint == 0 {
        return invalid(&ctx, "fingerprint is 0");
    }
    // A service of on-demand views over request fields only has no stored view, so no key.
    if s.entity_keys.is_empty() != s.views.is_empty() {
        return invalid(&ctx, "entity keys and stored views go together");
    }
    if s.entity_keys.len() > limits::MAX_JOIN_KEYS {
        return invalid(
            &ctx,
            format!(
                "{} join keys, at most {}",
                s.entity_keys.len(),
                limits::MAX_JOIN_KEYS
            ),
        );
    }
    let mut entity_keys = Vec::with_capacity(s.entity_keys.len());
    for k in s.entity_keys {
        let Some(kind) = key_kind(k.r#type) else {
            let reason = format!("join key '{}' must be string or int64", k.join_key);
            return invalid(&ctx, reason);
        };
        entity_keys.push(EntityKey {
            join_key: k.join_key,
            kind,
        });
    }
    let views = s
        .views
        .into_iter()
        .map(|v| view(v, &ctx))
        .collect::<Result<Vec<View>, ConfigError>>()?;
    let feature_count = views.iter().map(|v| v.features.len()).sum();
    let derived = on_demand::derived_parts(s.derived, on_demand, &views, &ctx)?;
    let derived_count = derived.iter().map(|d| d.features.len()).sum();
    if feature_count + derived_count == 0 {
        return invalid(&ctx, "no features");
    }
    if derived.is_empty() != s.derived_version.is_empty() {
        return invalid(
            &ctx,
            "a derived version goes with on-demand views, and only with them",
        );
    }
    if let Some(layout) = &s.feast {
        feast_layout(layout, &entity_keys, &views, &ctx)?;
    }
    Ok(Service {
        feast: s.feast,
        fingerprint_hex: ferry_protos::fingerprint_hex(s.fingerprint),
        name: s.name,
        fingerprint: s.fingerprint,
        entity_keys,
        views,
        feature_count,
        derived,
        derived_count,
        derived_version: s.derived_version,
    })
}

/// The kind of a join key's type: only strings and int64 identify an entity.
fn key_kind(value_type: i32) -> Option<KeyKind> {
    match pb::ValueType::try_from(value_type) {
        Ok(pb::ValueType::String) => Some(KeyKind::String),
        Ok(pb::ValueType::Int64) => Some(KeyKind::Int64),
        _ => None,
    }
}

/// A Feast layout must describe exactly the service: its join keys (same names, order and
/// types) and, per view, one 4-byte field per feature and a timestamp field.
fn feast_layout(
    layout: &pb::FeastLayout,
    keys: &[EntityKey],
    views: &[View],
    ctx: &str,
) -> Result<(), ConfigError> {
    let fctx = format!("{ctx}: feast layout");
    if !ferry_protos::is_valid_name(&layout.project) {
        return invalid(&fctx, "invalid project name");
    }
    let keys_match = layout.join_keys.len() == keys.len()
        && layout
            .join_keys
            .iter()
            .zip(keys)
            .all(|(f, k)| f.name == k.join_key && f.int64 == (k.kind == KeyKind::Int64));
    if !keys_match {
        return invalid(&fctx, "join keys differ from the service's entity keys");
    }
    let views_match = layout.views.len() == views.len()
        && layout.views.iter().zip(views).all(|(f, v)| {
            f.feature_fields.len() == v.features.len()
                && f.feature_fields.iter().all(|x| x.len() == 4)
                && !f.timestamp_field.is_empty()
        });
    if !views_match {
        return invalid(&fctx, "views or feature fields differ from the service's");
    }
    // The reader's own check, so a pushed snapshot it would refuse is refused here first.
    if let Some(why) = ferry_protos::feast::layout_problem(layout) {
        return invalid(&fctx, why);
    }
    Ok(())
}

fn view(v: pb::ServiceView, ctx: &str) -> Result<View, ConfigError> {
    let vctx = format!("{ctx}: view '{}'", v.name);
    if v.features.is_empty() {
        return invalid(&vctx, "no features");
    }
    if v.ttl_seconds < 0 {
        return invalid(&vctx, "negative ttl");
    }
    let mut features = Vec::with_capacity(v.features.len());
    for f in v.features {
        let value_type = match pb::ValueType::try_from(f.r#type) {
            Ok(pb::ValueType::Unspecified) | Err(_) => {
                return invalid(&vctx, format!("feature '{}' has no type", f.name))
            }
            Ok(t) => t,
        };
        let default = match f.default_value {
            None => None,
            Some(d) if values::matches_type(&d.kind, value_type) => d.kind,
            Some(_) => {
                return invalid(
                    &vctx,
                    format!("feature '{}': default has the wrong type", f.name),
                )
            }
        };
        features.push(Feature {
            name: f.name,
            value_type,
            default,
        });
    }
    Ok(View {
        name: v.name,
        ttl_us: (v.ttl_seconds > 0).then(|| v.ttl_seconds.saturating_mul(1_000_000)),
        features,
    })
}
