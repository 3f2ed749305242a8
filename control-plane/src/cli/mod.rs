//! The `ferry` subcommands, one file each: its flags (clap derive) and how it runs, printing
//! what the library returns. The rules themselves live in the library.
//!
//! - [`apply`]: validate a repo, print its snapshot; `--push` and `--materialize`.
//! - [`serve`]: the control plane.
//! - [`materialize`]: vectors into Redis.
//! - [`backfill`]: one view's rows from a file, through the write path.
//! - [`envoy_config`]: a static or xDS Envoy bootstrap.
//! - [`plugin_config`]: the filter's configuration as JSON, for Istio and Envoy Gateway.
//! - [`keygen`]: a key pair for signed snapshots.
//! - [`oci_image`]: the filter as an OCI image layout.
//! - [`filter_build`]: which build of the filter Envoy runs (flags shared by `serve` and
//!   `envoy-config`).

pub mod apply;
pub mod backfill;
pub mod envoy_config;
pub mod filter_build;
pub mod keygen;
pub mod log_sink;
pub mod materialize;
pub mod oci_image;
pub mod plugin_config;
pub mod serve;

use std::path::Path;

use anyhow::Result;
use ferry_repo::{self as repo, Registry};

/// The repo in folder `repo`, validated; every problem is one line of the error.
pub fn load(repo: &Path) -> Result<Registry> {
    // Validation errors are already one precise line each: print them as they are.
    repo::load(repo).map_err(|e| match e {
        repo::RepoError::Invalid { ref issues, .. } => {
            anyhow::anyhow!("{e}\n{} problem(s) in the feature repo", issues.len())
        }
        other => other.into(),
    })
}

/// `--key-ttl` (e.g. `7d`) in seconds.
pub fn parse_key_ttl(key_ttl: Option<String>) -> Result<Option<u64>> {
    key_ttl
        .map(|t| {
            repo::scalars::parse_duration(&t)
                .map(|s| s.unsigned_abs())
                .map_err(|e| anyhow::anyhow!("--key-ttl: {e}"))
        })
        .transpose()
}
