//! Ferry as an Envoy dynamic module (`libferry_native.so`): the same host-agnostic core as the
//! Wasm filter, driven by Envoy's dynamic-module event hooks instead of proxy-wasm. The
//! filter config is the snapshot (a `ferry.v1.Snapshot` or its JSON form); the near cache is a
//! process-wide sharded map ([`shared`]) instead of proxy-wasm shared data. With
//! `FERRY_NATIVE_READER` set, the reader's lookup runs inside Envoy (`direct`) instead of being
//! a dispatched call to the reader cluster.
//!
//! No panic may cross the C boundary: nothing here unwraps, and the release profile aborts.

pub mod abi;
pub mod config;
pub mod shared;

// The hooks and the host call into Envoy: they only link inside Envoy, so unit tests (which
// cover the pure parts) build without them.
#[cfg(not(test))]
pub mod direct;
#[cfg(not(test))]
mod hooks;
#[cfg(not(test))]
pub mod host;
