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
//!
//! [`TlsArgs`], a listener's TLS flags, are shared by `serve` and `log-sink`.

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

use std::path::{Path, PathBuf};

use anyhow::Result;
use ferry_http_serve::TlsFiles;
use ferry_repo::{self as repo, Registry};

/// The listeners a command serves TLS on, as its TLS flags' help names them.
pub trait TlsListener {
    /// --tls-cert's help.
    const CERT_HELP: &'static str;
    /// --client-ca's help.
    const CLIENT_CA_HELP: &'static str;
}

/// A listener's TLS flags: its certificate chain and key, and the CAs client certificates must
/// chain to; `L` names the listeners in their help.
#[derive(clap::Args)]
pub struct TlsArgs<L: TlsListener + Send + Sync + 'static> {
    #[arg(long, env = "FERRY_TLS_CERT", requires = "tls_key", help = L::CERT_HELP)]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "FERRY_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    #[arg(long, env = "FERRY_CLIENT_CA", requires = "tls_cert", help = L::CLIENT_CA_HELP)]
    client_ca: Option<PathBuf>,
    #[arg(skip)]
    listener: std::marker::PhantomData<L>,
}

impl<L: TlsListener + Send + Sync + 'static> TlsArgs<L> {
    /// Whether client certificates are asked for (--client-ca).
    pub fn mtls(&self) -> bool {
        self.client_ca.is_some()
    }

    /// The files to serve TLS with, when --tls-cert and --tls-key are given.
    pub fn files(self) -> Option<TlsFiles> {
        let client_ca = self.client_ca;
        self.tls_cert.zip(self.tls_key).map(|(cert, key)| TlsFiles {
            cert,
            key,
            client_ca,
        })
    }
}

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
