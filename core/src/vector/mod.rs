//! Decodes one entity's stored vector against its FeatureService: the fingerprint must match,
//! the layout must match the registry, and each view's age is checked against its TTL.

use ferry_protos::v1::StoredVector;
use prost::Message;

use crate::config::Service;
use crate::error::FerryError;
use crate::values::{FeatureValue, ValueRef};

mod wire;

/// Per-feature status, with Feast's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureStatus {
    Present,
    NotFound,
    OutsideMaxAge,
    NullValue,
    /// A derived feature whose evaluation failed (Feast's `INVALID`).
    Invalid,
}

impl FeatureStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            FeatureStatus::Present => "PRESENT",
            FeatureStatus::NotFound => "NOT_FOUND",
            FeatureStatus::OutsideMaxAge => "OUTSIDE_MAX_AGE",
            FeatureStatus::NullValue => "NULL_VALUE",
            FeatureStatus::Invalid => "INVALID",
        }
    }
}

/// One entity's features, flattened in the service's canonical order.
#[derive(Debug, PartialEq)]
pub struct EntityFeatures {
    pub values: Vec<FeatureValue>,
    pub statuses: Vec<FeatureStatus>,
}

impl EntityFeatures {
    /// `n` more features NOT_FOUND (null): a view without a row, an entity without a vector.
    pub fn push_not_found(&mut self, n: usize) {
        self.values.extend(std::iter::repeat_n(None, n));
        self.statuses
            .extend(std::iter::repeat_n(FeatureStatus::NotFound, n));
    }

    /// Features from JSON literals, for tests: null is NOT_FOUND, anything else PRESENT.
    #[cfg(test)]
    pub fn of_json(values: &[serde_json::Value]) -> EntityFeatures {
        let statuses = values
            .iter()
            .map(|v| {
                if v.is_null() {
                    FeatureStatus::NotFound
                } else {
                    FeatureStatus::Present
                }
            })
            .collect();
        EntityFeatures {
            values: crate::values::fvs(values),
            statuses,
        }
    }
}

/// Where decoding puts an entity's features: typed (`EntityFeatures`), or written straight
/// into a body (`format::kserve_v1::Rendered`), each value borrowed from the vector's bytes
/// until then.
pub trait Sink {
    /// `n` more features NOT_FOUND (null): a view without a row, an entity without a vector.
    fn not_found(&mut self, n: usize);
    /// One more feature (`None`: null).
    fn push(&mut self, value: Option<ValueRef<'_>>, status: FeatureStatus);
    /// The statuses of the entity being decoded, in order.
    fn statuses(&self) -> &[FeatureStatus];
}

impl Sink for EntityFeatures {
    fn not_found(&mut self, n: usize) {
        self.push_not_found(n);
    }

    #[inline]
    fn push(&mut self, value: Option<ValueRef<'_>>, status: FeatureStatus) {
        self.values.push(value.map(|v| v.to_kind()));
        self.statuses.push(status);
    }

    fn statuses(&self) -> &[FeatureStatus] {
        &self.statuses
    }
}

/// Whether a view whose row has `event_time_us` is stale at `now_us`.
pub fn is_stale(event_time_us: i64, ttl_us: Option<i64>, now_us: i64) -> bool {
    match ttl_us {
        None => false,
        Some(ttl) => now_us.saturating_sub(event_time_us) > ttl,
    }
}

/// One entity's features from its stored vector, checked against its FeatureService.
pub fn decode(
    bytes: &[u8],
    service: &Service,
    entity: &str,
    now_us: i64,
) -> Result<EntityFeatures, FerryError> {
    let mut out = EntityFeatures {
        values: Vec::with_capacity(service.feature_count),
        statuses: Vec::with_capacity(service.feature_count),
    };
    decode_into(bytes, service, entity, now_us, &mut out, &mut Vec::new())?;
    Ok(out)
}

/// `decode`, the features appended to `out` (an entity keyed by several services gets each
/// service's features in turn). The bytes are read in place (`wire`): each value goes from
/// them straight into `out`, borrowed until `out` takes it; each view's event time (µs, 0 = no
/// row) is appended to `times`.
pub fn decode_into<S: Sink>(
    bytes: &[u8],
    service: &Service,
    entity: &str,
    now_us: i64,
    out: &mut S,
    times: &mut Vec<i64>,
) -> Result<(), FerryError> {
    let bad = |detail: String| FerryError::BadVector {
        detail: format!("entity '{entity}': {detail}"),
    };
    let undecodable = |e: wire::WireError| bad(format!("undecodable: {e}"));
    let v = wire::stored(bytes).map_err(undecodable)?;
    if v.fingerprint != service.fingerprint {
        return Err(FerryError::FingerprintMismatch {
            entity: entity.to_string(),
            expected: service.fingerprint,
            found: v.fingerprint,
        });
    }
    if v.views.len() != service.views.len() {
        return Err(bad(format!(
            "{} views stored, the service has {}",
            v.views.len(),
            service.views.len()
        )));
    }
    for (stored, view) in v.views.iter().zip(&service.views) {
        let stored = wire::view(stored).map_err(undecodable)?;
        let n = view.features.len();
        if stored.count == 0 {
            out.not_found(n);
            times.push(0);
            continue;
        }
        if stored.count != n {
            return Err(bad(format!(
                "view '{}' has {} values, the registry {} features",
                view.name, stored.count, n
            )));
        }
        let stale = is_stale(stored.event_time_us, view.ttl_us, now_us);
        times.push(stored.event_time_us);
        for (value, feature) in stored.values().zip(&view.features) {
            let kind = value.and_then(wire::value).map_err(undecodable)?;
            if kind
                .as_ref()
                .is_some_and(|k| !k.matches_type(feature.value_type))
            {
                return Err(bad(format!(
                    "feature '{}:{}' is not of type {:?}",
                    view.name, feature.name, feature.value_type
                )));
            }
            match kind {
                _ if stale => out.push(None, FeatureStatus::OutsideMaxAge),
                // A non-finite float has no JSON form: it is sent as null, and said so.
                Some(k) if !k.is_json_null() => out.push(Some(k), FeatureStatus::Present),
                _ => out.push(None, FeatureStatus::NullValue),
            }
        }
    }
    Ok(())
}

/// The event time (µs) of each feature's view in a stored vector, flattened like its values;
/// 0 where the view has no row or the vector cannot be read (`decode` reports that).
pub fn event_times_us(bytes: &[u8], service: &Service) -> Vec<i64> {
    let stored = StoredVector::decode(bytes).ok();
    let views = stored
        .as_ref()
        .map(|v| v.views.as_slice())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(service.feature_count);
    for (i, view) in service.views.iter().enumerate() {
        let t = views
            .get(i)
            .filter(|v| !v.values.is_empty())
            .map_or(0, |v| v.event_time_us);
        out.extend(std::iter::repeat_n(t, view.features.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixture::{config, FP};
    use ferry_protos::v1::value::Kind;
    use ferry_test_support::snapshot::DAY_US;
    use ferry_test_support::vector::{vector, NOW_US as NOW};
    use serde_json::{json, Value as Json};

    fn json_of(f: &EntityFeatures) -> Vec<Json> {
        f.values.iter().map(crate::values::to_json).collect()
    }

    fn fresh(fp: u64) -> Vec<u8> {
        vector(
            fp,
            vec![
                (
                    NOW - 5 * DAY_US,
                    vec![Some(Kind::Int64Val(42)), Some(Kind::FloatVal(0.5))],
                ),
                (NOW - 1000, vec![Some(Kind::Int64Val(7))]),
            ],
        )
    }

    #[test]
    fn fresh_vector_is_present() {
        let c = config();
        let f = decode(&fresh(FP), c.routes[0].service(), "u1", NOW).unwrap();
        assert_eq!(json_of(&f), vec![json!(42), json!(0.5), json!(7)]);
        assert!(f.statuses.iter().all(|s| *s == FeatureStatus::Present));
    }

    #[test]
    fn ttl_applies_per_view() {
        // profile has no ttl (a 5-day-old row is fine), txn has 1 day.
        assert!(!is_stale(NOW - 100 * DAY_US, None, NOW));
        assert!(!is_stale(NOW - DAY_US, Some(DAY_US), NOW));
        assert!(is_stale(NOW - DAY_US - 1, Some(DAY_US), NOW));
        assert!(
            !is_stale(NOW + DAY_US, Some(DAY_US), NOW),
            "future rows are not stale"
        );
        let c = config();
        let bytes = vector(
            FP,
            vec![
                (NOW - 5 * DAY_US, vec![Some(Kind::Int64Val(42)), None]),
                (NOW - 2 * DAY_US, vec![Some(Kind::Int64Val(7))]),
            ],
        );
        let f = decode(&bytes, c.routes[0].service(), "u1", NOW).unwrap();
        assert_eq!(json_of(&f), vec![json!(42), json!(null), json!(null)]);
        assert_eq!(
            f.statuses,
            vec![
                FeatureStatus::Present,
                FeatureStatus::NullValue,
                FeatureStatus::OutsideMaxAge
            ]
        );
    }

    #[test]
    fn non_finite_floats_are_null_values() {
        let c = config();
        let bytes = vector(
            FP,
            vec![
                (
                    NOW,
                    vec![Some(Kind::Int64Val(1)), Some(Kind::FloatVal(f32::NAN))],
                ),
                (NOW, vec![Some(Kind::Int64Val(2))]),
            ],
        );
        let f = decode(&bytes, c.routes[0].service(), "u1", NOW).unwrap();
        assert_eq!(
            (&f.values[1], f.statuses[1]),
            (&None, FeatureStatus::NullValue)
        );
    }

    #[test]
    fn view_without_row_is_not_found() {
        let c = config();
        let bytes = vector(
            FP,
            vec![
                (
                    NOW,
                    vec![Some(Kind::Int64Val(1)), Some(Kind::FloatVal(1.0))],
                ),
                (0, vec![]),
            ],
        );
        let f = decode(&bytes, c.routes[0].service(), "u1", NOW).unwrap();
        assert_eq!(f.statuses[2], FeatureStatus::NotFound);
        assert_eq!(f.values[2], None);
    }

    #[test]
    fn fingerprint_mismatch_is_an_error() {
        let c = config();
        let e = decode(&fresh(FP + 1), c.routes[0].service(), "u1", NOW).unwrap_err();
        assert!(matches!(e, FerryError::FingerprintMismatch { found, .. } if found == FP + 1));
        assert_eq!(e.status(), 502);
    }

    #[test]
    fn layout_and_type_mismatches_are_errors() {
        let c = config();
        let s = c.routes[0].service();
        let one_view = vector(FP, vec![(NOW, vec![Some(Kind::Int64Val(1))])]);
        assert!(matches!(
            decode(&one_view, s, "u", NOW),
            Err(FerryError::BadVector { .. })
        ));
        let wrong_type = vector(
            FP,
            vec![
                (
                    NOW,
                    vec![Some(Kind::StringVal("x".into())), Some(Kind::FloatVal(1.0))],
                ),
                (NOW, vec![Some(Kind::Int64Val(1))]),
            ],
        );
        let e = decode(&wrong_type, s, "u", NOW).unwrap_err();
        assert!(
            e.message().contains("'profile:age' is not of type Int64"),
            "{}",
            e.message()
        );
        assert!(matches!(
            decode(b"\xff\xff", s, "u", NOW),
            Err(FerryError::BadVector { .. })
        ));
    }
}
