//! Which build of the filter Envoy runs, and the file it loads: flags of `serve` and
//! `envoy-config`.

use std::path::{Path, PathBuf};

use anyhow::Result;
use ferry::envoy_config::{self, Runtime, RuntimeKind};

/// Which build of the filter Envoy runs.
#[derive(clap::Args)]
pub struct RuntimeArgs {
    /// wasm: the proxy-wasm filter on Envoy's V8 runtime (--wasm FILE); native: the same
    /// filter as an Envoy dynamic module (--native-module FILE, libferry_native.so).
    #[arg(long, value_enum, default_value_t = RuntimeKind::Wasm)]
    runtime: RuntimeKind,
    /// The native module (target/native/libferry_native.so), as Envoy will open it (with
    /// --runtime native).
    #[arg(long, value_name = "FILE")]
    native_module: Option<PathBuf>,
}

impl RuntimeArgs {
    /// The runtime and the absolute path of the file Envoy loads (`wasm` for the Wasm build);
    /// `None` paths are allowed only when Envoy gets the filter elsewhere (`--xds`).
    pub fn resolve(&self, wasm: Option<&Path>, paths_needed: bool) -> Result<(Runtime, String)> {
        let (flag, path) = match self.runtime {
            RuntimeKind::Wasm => ("--wasm", wasm),
            RuntimeKind::Native => ("--native-module", self.native_module.as_deref()),
        };
        let path = match path {
            Some(p) => {
                if !p.is_file() {
                    eprintln!(
                        "warning: {} does not exist (yet); Envoy needs it",
                        p.display()
                    );
                }
                envoy_config::absolute_wasm_path(p)?
            }
            None if paths_needed => anyhow::bail!(
                "--runtime {} needs {flag} FILE",
                clap::ValueEnum::to_possible_value(&self.runtime)
                    .map_or_else(String::new, |v| v.get_name().to_owned())
            ),
            None => String::new(),
        };
        Ok(match self.runtime {
            RuntimeKind::Wasm => (Runtime::Wasm, path),
            RuntimeKind::Native => (Runtime::Native { module_path: path }, String::new()),
        })
    }
}
