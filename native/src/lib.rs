//! Ferry as an Envoy dynamic module (`libferry_native.so`): the same host-agnostic core as the
//! Wasm filter, driven by Envoy's dynamic-module event hooks instead of proxy-wasm. The
//! filter config is the snapshot (a `ferry.v1.Snapshot` or its JSON form); the near cache is a
//! process-wide sharded map ([`shared_data`]) instead of proxy-wasm shared data. With
//! `FERRY_NATIVE_READER` set, the reader's lookup runs inside Envoy (`direct`) instead of being
//! a dispatched call to the reader cluster. With `snapshot_url` the config pulls its snapshot
//! from `ferry serve` (`pull`, on a clock of its own: `ticker`), as the Wasm filter does.
//!
//! Layers, from Envoy inwards: `hooks` (the C entry points) → `stream` (one HTTP stream: the
//! re-entrancy and fail-closed rules) → `host` (the core's `Host` over `envoy::Envoy`, the seam
//! to Envoy's callbacks, whose real side is `envoy::EnvoyFilter` over `abi`).
//!
//! No panic may cross the C boundary: every hook catches one and fails its stream (or the
//! config) closed. That needs unwinding: the module is built with the `native` profile
//! (`cargo build --profile native -p ferry-native`), the release profile with `panic = "unwind"`.

pub mod abi;
pub mod config;
pub mod direct;
pub mod envoy;
mod hooks;
pub mod host;
pub mod pull;
pub mod reader_flags;
pub mod reentry;
pub mod shared_data;
pub mod slot;
pub mod stages;
pub mod stream;
pub mod ticker;
