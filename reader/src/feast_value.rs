//! Feast's stored values as Ferry's: a `feast.types.Value` (a hash field, or an entry of a
//! precomputed vector), a `Timestamp`, and what one entity's read gives. Shared by the
//! per-field read (`feast`) and the precomputed one (`feast_precomputed`).

use ferry_protos::feast_proto::{self, value::Val};
use ferry_protos::v1::{self, value::Kind};
use prost::Message;

use crate::error::ReaderError;

/// One entity's answer: the bytes of its `StoredVector` (empty: not found), and whether a
/// vector Feast holds was refused for its schema (counted, and served as not found).
#[derive(Debug, Default, PartialEq)]
pub struct Read {
    pub vector: Vec<u8>,
    pub refused: bool,
}

impl Read {
    pub fn found(vector: Vec<u8>) -> Read {
        Read {
            vector,
            refused: false,
        }
    }
}

/// A Feast timestamp in microseconds since the epoch.
pub fn micros(t: &feast_proto::Timestamp) -> i64 {
    t.seconds
        .saturating_mul(1_000_000)
        .saturating_add(i64::from(t.nanos) / 1_000)
}

/// A stored `feast.types.Value` as Ferry's `Value`. Feast writes a null as a `Value` with no
/// kind (zero bytes) or `null_val`; a kind Ferry does not read is an error, never a null.
pub fn value(bytes: &[u8]) -> Result<v1::Value, ReaderError> {
    let v = feast_proto::Value::decode(bytes)
        .map_err(|e| ReaderError::Internal(format!("a Feast field is not a Value: {e}")))?;
    let kind = match v.val {
        None if bytes.is_empty() => None,
        None => {
            return Err(ReaderError::Internal(
                "a Feast value has a kind Ferry does not read (lists other than float, \
                 timestamps, maps, sets, ...)"
                    .into(),
            ))
        }
        Some(Val::NullVal(_)) => None,
        Some(Val::BytesVal(b)) => Some(Kind::BytesVal(b)),
        Some(Val::StringVal(s)) => Some(Kind::StringVal(s)),
        Some(Val::Int32Val(x)) => Some(Kind::Int32Val(x)),
        Some(Val::Int64Val(x)) => Some(Kind::Int64Val(x)),
        Some(Val::DoubleVal(x)) => Some(Kind::DoubleVal(x)),
        Some(Val::FloatVal(x)) => Some(Kind::FloatVal(x)),
        Some(Val::BoolVal(x)) => Some(Kind::BoolVal(x)),
        Some(Val::FloatListVal(l)) => Some(Kind::FloatListVal(v1::FloatList { values: l.val })),
    };
    Ok(v1::Value { kind })
}
