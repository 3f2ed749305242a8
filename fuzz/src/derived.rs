//! The fixture's on-demand view and the routes computing it (`od_*`, last in the snapshot so
//! that inputs written before them choose the routes they did), and what each derived feature
//! must be, worked out here from the stored inputs Ferry wrote (never by calling the engine).
//!
//! `od` reads the request field `amount` (float64) and the stored `txn.sum`, `profile.verified`:
//! `seen = has(request.amount) || true` (always true: the field is read, so a wrong type is the
//! client's 400, but its value never matters), `sum2 = txn.sum * 2.0`, `unverified =
//! !profile.verified`. Output order: stored features, then these by name.

use ferry_core::vector::FeatureStatus;
use ferry_protos::v1::{self as pb, value::Kind};
use ferry_protos::v1::{Function as F, ValueType as T};
use ferry_test_support::on_demand::{
    boolean, call, dbl, feature, has, input, request_field, stored,
};

/// The request field the view reads, in every instance.
pub const FIELD: &str = "amount";

/// Slots: 0 `request.amount`, 1 `request.time`, 2 `txn.sum`, 3 `profile.verified`.
pub fn view() -> pb::OnDemandView {
    pb::OnDemandView {
        name: "od".into(),
        request: vec![request_field(FIELD, T::Float64)],
        sources: vec!["profile".into(), "txn".into()],
        stored: vec![
            stored("txn", "sum", T::Float64),
            stored("profile", "verified", T::Bool),
        ],
        features: vec![
            feature("seen", T::Bool, call(F::Or, vec![has(0), boolean(true)])),
            feature("sum2", T::Float64, call(F::Mul, vec![input(2), dbl(2.0)])),
            feature("unverified", T::Bool, call(F::Not, vec![input(3)])),
        ],
    }
}

/// `od_scoring`: the scoring service's stored views, and `od`.
pub fn service(scoring: &pb::FeatureService) -> pb::FeatureService {
    pb::FeatureService {
        name: "od_scoring".into(),
        derived: vec![pb::ServiceDerived {
            view: "od".into(),
            features: vec!["seen".into(), "sum2".into(), "unverified".into()],
        }],
        derived_version: "00000000000000aa".into(),
        ..scoring.clone()
    }
}

/// The routes computing `od`, one per body format and header mode (appended last).
pub fn routes() -> Vec<pb::Route> {
    use pb::Format as Fm;
    let mut json = crate::route("od_json", "od_scoring", Fm::Json, &["user_id"]);
    json.entity_pointer = "/users".into();
    json.inject_pointer = "/features".into();
    vec![
        crate::route("od_kserve_v1", "od_scoring", Fm::KserveV1, &["user_id"]),
        json,
        crate::route("od_header", "od_scoring", Fm::Header, &["user_id"]),
    ]
}

/// The derived features of one entity from its stored features as Ferry wrote them (after the
/// route's policies), by output name: (value, status).
pub fn expected(
    stored: &[(&str, Option<Kind>, FeatureStatus)],
) -> Vec<(Option<Kind>, FeatureStatus)> {
    let input = |suffix: &str| {
        stored
            .iter()
            .find(|(n, _, _)| n.ends_with(suffix))
            .map(|(_, v, s)| (v.clone(), *s))
            .unwrap_or_else(|| panic!("no stored {suffix}"))
    };
    let present = |(v, s): (Option<Kind>, FeatureStatus)| match (s, v) {
        (FeatureStatus::Present, Some(v)) => Ok(v),
        (FeatureStatus::Present, None) => Err(FeatureStatus::NullValue),
        (s, _) => Err(s),
    };
    let sum2 = present(input("sum")).map(|v| match v {
        Kind::DoubleVal(d) if (d * 2.0).is_finite() => Ok(Kind::DoubleVal(d * 2.0)),
        Kind::DoubleVal(d) if d.is_finite() => Err(FeatureStatus::Invalid),
        Kind::DoubleVal(_) => Err(FeatureStatus::NullValue),
        other => panic!("txn.sum is {other:?}"),
    });
    let unverified = present(input("verified")).map(|v| match v {
        Kind::BoolVal(b) => Ok(Kind::BoolVal(!b)),
        other => panic!("profile.verified is {other:?}"),
    });
    let out = |r: Result<Result<Kind, FeatureStatus>, FeatureStatus>| match r.and_then(|x| x) {
        Ok(v) => (Some(v), FeatureStatus::Present),
        Err(s) => (None, s),
    };
    vec![
        (Some(Kind::BoolVal(true)), FeatureStatus::Present),
        out(sum2),
        out(unverified),
    ]
}
