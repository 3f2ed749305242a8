//! On-demand views in a snapshot: compiled and bound to the services listing them, and every
//! forged or inconsistent one refused naming the view and the feature.

use ferry_protos::v1::{self as pb, Function as F, ValueType as T};

use crate::config::fixture::*;
use crate::config::Config;
use ferry_expr::{Absence, Budget, Input, Outcome, Val};
use ferry_test_support::on_demand::{call, dbl, feature, input, int};

/// `risk`: request `amount` (float64, slot 0), request.time (slot 1), stored `profile.score`
/// (slot 2) and `txn.count` (slot 3).
fn risk() -> pb::OnDemandView {
    pb::OnDemandView {
        name: "risk".into(),
        request: vec![pb::RequestField {
            name: "amount".into(),
            field: "amt".into(),
            r#type: T::Float64 as i32,
        }],
        sources: vec!["profile".into(), "txn".into()],
        stored: vec![
            pb::StoredInput {
                view: "profile".into(),
                feature: "score".into(),
                r#type: T::Float32 as i32,
            },
            pb::StoredInput {
                view: "txn".into(),
                feature: "count".into(),
                r#type: T::Int64 as i32,
            },
        ],
        features: vec![
            feature("ratio", T::Float64, call(F::Div, vec![input(0), input(2)])),
            feature("big", T::Bool, call(F::Gt, vec![input(0), dbl(1000.0)])),
        ],
    }
}

fn with_risk() -> pb::Snapshot {
    let mut s = snapshot();
    s.on_demand_views.push(risk());
    s.services[0].derived.push(pb::ServiceDerived {
        view: "risk".into(),
        features: vec!["big".into(), "ratio".into()],
    });
    s.services[0].derived_version = "00000000000000aa".into();
    s
}

#[test]
fn on_demand_views_are_compiled_and_bound_to_the_stored_vector() {
    let c = Config::from_snapshot(with_risk()).unwrap();
    let s = &c.services[0];
    assert_eq!(s.derived_version, "00000000000000aa");
    assert_eq!(s.derived_count, 2);
    let d = &s.derived[0];
    assert_eq!(d.view.name, "risk");
    // Features sorted by name: big, ratio. Inputs: profile.score is the vector's 2nd feature,
    // txn.count its 3rd.
    assert_eq!(d.features, [0, 1]);
    assert_eq!(d.stored_index, [1, 2]);
    assert_eq!(d.view.request[0].field, "amt");
    assert_eq!(
        (
            d.view.time_slot(),
            d.view.stored_slot(0),
            d.view.slot_count()
        ),
        (1, 2, 4)
    );
    let ratio = &d.view.features[1];
    assert_eq!(ratio.name, "ratio");
    let ins = [
        Input::Present(Val::Double(50.0)),
        Input::Present(Val::Int(0)),
        Input::Present(Val::Double(4.0)),
        Input::Absent(Absence::NotFound),
    ];
    assert_eq!(
        ratio.program.eval(&ins, &mut Budget::new(100)),
        Outcome::Value(Val::Double(12.5))
    );
    // The route writes the stored names, then the derived ones, bound to its vector.
    let r = &c.routes[0];
    assert_eq!(r.output_names[3..], ["risk__big", "risk__ratio"]);
    assert_eq!((r.stored_count, r.feature_count), (3, 5));
    assert_eq!(r.derived.bindings[0].stored, [1, 2]);
    assert_eq!(r.derived.fields[0].field, "amt");
    assert_eq!(r.derived.version_label, "00000000000000aa");
    assert_eq!(c.on_demand_views.len(), 1);
}

#[test]
fn forged_or_inconsistent_on_demand_views_are_refused() {
    let refuse = |f: &dyn Fn(&mut pb::Snapshot), want: &str| {
        let mut s = with_risk();
        f(&mut s);
        let e = Config::from_snapshot(s).unwrap_err().to_string();
        assert!(e.contains(want), "{e} does not contain {want}");
    };
    refuse(
        &|s| s.on_demand_views[0].features[0].expr = Some(input(9)),
        "on-demand view 'risk': feature 'ratio': at offset 0: input slot 9 out of range (4 inputs)",
    );
    refuse(
        &|s| s.on_demand_views[0].features[0].expr = Some(call(F::Div, vec![input(0), input(3)])),
        "feature 'ratio': at offset 0: '/' of double and int: CEL does not mix int and double",
    );
    refuse(
        &|s| s.on_demand_views[0].features[1].r#type = T::Int64 as i32,
        "feature 'big': at offset 0: the expression is bool, the feature is declared int64",
    );
    refuse(
        &|s| s.on_demand_views[0].features[0].text = "x".repeat(3000),
        "feature 'ratio': expression over 2048 bytes",
    );
    let mut deep = int(1);
    for _ in 0..40 {
        deep = call(F::Neg, vec![deep]);
    }
    refuse(
        &move |s| s.on_demand_views[0].features[0].expr = Some(deep.clone()),
        "nested deeper than 32 levels",
    );
    refuse(
        &|s| s.on_demand_views[0].stored[0].feature = "nope".into(),
        "service 'scoring': on-demand view 'risk': reads 'profile.nope', which the service does not hold",
    );
    refuse(
        &|s| s.on_demand_views[0].stored[0].r#type = T::Float64 as i32,
        "input 'profile.score' has another type in the service",
    );
    refuse(
        &|s| s.on_demand_views[0].name = "profile".into(),
        "a stored view has the same name",
    );
    refuse(
        &|s| s.services[0].derived[0].features = vec!["ratio".into(), "big".into()],
        "features listed twice or out of order",
    );
    refuse(
        &|s| s.services[0].derived[0].view = "nope".into(),
        "not in the snapshot",
    );
    refuse(
        &|s| s.services[0].derived_version.clear(),
        "a derived version goes with",
    );
    refuse(
        &|s| s.on_demand_views[0].request[0].r#type = T::Bytes as i32,
        "request field 'amount': type must be",
    );
    refuse(
        &|s| s.on_demand_views[0].request[0].name = "time".into(),
        "request field 'time': invalid name",
    );
    // A derived feature named like a stored one, under short names.
    refuse(
        &|s| {
            s.on_demand_views[0].features[1].name = "age".into();
            s.services[0].derived[0].features = vec!["age".into(), "ratio".into()];
            s.routes[0].feature_names = pb::FeatureNames::Short as i32;
        },
        "feature name 'age' is given by views 'profile' and 'risk'",
    );
}

#[test]
fn a_service_of_request_fields_only_has_no_key_and_no_stored_view() {
    let mut s = with_risk();
    let mut v = risk();
    v.name = "req".into();
    v.stored.clear();
    v.features.truncate(1);
    v.features[0].expr = Some(call(F::Mul, vec![input(0), dbl(2.0)]));
    s.on_demand_views.push(v);
    let mut only = s.services[0].clone();
    only.name = "only".into();
    only.entity_keys.clear();
    only.views.clear();
    only.derived = vec![pb::ServiceDerived {
        view: "req".into(),
        features: vec!["ratio".into()],
    }];
    only.derived_version = "0000000000000001".into();
    s.services.push(only.clone());
    let c = Config::from_snapshot(s.clone()).unwrap();
    assert_eq!(
        (c.services[1].feature_count, c.services[1].derived_count),
        (0, 1)
    );
    only.entity_keys = s.services[0].entity_keys.clone();
    s.services[1] = only;
    let e = Config::from_snapshot(s).unwrap_err().to_string();
    assert!(
        e.contains("entity keys and stored views go together"),
        "{e}"
    );
}
