//! Builders of `ferry.v1.Expr` trees for the engine's tests.

use ferry_protos::v1::{self as pb, expr::Kind, literal::Value as Lit, Function as F};

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
