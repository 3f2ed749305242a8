//! `ferry`, the control plane CLI's library: everything between a feature repo on disk and the
//! bytes that Envoy and Redis receive.
//!
//! The repo itself (from `ferry.yaml` or a Feast registry to the snapshot) is the `ferry-repo`
//! crate; this one holds what is done with it. Module map:
//! - [`materialize`]: each service's vectors (from `ferry_repo::tables`, encoded by
//!   `ferry-vector-store`) written into Redis in pipelined batches, pruning.
//! - [`envoy_config`]: renders the static Envoy bootstrap with the snapshot inlined, the xDS
//!   bootstrap (filter config from the control plane), and the filter's JSON configuration
//!   that pulls (and verifies) its snapshot (Istio, Envoy Gateway).
//! - [`serve`]: `ferry serve`, the control plane: current snapshot (the xDS server's source),
//!   stream table (its callbacks), the filter's xDS resources, HTTP API, its wire types and
//!   the client `ferry apply --push` sends a snapshot with, repo watching.
//! - [`write`]: feature writes (`POST /push`, `/write-to-online-store`, Feast's shapes) that
//!   `ferry serve` executes: validation, then per vector the merge rule and the atomic
//!   compare-and-set of `ferry-vector-store`.
//! - [`oci`]: `ferry oci-image`, the filter as an OCI image layout (Istio, Envoy Gateway).
//!
//! Crates beside this one, under `control-plane/`:
//! - `ferry-repo` (`repo/`): `ferry.yaml` or a Feast registry, validated, into the snapshot.
//! - `ferry-vector-store` (`vector-store/`): the stored vector: its encoding, the merge rule
//!   and the compare-and-set both write paths use.
//! - `ferry-xds` (`xds/`): an xDS server as a library (protocol core without I/O, ADS/ECDS gRPC
//!   services) over two interfaces the application implements: a snapshot source and callbacks.
//! - `ferry-log-sink` (`log-sink/`): `ferry log-sink`'s server: served-feature records from
//!   Envoy's gRPC access-log service into Parquet files in Feast's feature-logging layout.
//!
//! The `ferry` binary (`main.rs`, one file per subcommand under `cli/`) only parses flags,
//! calls these modules and prints what they return.

pub mod envoy_config;
pub mod materialize;
pub mod oci;
pub mod serve;
pub mod write;
