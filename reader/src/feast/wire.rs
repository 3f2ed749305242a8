//! A borrowing walk over a protobuf message's fields: the precomputed read takes a
//! `PrecomputedFeatureVector`'s names and values as slices of the bytes Redis answered, where
//! prost's decoding would allocate a `String` and a `Vec` per feature of every entity, and
//! copies each value's scalar bytes into Ferry's `Value` (`values::transcode`).

pub use prost::encoding::WireType;

/// One field: its number, its wire type, and its bytes: the payload of a length-delimited
/// field (strings, bytes, messages), else the scalar's own bytes (a varint, 8 or 4 bytes).
pub type Field<'a> = (u32, WireType, &'a [u8]);

/// The fields of `message` in wire order. Stops at the first malformed field with a
/// description of it (groups, of proto2, are malformed here).
pub fn fields(mut message: &[u8]) -> impl Iterator<Item = Result<Field<'_>, String>> {
    std::iter::from_fn(move || {
        if message.is_empty() {
            return None;
        }
        let next = field(&mut message);
        if next.is_err() {
            message = &[];
        }
        Some(next)
    })
}

fn field<'a>(buf: &mut &'a [u8]) -> Result<Field<'a>, String> {
    let key = varint(buf).ok_or("a field key is cut short")?;
    let tag = u32::try_from(key >> 3).map_err(|_| format!("field key {key} is too large"))?;
    if tag == 0 {
        return Err("a field numbered 0".into());
    }
    let wire_type = WireType::try_from(key & 7).map_err(|e| e.to_string())?;
    let len = match wire_type {
        WireType::Varint => {
            let start = *buf;
            varint(buf).ok_or_else(|| format!("field {tag}: a varint cut short"))?;
            let used = start.len() - buf.len();
            return Ok((tag, wire_type, &start[..used]));
        }
        WireType::SixtyFourBit => 8,
        WireType::ThirtyTwoBit => 4,
        WireType::LengthDelimited => {
            let len = varint(buf).ok_or_else(|| format!("field {tag}: a length cut short"))?;
            usize::try_from(len).unwrap_or(usize::MAX)
        }
        WireType::StartGroup | WireType::EndGroup => {
            return Err(format!("field {tag} is a group"));
        }
    };
    if len > buf.len() {
        return Err(format!("field {tag} of {len} bytes, {} left", buf.len()));
    }
    let (bytes, rest) = buf.split_at(len);
    *buf = rest;
    Ok((tag, wire_type, bytes))
}

/// A varint (at most 10 bytes), `None` when cut short or longer. Most keys and lengths here
/// are one byte: that case goes first.
#[inline]
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let (&first, rest) = buf.split_first()?;
    if first < 0x80 {
        *buf = rest;
        return Some(u64::from(first));
    }
    let mut value = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *buf = &buf[i + 1..];
            return Some(value);
        }
    }
    None
}

/// Appends `value` as a varint (one byte for most keys and lengths written here).
#[inline]
pub fn put_varint(mut value: u64, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a field key.
#[inline]
pub fn put_key(tag: u32, wire_type: WireType, out: &mut Vec<u8>) {
    put_varint((u64::from(tag) << 3) | wire_type as u64, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::feast_proto::{FeatureViewTimestamp, PrecomputedFeatureVector, Timestamp};
    use prost::Message;

    #[test]
    fn fields_borrow_what_prost_would_decode() {
        let v = PrecomputedFeatureVector {
            feature_names: vec!["a__x".into(), "b__y".into()],
            values: vec![vec![0x20, 0x07], Vec::new()],
            fv_timestamps: vec![FeatureViewTimestamp {
                feature_view_name: "a".into(),
                event_timestamp: Some(Timestamp {
                    seconds: 5,
                    nanos: 0,
                }),
            }],
            precomputed_at: Some(Timestamp {
                seconds: 9,
                nanos: 1,
            }),
        };
        let bytes = v.encode_to_vec();
        let got: Vec<Field<'_>> = fields(&bytes).collect::<Result<_, _>>().unwrap();
        let tags: Vec<u32> = got.iter().map(|f| f.0).collect();
        assert_eq!(tags, [1, 1, 2, 2, 3, 4]);
        assert_eq!(got[1].2, b"b__y");
        assert_eq!(got[2].2, [0x20, 0x07]);
        assert_eq!(got[3], (2, WireType::LengthDelimited, &[][..]));
        // Scalars come with their own bytes: varint, fixed64, fixed32.
        let scalars = [
            0x08, 0x96, 0x01, 0x11, 1, 2, 3, 4, 5, 6, 7, 8, 0x1d, 1, 2, 3, 4,
        ];
        let got: Vec<_> = fields(&scalars).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            got,
            [
                (1, WireType::Varint, &[0x96, 0x01][..]),
                (2, WireType::SixtyFourBit, &[1, 2, 3, 4, 5, 6, 7, 8][..]),
                (3, WireType::ThirtyTwoBit, &[1, 2, 3, 4][..]),
            ]
        );
    }

    #[test]
    fn varints_are_read_and_written_as_prost_does() {
        for v in [0, 1, 127, 128, 300, u64::from(u32::MAX), u64::MAX] {
            let mut ours = Vec::new();
            put_varint(v, &mut ours);
            let mut theirs = Vec::new();
            prost::encoding::encode_varint(v, &mut theirs);
            assert_eq!(ours, theirs, "{v}");
            let mut buf = ours.as_slice();
            assert_eq!(varint(&mut buf), Some(v));
            assert!(buf.is_empty());
        }
        let mut key = Vec::new();
        put_key(19, WireType::Varint, &mut key);
        assert_eq!(key, [0x98, 0x01]);
    }

    #[test]
    fn a_malformed_field_ends_the_walk_with_an_error() {
        for bad in [
            &[0x0a, 0x05, b'a'][..], // 5 bytes announced, 1 there
            &[0x0b],                 // a group
            &[0xff, 0xff],           // a key cut short
            &[0x02, 0x00],           // field number 0
            &[
                0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ], // 11 bytes
            &[0x11, 1, 2],           // a fixed64 cut short
        ] {
            let got: Vec<_> = fields(bad).collect();
            assert_eq!(got.len(), 1, "{bad:?}");
            assert!(got[0].is_err(), "{bad:?}");
        }
    }
}
