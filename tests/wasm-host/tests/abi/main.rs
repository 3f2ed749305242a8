//! ABI tests: the built filter (`target/wasm32-wasip1/release/ferry_filter.wasm`) in the
//! wasmtime host, driven as Envoy drives it. One test binary, so the module is loaded once.

// Tests may unwrap and panic (clippy.toml allows it in #[test] fns; helpers here too).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cache_metrics;
mod format_policies;
mod header_mode;
mod host;
mod json_body;
mod kserve_binary;
mod kserve_grpc;
mod kserve_v1;
mod kserve_v2;
mod on_demand;
mod plugin_config;
mod routing;
mod snapshot_pull;
mod support;
mod sweep;
mod trailers;
