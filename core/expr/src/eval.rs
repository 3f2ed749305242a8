//! A [`Program`] evaluated for one instance: a walk of the checked tree over borrowed inputs,
//! charging the request's budget as it goes. Values borrow from the inputs and the program;
//! only `map`/`filter`, string concatenation and `string()` allocate.

use std::borrow::Cow;

use ferry_protos::v1::ValueType;

use crate::compile::Program;
use crate::cost::{self, MAX_LIST_LEN, MAX_NESTED_COMPREHENSIONS};
use crate::functions::{Cost, Op};
use crate::ops;
use crate::tree::{CompKind, Const, Node};
use crate::types::{Absence, Budget, Input, Invalid, List, Outcome, Val};

/// Why an evaluation stopped before a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    Absent(usize, Absence),
    Invalid(Invalid),
}

impl From<Invalid> for Stop {
    fn from(i: Invalid) -> Stop {
        Stop::Invalid(i)
    }
}

type Res<'a> = Result<Val<'a>, Stop>;

struct Ctx<'a, 'b> {
    inputs: &'a [Input<'a>],
    budget: &'b mut Budget,
    /// The variables of the enclosing comprehensions, outermost first.
    vars: [f64; MAX_NESTED_COMPREHENSIONS],
}

impl Program {
    /// Evaluates the feature for one instance. `inputs` is the view's slot layout, filled by
    /// the caller; a slot the program reads must hold a value of its declared type.
    pub fn eval<'a>(&'a self, inputs: &'a [Input<'a>], budget: &mut Budget) -> Outcome<'a> {
        for &slot in self.unguarded.iter() {
            match inputs.get(slot) {
                Some(Input::Absent(status)) => {
                    return Outcome::Absent {
                        slot,
                        status: *status,
                    }
                }
                Some(Input::Present(_)) => {}
                None => {
                    return Outcome::Absent {
                        slot,
                        status: Absence::NotFound,
                    }
                }
            }
        }
        let mut ctx = Ctx {
            inputs,
            budget,
            vars: [0.0; MAX_NESTED_COMPREHENSIONS],
        };
        match ctx.eval(&self.root) {
            Ok(v) => finish(v, self.declared),
            Err(Stop::Absent(slot, status)) => Outcome::Absent { slot, status },
            Err(Stop::Invalid(i)) => Outcome::Invalid(i),
        }
    }
}

/// The result as the declared type holds it: an int32 must fit.
fn finish(v: Val<'_>, declared: ValueType) -> Outcome<'_> {
    match (&v, declared) {
        (Val::Int(i), ValueType::Int32) if i32::try_from(*i).is_err() => {
            Outcome::Invalid(Invalid::Overflow)
        }
        (Val::List(l), _) if l.len() > MAX_LIST_LEN => Outcome::Invalid(Invalid::TooLong),
        _ => Outcome::Value(v),
    }
}

impl<'a> Ctx<'a, '_> {
    fn eval(&mut self, n: &'a Node) -> Res<'a> {
        self.budget.spend(1)?;
        match n {
            Node::Const(c) => Ok(constant(c)),
            Node::Input(slot) => match self.inputs.get(*slot) {
                Some(Input::Present(v)) => Ok(borrow(v)),
                Some(Input::Absent(status)) => Err(Stop::Absent(*slot, *status)),
                None => Err(Stop::Absent(*slot, Absence::NotFound)),
            },
            Node::Has(slot) => Ok(Val::Bool(matches!(
                self.inputs.get(*slot),
                Some(Input::Present(_))
            ))),
            Node::Var(i) => Ok(Val::Double(self.vars[*i])),
            Node::List(items) => {
                let mut out = Vec::with_capacity(items.len());
                for i in items.iter() {
                    out.push(double(self.eval(i)?)?);
                }
                Ok(Val::List(List::F64(Cow::Owned(out))))
            }
            Node::Call(op, cost, args) => self.call(*op, *cost, args),
            Node::Comp {
                kind,
                var,
                range,
                predicate,
                body,
            } => self.comprehension(*kind, *var, range, predicate.as_deref(), body),
        }
    }

    fn call(&mut self, op: Op, cost: Cost, args: &'a [Node]) -> Res<'a> {
        match (op, args) {
            (Op::And, [a, b]) => self.logic(a, b, false),
            (Op::Or, [a, b]) => self.logic(a, b, true),
            (Op::Cond, [c, a, b]) => match self.eval(c)? {
                Val::Bool(true) => self.eval(a),
                _ => self.eval(b),
            },
            (_, [a]) => {
                let a = self.eval(a)?;
                self.charge(cost, &a)?;
                Ok(ops::unary(op, a)?)
            }
            (_, [a, b]) => {
                let a = self.eval(a)?;
                self.charge(cost, &a)?;
                let b = self.eval(b)?;
                self.charge(cost, &b)?;
                Ok(ops::binary(op, a, b)?)
            }
            _ => Err(Stop::Invalid(Invalid::Conversion)),
        }
    }

    /// Charges what an argument of a list or string function costs, refusing one over the
    /// bound the static cost assumed.
    fn charge(&mut self, cost: Cost, arg: &Val<'_>) -> Result<(), Invalid> {
        if cost == Cost::One {
            return Ok(());
        }
        if cost::too_long(cost, arg) {
            return Err(Invalid::TooLong);
        }
        self.budget.spend(cost::run_cost(cost, arg))
    }

    /// `&&` (`wins` false) and `||` (`wins` true) as CEL has them: the side that decides wins
    /// over an error or an absent input on the other side. A spent budget always stops.
    fn logic(&mut self, a: &'a Node, b: &'a Node, wins: bool) -> Res<'a> {
        let left = self.eval(a);
        match left {
            Ok(Val::Bool(x)) if x == wins => return Ok(Val::Bool(wins)),
            Err(Stop::Invalid(Invalid::Budget)) => return left,
            _ => {}
        }
        let right = self.eval(b);
        match (left, right) {
            (_, Ok(Val::Bool(y))) if y == wins => Ok(Val::Bool(wins)),
            (_, Err(Stop::Invalid(Invalid::Budget))) => Err(Stop::Invalid(Invalid::Budget)),
            (Err(e), _) => Err(e),
            (Ok(_), right) => right,
        }
    }

    fn comprehension(
        &mut self,
        kind: CompKind,
        var: usize,
        range: &'a Node,
        predicate: Option<&'a Node>,
        body: &'a Node,
    ) -> Res<'a> {
        let Val::List(list) = self.eval(range)? else {
            return Err(Stop::Invalid(Invalid::Conversion));
        };
        if list.len() > MAX_LIST_LEN {
            return Err(Stop::Invalid(Invalid::TooLong));
        }
        let mut mapped = Vec::new();
        // all/exists: the first error, kept while no element decides.
        let mut pending: Option<Stop> = None;
        for x in list.iter() {
            self.budget.spend(1)?;
            self.vars[var] = x;
            if let Some(p) = predicate {
                if self.eval(p)? != Val::Bool(true) {
                    continue;
                }
            }
            let v = self.eval(body);
            match (kind, v) {
                (CompKind::Map, v) => mapped.push(double(v?)?),
                (CompKind::All, Ok(Val::Bool(false))) => return Ok(Val::Bool(false)),
                (CompKind::Exists, Ok(Val::Bool(true))) => return Ok(Val::Bool(true)),
                (_, Err(Stop::Invalid(Invalid::Budget))) => return Err(Invalid::Budget.into()),
                (_, Err(e)) => pending = pending.or(Some(e)),
                (_, Ok(_)) => {}
            }
        }
        if let Some(e) = pending {
            return Err(e);
        }
        Ok(match kind {
            CompKind::All => Val::Bool(true),
            CompKind::Exists => Val::Bool(false),
            CompKind::Map => Val::List(List::F64(Cow::Owned(mapped))),
        })
    }
}

fn double(v: Val<'_>) -> Result<f64, Stop> {
    match v {
        Val::Double(d) => Ok(d),
        _ => Err(Stop::Invalid(Invalid::Conversion)),
    }
}

fn constant(c: &Const) -> Val<'_> {
    match c {
        Const::Int(i) => Val::Int(*i),
        Const::Double(d) => Val::Double(*d),
        Const::Bool(b) => Val::Bool(*b),
        Const::Str(s) => Val::Str(Cow::Borrowed(s)),
        Const::Bytes(b) => Val::Bytes(Cow::Borrowed(b)),
        Const::List(l) => Val::List(List::F64(Cow::Borrowed(l))),
    }
}

/// An input's value, borrowed (never copied).
fn borrow<'a>(v: &'a Val<'a>) -> Val<'a> {
    match v {
        Val::Int(i) => Val::Int(*i),
        Val::Double(d) => Val::Double(*d),
        Val::Bool(b) => Val::Bool(*b),
        Val::Str(s) => Val::Str(Cow::Borrowed(s)),
        Val::Bytes(b) => Val::Bytes(Cow::Borrowed(b)),
        Val::List(List::F32(l)) => Val::List(List::F32(l)),
        Val::List(List::F64(l)) => Val::List(List::F64(Cow::Borrowed(l))),
    }
}
