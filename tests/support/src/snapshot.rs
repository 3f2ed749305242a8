//! Registry snapshots the filter accepts (each one passes `Config::from_snapshot`). Most tests
//! use the standard one, [`snapshot`]: service [`scoring`], route [`fraud`]. The builders
//! ([`feature`], [`view`], [`key`], [`route`]) make the others, so a crate that needs more
//! services or routes writes only what differs.

use ferry_protos::v1::{self as pb, value::Kind, ValueType};

/// Fingerprint of [`scoring`].
pub const FP: u64 = 0x1234_5678_9abc_def0;
/// [`FP`] as the filter reports it (`x-ferry-fingerprint`).
pub const FP_HEX: &str = "123456789abcdef0";
/// Fingerprint of [`merchant`].
pub const MERCHANT_FP: u64 = 0x0fed_cba9_8765_4321;
/// One day in seconds: the ttl of [`scoring`]'s `txn` view.
pub const DAY: i64 = 86_400;
/// [`DAY`] in µs, the unit of event times.
pub const DAY_US: i64 = DAY * 1_000_000;
/// Path prefix of [`fraud`].
pub const FRAUD_PREFIX: &str = "/v1/models/fraud";
/// Body limit of a [`route`] (so of [`fraud`]).
pub const MAX_BODY: u32 = 4096;

/// A feature of type `t`, with the value a route under `on_missing_entity: default` gives it.
pub fn feature(name: &str, t: ValueType, default: Option<Kind>) -> pb::Feature {
    pb::Feature {
        name: name.into(),
        r#type: t as i32,
        default_value: default.map(|k| pb::Value { kind: Some(k) }),
    }
}

/// A view of a service; `ttl_seconds` 0 is never stale.
pub fn view(name: &str, ttl_seconds: i64, features: Vec<pb::Feature>) -> pb::ServiceView {
    pb::ServiceView {
        name: name.into(),
        ttl_seconds,
        features,
    }
}

/// An entity key on `join_key`, its entity named without the `_id` (`user_id`: `user`).
pub fn key(join_key: &str, t: ValueType) -> pb::EntityKey {
    pb::EntityKey {
        entity: join_key.trim_end_matches("_id").into(),
        join_key: join_key.into(),
        r#type: t as i32,
    }
}

/// A route match on a path prefix.
pub fn prefix(path: &str) -> Option<pb::RouteMatch> {
    Some(pb::RouteMatch {
        path_prefix: path.into(),
        ..Default::default()
    })
}

/// `scoring`, fingerprint [`FP`], keyed by a string `user_id`: view `profile`, never stale
/// (`age` int64 with default -1, `score` float32), and view `txn`, ttl [`DAY`] (`count` int64).
pub fn scoring() -> pb::FeatureService {
    use ValueType as T;
    pb::FeatureService {
        feast: None,
        derived: vec![],
        derived_version: String::new(),
        name: "scoring".into(),
        fingerprint: FP,
        entity_keys: vec![key("user_id", T::String)],
        views: vec![
            view(
                "profile",
                0,
                vec![
                    feature("age", T::Int64, Some(Kind::Int64Val(-1))),
                    feature("score", T::Float32, None),
                ],
            ),
            view("txn", DAY, vec![feature("count", T::Int64, None)]),
        ],
    }
}

/// `merchant`, fingerprint [`MERCHANT_FP`], keyed by `merchant_id` of `key_type`: view
/// `mprofile`, never stale (`risk` float32).
pub fn merchant(key_type: ValueType) -> pb::FeatureService {
    pb::FeatureService {
        feast: None,
        derived: vec![],
        derived_version: String::new(),
        name: "merchant".into(),
        fingerprint: MERCHANT_FP,
        entity_keys: vec![key("merchant_id", key_type)],
        views: vec![view(
            "mprofile",
            0,
            vec![feature("risk", ValueType::Float32, None)],
        )],
    }
}

/// Route `name` on the path prefix `/NAME`: `service`'s features in `format`, the entity ids in
/// `entity_fields`; full feature names, strict policies (a missing entity or a reader error is
/// refused, a stale feature is null), bodies up to [`MAX_BODY`], 10 entities, a 100 ms reader
/// timeout.
pub fn route(name: &str, service: &str, format: pb::Format, entity_fields: &[&str]) -> pb::Route {
    pb::Route {
        name: name.into(),
        r#match: prefix(&format!("/{name}")),
        service: service.into(),
        format: format as i32,
        entity_fields: entity_fields.iter().map(|f| f.to_string()).collect(),
        feature_names: pb::FeatureNames::Full as i32,
        on_missing_entity: pb::MissingEntityPolicy::MissingReject as i32,
        on_stale: pb::StalePolicy::StaleNull as i32,
        on_reader_error: pb::ReaderErrorPolicy::ReaderErrorReject as i32,
        max_body_bytes: MAX_BODY,
        max_entities: 10,
        reader_timeout_ms: 100,
        ..Default::default()
    }
}

/// `fraud`: a [`route`] on [`FRAUD_PREFIX`], [`scoring`] in KServe v1, ids in `user_id`.
pub fn fraud() -> pb::Route {
    pb::Route {
        r#match: prefix(FRAUD_PREFIX),
        ..route("fraud", "scoring", pb::Format::KserveV1, &["user_id"])
    }
}

/// Project `banking`, version `v1`: [`scoring`] and [`fraud`]; the reader at cluster
/// `ferry_reader`, authority `ferry-reader`; a 64 MiB near cache; `/v1/models/` protected (an
/// unmatched request under it is refused).
pub fn snapshot() -> pb::Snapshot {
    pb::Snapshot {
        project: "banking".into(),
        version: "v1".into(),
        reader_cluster: "ferry_reader".into(),
        reader_authority: "ferry-reader".into(),
        near_cache_max_bytes: 64 << 20,
        protected_paths: vec!["/v1/models/".into()],
        services: vec![scoring()],
        routes: vec![fraud()],
        on_demand_views: vec![],
        write_views: vec![],
        push_sources: vec![],
    }
}

/// [`snapshot`] with its route changed by `f`.
pub fn route_with(f: impl FnOnce(&mut pb::Route)) -> pb::Snapshot {
    let mut s = snapshot();
    f(&mut s.routes[0]);
    s
}

/// [`snapshot`] whose routes are copies of its route, each under a name and a match of its own:
/// for the tests of route selection (by path, host, headers, or by name alone).
pub fn routes_by_match(routes: Vec<(&str, pb::RouteMatch)>) -> pb::Snapshot {
    let mut s = snapshot();
    let base = s.routes[0].clone();
    s.routes = routes
        .into_iter()
        .map(|(name, m)| pb::Route {
            name: name.into(),
            r#match: Some(m),
            ..base.clone()
        })
        .collect();
    s
}

/// A route mutator (for [`route_with`]): the route in header mode, the entity id in the
/// `x-user-id` request header, the features in the default features header.
pub fn header_format(r: &mut pb::Route) {
    r.format = pb::Format::Header as i32;
    r.entity_fields = vec!["x-user-id".into()];
}

/// [`snapshot`] whose route also enriches from [`merchant`] (ids in `merchant_id`, of
/// `key_type`), in the same reader call; an entity missing from either service is null.
pub fn with_merchant(key_type: ValueType) -> pb::Snapshot {
    let mut s = snapshot();
    s.services.push(merchant(key_type));
    let r = &mut s.routes[0];
    r.extra_services = vec![pb::ExtraService {
        service: "merchant".into(),
        entity_fields: vec!["merchant_id".into()],
    }];
    r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
    s
}
