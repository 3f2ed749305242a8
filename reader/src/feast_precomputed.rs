//! A `precompute_online` service in Feast's layout: each entity's hash holds, besides every
//! view's fields, one `PrecomputedFeatureVector` (Feast 0.64+) as the `bytes_val` of the field
//! `murmur3("__precomputed__SERVICE:vector")`. One field per entity is read instead of one
//! per feature. Its schema is checked as Feast checks it (`_try_precomputed_fast_path`): the
//! vector's feature names must be exactly the service's, in any order; a vector under another
//! schema is refused (served as not found, and counted) as Ferry's layout refuses another
//! fingerprint. Each view's event time is its own `fv_timestamps` entry (Feast reports the
//! precompute time for every feature instead).

use std::collections::HashMap;

use ferry_protos::feast_proto::{self, value::Val, PrecomputedFeatureVector};
use ferry_protos::v1::{FeastLayout, StoredVector, ViewValues};
use prost::Message;

use crate::error::ReaderError;
use crate::feast_value::{micros, value, Read};

/// One entity's precomputed field (the stored `feast.types.Value`) as a `StoredVector`.
pub fn vector(field: &[u8], layout: &FeastLayout, fingerprint: u64) -> Result<Read, ReaderError> {
    let blob = match feast_proto::Value::decode(field) {
        Ok(feast_proto::Value {
            val: Some(Val::BytesVal(blob)),
        }) => blob,
        // Feast reads only a bytes value there; anything else is no vector it would serve.
        _ => return Ok(refused()),
    };
    let stored = PrecomputedFeatureVector::decode(blob.as_slice()).map_err(|e| {
        ReaderError::Internal(format!(
            "a Feast precomputed field is not a PrecomputedFeatureVector: {e}"
        ))
    })?;
    if stored.values.len() != stored.feature_names.len() {
        return Err(ReaderError::Internal(format!(
            "a Feast precomputed vector has {} names and {} values",
            stored.feature_names.len(),
            stored.values.len()
        )));
    }
    let Some(at) = positions(&stored.feature_names, layout) else {
        return Ok(refused());
    };
    // Feast 0.67's precompute records a view without a row for the entity at the epoch (its
    // online_read answers a missing row with an empty Timestamp): no row, as no timestamp.
    let times: HashMap<&str, i64> = stored
        .fv_timestamps
        .iter()
        .filter_map(|t| {
            Some((
                t.feature_view_name.as_str(),
                micros(t.event_timestamp.as_ref()?),
            ))
        })
        .filter(|(_, us)| *us != 0)
        .collect();
    let mut at = at.into_iter();
    let mut views = Vec::with_capacity(layout.views.len());
    for view in &layout.views {
        let positions: Vec<usize> = at.by_ref().take(view.precomputed_names.len()).collect();
        // No timestamp: the view had no row for the entity when the vector was assembled
        // (Feast then stores empty values), so the view is not found.
        let Some(&event_time_us) = times.get(view.precomputed_view.as_str()) else {
            views.push(ViewValues::default());
            continue;
        };
        let values = positions
            .into_iter()
            .map(|i| value(&stored.values[i]))
            .collect::<Result<_, _>>()?;
        views.push(ViewValues {
            event_time_us,
            values,
        });
    }
    if views.iter().all(|v| v.values.is_empty()) {
        return Ok(Read::default());
    }
    Ok(Read::found(
        StoredVector { fingerprint, views }.encode_to_vec(),
    ))
}

fn refused() -> Read {
    Read {
        vector: Vec::new(),
        refused: true,
    }
}

/// Where each of the layout's names (views in order, features in order) is in `stored`, or
/// `None` when `stored` holds another set of names (Feast's schema check).
fn positions(stored: &[String], layout: &FeastLayout) -> Option<Vec<usize>> {
    let expected: usize = layout.views.iter().map(|v| v.precomputed_names.len()).sum();
    if stored.len() != expected {
        return None;
    }
    let index: HashMap<&str, usize> = stored
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    if index.len() != stored.len() {
        return None;
    }
    layout
        .views
        .iter()
        .flat_map(|v| &v.precomputed_names)
        .map(|n| index.get(n.as_str()).copied())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::feast::feature_field;
    use ferry_protos::feast_proto::{FeatureViewTimestamp, Timestamp};
    use ferry_protos::v1::{value::Kind, FeastView};

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
