//! Feast's stored values as Ferry's: a `feast.types.Value` (a hash field, or an entry of a
//! precomputed vector), a `Timestamp`, and what one entity's read gives. Shared by the
//! per-field read (`mod.rs`) and the precomputed one (`precomputed.rs`).

use ferry_protos::feast_proto::{self, value::Val};
use ferry_protos::v1::{self, value::Kind};
use prost::encoding::encoded_len_varint;
use prost::Message;

use super::wire::{fields, put_key, put_varint, WireType};
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
        None => return Err(unread_kind()),
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

/// Appends a stored `feast.types.Value` to `out` as one entry of `ViewValues.values` (field 2)
/// holding the same bytes prost would write for [`value`]'s answer, the scalar's own bytes
/// copied: Feast's kinds and Ferry's differ only in their field numbers. Read as prost reads
/// it (the last field of the oneof wins; fields it does not know are skipped).
pub fn transcode(bytes: &[u8], out: &mut Vec<u8>) -> Result<(), ReaderError> {
    let not_a_value =
        |e: String| ReaderError::Internal(format!("a Feast field is not a Value: {e}"));
    let mut last: Option<(u32, WireType, &[u8])> = None;
    for field in fields(bytes) {
        let (tag, wire_type, payload) = field.map_err(not_a_value)?;
        // Feast's field → Ferry's, and the wire type both have.
        let ours = match tag {
            1 => (7, WireType::LengthDelimited),  // bytes
            2 => (6, WireType::LengthDelimited),  // string
            3 => (1, WireType::Varint),           // int32
            4 => (2, WireType::Varint),           // int64
            5 => (4, WireType::SixtyFourBit),     // double
            6 => (3, WireType::ThirtyTwoBit),     // float
            7 => (5, WireType::Varint),           // bool
            16 => (8, WireType::LengthDelimited), // float list
            19 => (0, WireType::Varint),          // null
            _ => continue,
        };
        if wire_type != ours.1 {
            return Err(not_a_value(format!(
                "field {tag} has wire type {wire_type:?}"
            )));
        }
        last = Some((ours.0, wire_type, payload));
    }
    let inner = match last {
        None if bytes.is_empty() => None,
        None => return Err(unread_kind()),
        Some((0, ..)) => None,
        Some((ours, wire_type, payload)) => {
            if ours == 6 {
                std::str::from_utf8(payload).map_err(|e| not_a_value(e.to_string()))?;
            }
            if ours == 8 {
                feast_proto::FloatList::decode(payload).map_err(|e| not_a_value(e.to_string()))?;
            }
            Some((ours, wire_type, payload))
        }
    };
    put_key(2, WireType::LengthDelimited, out);
    let Some((ours, wire_type, payload)) = inner else {
        out.push(0); // null: a Value with no kind
        return Ok(());
    };
    let delimited = wire_type == WireType::LengthDelimited;
    let len_prefix = if delimited {
        encoded_len_varint(payload.len() as u64)
    } else {
        0
    };
    put_varint((1 + len_prefix + payload.len()) as u64, out);
    put_key(ours, wire_type, out);
    if delimited {
        put_varint(payload.len() as u64, out);
    }
    out.extend_from_slice(payload);
    Ok(())
}

fn unread_kind() -> ReaderError {
    ReaderError::Internal(
        "a Feast value has a kind Ferry does not read (lists other than float, timestamps, \
         maps, sets, ...)"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::feast_proto::value::Val;

    fn feast(val: Option<Val>) -> Vec<u8> {
        feast_proto::Value { val }.encode_to_vec()
    }

    #[test]
    fn a_transcoded_value_is_what_prost_writes_for_the_decoded_one() {
        let mut inputs = vec![
            Vec::new(),
            feast(Some(Val::BytesVal(vec![0, 1, 255]))),
            feast(Some(Val::StringVal("héllo".into()))),
            feast(Some(Val::StringVal(String::new()))),
            feast(Some(Val::Int32Val(-7))),
            feast(Some(Val::Int64Val(i64::MIN))),
            feast(Some(Val::Int64Val(0))),
            feast(Some(Val::DoubleVal(-2.5))),
            feast(Some(Val::FloatVal(1.25))),
            feast(Some(Val::BoolVal(true))),
            feast(Some(Val::BoolVal(false))),
            feast(Some(Val::NullVal(0))),
            feast(Some(Val::FloatListVal(feast_proto::FloatList {
                val: vec![1.0, -3.5],
            }))),
            feast(Some(Val::FloatListVal(feast_proto::FloatList {
                val: vec![],
            }))),
        ];
        // Two kinds, the last one wins; a field no kind has (99) is skipped.
        let mut two = feast(Some(Val::Int64Val(3)));
        two.extend(feast(Some(Val::StringVal("last".into()))));
        inputs.push(two);
        let mut unknown = feast(Some(Val::FloatVal(2.0)));
        prost::encoding::string::encode(99, &"x".to_string(), &mut unknown);
        inputs.push(unknown);
        for bytes in inputs {
            let mut ours = Vec::new();
            transcode(&bytes, &mut ours).unwrap();
            let prost = v1::ViewValues {
                event_time_us: 0,
                values: vec![value(&bytes).unwrap()],
            }
            .encode_to_vec();
            assert_eq!(ours, prost, "{bytes:?}");
        }
    }

    #[test]
    fn what_value_refuses_transcode_refuses() {
        let string_list = vec![0x62, 0x03, 0x0a, 0x01, b'x'];
        let bad_utf8 = vec![0x12, 0x01, 0xff];
        let field_zero = vec![0x20, 0x01, 0x02]; // an int64, then a key of field number 0
        let as_len = vec![0x22, 0x01, 0x05]; // int64 (4) length-delimited
        for bytes in [string_list, bad_utf8, field_zero, as_len] {
            assert!(value(&bytes).is_err(), "value {bytes:?}");
            let e = transcode(&bytes, &mut Vec::new()).unwrap_err();
            assert_eq!(e.code(), "internal", "{bytes:?}");
        }
    }
}
