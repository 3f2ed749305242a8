//! A `precompute_online` service in Feast's layout: each entity's hash holds, besides every
//! view's fields, one `PrecomputedFeatureVector` (Feast 0.64+) as the `bytes_val` of the field
//! `murmur3("__precomputed__SERVICE:vector")`. One field per entity is read instead of one
//! per feature. Its schema is checked as Feast checks it (`_try_precomputed_fast_path`): the
//! vector's feature names must be exactly the service's, in any order; a vector under another
//! schema is refused (served as not found, and counted) as Ferry's layout refuses another
//! fingerprint. Each view's event time is its own `fv_timestamps` entry (Feast reports the
//! precompute time for every feature instead).

use std::collections::HashMap;

use ferry_protos::feast_proto::Timestamp;
use ferry_protos::v1::FeastLayout;
use prost::Message;

use super::values::{micros, transcode, Read};
use super::wire::{fields, put_key, put_varint, WireType};
use crate::error::ReaderError;

/// A precomputed lookup's schema, compiled once per request from its layout, and the order of
/// the names in the vectors it has read. Feast writes every entity's vector with the service's
/// names in one order, so after the first entity a vector's names are only compared, byte for
/// byte and in place, with the order found before (Feast's own check also compares each vector
/// with the first one's names); a vector in another order is looked up by name once more.
pub struct Schema<'a> {
    layout: &'a FeastLayout,
    /// The layout's names, views in order and features in order: slot `k` is the `k`-th.
    names: Vec<&'a [u8]>,
    /// Name → slot, built on the first vector whose names are not in the order known so far.
    index: Option<HashMap<&'a [u8], usize>>,
    /// The order known: the slot of each stored position (empty before the first vector).
    order: Vec<usize>,
    /// The same order the other way: the stored position holding each slot.
    at: Vec<usize>,
    /// One view's `ViewValues` being written (reused: its length precedes it).
    view: Vec<u8>,
}

/// One entity's vector as it lies in the bytes Redis answered: names, values and each view's
/// event time (not zero), borrowed.
struct Stored<'b> {
    names: Vec<&'b [u8]>,
    values: Vec<&'b [u8]>,
    times: Vec<(&'b [u8], i64)>,
}

impl<'a> Schema<'a> {
    pub fn new(layout: &'a FeastLayout) -> Schema<'a> {
        let names = layout
            .views
            .iter()
            .flat_map(|v| &v.precomputed_names)
            .map(|n| n.as_bytes())
            .collect();
        Schema {
            layout,
            names,
            index: None,
            order: Vec::new(),
            at: Vec::new(),
            view: Vec::new(),
        }
    }

    /// One entity's precomputed field (the stored `feast.types.Value`) as a `StoredVector`.
    pub fn vector(&mut self, field: &[u8], fingerprint: u64) -> Result<Read, ReaderError> {
        // Feast reads only a bytes value there; anything else is no vector it would serve.
        let Some(blob) = bytes_val(field) else {
            return Ok(refused());
        };
        let stored = stored(blob)?;
        if stored.values.len() != stored.names.len() {
            return Err(ReaderError::Internal(format!(
                "a Feast precomputed vector has {} names and {} values",
                stored.names.len(),
                stored.values.len()
            )));
        }
        if !self.knows(&stored.names) {
            return Ok(refused());
        }
        // The `StoredVector`, written as prost would write it, each value's bytes copied.
        let mut out = Vec::with_capacity(16 + blob.len());
        if fingerprint != 0 {
            put_key(1, WireType::SixtyFourBit, &mut out);
            out.extend_from_slice(&fingerprint.to_le_bytes());
        }
        let mut found = false;
        let mut slots = self.at.iter();
        for view in &self.layout.views {
            let at = slots.by_ref().take(view.precomputed_names.len());
            self.view.clear();
            // No timestamp: the view had no row for the entity when the vector was assembled
            // (Feast then stores empty values), so the view is not found (no values).
            let name = view.precomputed_view.as_bytes();
            if let Some(&(_, event_time_us)) = stored.times.iter().rev().find(|t| t.0 == name) {
                found = true;
                put_key(1, WireType::Varint, &mut self.view);
                put_varint(event_time_us as u64, &mut self.view);
                for &i in at {
                    transcode(stored.values[i], &mut self.view)?;
                }
            }
            put_key(2, WireType::LengthDelimited, &mut out);
            put_varint(self.view.len() as u64, &mut out);
            out.extend_from_slice(&self.view);
        }
        if !found {
            return Ok(Read::default());
        }
        Ok(Read::found(out))
    }

    /// Whether `names` are exactly the layout's, in any order (Feast's schema check); when
    /// they are, `at` says where each slot's value is.
    fn knows(&mut self, names: &[&[u8]]) -> bool {
        if names.len() != self.names.len() {
            return false;
        }
        let same_order = self.order.len() == names.len()
            && names
                .iter()
                .zip(&self.order)
                .all(|(n, &slot)| *n == self.names[slot]);
        if same_order {
            return true;
        }
        let slots = &self.names;
        let index = self
            .index
            .get_or_insert_with(|| slots.iter().enumerate().map(|(i, n)| (*n, i)).collect());
        let mut at = vec![usize::MAX; names.len()];
        let mut order = Vec::with_capacity(names.len());
        for (position, name) in names.iter().enumerate() {
            // A name the layout lacks, or one seen twice: another schema.
            match index.get(name) {
                Some(&slot) if at[slot] == usize::MAX => {
                    at[slot] = position;
                    order.push(slot);
                }
                _ => return false,
            }
        }
        self.order = order;
        self.at = at;
        true
    }
}

/// The `bytes_val` of a stored `feast.types.Value`, read as prost would (the last field of its
/// `val` oneof wins; fields it does not know are skipped), or `None` for anything else.
fn bytes_val(field: &[u8]) -> Option<&[u8]> {
    let mut last = None;
    for f in fields(field) {
        match f.ok()? {
            (1, WireType::LengthDelimited, blob) => last = Some(Some(blob)),
            (1..=7 | 16 | 19, ..) => last = Some(None),
            _ => {}
        }
    }
    last.flatten()
}

/// An entity's `PrecomputedFeatureVector`, its names and values borrowed from `blob`. A name
/// that is not UTF-8 is taken as is: it matches no layout name, so the vector is refused.
fn stored(blob: &[u8]) -> Result<Stored<'_>, ReaderError> {
    let malformed = |why: String| {
        ReaderError::Internal(format!(
            "a Feast precomputed field is not a PrecomputedFeatureVector: {why}"
        ))
    };
    let mut stored = Stored {
        names: Vec::with_capacity(64),
        values: Vec::with_capacity(64),
        times: Vec::new(),
    };
    for f in fields(blob) {
        let (tag, wire_type, payload) = f.map_err(malformed)?;
        if (1..=4).contains(&tag) && wire_type != WireType::LengthDelimited {
            return Err(malformed(format!(
                "field {tag} has wire type {wire_type:?}"
            )));
        }
        match tag {
            1 => stored.names.push(payload),
            2 => stored.values.push(payload),
            3 => stored.times.extend(view_time(payload).map_err(malformed)?),
            // precomputed_at (4): Feast's event time for every feature, not Ferry's.
            _ => {}
        }
    }
    Ok(stored)
}

/// A `FeatureViewTimestamp`: the view's name and event time, `None` without one. Feast 0.67's
/// precompute records a view without a row for the entity at the epoch (its online_read
/// answers a missing row with an empty Timestamp): no row, as no timestamp.
fn view_time(message: &[u8]) -> Result<Option<(&[u8], i64)>, String> {
    let (mut name, mut time): (&[u8], Option<i64>) = (&[], None);
    for f in fields(message) {
        let (tag, wire_type, payload) = f?;
        if (1..=2).contains(&tag) && wire_type != WireType::LengthDelimited {
            return Err(format!(
                "fv_timestamps field {tag} has wire type {wire_type:?}"
            ));
        }
        match tag {
            1 => name = payload,
            2 => {
                let t = Timestamp::decode(payload).map_err(|e| e.to_string())?;
                time = Some(micros(&t));
            }
            _ => {}
        }
    }
    Ok(time.filter(|us| *us != 0).map(|us| (name, us)))
}

fn refused() -> Read {
    Read {
        vector: Vec::new(),
        refused: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::feast::feature_field;
    use ferry_protos::feast_proto::{
        self, value::Val, FeatureViewTimestamp, PrecomputedFeatureVector,
    };
    use ferry_protos::v1::{value::Kind, FeastView, StoredVector};

    /// A service of views `a` (features x, y) and `b@v2` (feature z).
    fn layout() -> FeastLayout {
        let view = |name: &str, features: &[&str]| FeastView {
            timestamp_field: format!("_ts:{name}").into_bytes(),
            feature_fields: features.iter().map(|f| feature_field(name, f)).collect(),
            precomputed_view: name.into(),
            precomputed_names: features.iter().map(|f| format!("{name}__{f}")).collect(),
        };
        FeastLayout {
            views: vec![view("a", &["x", "y"]), view("b@v2", &["z"])],
            precomputed_field: feature_field("__precomputed__s", "vector"),
            ..Default::default()
        }
    }

    /// One entity read with a schema of its own.
    fn vector(field: &[u8], layout: &FeastLayout, fingerprint: u64) -> Result<Read, ReaderError> {
        Schema::new(layout).vector(field, fingerprint)
    }

    fn int(x: i64) -> Vec<u8> {
        feast_proto::Value {
            val: Some(Val::Int64Val(x)),
        }
        .encode_to_vec()
    }

    fn ts(view: &str, seconds: i64) -> FeatureViewTimestamp {
        FeatureViewTimestamp {
            feature_view_name: view.into(),
            event_timestamp: Some(Timestamp { seconds, nanos: 0 }),
        }
    }

    fn field(v: &PrecomputedFeatureVector) -> Vec<u8> {
        feast_proto::Value {
            val: Some(Val::BytesVal(v.encode_to_vec())),
        }
        .encode_to_vec()
    }

    fn stored(read: Read) -> StoredVector {
        assert!(!read.refused);
        StoredVector::decode(read.vector.as_slice()).unwrap()
    }

    #[test]
    fn names_in_another_order_are_read_by_name_with_each_views_event_time() {
        let v = PrecomputedFeatureVector {
            feature_names: vec!["b@v2__z".into(), "a__y".into(), "a__x".into()],
            values: vec![int(3), Vec::new(), int(1)],
            fv_timestamps: vec![ts("a", 10), ts("b@v2", 20)],
            precomputed_at: Some(Timestamp {
                seconds: 99,
                nanos: 0,
            }),
        };
        let s = stored(vector(&field(&v), &layout(), 7).unwrap());
        assert_eq!(s.fingerprint, 7);
        assert_eq!(s.views[0].event_time_us, 10_000_000);
        assert_eq!(s.views[0].values[0].kind, Some(Kind::Int64Val(1)));
        assert_eq!(s.views[0].values[1].kind, None, "Feast's null");
        assert_eq!(s.views[1].event_time_us, 20_000_000);
        assert_eq!(s.views[1].values[0].kind, Some(Kind::Int64Val(3)));
    }

    #[test]
    fn one_schema_reads_entities_in_the_order_found_and_in_another_order() {
        let l = layout();
        let mut schema = Schema::new(&l);
        let entity = |names: [&str; 3], x: i64| PrecomputedFeatureVector {
            feature_names: names.iter().map(|n| n.to_string()).collect(),
            values: names
                .iter()
                .map(|n| int(if *n == "a__x" { x } else { 0 }))
                .collect(),
            fv_timestamps: vec![ts("a", 10), ts("b@v2", 20)],
            precomputed_at: None,
        };
        let feast_order = ["a__x", "a__y", "b@v2__z"];
        for (names, x) in [
            (feast_order, 1),
            (feast_order, 2),
            (["b@v2__z", "a__x", "a__y"], 3),
            (feast_order, 4),
        ] {
            let s = stored(schema.vector(&field(&entity(names, x)), 7).unwrap());
            assert_eq!(
                s.views[0].values[0].kind,
                Some(Kind::Int64Val(x)),
                "{names:?}"
            );
        }
        // A vector of another schema after ones that matched: still refused.
        let other = entity(["a__x", "a__y", "b__z"], 5);
        assert_eq!(schema.vector(&field(&other), 7).unwrap(), refused_read());
        let s = stored(schema.vector(&field(&entity(feast_order, 6)), 7).unwrap());
        assert_eq!(s.views[0].values[0].kind, Some(Kind::Int64Val(6)));
    }

    #[test]
    fn a_view_without_a_timestamp_is_not_found_and_no_row_at_all_is_no_vector() {
        let mut v = PrecomputedFeatureVector {
            feature_names: vec!["a__x".into(), "a__y".into(), "b@v2__z".into()],
            values: vec![int(1), int(2), Vec::new()],
            fv_timestamps: vec![ts("a", 10), ts("b@v2", 0)],
            precomputed_at: None,
        };
        let s = stored(vector(&field(&v), &layout(), 7).unwrap());
        assert_eq!(s.views[0].values.len(), 2);
        assert!(
            s.views[1].values.is_empty(),
            "the epoch is Feast's 'no row'"
        );
        v.fv_timestamps.clear();
        assert_eq!(vector(&field(&v), &layout(), 7).unwrap(), Read::default());
    }

    #[test]
    fn another_schema_is_refused_as_not_found() {
        let refused = |names: &[&str]| {
            let v = PrecomputedFeatureVector {
                feature_names: names.iter().map(|n| n.to_string()).collect(),
                values: vec![int(1); names.len()],
                fv_timestamps: vec![ts("a", 10), ts("b@v2", 20)],
                precomputed_at: None,
            };
            vector(&field(&v), &layout(), 7).unwrap()
        };
        // A feature more, a feature less, a renamed one, a repeated one.
        for names in [
            &["a__x", "a__y", "b@v2__z", "a__w"][..],
            &["a__x", "a__y"],
            &["a__x", "a__y", "b__z"],
            &["a__x", "a__x", "b@v2__z"],
        ] {
            assert_eq!(refused(names), refused_read(), "{names:?}");
        }
        // Not a bytes value: no vector Feast would serve either.
        assert_eq!(vector(&int(1), &layout(), 7).unwrap(), refused_read());
    }

    fn refused_read() -> Read {
        refused()
    }

    #[test]
    fn a_malformed_vector_is_an_error() {
        let v = PrecomputedFeatureVector {
            feature_names: vec!["a__x".into(), "a__y".into(), "b@v2__z".into()],
            values: vec![int(1)],
            ..Default::default()
        };
        let e = vector(&field(&v), &layout(), 7).unwrap_err();
        assert_eq!(e.code(), "internal");
        let not_a_vector = feast_proto::Value {
            val: Some(Val::BytesVal(vec![0xff, 0xff])),
        }
        .encode_to_vec();
        assert_eq!(
            vector(&not_a_vector, &layout(), 7).unwrap_err().code(),
            "internal"
        );
    }
}
