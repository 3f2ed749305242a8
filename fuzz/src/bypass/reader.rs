//! The fake reader: answers the filter's one call with a vector (or none) per key asked,
//! synthesized from the input, and keeps what each entity's features must then be — worked out
//! here from the values it chose, not by the filter's decoder.

use ferry_core::config::{Config, Service};
use ferry_core::vector::FeatureStatus;
use ferry_protos::v1::{self as pb, value::Kind, ValueType};
use prost::Message;

use super::super::NOW_US;
use super::input::Bytes;

/// One key's vector as the reader returned it.
#[derive(Debug, Clone)]
pub enum Synth {
    /// No vector (an empty one in the answer).
    Missing,
    /// A vector the filter must refuse (wrong fingerprint, or not a StoredVector at all).
    Bad,
    /// A good vector: per feature of the service, what the filter must make of it; and whether
    /// a view of it is past its ttl.
    Found {
        features: Vec<(Option<Kind>, FeatureStatus)>,
        stale: bool,
    },
}

/// The reader's answer to one call, and what it holds per key, in the order asked (lookup by
/// lookup).
pub struct Answer {
    pub body: Vec<u8>,
    /// Per lookup, per key.
    pub keys: Vec<Vec<Synth>>,
    /// The lookups the filter asked for: (service, keys).
    pub asked: Vec<(String, Vec<String>)>,
}

/// A value of type `t`, from a small table: each has one JSON form that the checks can write
/// down (exact floats, plain strings); NaN and infinity must become null. None of them is the
/// forged marker.
pub fn value(t: ValueType, i: usize) -> Option<Kind> {
    Some(match t {
        ValueType::Int32 => Kind::Int32Val([0, -1, 7, i32::MAX, i32::MIN][i % 5]),
        ValueType::Int64 => Kind::Int64Val([0, -1, 42, i64::MAX, i64::MIN][i % 5]),
        ValueType::Float32 => Kind::FloatVal([0.0, 0.5, -1.5, 65536.25, f32::NAN][i % 5]),
        ValueType::Float64 => {
            Kind::DoubleVal([0.0, 0.5, -1.5, 1e300, 5e-324, f64::NAN, f64::INFINITY][i % 7])
        }
        ValueType::Bool => Kind::BoolVal(i.is_multiple_of(2)),
        ValueType::String => {
            Kind::StringVal(["", "x", "é\"\\", "\u{1f}", "\u{7f}<"][i % 5].to_string())
        }
        ValueType::Bytes => Kind::BytesVal([&b""[..], &[1, 2, 3], &[255; 3], &[0]][i % 4].to_vec()),
        ValueType::Float32List => Kind::FloatListVal(pb::FloatList {
            values: [&[][..], &[0.5], &[0.5, -1.5], &[1.0, 2.0, 3.0]][i % 4].to_vec(),
        }),
        ValueType::Unspecified => return None,
    })
}

/// A stored value of type `t` drawn from `b`: null one time in eight, else one of [`value`]'s.
fn drawn_value(b: &mut Bytes<'_>, t: ValueType) -> Option<Kind> {
    if b.one_in(8) {
        None
    } else {
        value(t, b.below(8))
    }
}

fn finite(k: &Kind) -> bool {
    match k {
        Kind::FloatVal(f) => f.is_finite(),
        Kind::DoubleVal(d) => d.is_finite(),
        _ => true,
    }
}

/// One key's stored vector for `service`, chosen by the input.
fn synth(b: &mut Bytes<'_>, service: &Service) -> (Vec<u8>, Synth) {
    match b.below(16) {
        12 | 13 => return (Vec::new(), Synth::Missing),
        14 => {
            let wrong = pb::StoredVector {
                fingerprint: service.fingerprint ^ 1,
                views: Vec::new(),
            };
            return (wrong.encode_to_vec(), Synth::Bad);
        }
        15 => return (vec![0xff, 0x01], Synth::Bad),
        _ => {}
    }
    let mut views = Vec::new();
    let mut features = Vec::new();
    let mut stale = false;
    for view in &service.views {
        let n = view.features.len();
        match b.below(8) {
            // A view with no values: its features are NOT_FOUND.
            6 => {
                views.push(pb::ViewValues {
                    event_time_us: NOW_US,
                    values: Vec::new(),
                });
                features.extend(std::iter::repeat_n((None, FeatureStatus::NotFound), n));
                continue;
            }
            // Written long ago: past the ttl if the view has one.
            7 => {
                let old = NOW_US - 400 * 86_400_000_000;
                let past_ttl = view.ttl_us.is_some();
                stale |= past_ttl;
                let mut values = Vec::new();
                for f in &view.features {
                    let kind = drawn_value(b, f.value_type);
                    let expect = match (&kind, past_ttl) {
                        (_, true) => (None, FeatureStatus::OutsideMaxAge),
                        (Some(k), false) if finite(k) => (kind.clone(), FeatureStatus::Present),
                        _ => (None, FeatureStatus::NullValue),
                    };
                    features.push(expect);
                    values.push(pb::Value { kind });
                }
                views.push(pb::ViewValues {
                    event_time_us: old,
                    values,
                });
            }
            _ => {
                let mut values = Vec::new();
                for f in &view.features {
                    let kind = drawn_value(b, f.value_type);
                    features.push(match &kind {
                        Some(k) if finite(k) => (kind.clone(), FeatureStatus::Present),
                        _ => (None, FeatureStatus::NullValue),
                    });
                    values.push(pb::Value { kind });
                }
                views.push(pb::ViewValues {
                    event_time_us: NOW_US - 1_000_000,
                    values,
                });
            }
        }
    }
    let v = pb::StoredVector {
        fingerprint: service.fingerprint,
        views,
    };
    (v.encode_to_vec(), Synth::Found { features, stale })
}

/// The 200 answer to the call the filter sent (`request`, a VectorRequest): each lookup's
/// service found by name in the snapshot. `short` drops one vector (an answer that does not
/// fit the question).
pub fn answer(b: &mut Bytes<'_>, config: &Config, request: &[u8], short: bool) -> Answer {
    let req = pb::VectorRequest::decode(request).unwrap_or_default();
    let mut results = Vec::new();
    let mut keys = Vec::new();
    let mut asked = Vec::new();
    for lookup in &req.lookups {
        let service = config
            .routes
            .iter()
            .flat_map(|r| r.parts.iter().map(|p| &p.service))
            .find(|s| s.name == lookup.service);
        let mut vectors = Vec::new();
        let mut synths = Vec::new();
        for _ in &lookup.entity_keys {
            let (bytes, s) = match service {
                Some(service) => synth(b, service),
                None => (Vec::new(), Synth::Missing),
            };
            vectors.push(bytes);
            synths.push(s);
        }
        results.push(pb::LookupResult { vectors });
        keys.push(synths);
        asked.push((lookup.service.clone(), lookup.entity_keys.clone()));
    }
    if short {
        if let Some(r) = results.iter_mut().rev().find(|r| !r.vectors.is_empty()) {
            r.vectors.pop();
        }
    }
    Answer {
        body: pb::VectorResponse { results }.encode_to_vec(),
        keys,
        asked,
    }
}
