//! Ferry's request logic, host-agnostic: plain Rust, unit-tested natively, shared by the
//! proxy-wasm adapter (`ferry-filter`) and by the control plane (which validates every snapshot
//! with [`config::Config::from_snapshot`] before Envoy sees it).
//!
//! - [`config`]: the registry snapshot as the filter uses it: validated once, pre-indexed.
//! - [`plugin_config`]: the filter's plugin configuration: a binary snapshot, or JSON (Istio,
//!   Envoy Gateway), inline or pulled from a URL ([`snapshot_pull`]), signed ([`signature`]).
//! - [`format`]: the request formats (one module per `format:` word) and what they share.
//! - [`vector`], [`values`]: decoding stored vectors, TTL and fingerprint checks, typed values.
//! - [`enrich`]: the reader call and its answer, features per entity, the rewrite.
//! - [`request`]: one request's life: a small executor over the [`host::Host`] seam, one file
//!   per step (admission, parse, lookup, forward, reply).
//! - [`log`]: served-feature logging: which requests a route logs, and the record of what the
//!   model received.
//! - [`rules`]: a route's rules, each written once, for the filter and `ferry apply`.
//! - [`civil`]: dates of day counts (RFC 3339 texts).
//! - [`near_cache`], [`metrics`], [`error`]: the near cache's layout, stats, and every error
//!   with its status and code.

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
pub mod values;
pub mod vector;
