//! A registry snapshot drawn from the input, shaped as `ferry apply` writes one: 1 to 4
//! services, each keyed (1 or 2 join keys, string or int64: composite keys) with its own stored
//! views of every value type, or keyless (request fields only, no stored view); on-demand views
//! over request fields and stored features; 1 to 4 routes in any format with any options, each
//! enriching from one to three services, with every policy, limits, near cache, logging.
//!
//! Names are unique by construction (features `f<N>`, derived features `d<N>`, views `s<i>v<j>`,
//! on-demand views `od<i>`), so short feature names never collide and most drawn snapshots are
//! accepted; the rest are refused by the filter's own validation and skipped.
//!
//! What derived features may be is chosen so that the checks can tell a client value from a
//! Ferry value: a derived feature over a request field is a bool (`has`, a comparison, a
//! negation), never the field's value passed through; one over stored features is computed from
//! the store's values only.

use ferry_protos::v1::{self as pb, value::Kind, Function as F, ValueType as T};
use ferry_test_support::on_demand::{call, dbl, feature as derived, has, input, int, string};
use ferry_test_support::snapshot::{feature, key, prefix, view};

use super::pick::Pick;

/// Join keys a service may have (name, type); a composite key takes two.
const KEYS: [(&str, T); 4] = [
    ("merchant_id", T::Int64),
    ("user_id", T::String),
    ("device", T::String),
    ("shop", T::Int64),
];

/// Request fields an on-demand view may read (name = the field the request holds it in).
pub const FIELDS: [(&str, T); 5] = [
    ("amount", T::Float64),
    ("n", T::Int64),
    ("flag", T::Bool),
    ("country", T::String),
    ("emb", T::Float32List),
];

const TYPES: [T; 8] = [
    T::Int64,
    T::Float64,
    T::String,
    T::Bool,
    T::Int32,
    T::Float32,
    T::Bytes,
    T::Float32List,
];

const FORMATS: [pb::Format; 6] = [
    pb::Format::KserveV2,
    pb::Format::KserveV1,
    pb::Format::Json,
    pb::Format::Header,
    pb::Format::KserveV2Grpc,
    pb::Format::FeastRest,
];

/// The header a route may be conditioned on.
pub const TENANT: &str = "x-tenant";

/// Every route lives under this prefix (protected or not, as drawn).
pub const ROOT: &str = "/m/";

/// The path prefix of route `i`.
pub fn route_prefix(i: usize) -> String {
    format!("{ROOT}r{i}/")
}

/// A fingerprint nothing else in a run spells (no canary digits).
fn fingerprint(i: usize) -> u64 {
    0xa5a5_0000_0000_0000 | (i as u64 + 1)
}

fn default_of(t: T) -> Option<pb::Value> {
    let kind = match t {
        T::Int64 => Kind::Int64Val(-7),
        T::Int32 => Kind::Int32Val(3),
        T::Float64 => Kind::DoubleVal(0.25),
        T::Float32 => Kind::FloatVal(1.5),
        T::Bool => Kind::BoolVal(true),
        T::String => Kind::StringVal("dflt".into()),
        T::Bytes => Kind::BytesVal(vec![9]),
        T::Float32List => Kind::FloatListVal(pb::FloatList { values: vec![2.0] }),
        T::Unspecified => return None,
    };
    Some(pb::Value { kind: Some(kind) })
}

/// Draws a snapshot. `next` numbers features across services so names never collide.
pub fn snapshot(p: &mut Pick<'_>) -> pb::Snapshot {
    let mut next = 0usize;
    let services_n = 1 + p.below(4);
    let mut services = Vec::new();
    let mut on_demand = Vec::new();
    for i in 0..services_n {
        let (s, od) = service(p, i, &mut next);
        services.push(s);
        on_demand.extend(od);
    }
    let routes_n = 1 + p.below(4);
    let routes = (0..routes_n).map(|i| route(p, i, &services)).collect();
    pb::Snapshot {
        project: "cs".into(),
        version: "v1".into(),
        reader_cluster: "ferry_reader".into(),
        reader_authority: "ferry-reader".into(),
        near_cache_max_bytes: p.of(&[1 << 20, 0, 64]),
        protected_paths: if p.one_in(3) {
            vec![]
        } else {
            vec![ROOT.into()]
        },
        services,
        routes,
        on_demand_views: on_demand,
        write_views: vec![],
        push_sources: vec![],
    }
}

fn service(
    p: &mut Pick<'_>,
    i: usize,
    next: &mut usize,
) -> (pb::FeatureService, Option<pb::OnDemandView>) {
    let keyless = p.one_in(3);
    let mut entity_keys = Vec::new();
    let mut views = Vec::new();
    if !keyless {
        let first = p.below(KEYS.len());
        let mut chosen = vec![KEYS[first]];
        if p.one_in(3) {
            chosen.push(KEYS[(first + 1 + p.below(KEYS.len() - 1)) % KEYS.len()]);
        }
        chosen.sort_by_key(|(k, _)| *k);
        entity_keys = chosen.iter().map(|(k, t)| key(k, *t)).collect();
        for j in 0..1 + p.below(2) {
            let ttl = p.of(&[0, 3600, 1]);
            let features = (0..1 + p.below(3))
                .map(|_| {
                    let t = p.of(&TYPES);
                    let name = format!("f{next}");
                    *next += 1;
                    let mut f = feature(&name, t, None);
                    if p.one_in(3) {
                        f.default_value = default_of(t);
                    }
                    f
                })
                .collect();
            views.push(view(&format!("s{i}v{j}"), ttl, features));
        }
    }
    let mut s = pb::FeatureService {
        name: format!("s{i}"),
        fingerprint: fingerprint(i),
        entity_keys,
        views,
        feast: None,
        derived: vec![],
        derived_version: String::new(),
    };
    let od = if keyless || p.one_in(3) {
        let v = on_demand_view(p, i, &s, next);
        s.derived = vec![pb::ServiceDerived {
            view: v.name.clone(),
            features: v.features.iter().map(|f| f.name.clone()).collect(),
        }];
        s.derived_version = format!("{:016x}", 0xd000 + i);
        Some(v)
    } else {
        None
    };
    (s, od)
}

/// An on-demand view for service `s`: request fields (none to three), stored inputs from the
/// service's own features, and one to three features over them.
fn on_demand_view(
    p: &mut Pick<'_>,
    i: usize,
    s: &pb::FeatureService,
    next: &mut usize,
) -> pb::OnDemandView {
    let mut request: Vec<(&str, T)> = Vec::new();
    for _ in 0..p.below(4) {
        let f = p.of(&FIELDS);
        if !request.iter().any(|(n, _)| *n == f.0) {
            request.push(f);
        }
    }
    let usable: Vec<(String, String, T)> = s
        .views
        .iter()
        .flat_map(|v| {
            v.features.iter().filter_map(|f| {
                let t = T::try_from(f.r#type).ok()?;
                matches!(t, T::Int64 | T::Float64 | T::Bool)
                    .then(|| (v.name.clone(), f.name.clone(), t))
            })
        })
        .collect();
    let mut stored: Vec<(String, String, T)> = Vec::new();
    for _ in 0..p.below(3) {
        if usable.is_empty() {
            break;
        }
        let u = p.of(&usable);
        if !stored.iter().any(|x| x.0 == u.0 && x.1 == u.1) {
            stored.push(u);
        }
    }
    stored.sort();
    let time_slot = request.len() as u32;
    let mut features = Vec::new();
    for _ in 0..1 + p.below(3) {
        let name = format!("d{next}");
        *next += 1;
        let pick_request = !request.is_empty() && (stored.is_empty() || p.one_in(2));
        let f = if pick_request {
            let slot = p.below(request.len());
            let s = slot as u32;
            let e = match (request[slot].1, p.one_in(2)) {
                (_, true) => has(s),
                (T::Float64, _) => call(F::Gt, vec![input(s), dbl(1.0)]),
                (T::Int64, _) => call(F::Gt, vec![input(s), int(1)]),
                (T::Bool, _) => call(F::Not, vec![input(s)]),
                (T::String, _) => call(F::Ne, vec![input(s), string("FR")]),
                _ => has(s),
            };
            derived(&name, T::Bool, e)
        } else if !stored.is_empty() {
            let k = p.below(stored.len());
            let s = time_slot + 1 + k as u32;
            match stored[k].2 {
                T::Int64 => derived(&name, T::Int64, call(F::Mul, vec![input(s), int(2)])),
                T::Float64 => derived(&name, T::Float64, call(F::Mul, vec![input(s), dbl(2.0)])),
                _ => derived(&name, T::Bool, call(F::Not, vec![input(s)])),
            }
        } else {
            // Over nothing but the clock: `request.time > 0`.
            derived(&name, T::Bool, call(F::Gt, vec![input(time_slot), int(0)]))
        };
        features.push(f);
    }
    pb::OnDemandView {
        name: format!("od{i}"),
        request: request
            .iter()
            .map(|(n, t)| pb::RequestField {
                name: (*n).into(),
                field: (*n).into(),
                r#type: *t as i32,
            })
            .collect(),
        sources: {
            let mut v: Vec<String> = stored.iter().map(|x| x.0.clone()).collect();
            v.dedup();
            v
        },
        stored: stored
            .iter()
            .map(|(v, f, t)| pb::StoredInput {
                view: v.clone(),
                feature: f.clone(),
                r#type: *t as i32,
            })
            .collect(),
        features,
    }
}

fn numeric(s: &pb::FeatureService) -> bool {
    s.views.iter().flat_map(|v| &v.features).all(|f| {
        matches!(
            T::try_from(f.r#type),
            Ok(T::Int32 | T::Int64 | T::Float32 | T::Float64 | T::Bool)
        )
    })
}

fn route(p: &mut Pick<'_>, i: usize, services: &[pb::FeatureService]) -> pb::Route {
    let main = p.below(services.len());
    let format = p.of(&FORMATS);
    let mut parts = vec![main];
    for _ in 0..p.below(3) {
        let other = p.below(services.len());
        if !parts.contains(&other) {
            parts.push(other);
        }
    }
    let fields = |s: &pb::FeatureService| -> Vec<String> {
        s.entity_keys.iter().map(|k| k.join_key.clone()).collect()
    };
    let mut r = pb::Route {
        name: format!("r{i}"),
        r#match: prefix(&route_prefix(i)),
        service: services[main].name.clone(),
        format: format as i32,
        entity_fields: fields(&services[main]),
        feature_names: p.of(&[pb::FeatureNames::Full, pb::FeatureNames::Short]) as i32,
        on_missing_entity: p.of(&[
            pb::MissingEntityPolicy::MissingReject,
            pb::MissingEntityPolicy::MissingNull,
            pb::MissingEntityPolicy::MissingDefault,
        ]) as i32,
        on_stale: p.of(&[pb::StalePolicy::StaleNull, pb::StalePolicy::StaleReject]) as i32,
        on_reader_error: p.of(&[
            pb::ReaderErrorPolicy::ReaderErrorReject,
            pb::ReaderErrorPolicy::ReaderErrorForward,
        ]) as i32,
        max_body_bytes: p.of(&[1 << 20, 1024, 8 << 20]),
        // The widest a route may be: 10,000 keys per reader call over its services.
        max_entities: p.of(&[64, 1, 4, 10_000 / parts.len() as u32]),
        reader_timeout_ms: p.of(&[100, 1]),
        cache_max_age_ms: p.of(&[60_000, 0]),
        ..Default::default()
    };
    if format == pb::Format::FeastRest {
        // Feast's request names the services it reads: the extra ones are `feast_services`.
        r.feast_services = parts[1..]
            .iter()
            .map(|&s| services[s].name.clone())
            .collect();
    } else {
        r.extra_services = parts[1..]
            .iter()
            .map(|&s| pb::ExtraService {
                service: services[s].name.clone(),
                entity_fields: fields(&services[s]),
            })
            .collect();
    }
    match format {
        pb::Format::KserveV2 | pb::Format::KserveV2Grpc => {
            r.packed = parts.iter().all(|&s| numeric(&services[s])) && p.one_in(2);
        }
        pb::Format::Json => {
            r.entity_pointer = p.of(&["", "/users", "/a/b"]).into();
            r.inject_pointer = p.of(&["", "/features"]).into();
        }
        pb::Format::Header => {
            r.features_header = p.of(&["", "model-features"]).into();
            r.features_encoding = p.of(&[
                pb::FeaturesEncoding::Unspecified,
                pb::FeaturesEncoding::Json,
                pb::FeaturesEncoding::ProtobufBase64,
            ]) as i32;
            r.max_header_bytes = p.of(&[0, 256, 65_536]);
        }
        _ => {}
    }
    // Conditions besides the path (every request carries what decides them: `request.rs`).
    if let Some(m) = r.r#match.as_mut() {
        if p.one_in(4) {
            m.host = p.of(&["models.example", "*.example"]).into();
        }
        if p.one_in(4) {
            m.headers = vec![pb::HeaderMatch {
                name: TENANT.into(),
                exact: p.of(&["a", ""]).into(),
            }];
        }
    }
    if p.one_in(3) {
        let mut statuses = std::collections::HashMap::new();
        if p.one_in(2) {
            statuses.insert(p.of(&["ok", "partial", "degraded"]).to_string(), 1.0);
        }
        r.log = Some(pb::RouteLog {
            sample: p.of(&[1.0, 0.0, 0.5]),
            statuses,
        });
    }
    r
}
