//! `ferry`, the control plane CLI's library: everything between a feature repo on disk and the
//! bytes that Envoy and Redis receive.
//!
//! The repo itself (from `ferry.yaml` or a Feast registry to the snapshot) is the `ferry-repo`
//! crate; this one holds what is done with it. Module map:
//! - [`materialize`]: each service's vectors (from `ferry_repo::tables`, encoded by
//!   `ferry-vector-store`) written into Redis in pipelined batches, pruning.
//! - [`envoy_config`]: renders the static Envoy bootstrap with the snapshot inlined.
//! - [`envoy_xds`]: renders the xDS bootstrap (filter config from the control plane).
//! - [`xds`]: an xDS server as a library (protocol core without I/O, ADS/ECDS gRPC services)
//!   over two interfaces the application implements: a snapshot source and callbacks.
//! - [`serve`]: `ferry serve`, the control plane: current snapshot (the xDS server's source),
//!   stream table (its callbacks), the filter's xDS resources, HTTP API and its wire types,
//!   repo watching.
//! - [`write`]: feature writes (`POST /push`, `/write-to-online-store`, Feast's shapes) that
//!   `ferry serve` executes: validation, then per vector the merge rule and the atomic
//!   compare-and-set of `ferry-vector-store`.
//! - [`push`]: the HTTP client `ferry apply --push` uses, and which services a push leaves
//!   to materialize first.
//! - [`oci`]: `ferry oci-image`, the filter as an OCI image layout (Istio, Envoy Gateway).
//! - [`log_sink`]: `ferry log-sink`: served-feature records from Envoy's gRPC access-log
//!   service into Parquet files in Feast's feature-logging layout.
//! - [`plugin_pull`]: the filter's JSON configuration that pulls (and verifies) its snapshot.
//!
//! The `ferry` binary (`main.rs`, one file per subcommand under `cli/`) only parses flags,
//! calls these modules and prints what they return.

pub mod envoy_config;
pub mod envoy_xds;
pub mod log_sink;
pub mod materialize;
pub mod oci;
pub mod plugin_pull;
pub mod push;
pub mod serve;
pub mod write;
pub mod xds;
