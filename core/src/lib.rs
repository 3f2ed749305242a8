//! Ferry's request logic, host-agnostic: plain Rust, unit-tested natively, shared by the
//! proxy-wasm adapter (`ferry-filter`), the dynamic module (`ferry-native`) and the control
//! plane (which validates every snapshot with [`config::Config::from_snapshot`] before Envoy
//! sees it). The expression language of on-demand views is its own crate, `ferry-expr`.
//!
//! The modules, in layers from the bottom up: a module imports (`use crate::...`) only from
//! the layers below its own, or from an earlier module of its own layer; tests may reach up
//! (the fake host, the request executor).
//!
//! 1. Leaves, importing no other module:
//!    - [`values`]: typed stored values, their type check and JSON forms.
//!    - [`civil`]: dates of day counts (RFC 3339 texts).
//!    - [`error`]: every error with its status and code.
//!    - [`signature`]: a pulled snapshot's Ed25519 signature.
//!    - [`near_cache`]: the near cache's layout (entry ids, sets, what an entry holds).
//!    - [`rules`]: a route's rules, each written once, for the filter and `ferry apply`.
//! 2. [`host`]: the [`host::Host`] seam the request runs over (Envoy's calls, or a fake one).
//! 3. [`config`]: the registry snapshot as the filter uses it: validated once, pre-indexed
//!    (a route's served-feature logging policy included).
//! 4. [`vector`]: decoding stored vectors, TTL and fingerprint checks.
//! 5. [`format`]: the request formats (one module per `format:` word) and what they share.
//! 6. [`log`], [`metrics`]: the record of what the model received (served-feature logging);
//!    the filter's stats.
//! 7. [`request`]: one request's life: a small executor over the [`host::Host`] seam, one
//!    file per step (admission, parse, lookup and the reader call, enrichment and the
//!    on-demand features, forward, reply).
//! 8. [`plugin_config`], then [`snapshot_pull`]: the filter's plugin configuration (a binary
//!    snapshot, or JSON for Istio and Envoy Gateway, inline or pulled from a URL, signed), and
//!    the pull of a snapshot from its URL.

pub mod civil;
pub mod config;
pub mod error;
pub mod format;
pub mod host;
pub mod log;
pub mod metrics;
pub mod near_cache;
pub mod plugin_config;
pub mod request;
pub mod rules;
pub mod signature;
pub mod snapshot_pull;
pub mod stage_clock;
pub mod values;
pub mod vector;
