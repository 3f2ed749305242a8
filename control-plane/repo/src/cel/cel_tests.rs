//! CEL text to Ferry's tree: names, positions, the macros, and what is refused.

use ferry_expr::{Budget, Input, Outcome, Type, Val};
use ferry_protos::v1::ValueType as VT;

use super::*;

const REQUEST: [(&str, Type); 2] = [("amount", Type::Double), ("country", Type::String)];

fn scope_sources() -> Vec<(&'static str, Vec<(&'static str, Type)>)> {
    vec![
        (
            "transactions",
            vec![("avg_7d", Type::Double), ("count_7d", Type::Int)],
        ),
        (
            "user_profile",
            vec![("emb", Type::List), ("country", Type::String)],
        ),
    ]
}

/// Converts and checks `text` declared `t`; slots: request (2), time, then stored in the order
/// first read.
fn compile(text: &str, t: VT) -> Result<(Program, Vec<StoredRef>), Vec<Problem>> {
    let sources = scope_sources();
    let scope = Scope {
        request: &REQUEST,
        sources: &sources,
        views: &["transactions", "user_profile", "merchant"],
    };
    let c = convert(text, &scope)?;
    let mut slots: Vec<Type> = REQUEST.iter().map(|r| r.1).collect();
    slots.push(Type::Int);
    slots.extend(c.stored.iter().map(|&(s, f)| sources[s].1[f].1));
    let p = check(text, &c.expr, &slots, t).map_err(|p| vec![p])?;
    Ok((p, c.stored))
}

fn problems(text: &str, t: VT) -> Vec<String> {
    match compile(text, t) {
        Ok(_) => panic!("{text} compiled"),
        Err(ps) => ps.iter().map(|p| p.to_string()).collect(),
    }
}

fn one(text: &str, t: VT) -> String {
    let ps = problems(text, t);
    assert_eq!(ps.len(), 1, "{ps:?}");
    ps[0].clone()
}

#[test]
fn the_issue_examples_compile_and_evaluate() {
    let (p, stored) = compile("request.amount / transactions.avg_7d", VT::Float64).unwrap();
    assert_eq!(stored, [(0, 0)]);
    let ins = [
        Input::Present(Val::Double(30.0)),
        Input::Present(Val::Str("DE".into())),
        Input::Present(Val::Int(1_700_000_000)),
        Input::Present(Val::Double(12.0)),
    ];
    assert_eq!(
        p.eval(&ins, &mut Budget::new(100)),
        Outcome::Value(Val::Double(2.5))
    );
    for (text, t) in [
        ("request.amount > 1000.0", VT::Bool),
        ("request.country != user_profile.country", VT::Bool),
        ("request.time - 86400 * 7", VT::Int64),
        ("cosine(user_profile.emb, user_profile.emb)", VT::Float64),
        (
            "has(transactions.avg_7d) ? transactions.avg_7d : 0.0",
            VT::Float64,
        ),
        (
            "user_profile.emb.exists(x, x > 0.5) && size(user_profile.emb) == 32",
            VT::Bool,
        ),
        ("sum(user_profile.emb.map(x, x * 2.0))", VT::Float64),
        ("size(user_profile.emb.filter(x, x > 0.0))", VT::Int64),
        ("user_profile.emb.map(x, x > 0.0, x * x)", VT::Float32List),
        ("user_profile.emb.all(x, x >= -1.0 && x <= 1.0)", VT::Bool),
        (
            "request.country.startsWith('D') || request.country.endsWith(\"E\")",
            VT::Bool,
        ),
        ("int(request.amount) % 7 + 3u", VT::Int64),
        (
            "string(transactions.count_7d) + string(size(b'x'))",
            VT::String,
        ),
        ("max(abs(-2.0), min(sqrt(4.0), log(exp(1.0))))", VT::Float64),
        (
            "dot([1.0, 2.0], [request.amount, 0.5]) / norm([3.0, 4.0])",
            VT::Float64,
        ),
        ("user_profile.emb[0]", VT::Float32),
    ] {
        assert!(
            compile(text, t).is_ok(),
            "{text}: {:?}",
            compile(text, t).err()
        );
    }
}

#[test]
fn names_are_resolved_or_reported_with_their_position() {
    for (text, t, want) in [
        (
            "request.amount / txns.avg_7d",
            VT::Float64,
            "1:18: unknown name 'txns' (names are request.<field>, request.time and <source>.<feature>)",
        ),
        (
            "request.amount + merchant.risk",
            VT::Float64,
            "1:18: 'merchant' is not a source of this on-demand view (sources: transactions, user_profile)",
        ),
        (
            "request.amt",
            VT::Float64,
            "1:9: request has no field 'amt' (declared: amount, country; and time)",
        ),
        (
            "transactions.avg_30d",
            VT::Float64,
            "1:14: view 'transactions' has no feature 'avg_30d'",
        ),
        (
            "amount",
            VT::Float64,
            "1:1: unknown name 'amount' (names are request.<field>, request.time and <source>.<feature>; sources: transactions, user_profile)",
        ),
        (
            "transactions",
            VT::Float64,
            "1:1: 'transactions' is a view, not a value: name one of its features (transactions.<feature>)",
        ),
    ] {
        assert_eq!(one(text, t), want, "{text}");
    }
    // All problems of an expression at once, on their lines.
    let ps = problems("request.a +\n  request.b", VT::Float64);
    assert_eq!(ps.len(), 2, "{ps:?}");
    assert!(ps[0].starts_with("1:9: request has no field 'a'"), "{ps:?}");
    assert!(
        ps[1].starts_with("2:11: request has no field 'b'"),
        "{ps:?}"
    );
}

#[test]
fn types_are_checked_with_positions() {
    for (text, t, want) in [
        (
            "request.country == transactions.count_7d",
            VT::Bool,
            "1:17: '==' does not take string, int (it takes int, int -> bool; double, double -> \
             bool; bool, bool -> bool; string, string -> bool; bytes, bytes -> bool)",
        ),
        (
            "request.amount + 1",
            VT::Float64,
            "1:16: '+' of double and int: CEL does not mix int and double; convert one with double() or int()",
        ),
        (
            "request.amount > 1000.0",
            VT::Float64,
            "1:16: the expression is bool, the feature is declared float64 (double)",
        ),
        // Offsets count characters, so a non-ASCII string before the problem moves it by one.
        (
            "'é' + request.nope",
            VT::String,
            "1:15: request has no field 'nope' (declared: amount, country; and time)",
        ),
    ] {
        assert_eq!(one(text, t), want, "{text}");
    }
}

#[test]
fn functions_outside_the_table_are_refused_by_name() {
    assert!(one("request.country.matches('^D')", VT::Bool)
        .contains("matches() is not allowed: a regular expression engine"));
    assert!(one("request.country in ['DE']", VT::Bool).contains("'in' is not supported"));
    assert!(one("now()", VT::Int64).contains("time functions are not available"));
    assert!(one("pow(2.0, 3.0)", VT::Float64)
        .contains("function 'pow' is not allowed (allowed: size, startsWith"));
    assert!(one("user_profile.emb.sum()", VT::Float64).contains("write sum(x), not x.sum()"));
    assert!(one("startsWith(request.country, 'D')", VT::Bool).contains("write x.startsWith(y)"));
    assert!(one("user_profile.emb.exists_one(x, x > 0.0)", VT::Bool)
        .contains("exists_one() is not allowed"));
    assert!(one("{'a': 1.0}['a']", VT::Float64).contains("maps and messages are not supported"));
    assert!(
        one("has(request.amount) ? request.amount : null", VT::Float64)
            .contains("null is not a value here")
    );
}

#[test]
fn limits_and_parse_errors() {
    let long = format!("1.0{}", " + 1.0".repeat(400));
    assert_eq!(
        one(&long, VT::Float64),
        "1:1: the expression is 2403 bytes, over the limit of 2048"
    );
    let p = one("request.amount +", VT::Float64);
    assert!(p.starts_with("1:17: "), "{p}");
    let nested = "user_profile.emb.exists(x, user_profile.emb.exists(y, x > y))";
    assert!(one(nested, VT::Bool).contains("cost bound"), "{nested}");
    assert_eq!(position("ab\ncdé f", 8), (2, 5));
}
