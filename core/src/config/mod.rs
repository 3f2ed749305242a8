//! The registry snapshot as the filter uses it: decoded once in `on_configure`, validated whole,
//! and pre-indexed (output names, TTLs in microseconds, defaults as JSON) so that the request
//! path only looks things up.
//!
//! One way through, as a pipeline's configuration is compiled once and then only read:
//! - `model.rs`: the types the request path reads ([`Config`], [`Route`], [`Service`], the
//!   policies, [`Format`], [`RouteConditions`]).
//! - `compile/`: a `ferry.v1.Snapshot` → [`Config`], every rule checked once (the snapshot's
//!   fields in `mod.rs`, a service in `service.rs`, an on-demand view in `on_demand.rs`, a
//!   route in `route.rs`); a broken rule is a
//!   [`ConfigError`] (`error.rs`) and Envoy keeps the last good snapshot.
//! - `matching.rs`: which route a request takes (path, host, headers), and the protected
//!   prefixes under which an unmatched request is refused.
//! - `log_policy.rs`: a route's served-feature logging rates and the sampling decision.
//! - `encode.rs`: the model written back into a snapshot, for the control plane.
//! - `fixture.rs` (tests only): the standard snapshot as the filter holds it.

mod compile;
mod encode;
pub mod log_policy;
mod matching;
mod model;

pub use compile::ConfigError;
pub use matching::normalize_host;
pub use model::{
    Config, DerivedBinding, DerivedFeature, DerivedPart, EntityKey, Feature, Format,
    HeaderEncoding, HeaderMatch, HostMatch, KeyKind, OnDemandView, OnMissing, OnReaderError,
    OnStale, PathMatch, RequestField, Route, RouteConditions, RouteDerived, RouteField, RoutePart,
    Service, StoredInput, View, OWN_HEADER_PREFIX,
};

#[cfg(test)]
pub mod fixture;
