//! The registry snapshot as the filter uses it: decoded once in `on_configure`, validated whole,
//! and pre-indexed (output names, TTLs in microseconds, defaults as JSON) so that the request
//! path only looks things up.

use std::rc::Rc;

use ferry_protos::limits;
use ferry_protos::v1 as pb;

use crate::rules;
use prost::Message;

use crate::values;

/// Header prefix Ferry owns: whatever a client sends under it is removed.
pub const OWN_HEADER_PREFIX: &str = "x-ferry-";

#[derive(Debug)]
pub struct Config {
    pub project: String,
    pub version: String,
    pub reader_cluster: String,
    pub reader_authority: String,
    pub routes: Vec<Route>,
    /// Sets of the near cache (see `near_cache`), from the snapshot's byte bound.
    pub near_cache_sets: u32,
    /// Some route is selected by name only: read the Envoy route's metadata on every request
    /// (one property read; skipped otherwise).
    pub reads_route_metadata: bool,
    /// Normalised, lowercase path prefixes under which an unmatched request is refused.
    pub protected_paths: Vec<String>,
    /// Request headers Ferry writes besides `x-ferry-*` (routes' custom features headers):
    /// removed from every request, like `x-ferry-*`.
    pub owned_headers: Vec<String>,
    /// Envoy holds the request headers while the body is read (the wasm filter's
    /// `allow_on_headers_stop_iteration` is set), so Ferry may rewrite them after the body:
    /// true for a binary snapshot (Ferry's own Envoy configs set the flag), as the JSON
    /// plugin configuration says otherwise (see `plugin_config`).
    pub headers_held: bool,
    /// Every FeatureService of the snapshot, in its order: a `feast_rest` request names any.
    pub services: Vec<Rc<Service>>,
}

#[derive(Debug)]
pub struct Service {
    pub name: String,
    pub fingerprint: u64,
    pub fingerprint_hex: String,
    pub entity_keys: Vec<EntityKey>,
    pub views: Vec<View>,
    /// Number of features over all views (the flattened vector length).
    pub feature_count: usize,
    /// Set for a service backed by a Feast registry: where Feast's Redis layout keeps it,
    /// sent along with each reader lookup of the service (checked against the service here).
    pub feast: Option<pb::FeastLayout>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    String,
    Int64,
}

#[derive(Debug)]
pub struct EntityKey {
    pub join_key: String,
    pub kind: KeyKind,
}

#[derive(Debug)]
pub struct View {
    pub name: String,
    /// None = never stale.
    pub ttl_us: Option<i64>,
    pub features: Vec<Feature>,
}

#[derive(Debug)]
pub struct Feature {
    pub name: String,
    pub value_type: pb::ValueType,
    /// The repo's default, for `on_missing_entity: default` (None = null).
    pub default: crate::values::FeatureValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMissing {
    Reject,
    Null,
    Default,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnStale {
    Null,
    Reject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnReaderError {
    Reject,
    Forward,
}

/// The request format of a route, with its options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Format {
    KserveV1,
    /// Open Inference Protocol JSON; `packed` = one FP32 `[N, F]` tensor.
    KserveV2 {
        packed: bool,
    },
    /// KServe v2 / Triton `ModelInfer` over gRPC (protobuf), with the same `packed` choice.
    KserveV2Grpc {
        packed: bool,
    },
    /// Any JSON: entities at `entity_pointer`, features written at `inject_pointer` of each.
    Json {
        entity_pointer: String,
        inject_pointer: String,
    },
    /// One entity whose ids are request headers; features go to `features_header`.
    Header {
        features_header: String,
        max_header_bytes: u32,
        encoding: HeaderEncoding,
    },
    /// Feast's REST API (`POST /get-online-features`), answered by the filter from any
    /// service of the snapshot; the request never reaches an upstream.
    FeastRest,
}

impl Format {
    /// The word `ferry.yaml` names this format by.
    pub fn word(&self) -> &'static str {
        match self {
            Format::KserveV1 => "kserve_v1",
            Format::KserveV2 { .. } => "kserve_v2",
            Format::KserveV2Grpc { .. } => "kserve_v2_grpc",
            Format::Json { .. } => "json",
            Format::Header { .. } => "header",
            Format::FeastRest => "feast_rest",
        }
    }

    /// Writes the format and its options into a snapshot route: the inverse of how
    /// `Config::from_snapshot` reads them (`route_format`).
    pub fn write_to(&self, r: &mut pb::Route) {
        match self {
            Format::KserveV1 => r.format = pb::Format::KserveV1 as i32,
            Format::KserveV2 { packed } => {
                r.format = pb::Format::KserveV2 as i32;
                r.packed = *packed;
            }
            Format::KserveV2Grpc { packed } => {
                r.format = pb::Format::KserveV2Grpc as i32;
                r.packed = *packed;
            }
            Format::Json {
                entity_pointer,
                inject_pointer,
            } => {
                r.format = pb::Format::Json as i32;
                r.entity_pointer.clone_from(entity_pointer);
                r.inject_pointer.clone_from(inject_pointer);
            }
            Format::Header {
                features_header,
                max_header_bytes,
                encoding,
            } => {
                r.format = pb::Format::Header as i32;
                r.features_header.clone_from(features_header);
                r.max_header_bytes = *max_header_bytes;
                r.features_encoding = match encoding {
                    HeaderEncoding::Json => pb::FeaturesEncoding::Json,
                    HeaderEncoding::ProtobufBase64 => pb::FeaturesEncoding::ProtobufBase64,
                } as i32;
            }
            Format::FeastRest => r.format = pb::Format::FeastRest as i32,
        }
    }
}

/// How header mode writes the features header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderEncoding {
    /// Compact ASCII JSON object (+ a status header when some feature is not PRESENT).
    Json,
    /// Base64 of a `ferry.v1.HeaderFeatures` (names, values, statuses).
    ProtobufBase64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathMatch {
    Prefix(String),
    Exact(String),
}

/// Request host condition, on `:authority` without its port, lowercase.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HostMatch {
    Exact(String),
    /// `*.example.com` is kept as `.example.com`: any subdomain, not the domain itself.
    Subdomain(String),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HeaderMatch {
    pub name: String,
    /// None: present with any value.
    pub exact: Option<String>,
}

/// Every condition that is set must hold; a route with none is selected by name only (from
/// an Envoy route's metadata).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RouteConditions {
    pub path: Option<PathMatch>,
    pub host: Option<HostMatch>,
    pub headers: Vec<HeaderMatch>,
}

impl HostMatch {
    /// A host condition as `ferry.yaml` and the snapshot spell it: a host name or `*.domain`,
    /// without a port; case-insensitive.
    pub fn parse(host: &str) -> Result<HostMatch, String> {
        let h = host.to_ascii_lowercase();
        if !ferry_protos::is_valid_host_match(&h) {
            return Err(format!(
                "host '{host}' must be a host name or *.domain, without a port"
            ));
        }
        Ok(match h.strip_prefix("*.") {
            Some(domain) => HostMatch::Subdomain(format!(".{domain}")),
            None => HostMatch::Exact(h),
        })
    }

    /// The spelling [`HostMatch::parse`] reads.
    pub fn pattern(&self) -> String {
        match self {
            HostMatch::Exact(h) => h.clone(),
            HostMatch::Subdomain(suffix) => format!("*{suffix}"),
        }
    }
}

impl std::fmt::Display for RouteConditions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.by_name_only() {
            return write!(f, "by name (Envoy route metadata)");
        }
        let mut parts = Vec::new();
        match &self.path {
            Some(PathMatch::Prefix(p)) => parts.push(format!("prefix {p}")),
            Some(PathMatch::Exact(p)) => parts.push(format!("exact {p}")),
            None => {}
        }
        if let Some(h) = &self.host {
            parts.push(format!("host {}", h.pattern()));
        }
        for h in &self.headers {
            match &h.exact {
                Some(v) => parts.push(format!("header {}={v}", h.name)),
                None => parts.push(format!("header {}", h.name)),
            }
        }
        write!(f, "{}", parts.join(" "))
    }
}

impl RouteConditions {
    pub fn by_name_only(&self) -> bool {
        self.path.is_none() && self.host.is_none() && self.headers.is_empty()
    }

    /// The conditions as a snapshot writes them: the inverse of how `Config::from_snapshot`
    /// reads them (`conditions`).
    pub fn to_proto(&self) -> pb::RouteMatch {
        let (path_prefix, path_exact) = match &self.path {
            Some(PathMatch::Prefix(p)) => (p.clone(), String::new()),
            Some(PathMatch::Exact(p)) => (String::new(), p.clone()),
            None => (String::new(), String::new()),
        };
        pb::RouteMatch {
            path_prefix,
            path_exact,
            host: self
                .host
                .as_ref()
                .map(HostMatch::pattern)
                .unwrap_or_default(),
            headers: self
                .headers
                .iter()
                .map(|h| pb::HeaderMatch {
                    name: h.name.clone(),
                    exact: h.exact.clone().unwrap_or_default(),
                })
                .collect(),
        }
    }

    fn accepts(
        &self,
        path: &str,
        host: &mut Lazy<'_>,
        header: &dyn Fn(&str) -> Option<String>,
    ) -> bool {
        if self.by_name_only() {
            return false;
        }
        let path_ok = match &self.path {
            None => true,
            Some(PathMatch::Prefix(p)) => path.starts_with(p.as_str()),
            Some(PathMatch::Exact(p)) => path == p,
        };
        if !path_ok {
            return false;
        }
        if let Some(want) = &self.host {
            let got = host.get();
            let ok = match want {
                HostMatch::Exact(h) => got == h,
                HostMatch::Subdomain(suffix) => {
                    got.len() > suffix.len() && got.ends_with(suffix.as_str())
                }
            };
            if !ok {
                return false;
            }
        }
        self.headers
            .iter()
            .all(|m| match (header(&m.name), &m.exact) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(v), Some(want)) => &v == want,
            })
    }
}

/// The request's host, read at most once and only when a route asks for it.
struct Lazy<'a> {
    header: &'a dyn Fn(&str) -> Option<String>,
    host: Option<String>,
}

impl Lazy<'_> {
    fn get(&mut self) -> &str {
        let header = self.header;
        self.host
            .get_or_insert_with(|| normalize_host(&header(":authority").unwrap_or_default()))
    }
}

/// `Example.COM:8080` → `example.com`; `[::1]:80` → `[::1]`.
pub fn normalize_host(authority: &str) -> String {
    let host = if authority.starts_with('[') {
        authority
            .split_once(']')
            .map_or(authority, |(h, _)| &authority[..=h.len()])
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// One FeatureService a route enriches from, with the request fields of its join keys.
#[derive(Debug)]
pub struct RoutePart {
    pub service: Rc<Service>,
    /// Request field of each join key, in the service's entity key order.
    pub entity_fields: Vec<String>,
}

#[derive(Debug)]
pub struct Route {
    pub name: String,
    pub conditions: RouteConditions,
    pub format: Format,
    /// Every service the route enriches from: the main one, then the extra services. Each
    /// entity is one lookup per part, all in the same reader call; an entity's features are
    /// the parts' features one after the other.
    pub parts: Vec<RoutePart>,
    /// The parts' service names and hex fingerprints, comma-separated (for one service: its
    /// name and fingerprint), for `x-ferry-service` / `x-ferry-fingerprint` and the metadata.
    pub services_label: String,
    pub fingerprints_label: String,
    /// Features per entity, over all parts.
    pub feature_count: usize,
    /// Output field name of every feature of the flattened vector, per `feature_names`.
    pub output_names: Vec<String>,
    /// `"name":` of each output name, JSON-escaped once, for the writers that emit JSON text.
    pub output_keys: Vec<Vec<u8>>,
    pub on_missing: OnMissing,
    pub on_stale: OnStale,
    pub on_reader_error: OnReaderError,
    pub max_body_bytes: u32,
    pub max_entities: u32,
    pub reader_timeout_ms: u32,
    /// Near cache maximum age; 0 = off for this route.
    pub cache_max_age_ms: u32,
}

impl Route {
    /// Keys a request holds per entity: one per part.
    pub fn keys_per_entity(&self) -> usize {
        self.parts.len().max(1)
    }

    /// The main service (the route's `service`).
    pub fn service(&self) -> &Service {
        &self.parts[0].service
    }

    /// The service key `j` of a request is looked up in (`j % keys_per_entity()`).
    pub fn service_of_key(&self, j: usize) -> &Service {
        &self.parts[j % self.keys_per_entity()].service
    }

    /// Every feature of an entity's flattened vector, in order, over all parts.
    pub fn features(&self) -> impl Iterator<Item = &Feature> {
        self.parts
            .iter()
            .flat_map(|p| p.service.views.iter().flat_map(|v| &v.features))
    }
}

/// Why a snapshot was refused (Envoy then keeps the last good one).
#[derive(Debug, PartialEq)]
pub enum ConfigError {
    /// The plugin configuration is not a `ferry.v1.Snapshot`.
    Undecodable(String),
    /// A part of the snapshot (`route 'fraud'`, `service 'scoring': view 'profile'`) breaks a
    /// rule; `reason` is the rule's own message (see `rules`).
    Invalid { part: String, reason: String },
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::Undecodable(e) => {
                write!(f, "invalid ferry snapshot: not a ferry.v1.Snapshot: {e}")
            }
            ConfigError::Invalid { part, reason } => {
                write!(f, "invalid ferry snapshot: {part}: {reason}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

fn invalid<T>(part: &str, reason: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::Invalid {
        part: part.to_owned(),
        reason: reason.into(),
    })
}

impl Config {
    pub fn from_bytes(bytes: &[u8]) -> Result<Config, ConfigError> {
        let snap =
            pb::Snapshot::decode(bytes).map_err(|e| ConfigError::Undecodable(e.to_string()))?;
        Config::from_snapshot(snap)
    }

    pub fn from_snapshot(snap: pb::Snapshot) -> Result<Config, ConfigError> {
        if !ferry_protos::is_valid_name(&snap.project) {
            return invalid(
                "snapshot",
                format!("invalid project name '{}'", snap.project),
            );
        }
        if snap.reader_cluster.is_empty() {
            return invalid("snapshot", "reader_cluster is empty");
        }
        let mut services: Vec<Rc<Service>> = Vec::with_capacity(snap.services.len());
        for s in snap.services {
            if services.iter().any(|x| x.name == s.name) {
                return invalid("snapshot", format!("service '{}' defined twice", s.name));
            }
            services.push(Rc::new(service(s)?));
        }
        let mut routes = Vec::with_capacity(snap.routes.len());
        for r in snap.routes {
            routes.push(route(r, &services)?);
        }
        let mut protected_paths = Vec::with_capacity(snap.protected_paths.len());
        for p in snap.protected_paths {
            if !ferry_protos::path::is_protected_prefix(&p) {
                return invalid(
                    "snapshot",
                    format!(
                        "protected path '{p}' must be a normalised, lowercase path starting with /"
                    ),
                );
            }
            protected_paths.push(p);
        }
        let mut owned_headers: Vec<String> = Vec::new();
        for r in &routes {
            if let Format::Header {
                features_header, ..
            } = &r.format
            {
                if !features_header.starts_with(OWN_HEADER_PREFIX)
                    && !owned_headers.contains(features_header)
                {
                    owned_headers.push(features_header.clone());
                }
            }
        }
        Ok(Config {
            protected_paths,
            owned_headers,
            project: snap.project,
            version: snap.version,
            reader_authority: if snap.reader_authority.is_empty() {
                snap.reader_cluster.clone()
            } else {
                snap.reader_authority
            },
            reader_cluster: snap.reader_cluster,
            reads_route_metadata: routes.iter().any(|r| r.conditions.by_name_only()),
            routes,
            near_cache_sets: crate::near_cache::sets_for(snap.near_cache_max_bytes),
            headers_held: true,
            services,
        })
    }

    /// Index of the first route whose conditions accept the request: `path` (query string
    /// ignored), and the request headers through `header` (`:authority` for the host), read
    /// only when a route has such a condition.
    pub fn match_route(
        &self,
        path: &str,
        header: &dyn Fn(&str) -> Option<String>,
    ) -> Option<usize> {
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        let mut host = Lazy { header, host: None };
        self.routes
            .iter()
            .position(|r| r.conditions.accepts(path, &mut host, header))
    }

    /// The protected prefix `path` (normalised) lies under, if any.
    pub fn protected_prefix(&self, path: &str) -> Option<&str> {
        self.protected_paths
            .iter()
            .find(|p| ferry_protos::path::is_under(path, p))
            .map(String::as_str)
    }

    /// Whether Ferry owns this request header (lowercase name): a client's value never reaches
    /// the model.
    pub fn owns_header(&self, name: &str) -> bool {
        name.starts_with(OWN_HEADER_PREFIX) || self.owned_headers.iter().any(|h| h == name)
    }

    /// Index of the route with this name (an Envoy route's `filter_metadata.ferry.route`).
    pub fn route_named(&self, name: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.name == name)
    }
}

fn conditions(m: pb::RouteMatch, ctx: &str) -> Result<RouteConditions, ConfigError> {
    let path = match (m.path_prefix.is_empty(), m.path_exact.is_empty()) {
        (true, true) => None,
        (false, true) => Some(PathMatch::Prefix(m.path_prefix)),
        (true, false) => Some(PathMatch::Exact(m.path_exact)),
        (false, false) => return invalid(ctx, "set at most one of path_prefix and path_exact"),
    };
    if let Some(PathMatch::Prefix(p) | PathMatch::Exact(p)) = &path {
        // Requests are matched on their normalised path: a path in another form never matches.
        if !ferry_protos::path::is_normalized(p) {
            return invalid(ctx, format!("path '{p}' is not a normalised path"));
        }
    }
    let host = if m.host.is_empty() {
        None
    } else {
        match HostMatch::parse(&m.host) {
            Ok(h) => Some(h),
            Err(e) => return invalid(ctx, e),
        }
    };
    let mut headers = Vec::with_capacity(m.headers.len());
    for h in m.headers {
        if !ferry_protos::is_valid_header_match_name(&h.name) {
            return invalid(
                ctx,
                format!(
                    "header match name '{}' must be a lowercase header name",
                    h.name
                ),
            );
        }
        headers.push(HeaderMatch {
            name: h.name,
            exact: (!h.exact.is_empty()).then_some(h.exact),
        });
    }
    Ok(RouteConditions {
        path,
        host,
        headers,
    })
}

fn service(s: pb::FeatureService) -> Result<Service, ConfigError> {
    let ctx = format!("service '{}'", s.name);
    if !ferry_protos::is_valid_name(&s.name) {
        return invalid(&ctx, "invalid name");
    }
    if s.fingerprint == 0 {
        return invalid(&ctx, "fingerprint is 0");
    }
    if s.entity_keys.is_empty() {
        return invalid(&ctx, "no entity keys");
    }
    if s.entity_keys.len() > limits::MAX_JOIN_KEYS {
        return invalid(
            &ctx,
            format!(
                "{} join keys, at most {}",
                s.entity_keys.len(),
                limits::MAX_JOIN_KEYS
            ),
        );
    }
    let mut entity_keys = Vec::with_capacity(s.entity_keys.len());
    for k in s.entity_keys {
        let kind = match pb::ValueType::try_from(k.r#type) {
            Ok(pb::ValueType::String) => KeyKind::String,
            Ok(pb::ValueType::Int64) => KeyKind::Int64,
            _ => {
                return invalid(
                    &ctx,
                    format!("join key '{}' must be string or int64", k.join_key),
                )
            }
        };
        entity_keys.push(EntityKey {
            join_key: k.join_key,
            kind,
        });
    }
    let views = s
        .views
        .into_iter()
        .map(|v| view(v, &ctx))
        .collect::<Result<Vec<View>, ConfigError>>()?;
    let feature_count = views.iter().map(|v| v.features.len()).sum();
    if feature_count == 0 {
        return invalid(&ctx, "no features");
    }
    if let Some(layout) = &s.feast {
        feast_layout(layout, &entity_keys, &views, &ctx)?;
    }
    Ok(Service {
        feast: s.feast,
        fingerprint_hex: ferry_protos::fingerprint_hex(s.fingerprint),
        name: s.name,
        fingerprint: s.fingerprint,
        entity_keys,
        views,
        feature_count,
    })
}

/// A Feast layout must describe exactly the service: its join keys (same names, order and
/// types) and, per view, one 4-byte field per feature and a timestamp field.
fn feast_layout(
    layout: &pb::FeastLayout,
    keys: &[EntityKey],
    views: &[View],
    ctx: &str,
) -> Result<(), ConfigError> {
    let fctx = format!("{ctx}: feast layout");
    if !ferry_protos::is_valid_name(&layout.project) {
        return invalid(&fctx, "invalid project name");
    }
    let keys_match = layout.join_keys.len() == keys.len()
        && layout
            .join_keys
            .iter()
            .zip(keys)
            .all(|(f, k)| f.name == k.join_key && f.int64 == (k.kind == KeyKind::Int64));
    if !keys_match {
        return invalid(&fctx, "join keys differ from the service's entity keys");
    }
    let views_match = layout.views.len() == views.len()
        && layout.views.iter().zip(views).all(|(f, v)| {
            f.feature_fields.len() == v.features.len()
                && f.feature_fields.iter().all(|x| x.len() == 4)
                && !f.timestamp_field.is_empty()
        });
    if !views_match {
        return invalid(&fctx, "views or feature fields differ from the service's");
    }
    Ok(())
}

fn view(v: pb::ServiceView, ctx: &str) -> Result<View, ConfigError> {
    let vctx = format!("{ctx}: view '{}'", v.name);
    if v.features.is_empty() {
        return invalid(&vctx, "no features");
    }
    if v.ttl_seconds < 0 {
        return invalid(&vctx, "negative ttl");
    }
    let mut features = Vec::with_capacity(v.features.len());
    for f in v.features {
        let value_type = match pb::ValueType::try_from(f.r#type) {
            Ok(pb::ValueType::Unspecified) | Err(_) => {
                return invalid(&vctx, format!("feature '{}' has no type", f.name))
            }
            Ok(t) => t,
        };
        let default = match f.default_value {
            None => None,
            Some(d) if values::matches_type(&d.kind, value_type) => d.kind,
            Some(_) => {
                return invalid(
                    &vctx,
                    format!("feature '{}': default has the wrong type", f.name),
                )
            }
        };
        features.push(Feature {
            name: f.name,
            value_type,
            default,
        });
    }
    Ok(View {
        name: v.name,
        ttl_us: (v.ttl_seconds > 0).then(|| v.ttl_seconds.saturating_mul(1_000_000)),
        features,
    })
}

fn route(r: pb::Route, services: &[Rc<Service>]) -> Result<Route, ConfigError> {
    let ctx = format!("route '{}'", r.name);
    let wrap = |reason: String| ConfigError::Invalid {
        part: ctx.clone(),
        reason,
    };
    let parts = route_parts(&r, services).map_err(wrap)?;
    let conditions = conditions(r.r#match.clone().unwrap_or_default(), &ctx)?;
    let format = route_format(&r, &parts).map_err(wrap)?;
    let short = match pb::FeatureNames::try_from(r.feature_names) {
        Ok(pb::FeatureNames::Full) => false,
        Ok(pb::FeatureNames::Short) => true,
        _ => return invalid(&ctx, "feature_names must be full or short"),
    };
    let output_names = output_names(&parts, short).map_err(wrap)?;
    let (on_missing, on_stale, on_reader_error) = policies(&r).map_err(wrap)?;
    let bounded = |b: &rules::Bound, v: u32| b.snapshot_value(v).map_err(wrap);
    let max_entities = bounded(&rules::MAX_ENTITIES, r.max_entities)?;
    rules::keys_per_call(max_entities, parts.len()).map_err(wrap)?;
    let output_keys = output_keys(&output_names);
    let (services_label, fingerprints_label) = labels(&parts);
    Ok(Route {
        services_label,
        fingerprints_label,
        feature_count: output_names.len(),
        name: r.name,
        conditions,
        format,
        parts,
        output_names,
        output_keys,
        on_missing,
        on_stale,
        on_reader_error,
        max_body_bytes: bounded(&rules::MAX_BODY_BYTES, r.max_body_bytes)?,
        max_entities,
        reader_timeout_ms: bounded(&rules::READER_TIMEOUT_MS, r.reader_timeout_ms)?,
        cache_max_age_ms: bounded(&rules::CACHE_MAX_AGE_MS, r.cache_max_age_ms)?,
    })
}

/// `"name":` of each output name, JSON-escaped once.
fn output_keys(names: &[String]) -> Vec<Vec<u8>> {
    names
        .iter()
        .map(|name| {
            let mut k = Vec::with_capacity(name.len() + 3);
            values::write_str(&mut k, name);
            k.push(b':');
            k
        })
        .collect()
}

/// The parts' service names and hex fingerprints, comma-separated.
fn labels(parts: &[RoutePart]) -> (String, String) {
    let label = |f: &dyn Fn(&Service) -> &str| {
        parts
            .iter()
            .map(|p| f(&p.service))
            .collect::<Vec<_>>()
            .join(",")
    };
    (
        label(&|s| s.name.as_str()),
        label(&|s| s.fingerprint_hex.as_str()),
    )
}

impl Route {
    /// This route over other services (`parts`), with its own name, conditions, format,
    /// policies and limits, and full feature names: the route a `feast_rest` request is served
    /// by, once its body named the services.
    pub fn over_services(&self, parts: Vec<RoutePart>) -> Result<Route, String> {
        let output_names = output_names(&parts, false)?;
        let (services_label, fingerprints_label) = labels(&parts);
        Ok(Route {
            name: self.name.clone(),
            conditions: self.conditions.clone(),
            format: self.format.clone(),
            services_label,
            fingerprints_label,
            feature_count: output_names.len(),
            output_keys: output_keys(&output_names),
            output_names,
            parts,
            ..*self
        })
    }
}

/// The main service, then the extra ones, each with the request fields of its join keys.
fn route_parts(r: &pb::Route, services: &[Rc<Service>]) -> Result<Vec<RoutePart>, String> {
    let find = |name: &str| {
        services
            .iter()
            .find(|s| s.name == name)
            .cloned()
            .ok_or_else(|| format!("unknown service '{name}'"))
    };
    let main = (&r.service, &r.entity_fields);
    let extras = r
        .extra_services
        .iter()
        .map(|e| (&e.service, &e.entity_fields));
    let mut parts: Vec<RoutePart> = Vec::with_capacity(1 + r.extra_services.len());
    for (name, fields) in std::iter::once(main).chain(extras) {
        let service = find(name)?;
        if parts.iter().any(|p| p.service.name == service.name) {
            return Err(format!("service '{name}' is used twice"));
        }
        let join_keys: Vec<&str> = service
            .entity_keys
            .iter()
            .map(|k| k.join_key.as_str())
            .collect();
        rules::entity_fields(fields.len(), name, &join_keys)?;
        parts.push(RoutePart {
            service,
            entity_fields: fields.clone(),
        });
    }
    Ok(parts)
}

/// The route's format with its options, checked against its services.
fn route_format(r: &pb::Route, parts: &[RoutePart]) -> Result<Format, String> {
    Ok(match pb::Format::try_from(r.format) {
        Ok(pb::Format::KserveV1) => Format::KserveV1,
        Ok(pb::Format::KserveV2) => {
            packable(r, parts)?;
            Format::KserveV2 { packed: r.packed }
        }
        Ok(pb::Format::KserveV2Grpc) => {
            packable(r, parts)?;
            Format::KserveV2Grpc { packed: r.packed }
        }
        Ok(pb::Format::Json) => {
            rules::json_pointer("entity_pointer", &r.entity_pointer)?;
            rules::json_pointer("inject_pointer", &r.inject_pointer)?;
            Format::Json {
                entity_pointer: r.entity_pointer.clone(),
                inject_pointer: r.inject_pointer.clone(),
            }
        }
        Ok(pb::Format::Header) => {
            let named = (!r.features_header.is_empty()).then_some(r.features_header.as_str());
            let max_header_bytes = match r.max_header_bytes {
                0 => rules::MAX_HEADER_BYTES.default,
                v => rules::MAX_HEADER_BYTES.snapshot_value(v)?,
            };
            let encoding = match pb::FeaturesEncoding::try_from(r.features_encoding) {
                Ok(pb::FeaturesEncoding::Unspecified | pb::FeaturesEncoding::Json) => {
                    HeaderEncoding::Json
                }
                Ok(pb::FeaturesEncoding::ProtobufBase64) => HeaderEncoding::ProtobufBase64,
                Err(_) => return Err(format!("unknown features_encoding {}", r.features_encoding)),
            };
            Format::Header {
                features_header: rules::features_header(named)?,
                max_header_bytes,
                encoding,
            }
        }
        Ok(pb::Format::FeastRest) => Format::FeastRest,
        Ok(other) => return Err(format!("format {other:?} is not supported by this filter")),
        Err(_) => return Err(format!("unknown format {}", r.format)),
    })
}

/// A packed route's features must all fit its FP32 tensor.
fn packable(r: &pb::Route, parts: &[RoutePart]) -> Result<(), String> {
    if r.packed {
        for v in parts.iter().flat_map(|p| &p.service.views) {
            for f in &v.features {
                rules::packable(&v.name, &f.name, f.value_type)?;
            }
        }
    }
    Ok(())
}

/// The output name of every feature over all parts, by the shared rule.
fn output_names(parts: &[RoutePart], short: bool) -> Result<Vec<String>, String> {
    let entity_fields: Vec<&str> = parts
        .iter()
        .flat_map(|p| p.entity_fields.iter().map(String::as_str))
        .collect();
    let mut names = rules::OutputNames::default();
    for v in parts.iter().flat_map(|p| &p.service.views) {
        for f in &v.features {
            names.add(&v.name, &f.name, short, &entity_fields)?;
        }
    }
    Ok(names.names)
}

fn policies(r: &pb::Route) -> Result<(OnMissing, OnStale, OnReaderError), String> {
    let on_missing = match pb::MissingEntityPolicy::try_from(r.on_missing_entity) {
        Ok(pb::MissingEntityPolicy::MissingReject) => OnMissing::Reject,
        Ok(pb::MissingEntityPolicy::MissingNull) => OnMissing::Null,
        Ok(pb::MissingEntityPolicy::MissingDefault) => OnMissing::Default,
        _ => return Err("on_missing_entity is not set".into()),
    };
    let on_stale = match pb::StalePolicy::try_from(r.on_stale) {
        Ok(pb::StalePolicy::StaleNull) => OnStale::Null,
        Ok(pb::StalePolicy::StaleReject) => OnStale::Reject,
        _ => return Err("on_stale is not set".into()),
    };
    let on_reader_error = match pb::ReaderErrorPolicy::try_from(r.on_reader_error) {
        Ok(pb::ReaderErrorPolicy::ReaderErrorReject) => OnReaderError::Reject,
        Ok(pb::ReaderErrorPolicy::ReaderErrorForward) => OnReaderError::Forward,
        _ => return Err("on_reader_error is not set".into()),
    };
    Ok((on_missing, on_stale, on_reader_error))
}

/// The standard snapshot of ferry-test-support as the filter holds it, for the unit tests of
/// every module.
#[cfg(test)]
pub mod fixture {
    use super::*;
    pub use ferry_test_support::snapshot::{snapshot, DAY, FP};

    pub fn config() -> Config {
        Config::from_snapshot(snapshot()).unwrap()
    }

    pub fn route_with(f: impl FnOnce(&mut pb::Route)) -> Config {
        Config::from_snapshot(ferry_test_support::snapshot::route_with(f)).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::fixture::*;
    use super::*;

    #[test]
    fn route_conditions_written_to_a_snapshot_read_back_the_same() {
        let all = RouteConditions {
            path: Some(PathMatch::Exact("/v1/models/fraud:predict".into())),
            host: Some(HostMatch::parse("*.Example.com").unwrap()),
            headers: vec![
                HeaderMatch {
                    name: "x-model".into(),
                    exact: Some("fraud".into()),
                },
                HeaderMatch {
                    name: "x-tenant".into(),
                    exact: None,
                },
            ],
        };
        assert_eq!(all.host, Some(HostMatch::Subdomain(".example.com".into())));
        for c in [all, RouteConditions::default()] {
            assert_eq!(conditions(c.to_proto(), "r").unwrap(), c, "{c}");
        }
    }

    #[test]
    fn a_format_written_to_a_snapshot_route_reads_back_the_same() {
        for format in [
            Format::KserveV1,
            Format::KserveV2 { packed: true },
            Format::KserveV2Grpc { packed: true },
            Format::KserveV2Grpc { packed: false },
            Format::Json {
                entity_pointer: "/rows".into(),
                inject_pointer: "/features".into(),
            },
            Format::Header {
                features_header: "x-my-features".into(),
                max_header_bytes: 4096,
                encoding: HeaderEncoding::ProtobufBase64,
            },
            Format::FeastRest,
        ] {
            let mut r = pb::Route::default();
            format.write_to(&mut r);
            assert_eq!(
                route_format(&r, &[]),
                Ok(format.clone()),
                "{}",
                format.word()
            );
        }
    }

    #[test]
    fn valid_snapshot_is_indexed() {
        let c = Config::from_bytes(&snapshot().encode_to_vec()).unwrap();
        let r = &c.routes[0];
        assert_eq!(
            r.output_names,
            ["profile__age", "profile__score", "txn__count"]
        );
        assert_eq!(r.service().feature_count, 3);
        assert_eq!(r.service().views[1].ttl_us, Some(DAY * 1_000_000));
        assert_eq!(r.service().views[0].ttl_us, None);
        assert_eq!(
            r.service().views[0].features[0].default,
            Some(pb::value::Kind::Int64Val(-1))
        );
        assert_eq!(r.service().fingerprint_hex, "123456789abcdef0");
    }

    #[test]
    fn short_names_and_route_matching() {
        let c = route_with(|r| r.feature_names = pb::FeatureNames::Short as i32);
        assert_eq!(c.routes[0].output_names, ["age", "score", "count"]);
        let none = |_: &str| None;
        assert_eq!(
            c.match_route("/v1/models/fraud:predict?x=1", &none),
            Some(0)
        );
        assert!(c.match_route("/v1/models/other:predict", &none).is_none());
        let c = route_with(|r| {
            r.r#match = Some(pb::RouteMatch {
                path_exact: "/p".into(),
                ..Default::default()
            })
        });
        assert!(c.match_route("/p?q", &none).is_some());
        assert!(c.match_route("/p/x", &none).is_none());
    }

    fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn routes_match_on_host_and_headers_and_by_name() {
        let mut s = snapshot();
        let base = s.routes[0].clone();
        let with = |name: &str, m: pb::RouteMatch| pb::Route {
            name: name.into(),
            r#match: Some(m),
            ..base.clone()
        };
        s.routes = vec![
            with(
                "by-host",
                pb::RouteMatch {
                    path_prefix: "/v1/".into(),
                    host: "Models.Example.com".into(),
                    ..Default::default()
                },
            ),
            with(
                "by-subdomain",
                pb::RouteMatch {
                    host: "*.example.com".into(),
                    ..Default::default()
                },
            ),
            with(
                "by-header",
                pb::RouteMatch {
                    path_prefix: "/".into(),
                    headers: vec![
                        pb::HeaderMatch {
                            name: "x-model".into(),
                            exact: "fraud".into(),
                        },
                        pb::HeaderMatch {
                            name: "x-tenant".into(),
                            exact: String::new(),
                        },
                    ],
                    ..Default::default()
                },
            ),
            with("by-name", pb::RouteMatch::default()),
        ];
        let c = Config::from_snapshot(s).unwrap();
        let m = |path: &str, h: &[(&str, &str)]| {
            c.match_route(path, &headers(h))
                .map(|i| c.routes[i].name.as_str())
        };
        assert_eq!(
            m("/v1/x", &[(":authority", "models.example.com:8080")]),
            Some("by-host")
        );
        assert_eq!(
            m("/v1/x", &[(":authority", "MODELS.example.com.")]),
            Some("by-host")
        );
        assert_eq!(
            m("/v2/x", &[(":authority", "models.example.com")]),
            Some("by-subdomain")
        );
        assert_eq!(
            m("/x", &[(":authority", "a.b.example.com")]),
            Some("by-subdomain")
        );
        assert_eq!(
            m("/x", &[(":authority", "example.com")]),
            None,
            "not a subdomain"
        );
        assert_eq!(m("/x", &[(":authority", "badexample.com")]), None);
        assert_eq!(
            m("/x", &[("x-model", "fraud"), ("x-tenant", "")]),
            Some("by-header"),
            "present with an empty value"
        );
        assert_eq!(m("/x", &[("x-model", "fraud")]), None, "x-tenant absent");
        assert_eq!(m("/x", &[("x-model", "Fraud"), ("x-tenant", "a")]), None);
        assert_eq!(m("/x", &[]), None, "by-name never matches a request");
        assert_eq!(c.route_named("by-name"), Some(3));
        assert_eq!(c.route_named("nope"), None);
        assert_eq!(normalize_host("[::1]:10000"), "[::1]");
        assert_eq!(normalize_host("Host"), "host");
    }

    #[test]
    fn invalid_snapshots_are_refused_with_a_reason() {
        let refuse = |f: &dyn Fn(&mut pb::Snapshot), want: &str| {
            let mut s = snapshot();
            f(&mut s);
            let e = Config::from_snapshot(s).unwrap_err();
            let e = e.to_string();
            assert!(e.contains(want), "{e} does not contain {want}");
        };
        refuse(
            &|s| s.routes[0].service = "nope".into(),
            "unknown service 'nope'",
        );
        refuse(
            &|s| {
                s.routes[0].r#match = Some(pb::RouteMatch {
                    path_prefix: "/a".into(),
                    path_exact: "/a".into(),
                    ..Default::default()
                })
            },
            "set at most one of path_prefix and path_exact",
        );
        refuse(
            &|s| {
                s.routes[0].r#match = Some(pb::RouteMatch {
                    host: "example.com:80".into(),
                    ..Default::default()
                })
            },
            "must be a host name or *.domain",
        );
        refuse(
            &|s| {
                s.routes[0].r#match = Some(pb::RouteMatch {
                    headers: vec![pb::HeaderMatch {
                        name: "X-Upper".into(),
                        exact: String::new(),
                    }],
                    ..Default::default()
                })
            },
            "must be a lowercase header name",
        );
        refuse(
            &|s| s.routes[0].on_missing_entity = 0,
            "on_missing_entity is not set",
        );
        refuse(
            &|s| s.routes[0].entity_fields.clear(),
            "entity names 0 field(s) but feature service 'scoring' has 1 entity key(s)",
        );
        refuse(&|s| s.routes[0].format = 99, "unknown format 99");
        refuse(
            &|s| s.routes[0].format = pb::Format::Unspecified as i32,
            "not supported",
        );
        refuse(
            &|s| {
                s.routes[0].format = pb::Format::Header as i32;
                s.routes[0].features_header = "x bad".into();
            },
            "is not a header name",
        );
        refuse(&|s| s.services[0].fingerprint = 0, "fingerprint is 0");
        refuse(&|s| s.reader_cluster.clear(), "reader_cluster");
        refuse(
            &|s| {
                s.services[0].views[0].features[0].default_value = Some(pb::Value {
                    kind: Some(pb::value::Kind::StringVal("x".into())),
                })
            },
            "default has the wrong type",
        );
        refuse(
            &|s| {
                s.routes[0].feature_names = pb::FeatureNames::Short as i32;
                s.services[0].views[1].features[0].name = "age".into();
            },
            "feature name 'age' is given by views 'profile' and 'txn'",
        );
        assert!(Config::from_bytes(b"\xff\xff garbage").is_err());
    }

    /// A Feast layout matching the fixture's `scoring` service.
    fn feast_layout() -> pb::FeastLayout {
        let view = |name: &str, features: &[&str]| pb::FeastView {
            timestamp_field: ferry_protos::feast::timestamp_field(name),
            feature_fields: features
                .iter()
                .map(|f| ferry_protos::feast::feature_field(name, f))
                .collect(),
        };
        pb::FeastLayout {
            project: "bank".into(),
            join_keys: vec![pb::FeastJoinKey {
                name: "user_id".into(),
                int64: false,
            }],
            views: vec![view("profile", &["age", "score"]), view("txn", &["count"])],
        }
    }

    #[test]
    fn a_feast_layout_must_describe_its_service_exactly() {
        let with = |edit: &dyn Fn(&mut pb::FeastLayout)| {
            let mut s = snapshot();
            let mut layout = feast_layout();
            edit(&mut layout);
            s.services[0].feast = Some(layout);
            Config::from_snapshot(s).map_err(|e| e.to_string())
        };
        let c = with(&|_| {}).unwrap();
        assert_eq!(c.routes[0].service().feast, Some(feast_layout()));
        let int64 = with(&|l| l.join_keys[0].int64 = true).unwrap_err();
        assert!(int64.contains("join keys differ"), "{int64}");
        let short = with(&|l| l.views[1].feature_fields.clear()).unwrap_err();
        assert!(short.contains("feature fields differ"), "{short}");
        let project = with(&|l| l.project = "a:b".into()).unwrap_err();
        assert!(project.contains("invalid project name"), "{project}");
    }
}
