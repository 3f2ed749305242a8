//! What Ferry must have written, worked out from the reader's answer and the route's policies
//! (independently of the filter's own decoder and writers): per entity its features' values and
//! statuses, the summary headers, and each Ferry-owned place's JSON.

use base64::Engine;
use ferry_core::config::{OnMissing, OnStale, Route};
use ferry_core::vector::FeatureStatus;
use ferry_protos::v1::{value::Kind, ValueType};
use serde_json::{json, Map, Value as Json};

use super::reader::{Answer, Synth};

/// One entity's features over all the route's services, in output-name order.
pub struct Entity {
    pub values: Vec<Option<Kind>>,
    pub statuses: Vec<FeatureStatus>,
}

pub struct Expected {
    pub entities: Vec<Entity>,
    /// Keys looked up, not found, and with a view past its ttl.
    pub keys: usize,
    pub missing: usize,
    pub stale: usize,
}

/// What the answer makes of the request: the features Ferry must write, or why the filter
/// must answer the client instead (Err).
pub fn expected(route: &Route, answer: &Answer) -> Result<Expected, String> {
    let parts = route.keys_per_entity();
    if answer.asked.len() != parts {
        return Err(format!(
            "the filter asked {} lookups for a route of {parts} services",
            answer.asked.len()
        ));
    }
    let n = answer.asked[0].1.len();
    for (p, (service, keys)) in answer.asked.iter().enumerate() {
        assert_eq!(
            service, &route.parts[p].service.name,
            "lookup {p} is not the route's service {p}"
        );
        assert_eq!(keys.len(), n, "lookups of one request ask different counts");
    }
    let mut entities = Vec::with_capacity(n);
    let (mut missing, mut stale) = (0, 0);
    let mut refuse = None;
    // Entity j is the j-th key of every lookup (one lookup per service of the route).
    #[allow(clippy::needless_range_loop)]
    for j in 0..n {
        let mut e = Entity {
            values: Vec::new(),
            statuses: Vec::new(),
        };
        for (p, part) in route.parts.iter().enumerate() {
            match &answer.keys[p][j] {
                Synth::Missing => {
                    missing += 1;
                    let n = part.service.feature_count;
                    e.values.extend(std::iter::repeat_n(None, n));
                    e.statuses
                        .extend(std::iter::repeat_n(FeatureStatus::NotFound, n));
                }
                Synth::Bad => refuse = Some("a vector the filter must refuse".to_string()),
                Synth::Found { features, stale: s } => {
                    stale += usize::from(*s);
                    for (v, st) in features {
                        e.values.push(v.clone());
                        e.statuses.push(*st);
                    }
                }
            }
        }
        entities.push(e);
    }
    if let Some(why) = refuse {
        return Err(why);
    }
    if route.on_missing == OnMissing::Reject && missing > 0 {
        return Err(format!(
            "{missing} keys not found under on_missing_entity: reject"
        ));
    }
    if route.on_stale == OnStale::Reject && stale > 0 {
        return Err(format!(
            "{stale} keys past their ttl under on_stale: reject"
        ));
    }
    if route.on_missing == OnMissing::Default {
        let defaults: Vec<&Option<Kind>> = route.features().map(|f| &f.default).collect();
        for e in &mut entities {
            for (i, st) in e.statuses.iter().enumerate() {
                if *st == FeatureStatus::NotFound {
                    e.values[i].clone_from(defaults[i]);
                }
            }
        }
    }
    with_derived(route, &mut entities);
    Ok(Expected {
        entities,
        keys: n * parts,
        missing,
        stale,
    })
}

/// Appends each entity's derived features (`crate::derived`), computed from its stored ones.
fn with_derived(route: &Route, entities: &mut [Entity]) {
    if route.derived.count == 0 {
        return;
    }
    for e in entities {
        let stored: Vec<(&str, Option<Kind>, FeatureStatus)> = route
            .output_names
            .iter()
            .zip(e.values.iter().zip(&e.statuses))
            .map(|(n, (v, s))| (n.as_str(), v.clone(), *s))
            .collect();
        for (v, s) in crate::derived::expected(&stored) {
            e.values.push(v);
            e.statuses.push(s);
        }
    }
}

/// What a degraded forward (`on_reader_error: forward` after a reader failure) writes for
/// `entities` entities: every feature null, or its default under `on_missing_entity: default`,
/// each NOT_FOUND.
pub fn degraded(route: &Route, entities: usize) -> Expected {
    let value = |f: &ferry_core::config::Feature| match route.on_missing {
        OnMissing::Default => f.default.clone(),
        _ => None,
    };
    let entities = (0..entities)
        .map(|_| Entity {
            values: route.features().map(value).collect(),
            statuses: vec![FeatureStatus::NotFound; route.feature_count],
        })
        .collect();
    Expected {
        entities,
        keys: 0,
        missing: 0,
        stale: 0,
    }
}

fn number(f: f64) -> Json {
    serde_json::Number::from_f64(f).map_or(Json::Null, Json::Number)
}

/// The JSON form of a value (the table in `reader::value` has exact floats).
pub fn json_of(v: &Option<Kind>) -> Json {
    match v {
        None => Json::Null,
        Some(Kind::Int32Val(i)) => json!(i),
        Some(Kind::Int64Val(i)) => json!(i),
        Some(Kind::FloatVal(f)) => number(f64::from(*f)),
        Some(Kind::DoubleVal(d)) => number(*d),
        Some(Kind::BoolVal(b)) => json!(b),
        Some(Kind::StringVal(s)) => json!(s),
        Some(Kind::BytesVal(b)) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        Some(Kind::FloatListVal(l)) => l.values.iter().map(|f| number(f64::from(*f))).collect(),
    }
}

impl Entity {
    /// `{output name: value}`.
    pub fn object(&self, route: &Route) -> Json {
        let m: Map<String, Json> = route
            .output_names
            .iter()
            .zip(&self.values)
            .map(|(n, v)| (n.clone(), json_of(v)))
            .collect();
        Json::Object(m)
    }

    /// `{output name: status}` of the features that are not PRESENT.
    pub fn statuses(&self, route: &Route) -> Json {
        let m: Map<String, Json> = route
            .output_names
            .iter()
            .zip(&self.statuses)
            .filter(|(_, s)| **s != FeatureStatus::Present)
            .map(|(n, s)| (n.clone(), json!(s.as_str())))
            .collect();
        Json::Object(m)
    }
}

impl Expected {
    /// The `ferry` metadata object of the body formats.
    pub fn metadata(&self, route: &Route) -> Json {
        let statuses: Vec<Json> = self.entities.iter().map(|e| e.statuses(route)).collect();
        let mut m = json!({
            "service": route.services_label,
            "fingerprint": route.fingerprints_label,
            "statuses": statuses,
        });
        if !route.derived.version_label.is_empty() {
            m["derived_version"] = json!(route.derived.version_label);
        }
        m
    }

    /// The `x-ferry-*` headers of an enriched request.
    pub fn summary(&self, route: &Route) -> Vec<(String, String)> {
        let partial = self.missing > 0 || self.stale > 0;
        let derived = (!route.derived.version_label.is_empty()).then(|| {
            (
                "x-ferry-derived-version".to_string(),
                route.derived.version_label.clone(),
            )
        });
        let mut out = vec![
            ("x-ferry-service".into(), route.services_label.clone()),
            (
                "x-ferry-fingerprint".into(),
                route.fingerprints_label.clone(),
            ),
            ("x-ferry-entities".into(), self.keys.to_string()),
            ("x-ferry-missing".into(), self.missing.to_string()),
            ("x-ferry-stale".into(), self.stale.to_string()),
            (
                "x-ferry-status".into(),
                if partial { "partial" } else { "ok" }.into(),
            ),
        ];
        out.extend(derived);
        out
    }

    /// KServe v2 tensors per output name (typed routes): (shape, data), nulls as the type's zero;
    /// Err when a float list feature has lists of different lengths (the filter must refuse).
    pub fn tensors(&self, route: &Route) -> Result<Vec<(Json, Vec<Json>)>, String> {
        let n = self.entities.len();
        let mut out = Vec::new();
        for (j, f) in route.features().enumerate() {
            let column: Vec<Json> = self
                .entities
                .iter()
                .map(|e| json_of(&e.values[j]))
                .collect();
            if f.value_type == ValueType::Float32List {
                let lens: Vec<usize> = column
                    .iter()
                    .filter_map(Json::as_array)
                    .map(Vec::len)
                    .collect();
                let d = lens.first().copied().unwrap_or(0);
                if lens.iter().any(|l| *l != d) {
                    return Err(format!("feature {j} has lists of different lengths"));
                }
                let data = column
                    .into_iter()
                    .flat_map(|v| match v {
                        Json::Array(a) => a,
                        _ => vec![json!(0.0); d],
                    })
                    .collect();
                out.push((json!([n, d]), data));
            } else {
                let zero = match f.value_type {
                    ValueType::Bool => json!(false),
                    ValueType::String | ValueType::Bytes => json!(""),
                    _ => json!(0),
                };
                let data = column
                    .into_iter()
                    .map(|v| if v.is_null() { zero.clone() } else { v })
                    .collect();
                out.push((json!([n]), data));
            }
        }
        Ok(out)
    }

    /// The packed FP32 tensor's data: every feature as a number (bools 0/1, nulls 0).
    pub fn packed(&self) -> Vec<Json> {
        self.entities
            .iter()
            .flat_map(|e| {
                e.values.iter().map(|v| match json_of(v) {
                    Json::Bool(b) => json!(u8::from(b)),
                    Json::Number(n) => Json::Number(n),
                    _ => json!(0),
                })
            })
            .collect()
    }
}

/// JSON equality with numbers compared by value (the filter may write `0` or `0.0`, `1e300`
/// or `1e+300`).
pub fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64().is_some() && x.as_f64() == y.as_f64(),
        },
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}
