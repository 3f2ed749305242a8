//! Request-time features: the five expressions of issue #21's example evaluated per instance,
//! binding included, with the `cel` crate's interpreter (compiled once, a `Context` per
//! instance) and with ferry-expr's engine (compiled once, borrowed inputs).

// A benchmark: a broken setup should stop it loudly.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::Arc;

use cel::{Context, Value};
use criterion::{criterion_group, criterion_main, Criterion};
use ferry_core::values::FeatureValue;
use ferry_expr::{Budget, Input, List, Program, Type, Val};
use ferry_protos::v1::{value::Kind, FloatList, ValueType as VT};
use ferry_repo::cel::{self as expr, Scope};

const EXPRESSIONS: [(&str, &str, VT); 5] = [
    ("ratio", "request.amount / transactions.avg_7d", VT::Float64),
    ("comparison", "request.amount > 1000.0", VT::Bool),
    (
        "request_only",
        "request.country == 'DE' || request.amount < 10.0",
        VT::Bool,
    ),
    ("time", "request.time - transactions.last_login", VT::Int64),
    ("cosine", "cosine(request.q, user_profile.emb)", VT::Float64),
];

const REQUEST: [(&str, Type); 3] = [
    ("amount", Type::Double),
    ("country", Type::String),
    ("q", Type::List),
];

fn sources() -> Vec<(&'static str, Vec<(&'static str, Type)>)> {
    vec![
        (
            "transactions",
            vec![("avg_7d", Type::Double), ("last_login", Type::Int)],
        ),
        ("user_profile", vec![("emb", Type::List)]),
    ]
}

/// One instance: the request's values and the stored features just decoded.
struct Instance {
    amount: f64,
    country: String,
    q: Vec<f64>,
    time: i64,
    stored: [FeatureValue; 3],
}

fn instance() -> Instance {
    let emb: Vec<f32> = (0..32).map(|i| (i as f32 * 0.37).sin()).collect();
    Instance {
        amount: 1234.5,
        country: "DE".into(),
        q: (0..32).map(|i| (i as f64 * 0.21).cos()).collect(),
        time: 1_767_225_600,
        stored: [
            Some(Kind::DoubleVal(80.0)),
            Some(Kind::Int64Val(1_767_200_000)),
            Some(Kind::FloatListVal(FloatList { values: emb })),
        ],
    }
}

/// Ferry's programs over one shared slot layout: request fields, time, then the stored
/// inputs in a fixed order (avg_7d, last_login, emb).
fn ours() -> Vec<Program> {
    let sources = sources();
    let scope = Scope {
        request: &REQUEST,
        sources: &sources,
        views: &["transactions", "user_profile"],
    };
    let fixed = [(0, 0), (0, 1), (1, 0)];
    let mut slots: Vec<Type> = REQUEST.iter().map(|r| r.1).collect();
    slots.push(Type::Int);
    slots.extend([Type::Double, Type::Int, Type::List]);
    EXPRESSIONS
        .iter()
        .map(|(_, text, t)| {
            let mut c = expr::convert(text, &scope).unwrap_or_else(|e| panic!("{e:?}"));
            let order: Vec<u32> = c
                .stored
                .iter()
                .map(|r| fixed.iter().position(|f| f == r).unwrap() as u32)
                .collect();
            expr::renumber(&mut c.expr, REQUEST.len() as u32, &order);
            expr::check(text, &c.expr, &slots, *t).unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

fn bind<'a>(i: &'a Instance) -> [Input<'a>; 7] {
    [
        Input::Present(Val::Double(i.amount)),
        Input::Present(Val::Str(i.country.as_str().into())),
        Input::Present(Val::List(List::F64(i.q.as_slice().into()))),
        Input::Present(Val::Int(i.time)),
        Input::stored(&i.stored[0]),
        Input::stored(&i.stored[1]),
        Input::stored(&i.stored[2]),
    ]
}

fn cel_context<'a>(root: &'a Context<'a, 'a>, i: &Instance) -> Context<'a, 'a> {
    let mut ctx = root.new_inner_scope();
    let q: Vec<Value> = i.q.iter().map(|&x| Value::Float(x)).collect();
    let mut request: HashMap<&str, Value> = HashMap::new();
    request.insert("amount", Value::Float(i.amount));
    request.insert("country", Value::String(Arc::new(i.country.clone())));
    request.insert("q", Value::List(Arc::new(q)));
    request.insert("time", Value::Int(i.time));
    let mut txn: HashMap<&str, Value> = HashMap::new();
    let mut profile: HashMap<&str, Value> = HashMap::new();
    if let (Some(Kind::DoubleVal(a)), Some(Kind::Int64Val(l)), Some(Kind::FloatListVal(e))) =
        (&i.stored[0], &i.stored[1], &i.stored[2])
    {
        txn.insert("avg_7d", Value::Float(*a));
        txn.insert("last_login", Value::Int(*l));
        let emb: Vec<Value> = e
            .values
            .iter()
            .map(|&x| Value::Float(f64::from(x)))
            .collect();
        profile.insert("emb", Value::List(Arc::new(emb)));
    }
    ctx.add_variable_from_value("request", request);
    ctx.add_variable_from_value("transactions", txn);
    ctx.add_variable_from_value("user_profile", profile);
    ctx
}

fn floats(l: &[Value]) -> impl Iterator<Item = f64> + '_ {
    l.iter().map(|v| match v {
        Value::Float(f) => *f,
        _ => f64::NAN,
    })
}

fn cel_cosine(a: Arc<Vec<Value>>, b: Arc<Vec<Value>>) -> f64 {
    let dot: f64 = floats(&a).zip(floats(&b)).map(|(x, y)| x * y).sum();
    let na = floats(&a).map(|x| x * x).sum::<f64>().sqrt();
    let nb = floats(&b).map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn bench(c: &mut Criterion) {
    let inst = instance();
    let programs = ours();
    let mut root = Context::default();
    root.add_function("cosine", cel_cosine).unwrap();
    let cel_programs: Vec<cel::Program> = EXPRESSIONS
        .iter()
        .map(|(_, text, _)| cel::Program::compile(text).unwrap())
        .collect();
    // Both give the same values.
    let inputs = bind(&inst);
    let ctx = cel_context(&root, &inst);
    for ((name, _, _), (p, q)) in EXPRESSIONS.iter().zip(programs.iter().zip(&cel_programs)) {
        let ours = p.eval(&inputs, &mut Budget::new(1 << 20));
        let theirs = q.execute(&ctx).unwrap_or_else(|e| panic!("{name}: {e}"));
        println!("{name}: ferry {ours:?}, cel {theirs:?}");
    }
    let mut g = c.benchmark_group("derive_five_per_instance");
    g.bench_function("ferry", |b| {
        b.iter(|| {
            let inputs = bind(std::hint::black_box(&inst));
            let mut budget = Budget::new(1 << 20);
            for p in &programs {
                std::hint::black_box(p.eval(&inputs, &mut budget));
            }
        })
    });
    g.bench_function("cel", |b| {
        b.iter(|| {
            let ctx = cel_context(&root, std::hint::black_box(&inst));
            for p in &cel_programs {
                let _ = std::hint::black_box(p.execute(&ctx));
            }
        })
    });
    g.bench_function("cel_execute_only", |b| {
        let ctx = cel_context(&root, &inst);
        b.iter(|| {
            for p in &cel_programs {
                let _ = std::hint::black_box(p.execute(&ctx));
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
