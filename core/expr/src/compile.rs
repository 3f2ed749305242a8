//! A checked tree made a [`Program`]: its result type matched against the feature's declared
//! type, its cost bound against the limit, and the inputs it reads split into those it guards
//! with `has()` and those it does not (an absent unguarded input makes the feature null without
//! evaluating anything).

use ferry_protos::v1::{self as pb, ValueType};

use crate::check::{self, CheckError};
use crate::cost::MAX_EXPR_COST;
use crate::tree::Node;
use crate::types::Type;

/// One derived feature's expression, ready to evaluate per instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    pub(super) root: Node,
    /// The declared type of the feature (int32 results are range-checked).
    pub(super) declared: ValueType,
    /// Slots read and not guarded by `has()`, ascending.
    pub(super) unguarded: Box<[usize]>,
    cost: u64,
}

impl Program {
    /// Checks `expr` against the types of the view's input slots and the feature's declared
    /// type, and compiles it.
    pub fn compile(
        expr: &pb::Expr,
        slots: &[Type],
        declared: ValueType,
    ) -> Result<Program, CheckError> {
        let (root, t, cost) = check::check(expr, slots)?;
        let at = expr.offset;
        let Some(want) = result_type(declared) else {
            return Err(CheckError {
                offset: at,
                message: format!("type {} cannot be computed", declared.as_str_name()),
            });
        };
        if t != want {
            return Err(CheckError {
                offset: at,
                message: format!(
                    "the expression is {}, the feature is declared {} ({})",
                    t.name(),
                    declared.as_str_name().to_ascii_lowercase(),
                    want.name()
                ),
            });
        }
        if cost > MAX_EXPR_COST {
            return Err(CheckError {
                offset: at,
                message: format!(
                    "cost bound {cost} is over the limit of {MAX_EXPR_COST} (each list counted \
                     at {} elements; a macro costs its body once per element)",
                    crate::cost::MAX_LIST_LEN
                ),
            });
        }
        let mut read = Vec::new();
        let mut guarded = Vec::new();
        slots_of(&root, &mut read, &mut guarded);
        read.sort_unstable();
        read.dedup();
        read.retain(|s| !guarded.contains(s));
        Ok(Program {
            root,
            declared,
            unguarded: read.into(),
            cost,
        })
    }

    /// The static cost bound, in budget units.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The input slots read without a `has()` guard: if one is absent, the feature is null
    /// with its status.
    pub fn unguarded(&self) -> &[usize] {
        &self.unguarded
    }
}

/// The expression type a feature of declared type `t` must compute.
pub fn result_type(t: ValueType) -> Option<Type> {
    match t {
        ValueType::Bytes => None,
        t => Type::of_value_type(t),
    }
}

/// Slots read (`read`) and slots tested with `has()` (`guarded`).
fn slots_of(n: &Node, read: &mut Vec<usize>, guarded: &mut Vec<usize>) {
    match n {
        Node::Input(s) => read.push(*s),
        Node::Has(s) => guarded.push(*s),
        Node::Const(_) | Node::Var(_) => {}
        Node::List(items) | Node::Call(_, _, items) => {
            items.iter().for_each(|i| slots_of(i, read, guarded));
        }
        Node::Comp {
            range,
            predicate,
            body,
            ..
        } => {
            slots_of(range, read, guarded);
            if let Some(p) = predicate {
                slots_of(p, read, guarded);
            }
            slots_of(body, read, guarded);
        }
    }
}
