//! cel's AST into Ferry's tree: names resolved to input slots (or reported), operators and
//! functions to the ids of ferry-core's table, the standard macros recognised from their
//! expansions, and each node given the byte offset of its source.

use cel::common::ast::{
    operators as op, CallExpr, ComprehensionExpr, Expr, IdedExpr, LiteralValue, SourceInfo,
};
use ferry_expr::functions::{self, Style};
use ferry_protos::v1::{self as pb, expr::Kind, literal::Value as Lit, Function as F};

use super::{problem_at, Converted, Problem, Scope};

/// The parser's own bound on nesting (ferry-core bounds the tree more tightly).
const PARSER_DEPTH: u16 = 64;
/// The variable the standard macros accumulate into.
const ACCU: &str = "@result";

pub(super) fn convert(text: &str, scope: &Scope) -> Result<Converted, Vec<Problem>> {
    let parsed = cel::parser::Parser::new()
        .max_recursion_depth(PARSER_DEPTH)
        .parse_with_source_info(text);
    let (ast, info) = match parsed {
        Ok(ok) => ok,
        Err(errs) => {
            return Err(errs
                .errors
                .iter()
                .map(|e| Problem {
                    line: e.pos.0.max(1) as usize,
                    column: e.pos.1.max(1) as usize,
                    message: e.msg.clone(),
                })
                .collect())
        }
    };
    let mut c = Conv {
        text,
        scope,
        info,
        problems: Vec::new(),
        stored: Vec::new(),
        vars: Vec::new(),
    };
    let expr = c.expr(&ast);
    if c.problems.is_empty() {
        Ok(Converted {
            expr,
            stored: c.stored,
        })
    } else {
        Err(c.problems)
    }
}

struct Conv<'a> {
    text: &'a str,
    scope: &'a Scope<'a>,
    info: SourceInfo,
    problems: Vec<Problem>,
    stored: Vec<super::StoredRef>,
    /// Iteration variables of the enclosing macros, outermost first.
    vars: Vec<String>,
}

impl Conv<'_> {
    /// Byte offset of a node.
    fn offset(&self, id: u64) -> u32 {
        self.info.offset_for(id).map_or(0, |(start, _)| start)
    }

    fn problem(&mut self, id: u64, message: impl Into<String>) -> pb::Expr {
        let at = self.offset(id) as usize;
        self.problems.push(problem_at(self.text, at, message));
        node(Kind::Literal(pb::Literal { value: None }), 0)
    }

    fn expr(&mut self, e: &IdedExpr) -> pb::Expr {
        let at = self.offset(e.id);
        match &e.expr {
            Expr::Literal(l) => self.literal(e.id, l, at),
            Expr::Ident(name) => self.ident(e.id, name, at),
            Expr::Select(s) => match &s.operand.expr {
                Expr::Ident(root) if !self.vars.contains(root) => {
                    match self.resolve((s.operand.id, e.id), root, &s.field) {
                        Some(slot) if s.test => node(Kind::Has(slot), at),
                        Some(slot) => node(Kind::Input(slot), at),
                        None => node(Kind::Literal(pb::Literal { value: None }), at),
                    }
                }
                _ => self.problem(
                    e.id,
                    "fields are selected only on request and on source views",
                ),
            },
            Expr::Call(call) => self.call(e.id, call, at),
            Expr::Comprehension(c) => self.comprehension(e.id, c, at),
            Expr::List(l) => {
                let elements = l.elements.iter().map(|x| self.expr(x)).collect();
                node(Kind::List(pb::ListLiteral { elements }), at)
            }
            Expr::Map(_) | Expr::Struct(_) => {
                self.problem(e.id, "maps and messages are not supported")
            }
            Expr::Unspecified => self.problem(e.id, "unsupported expression"),
        }
    }

    fn literal(&mut self, id: u64, l: &LiteralValue, at: u32) -> pb::Expr {
        let value = match l {
            LiteralValue::Int(i) => Lit::Int(*i.inner()),
            LiteralValue::UInt(u) => match i64::try_from(*u.inner()) {
                Ok(i) => Lit::Int(i),
                Err(_) => return self.problem(id, format!("{}u does not fit an int", u.inner())),
            },
            LiteralValue::Double(d) => Lit::Double(*d.inner()),
            LiteralValue::Boolean(b) => Lit::Bool(*b.inner()),
            LiteralValue::String(s) => Lit::String(s.inner().to_owned()),
            LiteralValue::Bytes(b) => Lit::Bytes(b.inner().to_vec()),
            LiteralValue::Null => {
                return self.problem(id, "null is not a value here: test presence with has(x.f)")
            }
        };
        node(Kind::Literal(pb::Literal { value: Some(value) }), at)
    }

    fn ident(&mut self, id: u64, name: &str, at: u32) -> pb::Expr {
        if let Some(pos) = self.vars.iter().rposition(|v| v == name) {
            return node(Kind::IterVar((self.vars.len() - 1 - pos) as u32), at);
        }
        let sources = self.source_names();
        let msg = if name == "request" {
            "'request' is not a value: name one of its fields (request.<field>, request.time)"
                .to_owned()
        } else if self.scope.sources.iter().any(|(s, _)| *s == name) {
            format!("'{name}' is a view, not a value: name one of its features ({name}.<feature>)")
        } else {
            format!("unknown name '{name}' (names are request.<field>, request.time and <source>.<feature>; sources: {sources})")
        };
        self.problem(id, msg)
    }

    fn source_names(&self) -> String {
        let names: Vec<&str> = self.scope.sources.iter().map(|(s, _)| *s).collect();
        if names.is_empty() {
            "none".to_owned()
        } else {
            names.join(", ")
        }
    }

    /// The slot `root.field` names, or a problem at the root (`ids.0`) or at the field (just
    /// after the select's dot, `ids.1`).
    fn resolve(&mut self, ids: (u64, u64), root: &str, field: &str) -> Option<u32> {
        let request_len = self.scope.request.len();
        if root == "request" {
            if field == "time" {
                return Some(request_len as u32);
            }
            if let Some(i) = self.scope.request.iter().position(|(n, _)| *n == field) {
                return Some(i as u32);
            }
            let declared: Vec<&str> = self.scope.request.iter().map(|(n, _)| *n).collect();
            let declared = if declared.is_empty() {
                "none".to_owned()
            } else {
                declared.join(", ")
            };
            self.field_problem(
                ids.1,
                format!("request has no field '{field}' (declared: {declared}; and time)"),
            );
            return None;
        }
        if let Some(si) = self.scope.sources.iter().position(|(s, _)| *s == root) {
            let Some(fi) = self.scope.sources[si]
                .1
                .iter()
                .position(|(f, _)| *f == field)
            else {
                self.field_problem(ids.1, format!("view '{root}' has no feature '{field}'"));
                return None;
            };
            let i = match self.stored.iter().position(|r| *r == (si, fi)) {
                Some(i) => i,
                None => {
                    self.stored.push((si, fi));
                    self.stored.len() - 1
                }
            };
            return Some((request_len + 1 + i) as u32);
        }
        let msg = if self.scope.views.contains(&root) {
            format!(
                "'{root}' is not a source of this on-demand view (sources: {})",
                self.source_names()
            )
        } else {
            format!("unknown name '{root}' (names are request.<field>, request.time and <source>.<feature>)")
        };
        self.problem(ids.0, msg);
        None
    }

    /// A problem with the field a select names: just after its dot.
    fn field_problem(&mut self, select_id: u64, message: String) {
        let at = self.offset(select_id) as usize + 1;
        self.problems.push(problem_at(self.text, at, message));
    }

    fn call(&mut self, id: u64, call: &CallExpr, at: u32) -> pb::Expr {
        let name = call.func_name.as_str();
        let function = match operator(name) {
            Some(f) => f,
            None => match self.named(id, name, call.target.is_some()) {
                Some(f) => f,
                None => return node(Kind::Literal(pb::Literal { value: None }), at),
            },
        };
        let args = call
            .target
            .iter()
            .map(|t| &**t)
            .chain(&call.args)
            .map(|a| self.expr(a))
            .collect();
        node(
            Kind::Call(pb::Call {
                function: function as i32,
                args,
            }),
            at,
        )
    }

    /// A function called by name, if allowed and written the way the table says.
    fn named(&mut self, id: u64, name: &str, member: bool) -> Option<F> {
        if name == op::IN {
            self.problem(
                id,
                "'in' is not supported: compare with == and combine with ||",
            );
            return None;
        }
        if let Some(why) = functions::refused(name) {
            self.problem(id, why);
            return None;
        }
        let Some(def) = functions::by_name(name) else {
            let allowed = functions::callable_names();
            self.problem(
                id,
                format!("function '{name}' is not allowed (allowed: {allowed})"),
            );
            return None;
        };
        let form = match (def.style, member) {
            (Style::Global, true) => Some(format!("{name}(x), not x.{name}()")),
            (Style::Member, false) => Some(format!("x.{name}(y), not {name}(x, y)")),
            _ => None,
        };
        if let Some(form) = form {
            self.problem(id, format!("write {form}"));
            return None;
        }
        Some(def.id)
    }

    fn comprehension(&mut self, id: u64, c: &ComprehensionExpr, at: u32) -> pb::Expr {
        let Some((kind, predicate, body)) = macro_shape(c) else {
            let msg = if matches!(c.accu_init.expr, Expr::Literal(LiteralValue::Int(_))) {
                functions::refused("exists_one").unwrap_or("exists_one() is not allowed")
            } else {
                "only the macros all, exists, map and filter are supported"
            };
            return self.problem(id, msg);
        };
        let range = self.expr(&c.iter_range);
        self.vars.push(c.iter_var.clone());
        let predicate = predicate.map(|p| Box::new(self.expr(p)));
        let body = self.expr(body);
        self.vars.pop();
        node(
            Kind::Comprehension(Box::new(pb::Comprehension {
                kind: kind as i32,
                range: Some(Box::new(range)),
                predicate,
                body: Some(Box::new(body)),
            })),
            at,
        )
    }
}

fn node(kind: Kind, offset: u32) -> pb::Expr {
    pb::Expr {
        kind: Some(kind),
        offset,
    }
}

fn operator(name: &str) -> Option<F> {
    Some(match name {
        op::ADD => F::Add,
        op::SUBSTRACT => F::Sub,
        op::MULTIPLY => F::Mul,
        op::DIVIDE => F::Div,
        op::MODULO => F::Mod,
        op::NEGATE => F::Neg,
        op::EQUALS => F::Eq,
        op::NOT_EQUALS => F::Ne,
        op::LESS => F::Lt,
        op::LESS_EQUALS => F::Le,
        op::GREATER => F::Gt,
        op::GREATER_EQUALS => F::Ge,
        op::LOGICAL_AND => F::And,
        op::LOGICAL_OR => F::Or,
        op::LOGICAL_NOT => F::Not,
        op::CONDITIONAL => F::Conditional,
        op::INDEX => F::Index,
        _ => return None,
    })
}

fn is_accu(e: &IdedExpr) -> bool {
    matches!(&e.expr, Expr::Ident(n) if n == ACCU)
}

/// `call(args)` if `e` is a call of `name` with two arguments, the first the accumulator.
fn accu_call<'e>(e: &'e IdedExpr, name: &str) -> Option<&'e IdedExpr> {
    match &e.expr {
        Expr::Call(c)
            if c.func_name == name
                && c.target.is_none()
                && c.args.len() == 2
                && is_accu(&c.args[0]) =>
        {
            Some(&c.args[1])
        }
        _ => None,
    }
}

type Shape<'e> = (pb::ComprehensionKind, Option<&'e IdedExpr>, &'e IdedExpr);

/// Which standard macro a comprehension is the expansion of, with its predicate and body.
fn macro_shape(c: &ComprehensionExpr) -> Option<Shape<'_>> {
    use pb::ComprehensionKind as K;
    if c.accu_var != ACCU || c.iter_var2.is_some() {
        return None;
    }
    match &c.accu_init.expr {
        Expr::Literal(LiteralValue::Boolean(b)) if *b.inner() => {
            accu_call(&c.loop_step, op::LOGICAL_AND).map(|body| (K::All, None, body))
        }
        Expr::Literal(LiteralValue::Boolean(_)) => {
            accu_call(&c.loop_step, op::LOGICAL_OR).map(|body| (K::Exists, None, body))
        }
        Expr::List(l) if l.elements.is_empty() => {
            let single = |e| match accu_call(e, op::ADD).map(|x| &x.expr) {
                Some(Expr::List(l)) if l.elements.len() == 1 => l.elements.first(),
                _ => None,
            };
            if let Some(f) = single(&c.loop_step) {
                return Some((K::Map, None, f));
            }
            match &c.loop_step.expr {
                Expr::Call(k)
                    if k.func_name == op::CONDITIONAL
                        && k.args.len() == 3
                        && is_accu(&k.args[2]) =>
                {
                    single(&k.args[1]).map(|f| (K::Map, Some(&k.args[0]), f))
                }
                _ => None,
            }
        }
        _ => None,
    }
}
