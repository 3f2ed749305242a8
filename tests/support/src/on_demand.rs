//! On-demand views in a snapshot, as `ferry apply` compiles them (`ferry.v1.Expr` trees), for
//! the expression engine's and the request path's tests, the ABI tests, the benches and the fuzz
//! targets; the tree builders (literals, inputs, calls, lists, comprehensions) are its own.
//!
//! [`with_risk`] is the standard [`snapshot`] whose `scoring` service also lists the on-demand
//! view `risk` (request fields `amount` float64 and `country` string; stored inputs
//! `profile.age`, `profile.score`, `txn.count`), and a service `only` of the view `req` over
//! request fields only (no entity key, no stored view), served on the route `req` (`/req`).

use ferry_protos::v1::{self as pb, expr::Kind, literal::Value as Lit, Function as F, ValueType};

use crate::snapshot::{route, snapshot};

/// `risk`'s slots: request fields, `request.time`, stored inputs sorted by (view, feature).
pub const AMOUNT: u32 = 0;
pub const COUNTRY: u32 = 1;
pub const TIME: u32 = 2;
pub const AGE: u32 = 3;
pub const SCORE: u32 = 4;
pub const COUNT: u32 = 5;

fn node(kind: Kind) -> pb::Expr {
    pb::Expr {
        kind: Some(kind),
        offset: 0,
    }
}

pub fn int(i: i64) -> pb::Expr {
    node(Kind::Literal(pb::Literal {
        value: Some(Lit::Int(i)),
    }))
}

pub fn dbl(d: f64) -> pb::Expr {
    node(Kind::Literal(pb::Literal {
        value: Some(Lit::Double(d)),
    }))
}

pub fn boolean(b: bool) -> pb::Expr {
    node(Kind::Literal(pb::Literal {
        value: Some(Lit::Bool(b)),
    }))
}

pub fn string(s: &str) -> pb::Expr {
    node(Kind::Literal(pb::Literal {
        value: Some(Lit::String(s.into())),
    }))
}

pub fn bytes(b: &[u8]) -> pb::Expr {
    node(Kind::Literal(pb::Literal {
        value: Some(Lit::Bytes(b.to_vec())),
    }))
}

pub fn input(slot: u32) -> pb::Expr {
    node(Kind::Input(slot))
}

pub fn has(slot: u32) -> pb::Expr {
    node(Kind::Has(slot))
}

pub fn var(n: u32) -> pb::Expr {
    node(Kind::IterVar(n))
}

pub fn list(items: Vec<pb::Expr>) -> pb::Expr {
    node(Kind::List(pb::ListLiteral { elements: items }))
}

pub fn call(f: F, args: Vec<pb::Expr>) -> pb::Expr {
    node(Kind::Call(pb::Call {
        function: f as i32,
        args,
    }))
}

pub fn comp(
    kind: pb::ComprehensionKind,
    range: pb::Expr,
    predicate: Option<pb::Expr>,
    body: pb::Expr,
) -> pb::Expr {
    node(Kind::Comprehension(Box::new(pb::Comprehension {
        kind: kind as i32,
        range: Some(Box::new(range)),
        predicate: predicate.map(Box::new),
        body: Some(Box::new(body)),
    })))
}

pub fn feature(name: &str, t: ValueType, expr: pb::Expr) -> pb::DerivedFeature {
    pb::DerivedFeature {
        name: name.into(),
        r#type: t as i32,
        text: String::new(),
        expr: Some(expr),
        cost: 0,
    }
}

/// A request field read under its own name.
pub fn request_field(name: &str, t: ValueType) -> pb::RequestField {
    pb::RequestField {
        name: name.into(),
        field: name.into(),
        r#type: t as i32,
    }
}

pub fn stored(view: &str, feature: &str, t: ValueType) -> pb::StoredInput {
    pb::StoredInput {
        view: view.into(),
        feature: feature.into(),
        r#type: t as i32,
    }
}

/// The view `risk`, its features sorted by name:
/// - `abroad` bool: `request.country != 'FR'`
/// - `age_at` int64: `request.time - profile.age` (reads `request.time`)
/// - `big` bool: `request.amount > 1000.0`
/// - `count_or_zero` int64: `has(txn.count) ? txn.count : 0`
/// - `huge` int64: `txn.count * 4611686018427387904` (overflows from a count of 2)
/// - `ratio` float64: `request.amount / profile.score` (INVALID when the score is 0)
pub fn risk() -> pb::OnDemandView {
    use ValueType as T;
    pb::OnDemandView {
        name: "risk".into(),
        request: vec![
            request_field("amount", T::Float64),
            request_field("country", T::String),
        ],
        sources: vec!["profile".into(), "txn".into()],
        stored: vec![
            stored("profile", "age", T::Int64),
            stored("profile", "score", T::Float32),
            stored("txn", "count", T::Int64),
        ],
        features: vec![
            feature(
                "abroad",
                T::Bool,
                call(F::Ne, vec![input(COUNTRY), string("FR")]),
            ),
            feature(
                "age_at",
                T::Int64,
                call(F::Sub, vec![input(TIME), input(AGE)]),
            ),
            feature(
                "big",
                T::Bool,
                call(F::Gt, vec![input(AMOUNT), dbl(1000.0)]),
            ),
            feature(
                "count_or_zero",
                T::Int64,
                call(F::Conditional, vec![has(COUNT), input(COUNT), int(0)]),
            ),
            feature(
                "huge",
                T::Int64,
                call(F::Mul, vec![input(COUNT), int(1 << 62)]),
            ),
            feature(
                "ratio",
                T::Float64,
                call(F::Div, vec![input(AMOUNT), input(SCORE)]),
            ),
        ],
    }
}

/// Names of `risk`'s features, in output order.
pub const RISK_FEATURES: [&str; 6] = ["abroad", "age_at", "big", "count_or_zero", "huge", "ratio"];

/// The view `req`: `double_amount` float64 = `request.amount * 2.0`, over request fields only.
pub fn req() -> pb::OnDemandView {
    pb::OnDemandView {
        name: "req".into(),
        request: vec![request_field("amount", ValueType::Float64)],
        sources: vec![],
        stored: vec![],
        features: vec![feature(
            "double_amount",
            ValueType::Float64,
            call(F::Mul, vec![input(0), dbl(2.0)]),
        )],
    }
}

/// [`snapshot`] with `risk` listed by `scoring` (all its features), and the service `only`
/// (the view `req`) on the route `req`.
pub fn with_risk() -> pb::Snapshot {
    let mut s = snapshot();
    s.on_demand_views = vec![req(), risk()];
    s.services[0].derived = vec![pb::ServiceDerived {
        view: "risk".into(),
        features: RISK_FEATURES.iter().map(|f| f.to_string()).collect(),
    }];
    s.services[0].derived_version = "00000000000000aa".into();
    s.services.push(pb::FeatureService {
        name: "only".into(),
        // Nothing is stored under it, but a fingerprint is what the snapshot carries.
        fingerprint: 0x0b,
        entity_keys: vec![],
        views: vec![],
        feast: None,
        derived: vec![pb::ServiceDerived {
            view: "req".into(),
            features: vec!["double_amount".into()],
        }],
        derived_version: "00000000000000bb".into(),
    });
    s.routes
        .push(route("req", "only", pb::Format::KserveV1, &[]));
    s
}
