//! Ferry's test fixtures, written once for the unit tests of every crate, the ABI tests, the
//! benches and the fuzz targets. Each module builds one kind of thing:
//!
//! - [`snapshot`]: registry snapshots (`ferry_protos::v1::Snapshot`) the filter accepts: the
//!   standard `scoring` service and `fraud` route, a merchant-keyed second service, builders
//!   for crates that need more services or routes;
//! - [`on_demand`]: on-demand views (expression trees) in the standard snapshot;
//! - [`vector`]: stored vectors, as `ferry materialize` writes them to Redis;
//! - [`reader`]: the reader's request and answer;
//! - [`signed`]: signed snapshots (keys from a seed, envelopes at any sequence);
//! - [`redis`]: a throwaway `redis-server` on a free loopback port (plain, TLS, password, or a
//!   three-master Cluster);
//! - [`proxy`]: a TCP proxy that can freeze, to play a Redis that went silent;
//! - [`ports`]: free loopback ports;
//! - [`certs`]: test CAs and the certificates they sign (`rcgen`), as PEM files;
//! - [`bench_service`]: the benchmarks' service shape (3 views x 10 features), its vectors and
//!   bodies;
//! - [`example`]: the banking example as a feature repo with generated data;
//! - [`hostile`]: issue #31's hostile tensor shapes (row counts, a gRPC request claiming one);
//! - [`docs`]: the book's generated reference blocks (CLI tables, ...) and their check.
//!
//! It depends on `ferry-protos` only (not on `ferry-core`, which dev-depends on it): a test
//! that needs the filter's typed `Config` builds it from [`snapshot::snapshot`].

// A fixture that cannot be built is a broken test: panicking with the reason is its job.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod bench_service;
pub mod certs;
pub mod docs;
pub mod example;
pub mod hostile;
pub mod on_demand;
pub mod ports;
pub mod proxy;
pub mod reader;
pub mod redis;
pub mod signed;
pub mod snapshot;
pub mod vector;
