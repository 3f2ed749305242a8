//! The types the request path reads: the snapshot's services, views and features, and its
//! routes with their format, policies, limits and conditions, all checked by `compile`.

use std::rc::Rc;

use ferry_protos::v1 as pb;

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
    /// The on-demand views, sorted by name (the services hold the ones they list).
    pub on_demand_views: Vec<Rc<OnDemandView>>,
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
    /// Its on-demand views, sorted by name: their features follow the stored vector's, in this
    /// order. A service may have no stored feature at all (then no entity key and no lookup).
    pub derived: Vec<DerivedPart>,
    /// Features over `derived`.
    pub derived_count: usize,
    /// Hash of the definitions of `derived`, for the `ferry` metadata and `x-ferry-*` (empty
    /// when there is none); the fingerprint covers only the stored vector.
    pub derived_version: String,
}

/// An on-demand view compiled: the input slots its programs read and its features.
#[derive(Debug)]
pub struct OnDemandView {
    pub name: String,
    /// Slots `0..request.len()`.
    pub request: Vec<RequestField>,
    /// Slots after `request.time` (`time_slot() + 1 ..`), sorted by (view, feature).
    pub stored: Vec<StoredInput>,
    /// Sorted by name.
    pub features: Vec<DerivedFeature>,
}

impl OnDemandView {
    /// The slot of `request.time` (int Unix seconds when Envoy received the request).
    pub fn time_slot(&self) -> usize {
        self.request.len()
    }

    /// The slot of `stored[i]`.
    pub fn stored_slot(&self, i: usize) -> usize {
        self.request.len() + 1 + i
    }

    /// Slots in all: what the caller's `Input` slice must hold.
    pub fn slot_count(&self) -> usize {
        self.request.len() + 1 + self.stored.len()
    }
}

/// A request field an on-demand view reads from each instance.
#[derive(Debug)]
pub struct RequestField {
    /// `request.<name>` in expressions.
    pub name: String,
    /// Where the instance holds it (instance key, tensor, JSON field, header).
    pub field: String,
    /// INT64, FLOAT64, BOOL, STRING or FLOAT32_LIST.
    pub value_type: pb::ValueType,
}

/// A stored feature an on-demand view reads.
#[derive(Debug)]
pub struct StoredInput {
    pub view: String,
    pub feature: String,
    pub value_type: pb::ValueType,
}

#[derive(Debug)]
pub struct DerivedFeature {
    pub name: String,
    pub value_type: pb::ValueType,
    /// The CEL text as written.
    pub text: String,
    pub program: ferry_expr::Program,
}

/// The features of one on-demand view a service lists, bound to the service's stored vector.
#[derive(Debug)]
pub struct DerivedPart {
    pub view: Rc<OnDemandView>,
    /// Indexes into `view.features`, in output order.
    pub features: Vec<usize>,
    /// For each of `view.stored`: its index in the service's flattened stored vector.
    pub stored_index: Vec<usize>,
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
    /// Feast's REST API (`POST /get-online-features`), answered by the filter from the
    /// services the route lists (`Route::feast_services`); the request never reaches an upstream.
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
    /// Features per entity, over all parts: the stored ones (`stored_count`), then the
    /// derived ones (`derived.count`).
    pub feature_count: usize,
    /// Stored features per entity, over all parts (the flattened stored vector's length).
    pub stored_count: usize,
    /// The on-demand features the route computes per entity, written after the stored ones.
    pub derived: RouteDerived,
    /// Output field name of every feature of an entity, stored then derived, per
    /// `feature_names`.
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
    /// `feast_rest`: the services a request may read (the route's service first, then its
    /// `feast_services`); empty on other formats and on a route built for one request.
    pub feast_services: Vec<Rc<Service>>,
    /// Served-feature logging (`log:`); None = off.
    pub log: Option<crate::config::log_policy::LogPolicy>,
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

    /// The type of every feature the route writes per entity, stored then derived (the order
    /// of `output_names`).
    pub fn value_types(&self) -> impl Iterator<Item = pb::ValueType> + '_ {
        let derived = self.derived.bindings.iter().flat_map(|b| {
            b.features
                .iter()
                .map(move |&i| b.view.features[i].value_type)
        });
        self.features().map(|f| f.value_type).chain(derived)
    }

    /// Whether some part has stored features, so that a lookup is needed: a route over
    /// on-demand views of request fields only makes no reader call.
    pub fn needs_lookup(&self) -> bool {
        self.stored_count > 0
    }
}

/// A route's on-demand features: the request fields it reads from each instance and each
/// on-demand view bound to the entity's flattened stored vector.
#[derive(Debug, Default)]
pub struct RouteDerived {
    /// The request fields read from each instance, once per (field, type), over every view.
    pub fields: Vec<RouteField>,
    /// One per (part, on-demand view the part's service lists), in part order.
    pub bindings: Vec<DerivedBinding>,
    /// Derived features per entity.
    pub count: usize,
    /// The parts' derived versions, comma-separated (empty when the route has none), for the
    /// `ferry` metadata and `x-ferry-derived-version`.
    pub version_label: String,
}

/// Where each instance holds a request field, and its declared type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteField {
    pub field: String,
    pub value_type: pb::ValueType,
}

/// One on-demand view of a route part, bound to the entity's features.
#[derive(Debug)]
pub struct DerivedBinding {
    pub view: Rc<OnDemandView>,
    /// Indexes into `view.features`, in output order.
    pub features: Vec<usize>,
    /// For each of `view.stored`: its index in the entity's flattened stored vector (over
    /// all parts).
    pub stored: Vec<usize>,
    /// For each of `view.request`: its index in `RouteDerived::fields`.
    pub request: Vec<usize>,
}

impl Config {
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
