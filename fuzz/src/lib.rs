//! The fuzz targets as plain functions (`targets`), and what they share: one fixed, valid
//! registry snapshot with routes per format and policy, synthesized features of the right
//! types, and the properties every request format must keep (`format_target`). `bypass` drives
//! the whole request state machine and checks that nothing a client chose reaches the model
//! under a Ferry-owned name.
//!
//! Each `fuzz_targets/NAME.rs` only hands libFuzzer's input to `targets::NAME`; the same
//! functions replay the committed corpus as an ordinary test on stable
//! (tests/wasm-host/tests/fuzz_corpus.rs). A new request format is: its routes in `snapshot()`,
//! a function in `targets` and an entry in `TARGETS`, a 3-line file in fuzz_targets/, a
//! `[[bin]]` in Cargo.toml, and a few seeds in corpus/NAME/.

pub mod bypass;
pub mod config_space;
pub mod derived;
pub mod feast_rest;
pub mod grpc;
pub mod kserve_binary;
pub mod targets;
pub mod upstream;

use ferry_core::config::{Config, Route};
use ferry_core::error::FerryError;
use ferry_core::vector::{EntityFeatures, FeatureStatus};
use ferry_protos::v1::{self as pb, value::Kind, ValueType};
use ferry_test_support::snapshot::{self as fixture, feature, key, view};
use serde_json::Value as Json;

pub use ferry_test_support::snapshot::FP;
/// The clock the targets judge TTLs at: 2027-01-15T08:00:00Z.
pub use ferry_test_support::vector::NOW_US;
pub const FP_NUMERIC: u64 = 0x0fed_cba9_8765_4321;
pub const FP_PAIR: u64 = 0x1111_2222_3333_4444;

/// Protected prefix of the snapshot, under which every route lives.
pub const PROTECTED: &str = "/protected/";

/// A route on `/protected/NAME/`, strict policies, generous limits.
pub fn route(name: &str, service: &str, format: pb::Format, fields: &[&str]) -> pb::Route {
    pb::Route {
        r#match: fixture::prefix(&format!("{PROTECTED}{name}/")),
        max_body_bytes: 1 << 20,
        max_entities: 64,
        ..fixture::route(name, service, format, fields)
    }
}

/// Services: `scoring` (every value type, string key `user_id`), `numeric` (numbers only, for
/// packed tensors), `pair` (composite key: string `user_id` + int64 `merchant_id`). Routes:
/// one or more per format, named after it (`kserve_v1*`, `kserve_v2*`, `json*`, `header*`; the
/// `*_multi` ones also enrich from `pair`, `header_pb` writes a base64 protobuf,
/// `header_forward` a custom features header and fails open), and per policy (`policy_*`,
/// KServe v1); `grpc*` are `kserve_v2_grpc` (per feature, packed, composite, two services) and
/// `feast_rest` answers Feast's REST requests. Every route is under the protected prefix.
pub fn snapshot() -> pb::Snapshot {
    use ValueType as T;
    // The standard `scoring` with a feature of every other value type (its `count` is the
    // int32 one).
    let mut scoring = fixture::scoring();
    scoring.views[0].features.extend([
        feature("tier", T::String, Some(Kind::StringVal("none".into()))),
        feature("verified", T::Bool, None),
    ]);
    let txn = &mut scoring.views[1];
    txn.features[0].r#type = T::Int32 as i32;
    txn.features.push(feature("sum", T::Float64, None));
    scoring.views.push(view(
        "user_embedding",
        0,
        vec![
            feature("embedding", T::Float32List, None),
            feature("raw", T::Bytes, None),
        ],
    ));
    let numeric = pb::FeatureService {
        feast: None,
        derived: vec![],
        derived_version: String::new(),
        name: "numeric".into(),
        fingerprint: FP_NUMERIC,
        entity_keys: vec![key("user_id", T::String)],
        views: vec![view(
            "stats",
            3600,
            vec![
                feature("a", T::Int64, None),
                feature("b", T::Float32, None),
                feature("c", T::Bool, None),
            ],
        )],
    };
    let pair = pb::FeatureService {
        feast: None,
        derived: vec![],
        derived_version: String::new(),
        name: "pair".into(),
        fingerprint: FP_PAIR,
        entity_keys: vec![key("merchant_id", T::Int64), key("user_id", T::String)],
        views: vec![view(
            "affinity",
            0,
            vec![feature("score", T::Float64, None)],
        )],
    };
    use pb::Format as F;
    let mut routes = vec![
        route("kserve_v1", "scoring", F::KserveV1, &["user_id"]),
        route(
            "kserve_v1_pair",
            "pair",
            F::KserveV1,
            &["merchant_id", "user_id"],
        ),
        route("kserve_v2", "scoring", F::KserveV2, &["user_id"]),
        route("kserve_v2_packed", "numeric", F::KserveV2, &["user_id"]),
        route(
            "kserve_v2_pair",
            "pair",
            F::KserveV2,
            &["merchant_id", "user_id"],
        ),
        route("json", "scoring", F::Json, &["user_id"]),
        route("json_root", "scoring", F::Json, &["user_id"]),
        route("json_pair", "pair", F::Json, &["merchant_id", "user_id"]),
        route("header", "scoring", F::Header, &["user_id"]),
        route(
            "header_pair",
            "pair",
            F::Header,
            &["merchant_id", "user_id"],
        ),
        route("kserve_v1_multi", "scoring", F::KserveV1, &["user_id"]),
        route("kserve_v2_multi", "scoring", F::KserveV2, &["user_id"]),
        route("json_multi", "scoring", F::Json, &["user_id"]),
        route("header_pb", "scoring", F::Header, &["user_id"]),
        route("policy_null", "scoring", F::KserveV1, &["user_id"]),
        route("policy_default", "scoring", F::KserveV1, &["user_id"]),
        route("policy_stale_reject", "scoring", F::KserveV1, &["user_id"]),
        route("policy_forward", "scoring", F::KserveV1, &["user_id"]),
        route("header_forward", "scoring", F::Header, &["user_id"]),
        // Last, so that `bypass`'s inputs from before these routes choose the routes they did.
        route("grpc", "scoring", F::KserveV2Grpc, &["user_id"]),
        route("grpc_packed", "numeric", F::KserveV2Grpc, &["user_id"]),
        route(
            "grpc_pair",
            "pair",
            F::KserveV2Grpc,
            &["merchant_id", "user_id"],
        ),
        route("grpc_multi", "scoring", F::KserveV2Grpc, &["user_id"]),
        route("feast_rest", "scoring", F::FeastRest, &["user_id"]),
    ];
    routes.extend(derived::routes());
    for r in &mut routes {
        match r.name.as_str() {
            "kserve_v2_packed" | "grpc_packed" => r.packed = true,
            "json" | "json_pair" => {
                r.entity_pointer = "/users".into();
                r.inject_pointer = "/features".into();
            }
            "header" => r.max_header_bytes = 512,
            "header_pb" => {
                r.features_encoding = pb::FeaturesEncoding::ProtobufBase64 as i32;
                r.max_header_bytes = 1024;
            }
            "kserve_v1_multi" | "kserve_v2_multi" | "json_multi" | "grpc_multi" => {
                r.extra_services = vec![pb::ExtraService {
                    service: "pair".into(),
                    entity_fields: vec!["merchant_id".into(), "user_id".into()],
                }];
                r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
            }
            "policy_null" => {
                r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
                r.feature_names = pb::FeatureNames::Short as i32;
            }
            "policy_default" => {
                r.on_missing_entity = pb::MissingEntityPolicy::MissingDefault as i32
            }
            "policy_stale_reject" => r.on_stale = pb::StalePolicy::StaleReject as i32,
            // Feast answers unknown entities with nulls. It reads `pair` too, not the others.
            "feast_rest" => {
                r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
                r.feast_services = vec!["pair".into()];
            }
            "policy_forward" => {
                r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32;
                r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
            }
            "header_forward" => {
                r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32;
                r.features_header = "model-features".into();
                r.max_header_bytes = 4096;
            }
            _ => {}
        }
    }
    let od = derived::service(&scoring);
    pb::Snapshot {
        project: "fuzz".into(),
        near_cache_max_bytes: 1 << 20,
        protected_paths: vec![PROTECTED.into()],
        services: vec![scoring, numeric, pair, od],
        on_demand_views: vec![derived::view()],
        routes,
        ..fixture::snapshot()
    }
}

/// The snapshot as the filter holds it. Panics if the filter refuses it: the fixture must
/// follow the filter's rules.
pub fn config() -> Config {
    match Config::from_snapshot(snapshot()) {
        Ok(c) => c,
        Err(e) => panic!("the fuzz fixture snapshot is refused: {e}"),
    }
}

/// Indices of the routes whose name starts with `prefix`.
pub fn routes_named(config: &Config, prefix: &str) -> Vec<usize> {
    (0..config.routes.len())
        .filter(|i| config.routes[*i].name.starts_with(prefix))
        .collect()
}

/// A cheap, stable hash of the input to vary synthesized features with it.
pub fn seed(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Features for `n` entities of the route's service, typed as the registry says, with a mix
/// of statuses, extreme values and odd strings chosen by `seed`.
pub fn features(route: &Route, n: usize, mut seed: u64) -> Vec<EntityFeatures> {
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    (0..n)
        .map(|_| {
            let mut values = Vec::new();
            let mut statuses = Vec::new();
            for f in route.features() {
                let r = next();
                let status = match r % 8 {
                    0 => FeatureStatus::NotFound,
                    1 => FeatureStatus::OutsideMaxAge,
                    2 => FeatureStatus::NullValue,
                    _ => FeatureStatus::Present,
                };
                let value = if status != FeatureStatus::Present {
                    None
                } else {
                    typed_value(f.value_type, next())
                };
                values.push(value);
                statuses.push(status);
            }
            EntityFeatures { values, statuses }
        })
        .collect()
}

fn typed_value(t: ValueType, r: u64) -> Option<Kind> {
    let pick = ((r >> 8) % 4) as usize;
    Some(match t {
        ValueType::Int32 => Kind::Int32Val([0, -1, i32::MAX, i32::MIN][pick]),
        ValueType::Int64 => Kind::Int64Val([0, -1, i64::MAX, i64::MIN][pick]),
        ValueType::Float32 => Kind::FloatVal([0.0, -1.5, 3.4e38, 1e-45][pick]),
        ValueType::Float64 => Kind::DoubleVal([0.0, -1.5, 3.4e38, 5e-324][pick]),
        ValueType::Bool => Kind::BoolVal(pick.is_multiple_of(2)),
        ValueType::String => Kind::StringVal(["", "é\u{0}\"\\", "x", "\u{1f}"][pick].to_string()),
        ValueType::Bytes => Kind::BytesVal([&b""[..], &[1, 2, 3], &[255; 3], &[0]][pick].to_vec()),
        ValueType::Float32List => {
            let len = ((r >> 16) % 5) as usize;
            Kind::FloatListVal(pb::FloatList {
                values: (0..len).map(|i| i as f32 * 0.5).collect(),
            })
        }
        ValueType::Unspecified => return None,
    })
}

/// The properties every request format keeps, for one route:
/// - parsing never panics; a parsed request has 1..=max_entities entities, each with one
///   non-empty key per service of the route (`keys_per_entity`);
/// - rewriting it with any well-typed features never panics, and when it succeeds the result
///   is JSON that parses again as a request for the same entities, in the same order (the
///   model must not lose or reorder entities, and Ferry's own output must stay a valid request).
pub fn format_target<R>(
    data: &[u8],
    route: &Route,
    parse: impl Fn(&[u8], &Route) -> Result<R, FerryError>,
    keys: impl Fn(&R) -> &[String],
    rewrite: impl Fn(R, &Route, Vec<EntityFeatures>) -> Result<Vec<u8>, FerryError>,
) {
    let Ok(req) = parse(data, route) else { return };
    let ids = keys(&req).to_vec();
    let entities = check_keys(route, &ids);
    let f = features(route, entities, seed(data));
    let Ok(out) = rewrite(req, route, f) else {
        return;
    };
    if let Err(e) = serde_json::from_slice::<Json>(&out) {
        panic!(
            "the rewritten body is not JSON ({e}): {}",
            String::from_utf8_lossy(&out)
        );
    }
    match parse(&out, route) {
        Ok(again) => assert_eq!(
            keys(&again),
            ids.as_slice(),
            "entities changed by the rewrite"
        ),
        Err(e) => panic!(
            "the rewritten body is no longer a request ({}): {}",
            e.message(),
            String::from_utf8_lossy(&out)
        ),
    }
}

/// The keys of a parsed request: 1..=max_entities entities, each with one non-empty key per
/// service of the route. Returns the entity count.
pub fn check_keys(route: &Route, ids: &[String]) -> usize {
    assert!(!ids.is_empty(), "parsed a request with no entities");
    // One key per service of the route for each entity: the limit is on entities.
    let per_entity = route.keys_per_entity();
    assert_eq!(
        ids.len() % per_entity,
        0,
        "{} keys for {per_entity} services per entity",
        ids.len()
    );
    let entities = ids.len() / per_entity;
    assert!(
        entities <= route.max_entities as usize,
        "{entities} entities ({} keys) over the limit of {}",
        ids.len(),
        route.max_entities
    );
    assert!(
        ids.iter().all(|k| !k.is_empty()),
        "an empty entity key: {ids:?}"
    );
    entities
}
