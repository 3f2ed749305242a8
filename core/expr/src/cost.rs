//! The bounds of an expression and what it may cost: the limits `ferry apply` and the filter
//! check, and the static cost bound of a checked tree, in the units the per-request budget is
//! counted in (one unit per node evaluated, one per list element a list function or macro goes
//! through, one per 256 bytes a string function reads).

use crate::functions::Cost;
use crate::tree::{Const, Node};
use crate::types::{Type, Val};

/// Longest expression text, in bytes.
pub const MAX_TEXT_BYTES: usize = 2048;
/// Deepest nesting of the tree (an operator and its operands are two levels).
pub const MAX_DEPTH: usize = 32;
/// Most nodes in one tree.
pub const MAX_NODES: usize = 256;
/// Most macros (`all`, `exists`, `map`, `filter`) nested in one another.
pub const MAX_NESTED_COMPREHENSIONS: usize = 4;
/// Longest list a list function or macro takes: longer is `INVALID` (`too_long`), so the
/// static bound holds.
pub const MAX_LIST_LEN: usize = 4096;
/// Longest string or bytes a string function or comparison takes: longer is `INVALID`.
pub const MAX_STRING_BYTES: usize = 4096;
/// Bytes a string function reads per cost unit.
pub const STRING_CHUNK: usize = 256;
/// Highest static cost bound of one expression: a cosine of two 4,096-element lists (~4,100)
/// fits twelve times; a macro nested in a macro over input lists (4,096² units) does not.
pub const MAX_EXPR_COST: u64 = 50_000;
/// The budget of one request, summed over its instances and derived features, unless the
/// caller chooses another: 100 instances × 5 features of one cosine over 1,536 dimensions
/// each is under 800,000.
pub const DEFAULT_REQUEST_BUDGET: u64 = 2_000_000;

/// The static cost bound of a call: one unit, plus what its entry's [`Cost`] charges for its
/// arguments at their bounds ([`MAX_LIST_LEN`] elements, [`MAX_STRING_BYTES`] bytes), plus
/// its arguments' own bounds.
pub(super) fn call_cost(cost: Cost, args: &[Node], types: &[Type], arg_costs: u64) -> u64 {
    let per_arg = |(n, t): (&Node, &Type)| -> u64 {
        match (cost, t) {
            (Cost::PerElement, Type::List) => list_bound(n),
            (Cost::PerChunk, Type::String | Type::Bytes) => {
                (MAX_STRING_BYTES / STRING_CHUNK) as u64
            }
            _ => 0,
        }
    };
    1u64.saturating_add(args.iter().zip(types).map(per_arg).sum::<u64>())
        .saturating_add(arg_costs)
}

/// The static cost bound of a macro: its range, then per element (at the range's bound) one
/// unit plus its predicate and its body.
pub(super) fn comprehension_cost(range: &Node, range_cost: u64, predicate: u64, body: u64) -> u64 {
    list_bound(range)
        .saturating_mul(1u64.saturating_add(predicate).saturating_add(body))
        .saturating_add(1)
        .saturating_add(range_cost)
}

/// The most elements a list-typed node can have: a literal's length, a `map` of its range's
/// bound, any other list at [`MAX_LIST_LEN`].
pub(super) fn list_bound(n: &Node) -> u64 {
    match n {
        Node::Const(Const::List(l)) => l.len() as u64,
        Node::List(items) => items.len() as u64,
        Node::Comp { range, .. } => list_bound(range),
        _ => MAX_LIST_LEN as u64,
    }
}

/// What a call costs at run time, for arguments of these sizes: the same rule as
/// [`call_cost`], with the actual lengths.
pub(super) fn run_cost(cost: Cost, arg: &Val<'_>) -> u64 {
    match (cost, arg) {
        (Cost::PerElement, Val::List(l)) => l.len() as u64,
        (Cost::PerChunk, Val::Str(s)) => (s.len() / STRING_CHUNK) as u64,
        (Cost::PerChunk, Val::Bytes(b)) => (b.len() / STRING_CHUNK) as u64,
        _ => 0,
    }
}

/// Whether an argument is over the bound the static cost assumes.
pub(super) fn too_long(cost: Cost, arg: &Val<'_>) -> bool {
    match (cost, arg) {
        (Cost::PerElement, Val::List(l)) => l.len() > MAX_LIST_LEN,
        (Cost::PerChunk, Val::Str(s)) => s.len() > MAX_STRING_BYTES,
        (Cost::PerChunk, Val::Bytes(b)) => b.len() > MAX_STRING_BYTES,
        _ => false,
    }
}
