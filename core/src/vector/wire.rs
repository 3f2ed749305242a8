//! The stored vector's protobuf encoding (`ferry.v1.StoredVector`) read in place: `decode`
//! walks the bytes and takes each value straight from them, instead of decoding prost's message
//! types first (a `Vec` per view, a `Value` per feature, then moved again into the entity's
//! features). The rules are prost's, with prost's own wire-format primitives: unknown fields
//! are skipped, a known field of the wrong wire type is an error, a scalar or oneof member
//! given twice keeps the last, a float list given twice is merged, floats of a list may come
//! packed or not, strings must be UTF-8.
//!
//! Reading is lazy per level: the vector's own fields first (fingerprint, one span per view),
//! then each view when `decode` reaches it. A vector that is malformed inside a view and also
//! has the wrong fingerprint is therefore reported as a fingerprint mismatch, where a full
//! prost decode reports it undecodable (both refuse the vector).

use std::borrow::Cow;

use prost::bytes::Buf;
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};

use crate::values::ValueRef;

/// What is wrong with the encoding.
pub type WireError = String;

/// The vector's own fields: its fingerprint and each view's encoded `ViewValues`.
pub struct Stored<'a> {
    pub fingerprint: u64,
    pub views: Vec<&'a [u8]>,
}

/// One view's row: its event time and its values, counted (each is read by `values`).
pub struct View<'a> {
    pub event_time_us: i64,
    pub count: usize,
    body: &'a [u8],
}

pub fn stored(mut buf: &[u8]) -> Result<Stored<'_>, WireError> {
    let mut out = Stored {
        fingerprint: 0,
        views: Vec::with_capacity(4),
    };
    while buf.has_remaining() {
        match key(&mut buf)? {
            (1, WireType::SixtyFourBit) => out.fingerprint = fixed(&mut buf, |b| b.get_u64_le())?,
            (2, WireType::LengthDelimited) => out.views.push(delimited(&mut buf)?),
            other => unknown(&mut buf, other, 2)?,
        }
    }
    Ok(out)
}

pub fn view(body: &[u8]) -> Result<View<'_>, WireError> {
    let mut out = View {
        event_time_us: 0,
        count: 0,
        body,
    };
    let mut buf = body;
    while buf.has_remaining() {
        match key(&mut buf)? {
            (1, WireType::Varint) => out.event_time_us = varint(&mut buf)? as i64,
            (2, WireType::LengthDelimited) => {
                delimited(&mut buf)?;
                out.count += 1;
            }
            other => unknown(&mut buf, other, 2)?,
        }
    }
    Ok(out)
}

impl<'a> View<'a> {
    /// Each value's encoded `Value`, in order (the view was read whole by `view`).
    pub fn values(&self) -> impl Iterator<Item = Result<&'a [u8], WireError>> {
        let mut buf = self.body;
        std::iter::from_fn(move || {
            while buf.has_remaining() {
                let field = key(&mut buf);
                match field {
                    Ok((2, WireType::LengthDelimited)) => return Some(delimited(&mut buf)),
                    Ok(other) => {
                        if let Err(e) = unknown(&mut buf, other, 0) {
                            return Some(Err(e));
                        }
                    }
                    Err(e) => return Some(Err(e)),
                }
            }
            None
        })
    }
}

/// One `Value`: its kind borrowed from `buf` (a string or bytes are not copied), `None` when
/// none is set (null).
pub fn value(mut buf: &[u8]) -> Result<Option<ValueRef<'_>>, WireError> {
    let mut kind = None;
    while buf.has_remaining() {
        kind = Some(match key(&mut buf)? {
            (1, WireType::Varint) => ValueRef::Int32(varint(&mut buf)? as i32),
            (2, WireType::Varint) => ValueRef::Int64(varint(&mut buf)? as i64),
            (3, WireType::ThirtyTwoBit) => ValueRef::Float(fixed(&mut buf, |b| b.get_f32_le())?),
            (4, WireType::SixtyFourBit) => ValueRef::Double(fixed(&mut buf, |b| b.get_f64_le())?),
            (5, WireType::Varint) => ValueRef::Bool(varint(&mut buf)? != 0),
            (6, WireType::LengthDelimited) => ValueRef::Str(
                std::str::from_utf8(delimited(&mut buf)?)
                    .map_err(|e| format!("string value is not UTF-8: {e}"))?,
            ),
            (7, WireType::LengthDelimited) => ValueRef::Bytes(delimited(&mut buf)?),
            (8, WireType::LengthDelimited) => {
                let mut values = match kind.take() {
                    Some(ValueRef::FloatList(list)) => list.into_owned(),
                    _ => Vec::new(),
                };
                floats(delimited(&mut buf)?, &mut values)?;
                ValueRef::FloatList(Cow::Owned(values))
            }
            other => {
                unknown(&mut buf, other, 8)?;
                continue;
            }
        });
    }
    Ok(kind)
}

/// The floats of an encoded `FloatList`, appended to `out`.
fn floats(mut buf: &[u8], out: &mut Vec<f32>) -> Result<(), WireError> {
    while buf.has_remaining() {
        match key(&mut buf)? {
            (1, WireType::LengthDelimited) => {
                let mut packed = delimited(&mut buf)?;
                if packed.len() % 4 != 0 {
                    return Err("packed floats of a length not a multiple of 4".into());
                }
                out.reserve(packed.len() / 4);
                while packed.has_remaining() {
                    out.push(packed.get_f32_le());
                }
            }
            (1, WireType::ThirtyTwoBit) => out.push(fixed(&mut buf, |b| b.get_f32_le())?),
            other => unknown(&mut buf, other, 1)?,
        }
    }
    Ok(())
}

/// Every field of a stored vector has a tag below 16, so its key is one byte: read inline in a
/// few instructions, the rest (a longer key, or a byte prost refuses) in `key_slow`. The call
/// and frame of a general reader were a tenth of decoding a vector (callgrind, issue #34).
#[inline(always)]
fn key(buf: &mut &[u8]) -> Result<(u32, WireType), WireError> {
    if let Some((&b, rest)) = buf.split_first() {
        if b < 0x80 && b >> 3 != 0 {
            if let Ok(wire) = WireType::try_from(u64::from(b & 7)) {
                *buf = rest;
                return Ok((u32::from(b >> 3), wire));
            }
        }
    }
    key_slow(buf)
}

#[cold]
#[inline(never)]
fn key_slow(buf: &mut &[u8]) -> Result<(u32, WireType), WireError> {
    decode_key(buf).map_err(|e| e.to_string())
}

/// A one-byte varint (lengths and small values, most of them) read inline, as `key` does.
#[inline(always)]
fn varint(buf: &mut &[u8]) -> Result<u64, WireError> {
    if let Some((&b, rest)) = buf.split_first() {
        if b < 0x80 {
            *buf = rest;
            return Ok(u64::from(b));
        }
    }
    varint_slow(buf)
}

#[inline(never)]
fn varint_slow(buf: &mut &[u8]) -> Result<u64, WireError> {
    decode_varint(buf).map_err(|e| e.to_string())
}

/// A fixed-width field (`get` reads it), when the bytes are there.
fn fixed<T>(buf: &mut &[u8], get: impl FnOnce(&mut &[u8]) -> T) -> Result<T, WireError> {
    if buf.remaining() < std::mem::size_of::<T>() {
        return Err("buffer underflow".into());
    }
    Ok(get(buf))
}

/// A length-delimited field's bytes.
fn delimited<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], WireError> {
    let len = varint(buf)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|n| *n <= buf.len())
        .ok_or("buffer underflow")?;
    let (head, tail) = buf.split_at(len);
    *buf = tail;
    Ok(head)
}

/// Skips a field this reader does not know; one it knows (tag up to `known`) with another wire
/// type is an error.
fn unknown(buf: &mut &[u8], (tag, wire): (u32, WireType), known: u32) -> Result<(), WireError> {
    if tag <= known {
        return Err(format!("field {tag} has the wrong wire type {wire:?}"));
    }
    skip_field(wire, tag, buf, DecodeContext::default()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::v1::{value::Kind, FloatList, StoredVector, Value, ViewValues};
    use ferry_test_support::vector::vector;
    use prost::encoding::{encode_key, encode_varint};
    use prost::Message;

    /// The vector as this reader reads it, in prost's message types.
    fn read(bytes: &[u8]) -> Result<StoredVector, WireError> {
        let s = stored(bytes)?;
        let mut views = Vec::new();
        for body in s.views {
            let v = view(body)?;
            let values = v
                .values()
                .map(|b| {
                    b.and_then(value).map(|kind| Value {
                        kind: kind.map(|k| k.to_kind()),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            assert_eq!(values.len(), v.count);
            views.push(ViewValues {
                event_time_us: v.event_time_us,
                values,
            });
        }
        Ok(StoredVector {
            fingerprint: s.fingerprint,
            views,
        })
    }

    /// Reads `bytes` as prost does: the same message, or an error for both.
    fn same_as_prost(bytes: &[u8]) {
        let ours = read(bytes);
        let prost = StoredVector::decode(bytes);
        match (&ours, &prost) {
            // Compared encoded again: bit for bit, NaN included.
            (Ok(a), Ok(b)) => assert_eq!(a.encode_to_vec(), b.encode_to_vec(), "{bytes:?}"),
            (Err(_), Err(_)) => {}
            _ => panic!("{bytes:?}: this reader {ours:?}, prost {prost:?}"),
        }
    }

    fn field(out: &mut Vec<u8>, tag: u32, wire: WireType, payload: &[u8]) {
        encode_key(tag, wire, out);
        if wire == WireType::LengthDelimited {
            encode_varint(payload.len() as u64, out);
        }
        out.extend_from_slice(payload);
    }

    fn every_kind() -> Vec<u8> {
        let list = |v: Vec<f32>| Some(Kind::FloatListVal(FloatList { values: v }));
        vector(
            0x0123_4567_89ab_cdef,
            vec![
                (
                    -5,
                    vec![
                        Some(Kind::Int32Val(-7)),
                        Some(Kind::Int64Val(i64::MIN)),
                        Some(Kind::FloatVal(0.1)),
                        Some(Kind::DoubleVal(f64::NAN)),
                        Some(Kind::BoolVal(true)),
                        Some(Kind::StringVal("é\u{0}x".into())),
                        Some(Kind::BytesVal(vec![0, 255])),
                        list(vec![1.5, -0.0]),
                        list(vec![]),
                        None,
                    ],
                ),
                (0, vec![]),
                (
                    1_800_000_000_000_000,
                    vec![Some(Kind::StringVal(String::new()))],
                ),
            ],
        )
    }

    /// What prost's own encoder never writes but a reader must take: unknown fields of every
    /// wire type (a group too), fields repeated, a oneof set twice, floats unpacked, two float
    /// lists merged.
    fn unusual() -> Vec<u8> {
        let mut list = Vec::new();
        field(&mut list, 1, WireType::ThirtyTwoBit, &2.5f32.to_le_bytes());
        field(&mut list, 1, WireType::LengthDelimited, &[0, 0, 128, 63]);
        field(&mut list, 9, WireType::Varint, &[5]);
        let mut value = Vec::new();
        field(&mut value, 2, WireType::Varint, &[3]);
        field(&mut value, 6, WireType::LengthDelimited, b"then a string");
        field(&mut value, 8, WireType::LengthDelimited, &list);
        field(&mut value, 8, WireType::LengthDelimited, &list);
        field(&mut value, 12, WireType::SixtyFourBit, &[1; 8]);
        let mut group = Vec::new();
        field(&mut group, 10, WireType::StartGroup, &[]);
        field(&mut group, 1, WireType::Varint, &[1]);
        field(&mut group, 10, WireType::EndGroup, &[]);
        let mut view = Vec::new();
        field(&mut view, 1, WireType::Varint, &[1]);
        field(&mut view, 2, WireType::LengthDelimited, &value);
        view.extend_from_slice(&group);
        field(&mut view, 2, WireType::LengthDelimited, &[]);
        field(&mut view, 1, WireType::Varint, &[0x80, 0x01]);
        let mut out = Vec::new();
        field(&mut out, 1, WireType::SixtyFourBit, &[9; 8]);
        field(&mut out, 3, WireType::LengthDelimited, b"unknown");
        field(&mut out, 2, WireType::LengthDelimited, &view);
        field(&mut out, 4, WireType::ThirtyTwoBit, &[0; 4]);
        field(&mut out, 1, WireType::SixtyFourBit, &[7; 8]);
        out
    }

    #[test]
    fn reads_what_prost_reads() {
        for bytes in [every_kind(), unusual(), Vec::new()] {
            assert!(read(&bytes).is_ok());
            same_as_prost(&bytes);
        }
        let v = read(&unusual()).unwrap();
        assert_eq!(v.fingerprint, u64::from_le_bytes([7; 8]));
        assert_eq!(v.views[0].event_time_us, 128);
        assert_eq!(
            v.views[0].values[0].kind,
            Some(Kind::FloatListVal(FloatList {
                values: vec![2.5, 1.0, 2.5, 1.0]
            }))
        );
    }

    /// Every truncation and many one-byte changes of the valid encodings: read as prost reads
    /// them, or refused where prost refuses them.
    #[test]
    fn damaged_encodings_are_read_or_refused_as_prost_does() {
        for bytes in [every_kind(), unusual()] {
            for end in 0..bytes.len() {
                same_as_prost(&bytes[..end]);
            }
            for at in 0..bytes.len() {
                for b in [
                    0x00,
                    0x01,
                    0x02,
                    0x07,
                    0x0a,
                    0x12,
                    0x1d,
                    0x80,
                    0xff,
                    bytes[at] ^ 0x08,
                ] {
                    let mut changed = bytes.clone();
                    changed[at] = b;
                    same_as_prost(&changed);
                }
            }
        }
        same_as_prost(&[0x0a, 0x05, 0x42, 0x02, 0x0d, 0x00]);
        same_as_prost(&[0x12, 0x04, 0x12, 0x02, 0x32, 0x01]);
        same_as_prost(&[0x12, 0x05, 0x12, 0x03, 0x32, 0x01, 0xff]);
    }
}
