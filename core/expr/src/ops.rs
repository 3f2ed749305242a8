//! What each typed operation computes. Doubles never leave an operation non-finite, ints never
//! wrap: either is `Invalid` instead.

use std::borrow::Cow;
use std::cmp::Ordering;

use crate::cost::MAX_STRING_BYTES;
use crate::functions::Op;
use crate::types::{Invalid, List, Val};

type R<'a> = Result<Val<'a>, Invalid>;

fn finite<'a>(d: f64) -> R<'a> {
    if d.is_finite() {
        Ok(Val::Double(d))
    } else {
        Err(Invalid::NonFinite)
    }
}

fn int<'a>(i: Option<i64>) -> R<'a> {
    i.map(Val::Int).ok_or(Invalid::Overflow)
}

pub(super) fn unary(op: Op, a: Val<'_>) -> R<'_> {
    match (op, a) {
        (Op::NegInt, Val::Int(i)) => int(i.checked_neg()),
        (Op::NegDouble, Val::Double(d)) => finite(-d),
        (Op::Not, Val::Bool(b)) => Ok(Val::Bool(!b)),
        (Op::SizeStr, Val::Str(s)) => Ok(Val::Int(s.chars().count() as i64)),
        (Op::SizeBytes, Val::Bytes(b)) => Ok(Val::Int(b.len() as i64)),
        (Op::SizeList, Val::List(l)) => Ok(Val::Int(l.len() as i64)),
        (Op::IntOfInt, v @ Val::Int(_)) => Ok(v),
        (Op::IntOfDouble, Val::Double(d)) => int_of_double(d),
        (Op::IntOfString, Val::Str(s)) => s.parse().map(Val::Int).map_err(|_| Invalid::Conversion),
        (Op::DoubleOfInt, Val::Int(i)) => Ok(Val::Double(i as f64)),
        (Op::DoubleOfDouble, v @ Val::Double(_)) => Ok(v),
        (Op::DoubleOfString, Val::Str(s)) => match s.parse::<f64>() {
            Ok(d) if d.is_finite() => Ok(Val::Double(d)),
            _ => Err(Invalid::Conversion),
        },
        (Op::StringOfInt, Val::Int(i)) => Ok(owned(i.to_string())),
        (Op::StringOfDouble, Val::Double(d)) => Ok(owned(d.to_string())),
        (Op::StringOfBool, Val::Bool(b)) => Ok(owned(b.to_string())),
        (Op::StringOfString, v @ Val::Str(_)) => Ok(v),
        (Op::StringOfBytes, Val::Bytes(b)) => match b {
            Cow::Borrowed(b) => std::str::from_utf8(b)
                .map(|s| Val::Str(Cow::Borrowed(s)))
                .map_err(|_| Invalid::Conversion),
            Cow::Owned(b) => String::from_utf8(b)
                .map(owned)
                .map_err(|_| Invalid::Conversion),
        },
        (Op::AbsInt, Val::Int(i)) => int(i.checked_abs()),
        (Op::AbsDouble, Val::Double(d)) => Ok(Val::Double(d.abs())),
        (Op::Sqrt, Val::Double(d)) => finite(d.sqrt()),
        (Op::Log, Val::Double(d)) => finite(d.ln()),
        (Op::Exp, Val::Double(d)) => finite(d.exp()),
        (Op::Sum, Val::List(l)) => finite(l.iter().sum()),
        (Op::Norm, Val::List(l)) => finite(norm(&l)),
        _ => Err(Invalid::Conversion),
    }
}

pub(super) fn binary<'a>(op: Op, a: Val<'a>, b: Val<'a>) -> R<'a> {
    match (op, a, b) {
        (Op::AddInt, Val::Int(x), Val::Int(y)) => int(x.checked_add(y)),
        (Op::SubInt, Val::Int(x), Val::Int(y)) => int(x.checked_sub(y)),
        (Op::MulInt, Val::Int(x), Val::Int(y)) => int(x.checked_mul(y)),
        (Op::DivInt | Op::ModInt, Val::Int(_), Val::Int(0)) => Err(Invalid::DivisionByZero),
        (Op::DivInt, Val::Int(x), Val::Int(y)) => int(x.checked_div(y)),
        (Op::ModInt, Val::Int(x), Val::Int(y)) => int(x.checked_rem(y)),
        (Op::MinInt, Val::Int(x), Val::Int(y)) => Ok(Val::Int(x.min(y))),
        (Op::MaxInt, Val::Int(x), Val::Int(y)) => Ok(Val::Int(x.max(y))),
        (Op::AddDouble, Val::Double(x), Val::Double(y)) => finite(x + y),
        (Op::SubDouble, Val::Double(x), Val::Double(y)) => finite(x - y),
        (Op::MulDouble, Val::Double(x), Val::Double(y)) => finite(x * y),
        (Op::DivDouble, Val::Double(x), Val::Double(y)) => finite(x / y),
        (Op::MinDouble, Val::Double(x), Val::Double(y)) => Ok(Val::Double(x.min(y))),
        (Op::MaxDouble, Val::Double(x), Val::Double(y)) => Ok(Val::Double(x.max(y))),
        (Op::AddStr, Val::Str(x), Val::Str(y)) => {
            if x.len() + y.len() > MAX_STRING_BYTES {
                return Err(Invalid::TooLong);
            }
            Ok(owned(x.into_owned() + &y))
        }
        (Op::StartsWith, Val::Str(x), Val::Str(y)) => Ok(Val::Bool(x.starts_with(&*y))),
        (Op::EndsWith, Val::Str(x), Val::Str(y)) => Ok(Val::Bool(x.ends_with(&*y))),
        (Op::Contains, Val::Str(x), Val::Str(y)) => Ok(Val::Bool(x.contains(&*y))),
        (Op::Index, Val::List(l), Val::Int(i)) => {
            let x = usize::try_from(i).ok().and_then(|i| l.get(i));
            finite(x.ok_or(Invalid::IndexOutOfRange)?)
        }
        (Op::Dot, Val::List(x), Val::List(y)) => finite(dot(&x, &y)?),
        (Op::Cosine, Val::List(x), Val::List(y)) => {
            let d = dot(&x, &y)?;
            finite(d / (norm(&x) * norm(&y)))
        }
        (op, a, b) => {
            let ord = compare(&a, &b).ok_or(Invalid::Conversion)?;
            Ok(Val::Bool(match op {
                Op::Eq => ord == Ordering::Equal,
                Op::Ne => ord != Ordering::Equal,
                Op::Lt => ord == Ordering::Less,
                Op::Le => ord != Ordering::Greater,
                Op::Gt => ord == Ordering::Greater,
                Op::Ge => ord != Ordering::Less,
                _ => return Err(Invalid::Conversion),
            }))
        }
    }
}

fn owned<'a>(s: String) -> Val<'a> {
    Val::Str(Cow::Owned(s))
}

/// CEL's int(double): truncated toward zero; a double outside int64 is an error.
fn int_of_double<'a>(d: f64) -> R<'a> {
    // 2^63 is exact as a double; every double below it and at or above -2^63 fits.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if (-LIMIT..LIMIT).contains(&d) {
        Ok(Val::Int(d.trunc() as i64))
    } else {
        Err(Invalid::Conversion)
    }
}

fn dot(x: &List<'_>, y: &List<'_>) -> Result<f64, Invalid> {
    if x.len() != y.len() {
        return Err(Invalid::LengthMismatch);
    }
    Ok(match (x, y) {
        (List::F32(a), List::F32(b)) => a
            .iter()
            .zip(b.iter())
            .map(|(&p, &q)| f64::from(p) * f64::from(q))
            .sum(),
        _ => x.iter().zip(y.iter()).map(|(p, q)| p * q).sum(),
    })
}

fn norm(l: &List<'_>) -> f64 {
    l.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// Orders two values of one type (the checker saw to it); doubles are finite here.
fn compare(a: &Val<'_>, b: &Val<'_>) -> Option<Ordering> {
    match (a, b) {
        (Val::Int(x), Val::Int(y)) => Some(x.cmp(y)),
        (Val::Double(x), Val::Double(y)) => x.partial_cmp(y),
        (Val::Bool(x), Val::Bool(y)) => Some(x.cmp(y)),
        (Val::Str(x), Val::Str(y)) => Some(x.cmp(y)),
        (Val::Bytes(x), Val::Bytes(y)) => Some(x.cmp(y)),
        _ => None,
    }
}
