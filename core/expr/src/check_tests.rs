//! The checker and the compiler: forged trees refused with a reason, types, limits, guards.

use ferry_protos::v1::{ComprehensionKind as CK, Function as F, ValueType as VT};

use super::*;
use ferry_test_support::on_demand::{boolean, call, comp, dbl, has, input, int, list, string, var};

fn refused(e: ferry_protos::v1::Expr, declared: VT) -> String {
    match Program::compile(&e, &TEST_SLOTS, declared) {
        Ok(p) => panic!("compiled: {p:?}"),
        Err(e) => e.message,
    }
}

/// Each tree is refused as declared, with its reason.
fn refused_with(cases: Vec<(ferry_protos::v1::Expr, VT, &str)>) {
    for (e, declared, reason) in cases {
        assert_eq!(refused(e, declared), reason);
    }
}

#[test]
fn forged_trees_are_refused_with_a_reason() {
    let mut unknown = call(F::Add, vec![int(1), int(2)]);
    if let Some(ferry_protos::v1::expr::Kind::Call(c)) = &mut unknown.kind {
        c.function = 999;
    }
    let bad_kind = comp(CK::Unspecified, input(3), None, boolean(true));
    let all_with_predicate = comp(CK::All, input(3), Some(boolean(true)), boolean(true));
    refused_with(vec![
        (unknown, VT::Int64, "unknown function id 999"),
        (input(7), VT::Int64, "input slot 7 out of range (7 inputs)"),
        (has(17), VT::Bool, "input slot 17 out of range (7 inputs)"),
        (
            var(0),
            VT::Float64,
            "iteration variable 0 outside its comprehension",
        ),
        (ferry_protos::v1::Expr::default(), VT::Int64, "empty node"),
        (dbl(f64::NAN), VT::Float64, "non-finite double literal"),
        (
            call(F::Conditional, vec![boolean(true)]),
            VT::Bool,
            "'? :' takes 3 operands, not 1",
        ),
        (bad_kind, VT::Bool, "unknown comprehension kind 0"),
        (
            all_with_predicate,
            VT::Bool,
            "only map and filter take a predicate",
        ),
    ]);
}

#[test]
fn depth_and_node_count_are_bounded() {
    let mut deep = int(1);
    for _ in 0..40 {
        deep = call(F::Neg, vec![deep]);
    }
    assert_eq!(refused(deep, VT::Int64), "nested deeper than 32 levels");
    let wide = list((0..300).map(|i| dbl(i as f64)).collect());
    assert_eq!(
        refused(call(F::Sum, vec![wide]), VT::Float64),
        "more than 256 nodes"
    );
    let mut nested = comp(CK::Exists, input(3), None, boolean(true));
    for _ in 0..4 {
        nested = comp(CK::Exists, list(vec![dbl(1.0)]), None, nested);
    }
    assert_eq!(refused(nested, VT::Bool), "macros nested deeper than 4");
}

#[test]
fn types_are_checked_as_cel_does() {
    refused_with(vec![
        (
            call(F::Add, vec![input(2), input(0)]),
            VT::Float64,
            "'+' of int and double: CEL does not mix int and double; convert one with double() or int()",
        ),
        (
            call(F::Eq, vec![input(2), input(1)]),
            VT::Bool,
            "'==' does not take int, string (it takes int, int -> bool; double, double -> bool; \
             bool, bool -> bool; string, string -> bool; bytes, bytes -> bool)",
        ),
        (
            call(F::Mod, vec![dbl(1.0), dbl(2.0)]),
            VT::Float64,
            "'%' does not take double, double (it takes int, int -> int)",
        ),
        (
            call(F::Conditional, vec![input(0), int(1), int(2)]),
            VT::Int64,
            "the condition of '? :' is bool, not double",
        ),
        (
            call(F::Conditional, vec![input(4), int(1), dbl(2.0)]),
            VT::Int64,
            "the branches of '? :' differ: int and double",
        ),
        (list(vec![dbl(1.0), int(2)]), VT::Float32List, "a list holds doubles, not int"),
        (
            comp(CK::Map, input(3), None, boolean(true)),
            VT::Float32List,
            "map's element must be double, not bool",
        ),
        (
            comp(CK::All, input(1), None, boolean(true)),
            VT::Bool,
            "a macro iterates over a list(double), not string",
        ),
    ]);
}

#[test]
fn the_result_must_be_the_declared_type() {
    refused_with(vec![
        (
            input(0),
            VT::Bool,
            "the expression is double, the feature is declared bool (bool)",
        ),
        (
            input(2),
            VT::Float32,
            "the expression is int, the feature is declared float32 (double)",
        ),
        (input(5), VT::Bytes, "type BYTES cannot be computed"),
    ]);
    for (e, t) in [
        (input(0), VT::Float32),
        (input(0), VT::Float64),
        (input(2), VT::Int32),
        (input(2), VT::Int64),
        (input(4), VT::Bool),
        (input(1), VT::String),
        (input(3), VT::Float32List),
    ] {
        assert!(Program::compile(&e, &TEST_SLOTS, t).is_ok(), "{t:?}");
    }
}

#[test]
fn the_cost_bound_counts_lists_at_their_bound_and_macros_per_element() {
    let p = Program::compile(&input(0), &TEST_SLOTS, VT::Float64).unwrap();
    assert_eq!(p.cost(), 1);
    let cos = call(F::Cosine, vec![input(3), input(3)]);
    let p = Program::compile(&cos, &TEST_SLOTS, VT::Float64).unwrap();
    assert_eq!(p.cost(), 1 + 2 * 4096 + 2);
    let starts = call(F::StartsWith, vec![input(1), string("x")]);
    let p = Program::compile(&starts, &TEST_SLOTS, VT::Bool).unwrap();
    assert_eq!(p.cost(), 1 + 2 * 16 + 2);
    // A comparison of ints reads no string.
    let lt = call(F::Lt, vec![input(2), int(3)]);
    assert_eq!(
        Program::compile(&lt, &TEST_SLOTS, VT::Bool).unwrap().cost(),
        3
    );
    let exists = comp(
        CK::Exists,
        input(3),
        None,
        call(F::Gt, vec![var(0), dbl(0.5)]),
    );
    let p = Program::compile(&exists, &TEST_SLOTS, VT::Bool).unwrap();
    assert_eq!(p.cost(), 4096 * (1 + 3) + 1 + 1);
    // A macro inside a macro over input lists is far over the limit.
    let inner = comp(
        CK::Exists,
        input(3),
        None,
        call(F::Gt, vec![var(0), var(1)]),
    );
    let nested = comp(CK::Exists, input(3), None, inner);
    let msg = refused(nested, VT::Bool);
    assert!(msg.starts_with("cost bound 67"), "{msg}");
    assert!(msg.contains("over the limit of 50000"), "{msg}");
}

#[test]
fn inputs_tested_with_has_are_guarded() {
    let e = call(
        F::Conditional,
        vec![has(0), input(0), call(F::ToDouble, vec![input(2)])],
    );
    let p = Program::compile(&e, &TEST_SLOTS, VT::Float64).unwrap();
    assert_eq!(p.unguarded(), &[2]);
    let e = call(F::Add, vec![input(0), input(0)]);
    let p = Program::compile(&e, &TEST_SLOTS, VT::Float64).unwrap();
    assert_eq!(p.unguarded(), &[0]);
}

#[test]
fn the_docs_table_lists_every_function_of_the_table() {
    let table = functions::markdown_table();
    for f in functions::FUNCTIONS {
        assert!(
            table.contains(&format!("| `{}` |", f.name.replace('|', "\\|"))),
            "{}",
            f.name
        );
        assert!(functions::by_id(f.id).is_some());
    }
    let docs = include_str!("../../../docs/on-demand.md");
    assert!(
        docs.contains(&table),
        "docs/on-demand.md must hold derive::functions::markdown_table():\n{table}"
    );
    assert!(functions::by_name("cosine").is_some());
    assert!(functions::by_name("+").is_none());
    assert!(functions::refused("matches")
        .unwrap()
        .contains("regular expression"));
}
