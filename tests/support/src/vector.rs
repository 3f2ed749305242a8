//! Stored vectors (`StoredVector`, protobuf-encoded as Redis holds them), in general and for the
//! services of [`crate::snapshot`].

use ferry_protos::v1::{value::Kind, StoredVector, Value, ViewValues};
use prost::Message;

use crate::snapshot::{FP, MERCHANT_FP};

/// The clock tests judge ages and TTLs at, in µs: 2027-01-15T08:00:00Z.
pub const NOW_US: i64 = 1_800_000_000_000_000;

/// A stored vector of the service with fingerprint `fp`: per view, (event time in µs, values);
/// `None` is a null value.
pub fn vector(fp: u64, views: Vec<(i64, Vec<Option<Kind>>)>) -> Vec<u8> {
    StoredVector {
        fingerprint: fp,
        views: views
            .into_iter()
            .map(|(t, values)| ViewValues {
                event_time_us: t,
                values: values.into_iter().map(|kind| Value { kind }).collect(),
            })
            .collect(),
    }
    .encode_to_vec()
}

/// A vector of [`crate::snapshot::scoring`], both views written at `event_time_us`:
/// `profile` (age, score) and `txn` (count); `None` is a null value.
pub fn scoring(
    event_time_us: i64,
    age: Option<i64>,
    score: Option<f32>,
    count: Option<i64>,
) -> Vec<u8> {
    vector(
        FP,
        vec![
            (
                event_time_us,
                vec![age.map(Kind::Int64Val), score.map(Kind::FloatVal)],
            ),
            (event_time_us, vec![count.map(Kind::Int64Val)]),
        ],
    )
}

/// A vector of [`crate::snapshot::merchant`]: its one view (`mprofile`: risk).
pub fn merchant(event_time_us: i64, risk: f32) -> Vec<u8> {
    vector(
        MERCHANT_FP,
        vec![(event_time_us, vec![Some(Kind::FloatVal(risk))])],
    )
}
