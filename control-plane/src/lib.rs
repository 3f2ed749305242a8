//! `ferry`, the control plane CLI's library: everything between a feature repo on disk and the
//! bytes that Envoy and Redis receive.
//!
//! Module map:
//! - [`types`]: value and key types of the repo language, and their proto counterparts.
//! - [`repo`]: `ferry.yaml` (serde model), validation that reports every problem at once, and
//!   the validated [`repo::Registry`] the rest of the crate works from.
//! - [`fingerprint`]: the stable hash of a FeatureService's schema (pins the vector layout),
//!   and the derived version of its on-demand views.
//! - [`expr`]: on-demand views' CEL text into Ferry's checked expression tree.
//! - [`snapshot`]: the registry snapshot (`ferry.v1.Snapshot`) delivered to the filter.
//! - [`sources`]: reading feature view sources (CSV; Parquet) into typed values.
//! - [`materialize`]: latest row per entity, vector encoding, pipelined writes into Redis.
//! - [`envoy_config`]: renders the static Envoy bootstrap with the snapshot inlined, the xDS
//!   bootstrap (filter config from the control plane), and the filter's JSON configuration
//!   that pulls (and verifies) its snapshot (Istio, Envoy Gateway).
//! - [`serve`]: `ferry serve`, the control plane: current snapshot (the xDS server's source),
//!   stream table (its callbacks), the filter's xDS resources, HTTP API and its wire types,
//!   repo watching.
//! - [`write`]: feature writes (`POST /push`, `/write-to-online-store`, Feast's shapes) that
//!   `ferry serve` executes: validation, the merge rule, an atomic compare-and-set per vector.
//! - [`oci`]: `ferry oci-image`, the filter as an OCI image layout (Istio, Envoy Gateway).
//!
//! Crates beside this one, under `control-plane/`:
//! - `ferry-xds` (`xds/`): an xDS server as a library (protocol core without I/O, ADS/ECDS gRPC
//!   services) over two interfaces the application implements: a snapshot source and callbacks.
//! - `ferry-log-sink` (`log-sink/`): `ferry log-sink`'s server: served-feature records from
//!   Envoy's gRPC access-log service into Parquet files in Feast's feature-logging layout.
//!
//! The `ferry` binary (`main.rs`, one file per subcommand under `cli/`) only parses flags,
//! calls these modules and prints what they return.

pub mod envoy_config;
pub mod expr;
pub mod fingerprint;
pub mod materialize;
pub mod oci;
pub mod repo;
pub mod serve;
pub mod snapshot;
pub mod sources;
pub mod types;
pub mod write;

#[cfg(test)]
pub(crate) mod test_support;
