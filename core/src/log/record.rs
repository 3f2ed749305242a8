//! The `ferry.v1.ServedLog` of one request: per FeatureService of the route, its features as
//! the model received them, for every instance. Built only for a request the route's policy
//! picked; bounded by [`super::MAX_RECORD_BYTES`].

use ferry_protos::v1 as pb;
use prost::Message;

use super::MAX_RECORD_BYTES;
use crate::config::log_policy::ServedStatus;
use crate::config::{KeyKind, Route};
use crate::vector::{self, EntityFeatures, FeatureStatus};

/// What the request gave its model, kept by `enrich` for a picked request.
#[derive(Debug)]
pub struct Served {
    pub status: ServedStatus,
    /// The request's entity keys: one per route part for each entity.
    pub keys: Vec<String>,
    /// Per entity: stored features (part after part), then derived ones.
    pub features: Vec<EntityFeatures>,
    /// Per entity and part, the stored vector (empty: none, or none read).
    pub vectors: Vec<Vec<u8>>,
}

/// Who and when: the request id and the times the record carries.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<'a> {
    pub request_id: &'a str,
    /// When the filter enriched the request (the record's time).
    pub now_us: i64,
    /// When Envoy received it: a derived feature's event time.
    pub received_us: i64,
}

/// Why no record was made.
#[derive(Debug, PartialEq, Eq)]
pub enum Dropped {
    TooLarge { bytes: usize },
}

/// The encoded record, or why there is none.
pub fn encode(route: &Route, stamp: Stamp<'_>, served: &Served) -> Result<Vec<u8>, Dropped> {
    let log = build(route, stamp, served);
    let bytes = log.encoded_len();
    if bytes > MAX_RECORD_BYTES {
        return Err(Dropped::TooLarge { bytes });
    }
    Ok(log.encode_to_vec())
}

/// Where one part's features sit in an entity's flattened features.
struct PartSlots {
    stored: std::ops::Range<usize>,
    derived: std::ops::Range<usize>,
}

/// Each part's stored range, then its derived range (bindings are in part order, one per
/// on-demand view the part's service lists).
fn slots(route: &Route) -> Vec<PartSlots> {
    let mut out = Vec::with_capacity(route.parts.len());
    let (mut stored, mut derived, mut binding) = (0, route.stored_count, 0);
    for part in &route.parts {
        let n = part.service.feature_count;
        let views = part.service.derived.len();
        let d: usize = route
            .derived
            .bindings
            .iter()
            .skip(binding)
            .take(views)
            .map(|b| b.features.len())
            .sum();
        out.push(PartSlots {
            stored: stored..stored + n,
            derived: derived..derived + d,
        });
        stored += n;
        derived += d;
        binding += views;
    }
    out
}

pub fn build(route: &Route, stamp: Stamp<'_>, served: &Served) -> pb::ServedLog {
    let types: Vec<i32> = route.value_types().map(|t| t as i32).collect();
    let parts = route.keys_per_entity();
    let services = route
        .parts
        .iter()
        .zip(slots(route))
        .enumerate()
        .map(|(p, (part, slots))| {
            let ranges = [slots.stored.clone(), slots.derived.clone()];
            let pick = |i: &usize| ranges.iter().any(|r| r.contains(i));
            let columns: Vec<usize> = (0..route.feature_count).filter(pick).collect();
            let service = &part.service;
            let instances = served
                .features
                .iter()
                .enumerate()
                .map(|(e, f)| {
                    let key = served.keys.get(e * parts + p).map_or("", String::as_str);
                    let bytes = served
                        .vectors
                        .get(e * parts + p)
                        .map_or(&[][..], Vec::as_slice);
                    instance(f, key, bytes, service, &columns, &slots, stamp.received_us)
                })
                .collect();
            pb::ServedService {
                name: service.name.clone(),
                fingerprint: service.fingerprint,
                derived_version: service.derived_version.clone(),
                join_keys: service
                    .entity_keys
                    .iter()
                    .map(|k| k.join_key.clone())
                    .collect(),
                join_key_types: service
                    .entity_keys
                    .iter()
                    .map(|k| key_type(k.kind))
                    .collect(),
                feature_names: columns
                    .iter()
                    .map(|&i| route.output_names[i].clone())
                    .collect(),
                feature_types: columns.iter().map(|&i| types[i]).collect(),
                instances,
            }
        })
        .collect();
    pb::ServedLog {
        request_id: stamp.request_id.to_owned(),
        time_us: stamp.now_us,
        route: route.name.clone(),
        status: served.status.word().to_owned(),
        services,
    }
}

fn key_type(kind: KeyKind) -> i32 {
    match kind {
        KeyKind::Int64 => pb::ValueType::Int64 as i32,
        KeyKind::String => pb::ValueType::String as i32,
    }
}

/// One entity's row of one service: its ids, and the features at `columns`.
fn instance(
    f: &EntityFeatures,
    key: &str,
    vector: &[u8],
    service: &crate::config::Service,
    columns: &[usize],
    slots: &PartSlots,
    received_us: i64,
) -> pb::ServedInstance {
    let times = if vector.is_empty() {
        vec![0; service.feature_count]
    } else {
        vector::event_times_us(vector, service)
    };
    let entity_values = if service.entity_keys.is_empty() {
        Vec::new()
    } else {
        key.split(ferry_protos::ENTITY_KEY_SEPARATOR)
            .map(str::to_owned)
            .collect()
    };
    pb::ServedInstance {
        entity_values,
        values: columns
            .iter()
            .map(|&i| pb::Value {
                kind: f.values.get(i).cloned().flatten(),
            })
            .collect(),
        statuses: columns
            .iter()
            .map(|&i| status(f.statuses.get(i).copied()) as i32)
            .collect(),
        event_times_us: columns
            .iter()
            .map(|&i| {
                if slots.stored.contains(&i) {
                    times.get(i - slots.stored.start).copied().unwrap_or(0)
                } else {
                    received_us
                }
            })
            .collect(),
    }
}

fn status(s: Option<FeatureStatus>) -> pb::FeatureStatus {
    match s {
        Some(FeatureStatus::Present) => pb::FeatureStatus::Present,
        Some(FeatureStatus::NotFound) => pb::FeatureStatus::NotFound,
        Some(FeatureStatus::OutsideMaxAge) => pb::FeatureStatus::OutsideMaxAge,
        Some(FeatureStatus::NullValue) => pb::FeatureStatus::NullValue,
        Some(FeatureStatus::Invalid) => pb::FeatureStatus::Invalid,
        None => pb::FeatureStatus::Unspecified,
    }
}
