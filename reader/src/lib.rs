//! Ferry's vector reader: the HTTP service the Envoy filter calls (proxy-wasm can make HTTP calls
//! but cannot speak Redis) to fetch precomputed feature vectors. One `POST /v1/vectors` carries
//! a whole batch of entity keys and costs exactly one Redis round trip.
//!
//! Module map, in the order a request meets them:
//! - [`server`]: accepts connections (HTTP/1.1 and h2c on one port, or TLS with client
//!   certificates), graceful shutdown.
//! - [`service`]: routes requests, bounds concurrency and body size, answers the endpoints.
//! - [`scan`]: counts a `VectorRequest` from its wire bytes and refuses one over the limits
//!   before it is decoded.
//! - [`batch`]: validates a `VectorRequest`, builds its single `MGET`, cuts the answer back into
//!   one result per lookup.
//! - [`feast`]: lookups of Feast-backed services: Feast's hashes read in place (pipelined
//!   `HMGET`s), answered as Ferry's `StoredVector`s; `feast/precomputed.rs` reads a
//!   `precompute_online` service's one vector per entity and checks its schema.
//! - [`store`]: Redis (one server or a Cluster, see `ferry-redis`) behind one multiplexed
//!   self-healing connection, deadlines, silent connections replaced, error classification, the
//!   up/down state.
//! - [`health`]: `/healthz` (Redis reachable, cached a second) and `/readyz` (and the vectors
//!   of the asked services written).
//! - [`metrics`]: counters and the OpenMetrics text of `GET /metrics`.
//! - [`error`]: every failure and its HTTP status and JSON body.
//! - [`config`]: the command line.

pub mod batch;
pub mod config;
pub mod error;
pub mod feast;
pub mod health;
pub mod metrics;
pub mod scan;
pub mod server;
pub mod service;
pub mod store;

pub use config::Config;
pub use error::ReaderError;
pub use server::{run, serve, serve_tls, shutdown_signal, StartError};
pub use service::Reader;
