//! Lookups of services backed by a Feast registry: Feast's Redis layout read in place. Each
//! entity is one `HMGET` of its hash (every selected feature's field plus each view's `_ts:`
//! field); all of a request's `HMGET`s go in one pipeline, one round trip. Each answer becomes
//! the same `StoredVector` Ferry's own layout stores, so the filter checks TTLs and applies its
//! policies to both layouts alike. A `precompute_online` service is read from its one
//! precomputed field instead.
//!
//! - `precomputed.rs`: a `precompute_online` service's one vector per entity, its schema checked.
//! - `values.rs`: Feast's stored values (`feast.types.Value`, `Timestamp`) as Ferry's.
//! - `wire.rs`: a borrowing walk over a protobuf message's fields (the precomputed read).

mod precomputed;
mod values;
mod wire;

use ferry_protos::feast::{hash_key, layout_problem};
use ferry_protos::feast_proto;
use ferry_protos::v1::{self, FeastLayout, Lookup, StoredVector, ViewValues};
use prost::Message;
use redis::Value;

use crate::error::ReaderError;
use values::{micros, value, Read};

/// The fields of one `HMGET`: the precomputed field alone, or per view, its features' fields
/// then its timestamp field.
fn fields(layout: &FeastLayout) -> Box<dyn Iterator<Item = &[u8]> + '_> {
    if !layout.precomputed_field.is_empty() {
        return Box::new(std::iter::once(layout.precomputed_field.as_slice()));
    }
    Box::new(layout.views.iter().flat_map(|v| {
        v.feature_fields
            .iter()
            .map(Vec::as_slice)
            .chain(std::iter::once(v.timestamp_field.as_slice()))
    }))
}

/// Adds one `HMGET` per entity of `lookup` to `pipe`.
pub fn add_lookup(
    pipe: &mut redis::Pipeline,
    i: usize,
    lookup: &Lookup,
    layout: &FeastLayout,
) -> Result<(), ReaderError> {
    // Only a layout `ferry apply` could have built: names key-safe and short, fields 4 bytes.
    if let Some(why) = layout_problem(layout) {
        return Err(ReaderError::BadRequest(format!("lookups[{i}].feast {why}")));
    }
    for (j, entity_key) in lookup.entity_keys.iter().enumerate() {
        let key = hash_key(&layout.project, &layout.join_keys, entity_key).map_err(|why| {
            ReaderError::BadRequest(format!("lookups[{i}].entity_keys[{j}]: {why}"))
        })?;
        let cmd = pipe.cmd("HMGET").arg(key);
        for field in fields(layout) {
            cmd.arg(field);
        }
    }
    Ok(())
}

/// What reading one lookup's answers needs, made once per lookup of a request: its layout,
/// its fingerprint, and for a precomputed service the schema its vectors are checked against
/// (with the order of their names, found once and reused for every entity).
pub struct Reading<'a> {
    layout: &'a FeastLayout,
    fingerprint: u64,
    precomputed: Option<precomputed::Schema<'a>>,
}

impl<'a> Reading<'a> {
    pub fn new(layout: &'a FeastLayout, fingerprint: u64) -> Reading<'a> {
        let precomputed =
            (!layout.precomputed_field.is_empty()).then(|| precomputed::Schema::new(layout));
        Reading {
            layout,
            fingerprint,
            precomputed,
        }
    }

    /// Turns one entity's `HMGET` answer into the bytes of a `StoredVector`, or empty bytes
    /// when Feast has nothing for the entity (no field of the hash is set).
    pub fn vector(&mut self, answer: Value) -> Result<Read, ReaderError> {
        let Value::Array(fields) = answer else {
            return Err(ReaderError::Internal(format!(
                "redis answered HMGET with {answer:?} instead of an array"
            )));
        };
        let Some(schema) = self.precomputed.as_mut() else {
            return vector(fields, self.layout, self.fingerprint);
        };
        let [field] = <[Value; 1]>::try_from(fields).map_err(|f| {
            ReaderError::Internal(format!("redis answered HMGET of 1 field with {}", f.len()))
        })?;
        match bulk(field)? {
            Some(bytes) => schema.vector(&bytes, self.fingerprint),
            None => Ok(Read::default()),
        }
    }
}

/// One entity's per-field answer (its views' features and `_ts:` fields) as a `StoredVector`.
fn vector(fields: Vec<Value>, layout: &FeastLayout, fingerprint: u64) -> Result<Read, ReaderError> {
    let expected: usize = layout
        .views
        .iter()
        .map(|v| v.feature_fields.len() + 1)
        .sum();
    if fields.len() != expected {
        return Err(ReaderError::Internal(format!(
            "redis answered HMGET of {expected} fields with {} values",
            fields.len()
        )));
    }
    let mut fields = fields.into_iter();
    let mut views = Vec::with_capacity(layout.views.len());
    let mut any = false;
    for view in &layout.views {
        let values: Vec<Option<Vec<u8>>> = fields
            .by_ref()
            .take(view.feature_fields.len())
            .map(bulk)
            .collect::<Result<_, _>>()?;
        let ts = fields.next().map(bulk).transpose()?.flatten();
        let part = view_values(values, ts)?;
        any |= !part.values.is_empty();
        views.push(part);
    }
    if !any {
        return Ok(Read::default());
    }
    Ok(Read::found(
        StoredVector { fingerprint, views }.encode_to_vec(),
    ))
}

/// A view's part: no row (empty values) when Feast wrote neither its timestamp nor a feature.
fn view_values(
    values: Vec<Option<Vec<u8>>>,
    ts: Option<Vec<u8>>,
) -> Result<ViewValues, ReaderError> {
    if ts.is_none() && values.iter().all(Option::is_none) {
        return Ok(ViewValues::default());
    }
    let event_time_us = match ts {
        Some(bytes) => {
            let t = feast_proto::Timestamp::decode(bytes.as_slice()).map_err(|e| {
                ReaderError::Internal(format!("a Feast _ts field is not a Timestamp: {e}"))
            })?;
            micros(&t)
        }
        None => 0,
    };
    let values = values
        .into_iter()
        .map(|v| v.map_or(Ok(v1::Value::default()), |b| value(&b)))
        .collect::<Result<_, _>>()?;
    Ok(ViewValues {
        event_time_us,
        values,
    })
}

fn bulk(v: Value) -> Result<Option<Vec<u8>>, ReaderError> {
    match v {
        Value::BulkString(b) => Ok(Some(b)),
        Value::Nil => Ok(None),
        other => Err(ReaderError::Internal(format!(
            "redis answered HMGET with an unexpected value: {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::feast::{feature_field, timestamp_field};
    use ferry_protos::feast_proto::value::Val;
    use ferry_protos::v1::value::Kind;
    use ferry_protos::v1::{FeastJoinKey, FeastView};

    /// One entity's answer read on its own.
    fn vector(answer: Value, layout: &FeastLayout, fingerprint: u64) -> Result<Read, ReaderError> {
        Reading::new(layout, fingerprint).vector(answer)
    }

    fn layout() -> FeastLayout {
        FeastLayout {
            project: "p".into(),
            join_keys: vec![FeastJoinKey {
                name: "user_id".into(),
                int64: false,
            }],
            views: vec![
                FeastView {
                    timestamp_field: timestamp_field("a"),
                    feature_fields: vec![feature_field("a", "x"), feature_field("a", "y")],
                    ..Default::default()
                },
                FeastView {
                    timestamp_field: timestamp_field("b"),
                    feature_fields: vec![feature_field("b", "z")],
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    fn feast(val: Val) -> Value {
        Value::BulkString(feast_proto::Value { val: Some(val) }.encode_to_vec())
    }

    fn ts(seconds: i64, nanos: i32) -> Value {
        Value::BulkString(feast_proto::Timestamp { seconds, nanos }.encode_to_vec())
    }

    #[test]
    fn one_hmget_per_entity_with_every_field() {
        let mut pipe = redis::pipe();
        let lookup = Lookup {
            entity_keys: vec!["u1".into(), "u2".into()],
            ..Default::default()
        };
        add_lookup(&mut pipe, 0, &lookup, &layout()).unwrap();
        let cmds: Vec<_> = pipe.cmd_iter().collect();
        assert_eq!(cmds.len(), 2);
        // HMGET, key, 3 feature fields, 2 timestamp fields.
        assert_eq!(cmds[0].args_iter().count(), 7);
        let bad = Lookup {
            entity_keys: vec!["a\u{1f}b".into()],
            ..Default::default()
        };
        let err = add_lookup(&mut redis::pipe(), 3, &bad, &layout()).unwrap_err();
        assert!(
            err.to_string().starts_with("lookups[3].entity_keys[0]"),
            "{err}"
        );
    }

    #[test]
    fn a_precomputed_layout_reads_one_field_per_entity() {
        let mut l = layout();
        l.precomputed_field = ferry_protos::feast::precomputed_field("s");
        for (v, names) in l
            .views
            .iter_mut()
            .zip([["a__x", "a__y"].as_slice(), &["b__z"]])
        {
            v.precomputed_view = names[0][..1].into();
            v.precomputed_names = names.iter().map(|n| n.to_string()).collect();
        }
        let mut pipe = redis::pipe();
        let lookup = Lookup {
            entity_keys: vec!["u1".into()],
            ..Default::default()
        };
        add_lookup(&mut pipe, 0, &lookup, &l).unwrap();
        let args: Vec<_> = pipe.cmd_iter().next().unwrap().args_iter().collect();
        // HMGET, key, the precomputed field.
        assert_eq!(args.len(), 3);
        assert_eq!(
            vector(Value::Array(vec![Value::Nil]), &l, 1).unwrap(),
            Read::default()
        );
        let two = Value::Array(vec![Value::Nil, Value::Nil]);
        assert_eq!(vector(two, &l, 1).unwrap_err().code(), "internal");
    }

    #[test]
    fn hash_fields_become_a_stored_vector_with_event_times_nulls_and_missing_views() {
        let answer = Value::Array(vec![
            feast(Val::Int64Val(7)),
            Value::BulkString(Vec::new()), // Feast's null: a Value with no kind
            ts(10, 500_000),
            Value::Nil, // view b: no row
            Value::Nil,
        ]);
        let bytes = vector(answer, &layout(), 42).unwrap().vector;
        let v = StoredVector::decode(bytes.as_slice()).unwrap();
        assert_eq!(v.fingerprint, 42);
        assert_eq!(v.views[0].event_time_us, 10_000_500);
        assert_eq!(v.views[0].values[0].kind, Some(Kind::Int64Val(7)));
        assert_eq!(v.views[0].values[1].kind, None);
        assert!(v.views[1].values.is_empty());
    }

    #[test]
    fn an_entity_feast_never_wrote_is_empty() {
        let answer = Value::Array(vec![Value::Nil; 5]);
        assert_eq!(vector(answer, &layout(), 1).unwrap(), Read::default());
        let short = Value::Array(vec![Value::Nil; 4]);
        assert_eq!(vector(short, &layout(), 1).unwrap_err().code(), "internal");
    }

    #[test]
    fn feast_values_map_to_ferry_values() {
        let f = |val| {
            value(&feast_proto::Value { val: Some(val) }.encode_to_vec())
                .unwrap()
                .kind
        };
        assert_eq!(
            f(Val::StringVal("s".into())),
            Some(Kind::StringVal("s".into()))
        );
        assert_eq!(f(Val::FloatVal(1.5)), Some(Kind::FloatVal(1.5)));
        assert_eq!(f(Val::DoubleVal(2.5)), Some(Kind::DoubleVal(2.5)));
        assert_eq!(f(Val::BoolVal(true)), Some(Kind::BoolVal(true)));
        assert_eq!(f(Val::Int32Val(3)), Some(Kind::Int32Val(3)));
        assert_eq!(f(Val::NullVal(0)), None);
        assert_eq!(
            f(Val::FloatListVal(feast_proto::FloatList { val: vec![1.0] })),
            Some(Kind::FloatListVal(v1::FloatList { values: vec![1.0] }))
        );
        // A kind Ferry does not read (field 12, string_list_val) is an error, not a null.
        let string_list = [0x62, 0x03, 0x0a, 0x01, b'x'];
        assert_eq!(value(&string_list).unwrap_err().code(), "internal");
    }
}
