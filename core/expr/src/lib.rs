//! Ferry's expression language, the request-time features of on-demand views: the expressions
//! as `ferry apply` compiled them from CEL into a `ferry.v1.Expr` tree, checked again here (a
//! pushed snapshot is untrusted), compiled once per snapshot and evaluated per instance under a
//! budget. Used by ferry-core (the request path), the control plane (`ferry apply`), the bench
//! and the fuzz targets.
//!
//! - `types.rs`: the expression types, values, inputs a caller binds per instance, outcomes.
//! - `functions.rs`: the one table of operators and functions (signatures, cost).
//! - `check.rs`: a tree decoded and checked (slots, functions, types, depth, size) into the
//!   typed tree of `tree.rs`.
//! - `cost.rs`: the limits and the static cost bound, in the budget's units.
//! - `compile.rs`: a checked tree made a [`Program`] (declared type, cost limit, guards).
//! - `eval.rs`, `ops.rs`: evaluation, and what each operation computes.
//!
//! Null rule (the caller applies it through [`Outcome`]): an input read without a `has()`
//! guard that is absent makes the feature null with that input's status, without evaluating;
//! a guarded input read while absent does the same at the point it is read; an evaluation
//! error is [`Outcome::Invalid`].

mod check;
mod compile;
pub mod cost;
mod eval;
pub mod functions;
mod ops;
mod tree;
mod types;

pub use check::CheckError;
pub use compile::{result_type, Program};
pub use types::{Absence, Budget, Input, Invalid, List, Outcome, Type, Val};

/// The input slots the unit tests compile against: 0 double, 1 string, 2 int, 3 list, 4 bool,
/// 5 bytes, 6 list (f64).
#[cfg(test)]
const TEST_SLOTS: [Type; 7] = [
    Type::Double,
    Type::String,
    Type::Int,
    Type::List,
    Type::Bool,
    Type::Bytes,
    Type::List,
];

#[cfg(test)]
mod check_tests;
#[cfg(test)]
mod eval_tests;
