//! Served-feature logging: the `ferry.v1.ServedLog` record of what the model received
//! (`record`), and where it goes. Which requests of a route are logged (`log:` in `ferry.yaml`,
//! one rule for `ferry apply` and the filter) and the sampling decision on a hash of Envoy's
//! request id are the route's compiled policy (`config/log_policy.rs`).
//!
//! The record leaves the filter as Envoy filter state (`request/log.rs` hands it to the host);
//! Envoy's gRPC access-log service carries it to `ferry log-sink`. Nothing here can fail or
//! change a request: a record that cannot be built within its bound is dropped and counted.

pub mod record;

/// Largest encoded record handed to Envoy. A larger one (a huge batch, long strings, big
/// embeddings) is dropped and counted (`ferry_logs_dropped`), never truncated: a partial record
/// would look like a complete one to whoever trains on it. 256 KiB keeps what a stream holds
/// in Envoy's filter state, and what one access-log entry adds to the logger's buffer, small.
pub const MAX_RECORD_BYTES: usize = 256 * 1024;

/// The filter-state name the record is stored under (Wasm: `wasm.` is prepended by Envoy).
pub const FILTER_STATE_KEY: &str = "ferry.log";

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;
