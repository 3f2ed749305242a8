//! Request-time features: each entity's on-demand features computed from its request fields,
//! `request.time` and the stored features just decoded (after the route's missing, stale and
//! default policies: an input reads what the model receives), and appended after the stored
//! ones. One budget per request; an evaluation error is a null with status `INVALID`, counted,
//! never an error of the request.

use std::borrow::Cow;

use crate::config::{DerivedBinding, Route};
use crate::metrics::DerivedCounts;
use crate::values::FeatureValue;
use crate::vector::{EntityFeatures, FeatureStatus};
use ferry_expr::{Absence, Budget, Input, Invalid, List, Outcome, Val};

/// Appends every entity's derived features to `features` (entity i: request fields at
/// `fields[i * route.derived.fields.len()..]`); `received_s` is `request.time`.
pub fn evaluate(
    route: &Route,
    fields: &[Input<'static>],
    features: &mut [EntityFeatures],
    received_s: i64,
    budget: &mut Budget,
) -> DerivedCounts {
    let mut counts = DerivedCounts::default();
    if route.derived.count == 0 {
        return counts;
    }
    let per = route.derived.fields.len();
    // Every entity's values first (one input buffer, refilled per view; one results buffer),
    // then appended: no allocation per entity.
    let mut results: Vec<(FeatureValue, FeatureStatus)> =
        Vec::with_capacity(features.len() * route.derived.count);
    let mut inputs: Vec<Input<'_>> = Vec::new();
    for (i, entity) in features.iter().enumerate() {
        let own = fields.get(i * per..(i + 1) * per).unwrap_or_default();
        for b in &route.derived.bindings {
            inputs.clear();
            bind(b, own, entity, received_s, &mut inputs);
            for &f in &b.features {
                let feature = &b.view.features[f];
                let outcome = feature.program.eval(&inputs, budget);
                results.push(written(outcome, feature.value_type, &mut counts));
            }
        }
    }
    drop(inputs);
    let mut results = results.into_iter();
    for entity in features.iter_mut() {
        // Room for the derived values at once, not a regrowth of the stored vector.
        entity.values.reserve_exact(route.derived.count);
        entity.statuses.reserve_exact(route.derived.count);
        for (value, status) in results.by_ref().take(route.derived.count) {
            entity.values.push(value);
            entity.statuses.push(status);
        }
    }
    counts
}

/// The view's input slots for one entity, into `inputs`: its request fields, `request.time`,
/// its stored inputs as the entity holds them.
fn bind<'a>(
    b: &DerivedBinding,
    own: &'a [Input<'static>],
    entity: &'a EntityFeatures,
    received_s: i64,
    inputs: &mut Vec<Input<'a>>,
) {
    inputs.reserve(b.view.slot_count());
    for &k in &b.request {
        inputs.push(match own.get(k) {
            Some(i) => borrowed(i),
            None => Input::Absent(Absence::NotFound),
        });
    }
    inputs.push(Input::Present(Val::Int(received_s)));
    for &k in &b.stored {
        let value = entity.values.get(k);
        let status = entity.statuses.get(k);
        inputs.push(match (value, status) {
            (Some(v @ Some(_)), _) => Input::stored(v),
            (_, Some(FeatureStatus::OutsideMaxAge)) => Input::Absent(Absence::OutsideMaxAge),
            (_, Some(FeatureStatus::NotFound)) | (None, _) => Input::Absent(Absence::NotFound),
            _ => Input::Absent(Absence::NullValue),
        });
    }
}

/// A request field's value, borrowed (never copied).
fn borrowed<'a>(i: &'a Input<'_>) -> Input<'a> {
    let v = match i {
        Input::Absent(a) => return Input::Absent(*a),
        Input::Present(v) => v,
    };
    Input::Present(match v {
        Val::Int(x) => Val::Int(*x),
        Val::Double(x) => Val::Double(*x),
        Val::Bool(x) => Val::Bool(*x),
        Val::Str(s) => Val::Str(Cow::Borrowed(s)),
        Val::Bytes(b) => Val::Bytes(Cow::Borrowed(b)),
        Val::List(List::F32(l)) => Val::List(List::F32(l)),
        Val::List(List::F64(l)) => Val::List(List::F64(Cow::Borrowed(l))),
    })
}

/// An outcome as the feature's value and status.
fn written(
    outcome: Outcome<'_>,
    declared: ferry_protos::v1::ValueType,
    counts: &mut DerivedCounts,
) -> (FeatureValue, FeatureStatus) {
    use ferry_protos::v1::value::Kind;
    let invalid = |counts: &mut DerivedCounts, why: Invalid| {
        counts.invalid += 1;
        counts.budget_spent |= why == Invalid::Budget;
        (None, FeatureStatus::Invalid)
    };
    match outcome {
        Outcome::Value(v) => match v.to_kind(declared) {
            // A double too large for a float32 feature would reach the model as null.
            Some(Kind::FloatVal(f)) if !f.is_finite() => invalid(counts, Invalid::NonFinite),
            Some(kind) => {
                counts.values += 1;
                (Some(kind), FeatureStatus::Present)
            }
            None => invalid(counts, Invalid::Overflow),
        },
        Outcome::Absent { status, .. } => (
            None,
            match status {
                Absence::NotFound => FeatureStatus::NotFound,
                Absence::OutsideMaxAge => FeatureStatus::OutsideMaxAge,
                Absence::NullValue => FeatureStatus::NullValue,
            },
        ),
        Outcome::Invalid(why) => invalid(counts, why),
    }
}
