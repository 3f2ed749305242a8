//! The values an expression computes with, the inputs a caller binds per instance, and what an
//! evaluation gives back.

use std::borrow::Cow;

use ferry_protos::v1::{value::Kind, ValueType};
use ferry_protos::FeatureValue;

/// CEL's types as on-demand views use them. `null` is no type: a missing input is tested with
/// `has()`, never compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    Int,
    Double,
    Bool,
    String,
    Bytes,
    /// `list(double)`: a float32_list feature or request field, a list literal, `map`/`filter`.
    List,
}

impl Type {
    /// CEL's spelling, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Type::Int => "int",
            Type::Double => "double",
            Type::Bool => "bool",
            Type::String => "string",
            Type::Bytes => "bytes",
            Type::List => "list(double)",
        }
    }

    /// The expression type of a feature or request field of this registry type: int32/int64
    /// are `int`, float32/float64 `double`, float32_list `list(double)`.
    pub fn of_value_type(t: ValueType) -> Option<Type> {
        Some(match t {
            ValueType::Int32 | ValueType::Int64 => Type::Int,
            ValueType::Float32 | ValueType::Float64 => Type::Double,
            ValueType::Bool => Type::Bool,
            ValueType::String => Type::String,
            ValueType::Bytes => Type::Bytes,
            ValueType::Float32List => Type::List,
            ValueType::Unspecified => return None,
        })
    }
}

/// A list of doubles: borrowed from a stored float32_list or a request's, or computed.
#[derive(Debug, Clone, PartialEq)]
pub enum List<'a> {
    F32(&'a [f32]),
    F64(Cow<'a, [f64]>),
}

impl List<'_> {
    pub fn len(&self) -> usize {
        match self {
            List::F32(l) => l.len(),
            List::F64(l) => l.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> Option<f64> {
        match self {
            List::F32(l) => l.get(i).map(|&x| f64::from(x)),
            List::F64(l) => l.get(i).copied(),
        }
    }

    /// Every element as a double, in order (no allocation).
    pub fn iter(&self) -> impl Iterator<Item = f64> + '_ {
        let (a, b) = match self {
            List::F32(l) => (Some(l.iter().map(|&x| f64::from(x))), None),
            List::F64(l) => (None, Some(l.iter().copied())),
        };
        a.into_iter().flatten().chain(b.into_iter().flatten())
    }
}

/// A value during evaluation; borrowed from the inputs or the program wherever it can be.
#[derive(Debug, Clone, PartialEq)]
pub enum Val<'a> {
    Int(i64),
    Double(f64),
    Bool(bool),
    Str(Cow<'a, str>),
    Bytes(Cow<'a, [u8]>),
    List(List<'a>),
}

impl Val<'_> {
    pub fn type_of(&self) -> Type {
        match self {
            Val::Int(_) => Type::Int,
            Val::Double(_) => Type::Double,
            Val::Bool(_) => Type::Bool,
            Val::Str(_) => Type::String,
            Val::Bytes(_) => Type::Bytes,
            Val::List(_) => Type::List,
        }
    }

    /// The value as a stored feature of type `t` would hold it (the expression's declared
    /// result type; the checker made sure they agree). None: an int32 result out of range.
    pub fn to_kind(&self, t: ValueType) -> Option<Kind> {
        use ferry_protos::v1::FloatList;
        Some(match (self, t) {
            (Val::Int(i), ValueType::Int32) => Kind::Int32Val(i32::try_from(*i).ok()?),
            (Val::Int(i), _) => Kind::Int64Val(*i),
            (Val::Double(d), ValueType::Float32) => Kind::FloatVal(*d as f32),
            (Val::Double(d), _) => Kind::DoubleVal(*d),
            (Val::Bool(b), _) => Kind::BoolVal(*b),
            (Val::Str(s), _) => Kind::StringVal(s.to_string()),
            (Val::Bytes(b), _) => Kind::BytesVal(b.to_vec()),
            (Val::List(l), _) => Kind::FloatListVal(FloatList {
                values: l.iter().map(|x| x as f32).collect(),
            }),
        })
    }
}

/// Why an input is absent, in Feast's words (the caller maps its statuses to these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Absence {
    /// `NOT_FOUND`: no row, no field in the instance.
    NotFound,
    /// `OUTSIDE_MAX_AGE`: stale.
    OutsideMaxAge,
    /// `NULL_VALUE`: null (or a non-finite float).
    NullValue,
}

impl Absence {
    pub fn as_str(self) -> &'static str {
        match self {
            Absence::NotFound => "NOT_FOUND",
            Absence::OutsideMaxAge => "OUTSIDE_MAX_AGE",
            Absence::NullValue => "NULL_VALUE",
        }
    }
}

/// One input slot of one instance: a request field, `request.time`, or a stored feature.
#[derive(Debug, Clone, PartialEq)]
pub enum Input<'a> {
    Present(Val<'a>),
    Absent(Absence),
}

impl<'a> Input<'a> {
    /// A stored feature whose status is PRESENT, as the vector decoder gave it, borrowed. A
    /// non-finite float has no value a model could receive (its JSON form is null): it is
    /// `NULL_VALUE`, as is a null.
    pub fn stored(value: &'a FeatureValue) -> Input<'a> {
        let v = match value {
            None => return Input::Absent(Absence::NullValue),
            Some(Kind::Int32Val(i)) => Val::Int(i64::from(*i)),
            Some(Kind::Int64Val(i)) => Val::Int(*i),
            Some(Kind::FloatVal(f)) => Val::Double(f64::from(*f)),
            Some(Kind::DoubleVal(d)) => Val::Double(*d),
            Some(Kind::BoolVal(b)) => Val::Bool(*b),
            Some(Kind::StringVal(s)) => Val::Str(Cow::Borrowed(s)),
            Some(Kind::BytesVal(b)) => Val::Bytes(Cow::Borrowed(b)),
            Some(Kind::FloatListVal(l)) => Val::List(List::F32(&l.values)),
        };
        match v {
            Val::Double(d) if !d.is_finite() => Input::Absent(Absence::NullValue),
            v => Input::Present(v),
        }
    }
}

/// Why an evaluation gave no value: the feature is null with status `INVALID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// A double operation gave NaN or an infinity (`x / 0.0`, `log(0.0)`, `sqrt(-1.0)`).
    NonFinite,
    /// An int operation overflowed 64 bits, or an int32 result does not fit 32.
    Overflow,
    /// Int division or modulo by zero.
    DivisionByZero,
    /// A list index outside the list.
    IndexOutOfRange,
    /// `dot`/`cosine` of lists of different lengths.
    LengthMismatch,
    /// `int()`/`double()` of a string that is no number, `int()` of a double out of range,
    /// `string()` of bytes that are not UTF-8.
    Conversion,
    /// A list or string over the bound the static cost assumes (see `cost`).
    TooLong,
    /// The request's evaluation budget is spent.
    Budget,
}

impl Invalid {
    pub fn as_str(self) -> &'static str {
        match self {
            Invalid::NonFinite => "non_finite",
            Invalid::Overflow => "overflow",
            Invalid::DivisionByZero => "division_by_zero",
            Invalid::IndexOutOfRange => "index_out_of_range",
            Invalid::LengthMismatch => "length_mismatch",
            Invalid::Conversion => "conversion",
            Invalid::TooLong => "too_long",
            Invalid::Budget => "budget",
        }
    }
}

/// What one feature's evaluation for one instance gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<'a> {
    Value(Val<'a>),
    /// An input the expression needed is absent: the feature is null with that input's
    /// status. `slot` is the input's index in the view's layout.
    Absent {
        slot: usize,
        status: Absence,
    },
    Invalid(Invalid),
}

/// The evaluation budget of one request, in cost units (see `cost`). Once spent, every
/// further evaluation of the request is `Invalid(Budget)`.
#[derive(Debug, Clone)]
pub struct Budget {
    left: u64,
}

impl Budget {
    pub fn new(units: u64) -> Budget {
        Budget { left: units }
    }

    pub fn left(&self) -> u64 {
        self.left
    }

    /// Takes `units`, or empties the budget and says so.
    pub(super) fn spend(&mut self, units: u64) -> Result<(), Invalid> {
        match self.left.checked_sub(units) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => {
                self.left = 0;
                Err(Invalid::Budget)
            }
        }
    }
}
