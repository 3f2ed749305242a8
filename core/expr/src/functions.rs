//! The one table of what an expression may call: every operator and function with its CEL
//! spelling, how it is written, its signatures and its cost. `ferry apply` resolves names with
//! it, the checker types calls with it, and `docs/on-demand.md`'s table is checked against
//! [`markdown_table`]. Nothing here reads a clock, randomness or anything outside the request
//! and the vector.

use ferry_protos::v1::Function;

use crate::types::Type;

/// How a function is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `a + b`, `!a`, `a ? b : c`, `l[i]`.
    Operator,
    /// `sqrt(x)`.
    Global,
    /// `s.startsWith(t)`: the receiver is the first argument.
    Member,
    /// `size(x)` or `x.size()`.
    Either,
}

/// What one call costs, in units of the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// One unit.
    One,
    /// One unit, plus one per element of its list arguments.
    PerElement,
    /// One unit, plus one per 256 bytes of its string arguments.
    PerChunk,
}

/// The typed operation a call resolves to, once its argument types are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    AddInt,
    AddDouble,
    AddStr,
    SubInt,
    SubDouble,
    MulInt,
    MulDouble,
    DivInt,
    DivDouble,
    ModInt,
    NegInt,
    NegDouble,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    Not,
    Cond,
    Index,
    SizeStr,
    SizeBytes,
    SizeList,
    StartsWith,
    EndsWith,
    Contains,
    IntOfInt,
    IntOfDouble,
    IntOfString,
    DoubleOfInt,
    DoubleOfDouble,
    DoubleOfString,
    StringOfInt,
    StringOfDouble,
    StringOfBool,
    StringOfString,
    StringOfBytes,
    AbsInt,
    AbsDouble,
    MinInt,
    MinDouble,
    MaxInt,
    MaxDouble,
    Sqrt,
    Log,
    Exp,
    Sum,
    Dot,
    Norm,
    Cosine,
}

/// One signature: argument types (the receiver first), result, operation. `Cond`'s branches
/// are any type (checked apart: both the same).
pub struct Sig {
    pub args: &'static [Type],
    pub result: Type,
    pub op: Op,
}

pub struct FunctionDef {
    pub id: Function,
    /// As written: `+`, `startsWith`, `cosine`.
    pub name: &'static str,
    pub style: Style,
    pub sigs: &'static [Sig],
    pub cost: Cost,
    /// One line for the docs.
    pub doc: &'static str,
}

use Type::{Bool as B, Bytes as Y, Double as D, Int as I, List as L, String as S};

const fn sig(args: &'static [Type], result: Type, op: Op) -> Sig {
    Sig { args, result, op }
}

const CMP_TYPES: [[Type; 2]; 5] = [[I, I], [D, D], [B, B], [S, S], [Y, Y]];

macro_rules! compare {
    ($op:expr) => {
        &[
            sig(&CMP_TYPES[0], B, $op),
            sig(&CMP_TYPES[1], B, $op),
            sig(&CMP_TYPES[2], B, $op),
            sig(&CMP_TYPES[3], B, $op),
            sig(&CMP_TYPES[4], B, $op),
        ]
    };
}

macro_rules! order {
    ($op:expr) => {
        &[
            sig(&[I, I], B, $op),
            sig(&[D, D], B, $op),
            sig(&[S, S], B, $op),
        ]
    };
}

macro_rules! f {
    ($id:ident, $name:expr, $style:ident, $cost:ident, $doc:expr, $sigs:expr) => {
        FunctionDef {
            id: Function::$id,
            name: $name,
            style: Style::$style,
            sigs: $sigs,
            cost: Cost::$cost,
            doc: $doc,
        }
    };
}

/// Every operator and function an expression may use.
pub const FUNCTIONS: &[FunctionDef] = &[
    f!(
        Add,
        "+",
        Operator,
        PerChunk,
        "sum; strings: concatenation",
        &[
            sig(&[I, I], I, Op::AddInt),
            sig(&[D, D], D, Op::AddDouble),
            sig(&[S, S], S, Op::AddStr)
        ]
    ),
    f!(
        Sub,
        "-",
        Operator,
        One,
        "difference",
        &[sig(&[I, I], I, Op::SubInt), sig(&[D, D], D, Op::SubDouble)]
    ),
    f!(
        Mul,
        "*",
        Operator,
        One,
        "product",
        &[sig(&[I, I], I, Op::MulInt), sig(&[D, D], D, Op::MulDouble)]
    ),
    f!(
        Div,
        "/",
        Operator,
        One,
        "quotient; int division truncates toward zero",
        &[sig(&[I, I], I, Op::DivInt), sig(&[D, D], D, Op::DivDouble)]
    ),
    f!(
        Mod,
        "%",
        Operator,
        One,
        "remainder (sign of the dividend)",
        &[sig(&[I, I], I, Op::ModInt)]
    ),
    f!(
        Neg,
        "-x",
        Operator,
        One,
        "negation",
        &[sig(&[I], I, Op::NegInt), sig(&[D], D, Op::NegDouble)]
    ),
    f!(
        Eq,
        "==",
        Operator,
        PerChunk,
        "equal (same types only)",
        compare!(Op::Eq)
    ),
    f!(
        Ne,
        "!=",
        Operator,
        PerChunk,
        "not equal (same types only)",
        compare!(Op::Ne)
    ),
    f!(Lt, "<", Operator, PerChunk, "less", order!(Op::Lt)),
    f!(
        Le,
        "<=",
        Operator,
        PerChunk,
        "less or equal",
        order!(Op::Le)
    ),
    f!(Gt, ">", Operator, PerChunk, "greater", order!(Op::Gt)),
    f!(
        Ge,
        ">=",
        Operator,
        PerChunk,
        "greater or equal",
        order!(Op::Ge)
    ),
    f!(
        And,
        "&&",
        Operator,
        One,
        "and (an error on one side is absorbed by false on the other)",
        &[sig(&[B, B], B, Op::And)]
    ),
    f!(
        Or,
        "||",
        Operator,
        One,
        "or (an error on one side is absorbed by true on the other)",
        &[sig(&[B, B], B, Op::Or)]
    ),
    f!(Not, "!", Operator, One, "not", &[sig(&[B], B, Op::Not)]),
    f!(
        Conditional,
        "c ? a : b",
        Operator,
        One,
        "a if c, else b (a and b of one type)",
        &[sig(&[B], B, Op::Cond)]
    ),
    f!(
        Index,
        "l[i]",
        Operator,
        One,
        "element i of a list (from 0)",
        &[sig(&[L, I], D, Op::Index)]
    ),
    f!(
        Size,
        "size",
        Either,
        PerChunk,
        "length: string in code points, bytes, list",
        &[
            sig(&[S], I, Op::SizeStr),
            sig(&[Y], I, Op::SizeBytes),
            sig(&[L], I, Op::SizeList)
        ]
    ),
    f!(
        StartsWith,
        "startsWith",
        Member,
        PerChunk,
        "s.startsWith(prefix)",
        &[sig(&[S, S], B, Op::StartsWith)]
    ),
    f!(
        EndsWith,
        "endsWith",
        Member,
        PerChunk,
        "s.endsWith(suffix)",
        &[sig(&[S, S], B, Op::EndsWith)]
    ),
    f!(
        Contains,
        "contains",
        Member,
        PerChunk,
        "s.contains(part)",
        &[sig(&[S, S], B, Op::Contains)]
    ),
    f!(
        ToInt,
        "int",
        Global,
        PerChunk,
        "to int: a double truncated toward zero, a decimal string",
        &[
            sig(&[I], I, Op::IntOfInt),
            sig(&[D], I, Op::IntOfDouble),
            sig(&[S], I, Op::IntOfString)
        ]
    ),
    f!(
        ToDouble,
        "double",
        Global,
        PerChunk,
        "to double: an int, a decimal string",
        &[
            sig(&[I], D, Op::DoubleOfInt),
            sig(&[D], D, Op::DoubleOfDouble),
            sig(&[S], D, Op::DoubleOfString)
        ]
    ),
    f!(
        ToString,
        "string",
        Global,
        PerChunk,
        "to string (UTF-8 bytes only)",
        &[
            sig(&[I], S, Op::StringOfInt),
            sig(&[D], S, Op::StringOfDouble),
            sig(&[B], S, Op::StringOfBool),
            sig(&[S], S, Op::StringOfString),
            sig(&[Y], S, Op::StringOfBytes)
        ]
    ),
    f!(
        Abs,
        "abs",
        Global,
        One,
        "absolute value",
        &[sig(&[I], I, Op::AbsInt), sig(&[D], D, Op::AbsDouble)]
    ),
    f!(
        Min,
        "min",
        Global,
        One,
        "the smaller of two",
        &[sig(&[I, I], I, Op::MinInt), sig(&[D, D], D, Op::MinDouble)]
    ),
    f!(
        Max,
        "max",
        Global,
        One,
        "the larger of two",
        &[sig(&[I, I], I, Op::MaxInt), sig(&[D, D], D, Op::MaxDouble)]
    ),
    f!(
        Sqrt,
        "sqrt",
        Global,
        One,
        "square root",
        &[sig(&[D], D, Op::Sqrt)]
    ),
    f!(
        Log,
        "log",
        Global,
        One,
        "natural logarithm",
        &[sig(&[D], D, Op::Log)]
    ),
    f!(
        Exp,
        "exp",
        Global,
        One,
        "e to the power x",
        &[sig(&[D], D, Op::Exp)]
    ),
    f!(
        Sum,
        "sum",
        Global,
        PerElement,
        "sum of a list's elements (0.0 for an empty list)",
        &[sig(&[L], D, Op::Sum)]
    ),
    f!(
        Dot,
        "dot",
        Global,
        PerElement,
        "dot product of two lists of one length",
        &[sig(&[L, L], D, Op::Dot)]
    ),
    f!(
        Norm,
        "norm",
        Global,
        PerElement,
        "Euclidean (L2) norm",
        &[sig(&[L], D, Op::Norm)]
    ),
    f!(
        Cosine,
        "cosine",
        Global,
        PerElement,
        "cosine similarity of two lists of one length",
        &[sig(&[L, L], D, Op::Cosine)]
    ),
];

/// The table's entry for a function id.
pub fn by_id(id: Function) -> Option<&'static FunctionDef> {
    FUNCTIONS.iter().find(|f| f.id == id)
}

/// The entry a call spells (`"size"`, `"cosine"`), operators excluded.
pub fn by_name(name: &str) -> Option<&'static FunctionDef> {
    FUNCTIONS
        .iter()
        .find(|f| f.style != Style::Operator && f.name == name)
}

/// Functions CEL has that Ferry refuses, with why.
pub fn refused(name: &str) -> Option<&'static str> {
    Some(match name {
        "matches" => {
            "matches() is not allowed: a regular expression engine would triple the \
                      filter's size and its cost per request is unbounded; use startsWith, \
                      endsWith or contains"
        }
        "exists_one" => "exists_one() is not allowed; use size(l.filter(x, p)) == 1",
        "now" | "timestamp" | "duration" | "getHours" | "getDate" => {
            "time functions are not available; request.time is the request's time (int Unix \
             seconds)"
        }
        _ => return None,
    })
}

/// The names a user may call, for the message of an unknown one.
pub fn callable_names() -> String {
    FUNCTIONS
        .iter()
        .filter(|f| f.style != Style::Operator)
        .map(|f| f.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The signatures of an entry as the docs show them: `int, int -> int; double, double -> double`.
pub fn signatures(f: &FunctionDef) -> String {
    f.sigs
        .iter()
        .map(|s| {
            if s.op == Op::Cond {
                return "bool, T, T -> T".to_owned();
            }
            let args: Vec<&str> = s.args.iter().map(|t| t.name()).collect();
            format!("{} -> {}", args.join(", "), s.result.name())
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The docs' table of functions, generated from [`FUNCTIONS`] (a test checks that
/// `docs/on-demand.md` holds it).
pub fn markdown_table() -> String {
    let mut out =
        String::from("| function | written | signatures | cost | what |\n|---|---|---|---|---|\n");
    for f in FUNCTIONS {
        let written = match f.style {
            Style::Operator => "operator",
            Style::Global => "f(x)",
            Style::Member => "x.f(y)",
            Style::Either => "f(x) or x.f()",
        };
        let cost = match f.cost {
            Cost::One => "1",
            Cost::PerElement => "1 + list length",
            Cost::PerChunk => "1 + string bytes / 256",
        };
        out.push_str(&format!(
            "| `{}` | {written} | {} | {cost} | {} |\n",
            f.name.replace('|', "\\|"),
            signatures(f),
            f.doc
        ));
    }
    out
}
