//! Ferry's proxy-wasm HTTP filter.
//!
//! Two layers: host-agnostic logic (`config`, `kserve_v1`, `vector`, `enrich`, `error`), plain
//! Rust unit-tested natively, and a thin adapter (`adapter`, wasm32 only) that implements the
//! proxy-wasm contexts over the [`host::Host`] seam.

pub mod config;
pub mod enrich;
pub mod error;
pub mod format;
pub mod header_mode;
pub mod host;
pub mod http_context;
pub mod json_body;
pub mod kserve_v1;
pub mod kserve_v2;
pub mod metrics;
pub mod near_cache;
pub mod values;
pub mod vector;

#[cfg(target_arch = "wasm32")]
mod adapter;
