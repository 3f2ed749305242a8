//! A `ferry.v1.Expr` tree decoded and checked into the typed [`Node`] tree the evaluator runs:
//! every slot, iteration variable and function id in range, every call typed by the table of
//! `functions`, depth and size bounded. `ferry apply` runs it on the trees it builds; the filter
//! runs it again on what it receives (a pushed snapshot is untrusted).

use ferry_protos::v1::{self as pb, expr::Kind, literal::Value as Lit};

use crate::cost::{self, MAX_DEPTH, MAX_NESTED_COMPREHENSIONS, MAX_NODES};
use crate::functions::{self, Cost, Op};
use crate::tree::{CompKind, Const, Node};
use crate::types::Type;

/// Why a tree is refused: where (a byte offset in the expression text) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckError {
    pub offset: u32,
    pub message: String,
}

fn err<T>(offset: u32, message: impl Into<String>) -> Result<T, CheckError> {
    Err(CheckError {
        offset,
        message: message.into(),
    })
}

/// A checked node, its type and its static cost bound.
pub(super) type Checked = (Node, Type, u64);

/// Checks a tree against the types of the input slots.
pub(super) fn check(expr: &pb::Expr, slots: &[Type]) -> Result<Checked, CheckError> {
    let mut c = Checker {
        slots,
        nodes: 0,
        vars: 0,
    };
    c.node(expr, 1)
}

struct Checker<'s> {
    slots: &'s [Type],
    nodes: usize,
    /// Enclosing comprehensions.
    vars: usize,
}

impl Checker<'_> {
    fn node(&mut self, e: &pb::Expr, depth: usize) -> Result<Checked, CheckError> {
        let at = e.offset;
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return err(at, format!("more than {MAX_NODES} nodes"));
        }
        if depth > MAX_DEPTH {
            return err(at, format!("nested deeper than {MAX_DEPTH} levels"));
        }
        match &e.kind {
            None => err(at, "empty node"),
            Some(Kind::Literal(l)) => literal(l, at),
            Some(Kind::Input(slot)) => {
                let (slot, t) = self.slot(*slot, at)?;
                Ok((Node::Input(slot), t, 1))
            }
            Some(Kind::Has(slot)) => Ok((Node::Has(self.slot(*slot, at)?.0), Type::Bool, 1)),
            Some(Kind::IterVar(n)) => {
                let n = *n as usize;
                if n >= self.vars {
                    return err(
                        at,
                        format!("iteration variable {n} outside its comprehension"),
                    );
                }
                Ok((Node::Var(self.vars - 1 - n), Type::Double, 1))
            }
            Some(Kind::List(l)) => self.list(l, depth),
            Some(Kind::Call(call)) => self.call(call, at, depth),
            Some(Kind::Comprehension(c)) => self.comprehension(c, at, depth),
        }
    }

    fn slot(&self, slot: u32, at: u32) -> Result<(usize, Type), CheckError> {
        match self.slots.get(slot as usize) {
            Some(t) => Ok((slot as usize, *t)),
            None => err(
                at,
                format!(
                    "input slot {slot} out of range ({} inputs)",
                    self.slots.len()
                ),
            ),
        }
    }

    fn list(&mut self, l: &pb::ListLiteral, depth: usize) -> Result<Checked, CheckError> {
        let mut nodes = Vec::with_capacity(l.elements.len());
        let mut cost = 1u64;
        for e in &l.elements {
            let (n, t, c) = self.node(e, depth + 1)?;
            cost = cost.saturating_add(c);
            if t != Type::Double {
                return err(e.offset, format!("a list holds doubles, not {}", t.name()));
            }
            nodes.push(n);
        }
        let constants: Option<Vec<f64>> = nodes
            .iter()
            .map(|n| match n {
                Node::Const(Const::Double(d)) => Some(*d),
                _ => None,
            })
            .collect();
        Ok(match constants {
            Some(c) => (Node::Const(Const::List(c)), Type::List, 1),
            None => (Node::List(nodes.into()), Type::List, cost),
        })
    }

    fn call(&mut self, call: &pb::Call, at: u32, depth: usize) -> Result<Checked, CheckError> {
        let id = pb::Function::try_from(call.function).ok();
        let Some(def) = id.and_then(functions::by_id) else {
            return err(at, format!("unknown function id {}", call.function));
        };
        let mut args = Vec::with_capacity(call.args.len());
        let mut types = Vec::with_capacity(call.args.len());
        let mut arg_costs = 0u64;
        for a in &call.args {
            let (n, t, c) = self.node(a, depth + 1)?;
            args.push(n);
            types.push(t);
            arg_costs = arg_costs.saturating_add(c);
        }
        let cost = cost::call_cost(def.cost, &args, &types, arg_costs);
        if def.id == pb::Function::Conditional {
            let (node, t) = conditional(args, &types, &call.args, at)?;
            return Ok((node, t, cost));
        }
        let Some(sig) = def.sigs.iter().find(|s| s.args == types.as_slice()) else {
            return err(at, no_overload(def, &types));
        };
        Ok((Node::Call(sig.op, def.cost, args.into()), sig.result, cost))
    }

    fn comprehension(
        &mut self,
        c: &pb::Comprehension,
        at: u32,
        depth: usize,
    ) -> Result<Checked, CheckError> {
        let kind = match pb::ComprehensionKind::try_from(c.kind) {
            Ok(pb::ComprehensionKind::All) => CompKind::All,
            Ok(pb::ComprehensionKind::Exists) => CompKind::Exists,
            Ok(pb::ComprehensionKind::Map) => CompKind::Map,
            _ => return err(at, format!("unknown comprehension kind {}", c.kind)),
        };
        let (Some(range), Some(body)) = (&c.range, &c.body) else {
            return err(at, "comprehension without a range or a body");
        };
        if kind != CompKind::Map && c.predicate.is_some() {
            return err(at, "only map and filter take a predicate");
        }
        let (range, rt, range_cost) = self.node(range, depth + 1)?;
        if rt != Type::List {
            return err(
                at,
                format!("a macro iterates over a list(double), not {}", rt.name()),
            );
        }
        if self.vars >= MAX_NESTED_COMPREHENSIONS {
            return err(
                at,
                format!("macros nested deeper than {MAX_NESTED_COMPREHENSIONS}"),
            );
        }
        self.vars += 1;
        let (predicate, predicate_cost) = match &c.predicate {
            None => (None, 0),
            Some(p) => {
                let (n, t, c) = self.node(p, depth + 1)?;
                if t != Type::Bool {
                    return err(p.offset, format!("a predicate is bool, not {}", t.name()));
                }
                (Some(Box::new(n)), c)
            }
        };
        let (body_node, bt, body_cost) = self.node(body, depth + 1)?;
        self.vars -= 1;
        let (want, result) = match kind {
            CompKind::All | CompKind::Exists => (Type::Bool, Type::Bool),
            CompKind::Map => (Type::Double, Type::List),
        };
        if bt != want {
            let what = if kind == CompKind::Map {
                "map's element"
            } else {
                "the condition"
            };
            return err(
                body.offset,
                format!("{what} must be {}, not {}", want.name(), bt.name()),
            );
        }
        let cost = cost::comprehension_cost(&range, range_cost, predicate_cost, body_cost);
        let node = Node::Comp {
            kind,
            var: self.vars,
            range: Box::new(range),
            predicate,
            body: Box::new(body_node),
        };
        Ok((node, result, cost))
    }
}

fn literal(l: &pb::Literal, at: u32) -> Result<Checked, CheckError> {
    let (c, t) = match &l.value {
        None => return err(at, "literal without a value"),
        Some(Lit::Int(i)) => (Const::Int(*i), Type::Int),
        Some(Lit::Double(d)) if !d.is_finite() => return err(at, "non-finite double literal"),
        Some(Lit::Double(d)) => (Const::Double(*d), Type::Double),
        Some(Lit::Bool(b)) => (Const::Bool(*b), Type::Bool),
        Some(Lit::String(s)) => (Const::Str(s.clone()), Type::String),
        Some(Lit::Bytes(b)) => (Const::Bytes(b.clone()), Type::Bytes),
    };
    Ok((Node::Const(c), t, 1))
}

fn conditional(
    args: Vec<Node>,
    types: &[Type],
    exprs: &[pb::Expr],
    at: u32,
) -> Result<(Node, Type), CheckError> {
    let [c, a, b] = types else {
        return err(at, format!("'? :' takes 3 operands, not {}", types.len()));
    };
    if *c != Type::Bool {
        return err(
            exprs[0].offset,
            format!("the condition of '? :' is bool, not {}", c.name()),
        );
    }
    if a != b {
        return err(
            at,
            format!(
                "the branches of '? :' differ: {} and {}",
                a.name(),
                b.name()
            ),
        );
    }
    Ok((Node::Call(Op::Cond, Cost::One, args.into()), *a))
}

/// The message for a call no signature fits: what it got, what it takes.
fn no_overload(def: &functions::FunctionDef, types: &[Type]) -> String {
    let got: Vec<&str> = types.iter().map(|t| t.name()).collect();
    let numeric = |t: &Type| matches!(t, Type::Int | Type::Double);
    let mixes = types.len() == 2 && types[0] != types[1] && types.iter().all(numeric);
    let name = def.name;
    if mixes {
        return format!(
            "'{name}' of {}: CEL does not mix int and double; convert one with double() or int()",
            got.join(" and ")
        );
    }
    let what = if got.is_empty() {
        "no arguments".to_owned()
    } else {
        got.join(", ")
    };
    format!(
        "'{name}' does not take {what} (it takes {})",
        functions::signatures(def)
    )
}
