//! Evaluation: every operator and function, errors, the budget, absent and guarded inputs.

use std::borrow::Cow;

use ferry_protos::v1::{ComprehensionKind as CK, Expr, Function as F, ValueType as VT};

use super::*;
use ferry_test_support::on_demand::{
    boolean, bytes, call, comp, dbl, has, input, int, list, string, var,
};

const EMB: [f32; 3] = [1.0, 2.0, 2.0];
const OTHER: [f64; 3] = [2.0, 0.0, 0.0];

fn inputs() -> Vec<Input<'static>> {
    vec![
        Input::Present(Val::Double(2.5)),
        Input::Present(Val::Str(Cow::Borrowed("héllo"))),
        Input::Present(Val::Int(7)),
        Input::Present(Val::List(List::F32(&EMB))),
        Input::Present(Val::Bool(true)),
        Input::Present(Val::Bytes(Cow::Borrowed(b"\xff\x00"))),
        Input::Present(Val::List(List::F64(Cow::Borrowed(&OTHER)))),
    ]
}

fn declared(t: Type) -> VT {
    match t {
        Type::Int => VT::Int64,
        Type::Double => VT::Float64,
        Type::Bool => VT::Bool,
        Type::String => VT::String,
        Type::Bytes => VT::Bytes,
        Type::List => VT::Float32List,
    }
}

/// Evaluates `e` (of type `t`) over [`inputs`] with a large budget.
fn run(e: Expr, t: Type) -> Outcome<'static> {
    run_with(e, t, &inputs(), &mut Budget::new(1_000_000))
}

fn run_with(e: Expr, t: Type, ins: &[Input<'_>], budget: &mut Budget) -> Outcome<'static> {
    let p = Program::compile(&e, &TEST_SLOTS, declared(t)).unwrap();
    match p.eval(ins, budget) {
        Outcome::Value(v) => Outcome::Value(owned(v)),
        Outcome::Absent { slot, status } => Outcome::Absent { slot, status },
        Outcome::Invalid(i) => Outcome::Invalid(i),
    }
}

fn owned(v: Val<'_>) -> Val<'static> {
    match v {
        Val::Int(i) => Val::Int(i),
        Val::Double(d) => Val::Double(d),
        Val::Bool(b) => Val::Bool(b),
        Val::Str(s) => Val::Str(Cow::Owned(s.into_owned())),
        Val::Bytes(b) => Val::Bytes(Cow::Owned(b.into_owned())),
        Val::List(l) => Val::List(List::F64(Cow::Owned(l.iter().collect()))),
    }
}

fn value(e: Expr, t: Type) -> Val<'static> {
    match run(e, t) {
        Outcome::Value(v) => v,
        other => panic!("{other:?}"),
    }
}

fn invalid(e: Expr, t: Type) -> Invalid {
    match run(e, t) {
        Outcome::Invalid(i) => i,
        other => panic!("{other:?}"),
    }
}

/// `$name(e)`: the value of `e` evaluated as `Type::$ty`, taken out of its `Val::$val` by
/// `$take`; any other outcome fails the test.
macro_rules! value_of {
    ($name:ident -> $out:ty, $ty:ident, $val:ident, |$x:ident| $take:expr) => {
        fn $name(e: Expr) -> $out {
            match value(e, Type::$ty) {
                Val::$val($x) => $take,
                v => panic!("{v:?}"),
            }
        }
    };
}

value_of!(d -> f64, Double, Double, |x| x);
value_of!(i -> i64, Int, Int, |x| x);
value_of!(b -> bool, Bool, Bool, |x| x);
value_of!(s -> String, String, Str, |x| x.into_owned());

fn c2(f: F, a: Expr, b: Expr) -> Expr {
    call(f, vec![a, b])
}

#[test]
fn int_arithmetic_truncates_and_never_wraps() {
    assert_eq!(i(c2(F::Add, input(2), int(3))), 10);
    assert_eq!(i(c2(F::Sub, input(2), int(10))), -3);
    assert_eq!(i(c2(F::Mul, input(2), int(-3))), -21);
    assert_eq!(i(c2(F::Div, int(-7), int(2))), -3);
    assert_eq!(i(c2(F::Mod, int(-7), int(2))), -1);
    assert_eq!(i(call(F::Neg, vec![input(2)])), -7);
    assert_eq!(
        invalid(c2(F::Add, int(i64::MAX), int(1)), Type::Int),
        Invalid::Overflow
    );
    assert_eq!(
        invalid(c2(F::Sub, int(i64::MIN), int(1)), Type::Int),
        Invalid::Overflow
    );
    assert_eq!(
        invalid(c2(F::Mul, int(i64::MAX), int(2)), Type::Int),
        Invalid::Overflow
    );
    assert_eq!(
        invalid(c2(F::Div, int(i64::MIN), int(-1)), Type::Int),
        Invalid::Overflow
    );
    assert_eq!(
        invalid(call(F::Neg, vec![int(i64::MIN)]), Type::Int),
        Invalid::Overflow
    );
    assert_eq!(
        invalid(c2(F::Div, input(2), int(0)), Type::Int),
        Invalid::DivisionByZero
    );
    assert_eq!(
        invalid(c2(F::Mod, input(2), int(0)), Type::Int),
        Invalid::DivisionByZero
    );
    assert_eq!(i(call(F::Abs, vec![int(-4)])), 4);
    assert_eq!(
        invalid(call(F::Abs, vec![int(i64::MIN)]), Type::Int),
        Invalid::Overflow
    );
    assert_eq!(i(c2(F::Min, int(3), int(-2))), -2);
    assert_eq!(i(c2(F::Max, int(3), int(-2))), 3);
}

#[test]
fn double_arithmetic_never_gives_nan_or_infinity() {
    assert_eq!(d(c2(F::Add, input(0), dbl(0.5))), 3.0);
    assert_eq!(d(c2(F::Sub, input(0), dbl(0.5))), 2.0);
    assert_eq!(d(c2(F::Mul, input(0), dbl(2.0))), 5.0);
    assert_eq!(d(c2(F::Div, input(0), dbl(2.0))), 1.25);
    assert_eq!(d(call(F::Neg, vec![input(0)])), -2.5);
    assert_eq!(
        invalid(c2(F::Div, input(0), dbl(0.0)), Type::Double),
        Invalid::NonFinite
    );
    assert_eq!(
        invalid(c2(F::Div, dbl(0.0), dbl(0.0)), Type::Double),
        Invalid::NonFinite
    );
    assert_eq!(
        invalid(c2(F::Mul, dbl(1e300), dbl(1e300)), Type::Double),
        Invalid::NonFinite
    );
    assert_eq!(d(call(F::Sqrt, vec![dbl(9.0)])), 3.0);
    assert_eq!(
        invalid(call(F::Sqrt, vec![dbl(-1.0)]), Type::Double),
        Invalid::NonFinite
    );
    assert_eq!(d(call(F::Log, vec![dbl(1.0)])), 0.0);
    assert_eq!(
        invalid(call(F::Log, vec![dbl(0.0)]), Type::Double),
        Invalid::NonFinite
    );
    assert_eq!(d(call(F::Exp, vec![dbl(0.0)])), 1.0);
    assert_eq!(
        invalid(call(F::Exp, vec![dbl(1000.0)]), Type::Double),
        Invalid::NonFinite
    );
    assert_eq!(d(call(F::Abs, vec![dbl(-1.5)])), 1.5);
    assert_eq!(d(c2(F::Min, dbl(1.5), dbl(-1.5))), -1.5);
    assert_eq!(d(c2(F::Max, dbl(1.5), dbl(-1.5))), 1.5);
}

#[test]
fn comparisons_and_logic() {
    for (f, want) in [
        (F::Eq, [false, true, false]),
        (F::Ne, [true, false, true]),
        (F::Lt, [true, false, false]),
        (F::Le, [true, true, false]),
        (F::Gt, [false, false, true]),
        (F::Ge, [false, true, true]),
    ] {
        for (k, other) in [8, 7, 6].into_iter().enumerate() {
            assert_eq!(
                b(c2(f, input(2), int(other))),
                want[k],
                "{f:?} 7 vs {other}"
            );
        }
        assert_eq!(b(c2(f, input(0), dbl(2.5))), want[1], "{f:?} doubles");
        assert_eq!(b(c2(f, string("b"), string("b"))), want[1], "{f:?} strings");
        assert_eq!(b(c2(f, string("a"), string("b"))), want[0], "{f:?} strings");
    }
    assert!(b(c2(F::Eq, input(4), boolean(true))));
    assert!(b(c2(F::Eq, input(5), bytes(b"\xff\x00"))));
    assert!(!b(call(F::Not, vec![input(4)])));
    assert!(!b(c2(F::And, input(4), boolean(false))));
    assert!(b(c2(F::Or, boolean(false), input(4))));
    assert_eq!(i(call(F::Conditional, vec![input(4), int(1), int(2)])), 1);
    assert_eq!(
        i(call(F::Conditional, vec![boolean(false), int(1), int(2)])),
        2
    );
}

#[test]
fn and_or_absorb_an_error_on_the_side_that_does_not_decide() {
    let div0 = c2(F::Gt, c2(F::Div, input(2), int(0)), int(1));
    assert!(b(c2(F::Or, div0.clone(), boolean(true))));
    assert!(b(c2(F::Or, boolean(true), div0.clone())));
    assert!(!b(c2(F::And, div0.clone(), boolean(false))));
    assert_eq!(
        invalid(c2(F::Or, div0.clone(), boolean(false)), Type::Bool),
        Invalid::DivisionByZero
    );
    assert_eq!(
        invalid(c2(F::And, boolean(true), div0), Type::Bool),
        Invalid::DivisionByZero
    );
}

#[test]
fn strings_bytes_and_conversions() {
    assert_eq!(i(call(F::Size, vec![input(1)])), 5, "code points");
    assert_eq!(i(call(F::Size, vec![input(5)])), 2);
    assert_eq!(i(call(F::Size, vec![input(3)])), 3);
    assert!(b(c2(F::StartsWith, input(1), string("hé"))));
    assert!(b(c2(F::EndsWith, input(1), string("llo"))));
    assert!(b(c2(F::Contains, input(1), string("él"))));
    assert!(!b(c2(F::Contains, input(1), string("x"))));
    assert_eq!(s(c2(F::Add, input(1), string("!"))), "héllo!");
    assert_eq!(i(call(F::ToInt, vec![dbl(-2.9)])), -2);
    assert_eq!(i(call(F::ToInt, vec![string("-42")])), -42);
    assert_eq!(i(call(F::ToInt, vec![input(2)])), 7);
    assert_eq!(
        invalid(call(F::ToInt, vec![string("4x")]), Type::Int),
        Invalid::Conversion
    );
    assert_eq!(
        invalid(call(F::ToInt, vec![dbl(1e19)]), Type::Int),
        Invalid::Conversion
    );
    assert_eq!(d(call(F::ToDouble, vec![input(2)])), 7.0);
    assert_eq!(d(call(F::ToDouble, vec![string("0.25")])), 0.25);
    assert_eq!(d(call(F::ToDouble, vec![input(0)])), 2.5);
    assert_eq!(
        invalid(call(F::ToDouble, vec![string("inf")]), Type::Double),
        Invalid::Conversion
    );
    assert_eq!(s(call(F::ToString, vec![input(2)])), "7");
    assert_eq!(s(call(F::ToString, vec![input(0)])), "2.5");
    assert_eq!(s(call(F::ToString, vec![input(4)])), "true");
    assert_eq!(s(call(F::ToString, vec![input(1)])), "héllo");
    assert_eq!(s(call(F::ToString, vec![bytes(b"ok")])), "ok");
    assert_eq!(
        invalid(call(F::ToString, vec![input(5)]), Type::String),
        Invalid::Conversion
    );
}

#[test]
fn lists_index_and_vector_functions() {
    assert_eq!(d(c2(F::Index, input(3), int(1))), 2.0);
    assert_eq!(
        invalid(c2(F::Index, input(3), int(3)), Type::Double),
        Invalid::IndexOutOfRange
    );
    assert_eq!(
        invalid(c2(F::Index, input(3), int(-1)), Type::Double),
        Invalid::IndexOutOfRange
    );
    assert_eq!(d(call(F::Sum, vec![input(3)])), 5.0);
    assert_eq!(d(call(F::Sum, vec![list(vec![])])), 0.0);
    assert_eq!(d(call(F::Norm, vec![input(3)])), 3.0);
    assert_eq!(d(c2(F::Dot, input(3), input(6))), 2.0);
    assert_eq!(d(c2(F::Dot, input(3), input(3))), 9.0);
    assert!((d(c2(F::Cosine, input(3), input(6))) - 1.0 / 3.0).abs() < 1e-12);
    let short = list(vec![dbl(1.0)]);
    assert_eq!(
        invalid(c2(F::Dot, input(3), short.clone()), Type::Double),
        Invalid::LengthMismatch
    );
    assert_eq!(
        invalid(c2(F::Cosine, input(3), short), Type::Double),
        Invalid::LengthMismatch
    );
    let zero = list(vec![dbl(0.0), dbl(0.0), dbl(0.0)]);
    assert_eq!(
        invalid(c2(F::Cosine, input(3), zero), Type::Double),
        Invalid::NonFinite
    );
    let computed = list(vec![input(0), c2(F::Mul, input(0), dbl(2.0))]);
    assert_eq!(d(call(F::Sum, vec![computed])), 7.5);
}

#[test]
fn macros() {
    let gt = |x: f64| c2(F::Gt, var(0), dbl(x));
    assert!(b(comp(CK::All, input(3), None, gt(0.5))));
    assert!(!b(comp(CK::All, input(3), None, gt(1.5))));
    assert!(b(comp(CK::Exists, input(3), None, gt(1.5))));
    assert!(!b(comp(CK::Exists, input(3), None, gt(2.5))));
    assert!(b(comp(CK::All, list(vec![]), None, gt(0.0))));
    let doubled = comp(CK::Map, input(3), None, c2(F::Mul, var(0), dbl(2.0)));
    assert_eq!(d(call(F::Sum, vec![doubled])), 10.0);
    let filtered = comp(CK::Map, input(3), Some(gt(1.5)), var(0));
    assert_eq!(i(call(F::Size, vec![filtered])), 2);
    // The inner variable is 0, the outer 1.
    let pairs = comp(
        CK::Exists,
        list(vec![dbl(1.0), dbl(2.0)]),
        None,
        comp(
            CK::Exists,
            input(3),
            None,
            c2(F::Eq, var(0), c2(F::Mul, var(1), dbl(2.0))),
        ),
    );
    assert!(b(pairs));
    // An error in one element is absorbed by an element that decides: 1 / (x - 1) > 0 over
    // [1, 2, 2] divides by zero at x = 1.
    let inverse_positive = c2(
        F::Gt,
        c2(F::Div, dbl(1.0), c2(F::Sub, var(0), dbl(1.0))),
        dbl(0.0),
    );
    let div = comp(CK::Exists, input(3), None, inverse_positive.clone());
    assert!(b(div));
    let all_err = comp(CK::All, input(3), None, inverse_positive);
    assert_eq!(invalid(all_err, Type::Bool), Invalid::NonFinite);
}

#[test]
fn an_absent_unguarded_input_is_null_with_its_status_before_anything_runs() {
    let mut ins = inputs();
    ins[0] = Input::Absent(Absence::OutsideMaxAge);
    // Would be a division by zero if it ran.
    let e = c2(
        F::Add,
        c2(F::Div, input(2), int(0)),
        call(F::ToInt, vec![input(0)]),
    );
    let mut budget = Budget::new(100);
    assert_eq!(
        run_with(e, Type::Int, &ins, &mut budget),
        Outcome::Absent {
            slot: 0,
            status: Absence::OutsideMaxAge
        }
    );
    assert_eq!(budget.left(), 100, "nothing evaluated");
}

#[test]
fn a_guarded_input_gives_its_own_default_or_is_absent_where_read() {
    let e = call(F::Conditional, vec![has(0), input(0), dbl(-1.0)]);
    let mut ins = inputs();
    ins[0] = Input::Absent(Absence::NotFound);
    let mut budget = Budget::new(100);
    assert_eq!(
        run_with(e.clone(), Type::Double, &ins, &mut budget),
        Outcome::Value(Val::Double(-1.0))
    );
    assert_eq!(run(e, Type::Double), Outcome::Value(Val::Double(2.5)));
    // Guarded somewhere, read anyway where it is absent.
    let e = c2(F::Or, has(0), c2(F::Gt, input(0), dbl(1.0)));
    assert_eq!(
        run_with(e, Type::Bool, &ins, &mut budget),
        Outcome::Absent {
            slot: 0,
            status: Absence::NotFound
        }
    );
}

#[test]
fn the_budget_is_charged_per_node_and_element_and_stops_for_good() {
    let cos = c2(F::Cosine, input(3), input(3));
    let mut budget = Budget::new(1_000);
    assert!(matches!(
        run_with(cos.clone(), Type::Double, &inputs(), &mut budget),
        Outcome::Value(_)
    ));
    assert_eq!(budget.left(), 1_000 - 3 - 6, "3 nodes, 2 lists of 3");
    let mut budget = Budget::new(5);
    assert_eq!(
        run_with(cos.clone(), Type::Double, &inputs(), &mut budget),
        Outcome::Invalid(Invalid::Budget)
    );
    assert_eq!(budget.left(), 0);
    assert_eq!(
        run_with(input(0), Type::Double, &inputs(), &mut budget),
        Outcome::Invalid(Invalid::Budget)
    );
    // A spent budget is never absorbed by || or a macro.
    let mut budget = Budget::new(2);
    let e = c2(F::Or, c2(F::Gt, input(0), dbl(1.0)), boolean(true));
    assert_eq!(
        run_with(e, Type::Bool, &inputs(), &mut budget),
        Outcome::Invalid(Invalid::Budget)
    );
}

#[test]
fn lists_and_strings_over_their_bound_are_invalid() {
    let long = vec![1.0f64; cost::MAX_LIST_LEN + 1];
    let mut ins = inputs();
    ins[6] = Input::Present(Val::List(List::F64(Cow::Borrowed(&long))));
    let mut budget = Budget::new(1_000_000);
    let e = call(F::Sum, vec![input(6)]);
    assert_eq!(
        run_with(e, Type::Double, &ins, &mut budget),
        Outcome::Invalid(Invalid::TooLong)
    );
    let text = "x".repeat(cost::MAX_STRING_BYTES + 1);
    ins[1] = Input::Present(Val::Str(Cow::Borrowed(&text)));
    let e = c2(F::Contains, input(1), string("y"));
    assert_eq!(
        run_with(e, Type::Bool, &ins, &mut budget),
        Outcome::Invalid(Invalid::TooLong)
    );
}

#[test]
fn an_int32_result_must_fit() {
    let p = Program::compile(&c2(F::Mul, input(2), int(1 << 30)), &TEST_SLOTS, VT::Int32).unwrap();
    assert_eq!(
        p.eval(&inputs(), &mut Budget::new(100)),
        Outcome::Invalid(Invalid::Overflow)
    );
    let p = Program::compile(&input(2), &TEST_SLOTS, VT::Int32).unwrap();
    assert_eq!(
        p.eval(&inputs(), &mut Budget::new(100)),
        Outcome::Value(Val::Int(7))
    );
}

#[test]
fn stored_values_bind_borrowed_and_non_finite_floats_are_null() {
    use ferry_protos::v1::{value::Kind, FloatList};
    let s = Some(Kind::StringVal("de".into()));
    assert_eq!(
        Input::stored(&s),
        Input::Present(Val::Str(Cow::Borrowed("de")))
    );
    let l = Some(Kind::FloatListVal(FloatList { values: vec![1.0] }));
    match Input::stored(&l) {
        Input::Present(Val::List(List::F32(x))) => assert_eq!(x, &[1.0]),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        Input::stored(&Some(Kind::FloatVal(f32::NAN))),
        Input::Absent(Absence::NullValue)
    );
    assert_eq!(Input::stored(&None), Input::Absent(Absence::NullValue));
    assert_eq!(
        Input::stored(&Some(Kind::Int32Val(3))),
        Input::Present(Val::Int(3))
    );
}

#[test]
fn a_run_never_charges_more_than_the_static_bound() {
    let exprs = [
        (c2(F::Cosine, input(3), input(6)), Type::Double),
        (
            comp(
                CK::Map,
                input(3),
                Some(c2(F::Gt, var(0), dbl(1.5))),
                c2(F::Mul, var(0), var(0)),
            ),
            Type::List,
        ),
        (
            c2(
                F::And,
                c2(F::Contains, input(1), string("l")),
                comp(CK::All, input(6), None, c2(F::Ge, var(0), dbl(0.0))),
            ),
            Type::Bool,
        ),
        (
            call(
                F::Conditional,
                vec![input(4), c2(F::Add, input(1), string("x")), string("y")],
            ),
            Type::String,
        ),
    ];
    for (e, t) in exprs {
        let p = Program::compile(&e, &TEST_SLOTS, declared(t)).unwrap();
        let mut budget = Budget::new(1_000_000);
        assert!(matches!(p.eval(&inputs(), &mut budget), Outcome::Value(_)));
        let spent = 1_000_000 - budget.left();
        assert!(
            spent > 0 && spent <= p.cost(),
            "spent {spent}, bound {}",
            p.cost()
        );
    }
}
