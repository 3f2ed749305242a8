//! An on-demand feature's CEL text compiled for the snapshot: parsed with the `cel` crate,
//! its names resolved against the view's request fields and sources, converted into Ferry's
//! own tree (`ferry.v1.Expr`, `convert.rs`), then typed, bounded and costed by ferry-core's
//! checker, the one the filter runs again. Every problem carries its line:column.

mod convert;

use ferry_expr::{cost, Program, Type};
use ferry_protos::v1::{self as pb, ValueType};

/// What an expression may name.
pub struct Scope<'a> {
    /// `request.<name>` and its type, in slot order (slot `request.len()` is `request.time`).
    pub request: &'a [(&'a str, Type)],
    /// Each source view with its features and their types.
    pub sources: &'a [(&'a str, Vec<(&'a str, Type)>)],
    /// Every view of the repo, stored or on-demand (to tell "not a source" from "unknown").
    pub views: &'a [&'a str],
}

/// A stored input an expression reads: (source index, feature index) in [`Scope::sources`].
pub type StoredRef = (usize, usize);

/// An expression converted, its stored inputs numbered in the order first read (a view's
/// layout is fixed once all its features are converted, see [`renumber`]).
pub struct Converted {
    pub expr: pb::Expr,
    /// Stored inputs, indexed by the provisional slot `request.len() + 1 + i`.
    pub stored: Vec<StoredRef>,
}

/// One problem with an expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

/// Line and column (from 1, in characters) of a byte offset of `text`.
pub fn position(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn problem_at(text: &str, offset: usize, message: impl Into<String>) -> Problem {
    let (line, column) = position(text, offset);
    Problem {
        line,
        column,
        message: message.into(),
    }
}

/// Parses and converts `text` (slots of stored inputs provisional).
pub fn convert(text: &str, scope: &Scope) -> Result<Converted, Vec<Problem>> {
    if text.len() > cost::MAX_TEXT_BYTES {
        return Err(vec![problem_at(
            text,
            0,
            format!(
                "the expression is {} bytes, over the limit of {}",
                text.len(),
                cost::MAX_TEXT_BYTES
            ),
        )]);
    }
    if text.trim().is_empty() {
        return Err(vec![problem_at(text, 0, "empty expression")]);
    }
    convert::convert(text, scope)
}

/// Gives every stored input of a view its final slot: `order[i]` is the final index (among
/// the view's stored inputs) of provisional input `i` of `converted`.
pub fn renumber(e: &mut pb::Expr, request_len: u32, order: &[u32]) {
    use pb::expr::Kind;
    let fix = |slot: &mut u32| {
        if *slot > request_len {
            let i = (*slot - request_len - 1) as usize;
            if let Some(&to) = order.get(i) {
                *slot = request_len + 1 + to;
            }
        }
    };
    match &mut e.kind {
        Some(Kind::Input(s)) | Some(Kind::Has(s)) => fix(s),
        Some(Kind::Call(c)) => c
            .args
            .iter_mut()
            .for_each(|a| renumber(a, request_len, order)),
        Some(Kind::List(l)) => l
            .elements
            .iter_mut()
            .for_each(|a| renumber(a, request_len, order)),
        Some(Kind::Comprehension(c)) => {
            for part in [&mut c.range, &mut c.predicate, &mut c.body]
                .into_iter()
                .flatten()
            {
                renumber(part, request_len, order);
            }
        }
        Some(Kind::Literal(_)) | Some(Kind::IterVar(_)) | None => {}
    }
}

/// Types, bounds and costs a converted tree with ferry-core's checker (the filter's), against
/// the view's final slot types and the feature's declared type.
pub fn check(
    text: &str,
    e: &pb::Expr,
    slots: &[Type],
    declared: ValueType,
) -> Result<Program, Problem> {
    Program::compile(e, slots, declared).map_err(|e| problem_at(text, e.offset as usize, e.message))
}

#[cfg(test)]
#[path = "cel_tests.rs"]
mod tests;
