//! Encoding of one entity's `StoredVector` straight from the kept source rows, whose values are
//! already encoded (see [`ViewRow`]): a vector is a few headers around copied slices. The bytes
//! are exactly what prost would produce for the equivalent message (a test holds this), so the
//! encoding is deterministic and a rerun writes identical values.

use ferry_protos::v1::{StoredVector, Value, ViewValues};
use prost::encoding::{self, WireType};
use prost::Message as _;

use ferry_repo::sources::ViewRow;

/// One view's part of a vector: the entity's kept row (if any) and the selected feature indexes
/// into that row's values, in canonical order.
#[derive(Clone, Copy)]
pub struct Part<'a> {
    pub row: Option<&'a ViewRow>,
    pub selected: &'a [usize],
}

impl<'a> Part<'a> {
    /// Whether the part takes the whole row as it is (the usual case: a whole view).
    fn whole(&self, row: &ViewRow) -> bool {
        self.selected.len() == row.len() && self.selected.iter().enumerate().all(|(i, &s)| i == s)
    }
}

fn values<'a>(part: &Part<'a>) -> impl Iterator<Item = Value> + 'a {
    let row = part.row;
    let selected = part.selected;
    row.into_iter().flat_map(move |r| {
        let all = r.values();
        selected
            .iter()
            .filter_map(|&i| all.get(i).cloned())
            .collect::<Vec<_>>()
    })
}

/// Encodes the vector of one entity into `out` (cleared first). A part without a row becomes an
/// empty `ViewValues`, which tells the filter "no row for this entity in this view".
pub fn encode_into(fingerprint: u64, parts: &[Part<'_>], out: &mut Vec<u8>) {
    out.clear();
    if fingerprint != 0 {
        encoding::fixed64::encode(1, &fingerprint, out);
    }
    // A row's fields, found in one walk; a service's canonical (sorted) feature order is rarely
    // the declared one, so a part picks them out of order.
    let mut fields: Vec<&[u8]> = Vec::new();
    for part in parts {
        encoding::encode_key(2, WireType::LengthDelimited, out);
        let Some(row) = part.row else {
            encoding::encode_varint(0, out);
            continue;
        };
        let time = if row.event_time_us != 0 {
            encoding::int64::encoded_len(1, &row.event_time_us)
        } else {
            0
        };
        let whole = part.whole(row);
        let values_len = if whole {
            row.encoded().len()
        } else {
            fields.clear();
            fields.extend(row.fields());
            part.selected
                .iter()
                .filter_map(|&i| fields.get(i))
                .map(|f| f.len())
                .sum()
        };
        encoding::encode_varint((time + values_len) as u64, out);
        if row.event_time_us != 0 {
            encoding::int64::encode(1, &row.event_time_us, out);
        }
        if whole {
            out.extend_from_slice(row.encoded());
        } else {
            for f in part.selected.iter().filter_map(|&i| fields.get(i)) {
                out.extend_from_slice(f);
            }
        }
    }
}

/// The same vector as a message (for tests and tools; the writer uses [`encode_into`]).
pub fn build(fingerprint: u64, parts: &[Part<'_>]) -> StoredVector {
    StoredVector {
        fingerprint,
        views: parts
            .iter()
            .map(|p| ViewValues {
                event_time_us: p.row.map_or(0, |r| r.event_time_us),
                values: values(p).collect(),
            })
            .collect(),
    }
}

/// Decodes stored bytes (used by tests and by `materialize`'s own checks).
pub fn decode(bytes: &[u8]) -> Result<StoredVector, prost::DecodeError> {
    StoredVector::decode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::v1::{value::Kind, FloatList};

    fn v(kind: Kind) -> Value {
        Value { kind: Some(kind) }
    }

    fn row(t: i64, values: Vec<Value>) -> ViewRow {
        ViewRow::new(t, &values)
    }

    #[test]
    fn hand_encoding_equals_prost_and_round_trips() {
        let profile = row(
            1_700_000_000_000_000,
            vec![
                v(Kind::Int64Val(41)),
                v(Kind::StringVal("gold".into())),
                Value { kind: None },
                v(Kind::BoolVal(true)),
            ],
        );
        let emb = row(
            -5,
            vec![v(Kind::FloatListVal(FloatList {
                values: vec![0.5, -1.0],
            }))],
        );
        let zero_time = row(
            0,
            vec![v(Kind::DoubleVal(2.5)), v(Kind::BytesVal(vec![0, 1]))],
        );
        let parts = [
            Part {
                row: Some(&profile),
                selected: &[3, 0, 2],
            },
            Part {
                row: None,
                selected: &[0, 1],
            },
            Part {
                row: Some(&emb),
                selected: &[0],
            },
            Part {
                row: Some(&zero_time),
                selected: &[1, 0],
            },
        ];
        let mut out = Vec::new();
        encode_into(0xfeed_beef_0000_0001, &parts, &mut out);
        let expected = build(0xfeed_beef_0000_0001, &parts);
        assert_eq!(out, expected.encode_to_vec());
        let back = decode(&out).unwrap();
        assert_eq!(back, expected);
        assert_eq!(back.views.len(), 4);
        assert_eq!(
            back.views[0].values,
            vec![
                v(Kind::BoolVal(true)),
                v(Kind::Int64Val(41)),
                Value { kind: None }
            ]
        );
        assert!(
            back.views[1].values.is_empty(),
            "missing row → empty ViewValues"
        );
        assert_eq!(back.views[1].event_time_us, 0);
        assert_eq!(back.views[2].event_time_us, -5);
        assert_eq!(back.views[3].values[0], v(Kind::BytesVal(vec![0, 1])));
    }

    #[test]
    fn long_values_and_partial_selections_match_prost() {
        let long = row(
            7,
            vec![
                v(Kind::StringVal("x".repeat(300))),
                v(Kind::FloatListVal(FloatList {
                    values: (0..100).map(|i| i as f32).collect(),
                })),
                Value { kind: None },
                v(Kind::Int64Val(-1)),
            ],
        );
        assert_eq!(long.len(), 4);
        assert_eq!(long.fields().count(), 4);
        for selected in [&[0, 1, 2, 3][..], &[3, 1], &[2], &[], &[0, 1, 2]] {
            let parts = [Part {
                row: Some(&long),
                selected,
            }];
            let mut out = Vec::new();
            encode_into(9, &parts, &mut out);
            assert_eq!(out, build(9, &parts).encode_to_vec(), "{selected:?}");
            assert_eq!(decode(&out).unwrap().views[0].values.len(), selected.len());
        }
    }
}
