//! The checked tree the evaluator walks: names already slots, calls typed operations.

use crate::functions::{Cost, Op};

/// A constant of the program, borrowed by the values computed from it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Const {
    Int(i64),
    Double(f64),
    Bool(bool),
    Str(String),
    Bytes(Vec<u8>),
    List(Vec<f64>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CompKind {
    All,
    Exists,
    Map,
}

/// A checked node: names resolved to slots, calls to typed operations.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Const(Const),
    /// Reads input slot N.
    Input(usize),
    /// Whether input slot N is present.
    Has(usize),
    /// The variable of the Nth enclosing comprehension, counted from the outermost.
    Var(usize),
    /// A list literal with computed elements (all-constant ones are `Const::List`).
    List(Box<[Node]>),
    /// A typed operation, charged by its entry's cost.
    Call(Op, Cost, Box<[Node]>),
    Comp {
        kind: CompKind,
        /// Its variable's index among the enclosing comprehensions' (0 = outermost).
        var: usize,
        range: Box<Node>,
        predicate: Option<Box<Node>>,
        body: Box<Node>,
    },
}
