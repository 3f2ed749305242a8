//! `ferry serve` as a test process: started on free ports, restartable on the same ports, with
//! small blocking helpers for its HTTP API (status, metrics, raw pushes).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use ferry::serve::api::Status;

use crate::http::raw;
use crate::process::{free_port, Proc};
use crate::{bin, wasm, Runtime};

/// The push token every test control plane requires.
pub const TOKEN: &str = "test-push-token-0123456789abcdef";
/// The write token (`ferry serve --write-token`) of the tests that write features.
pub const WRITE_TOKEN: &str = "test-write-token-0123456789abcdef";
/// The read token every test control plane has (reads `/status` and the snapshot).
pub const READ_TOKEN: &str = "test-read-token-0123456789abcdef";

pub struct ControlPlane {
    pub proc: Proc,
    pub xds_port: u16,
    pub http_port: u16,
    repo: PathBuf,
    dir: PathBuf,
    /// The .wasm path it names to Envoy (Wasm runtime).
    wasm: PathBuf,
    /// The filter's build it serves.
    runtime: Runtime,
    /// More `ferry serve` flags (e.g. `--signing-key`), kept across restarts.
    extra: Vec<std::ffi::OsString>,
}

impl ControlPlane {
    /// Starts `ferry serve REPO` with a token, a fast repo watch and the test-only
    /// `--allow-invalid` (so a test can force a snapshot the filter refuses).
    pub fn start(dir: &Path, repo: &Path) -> ControlPlane {
        ControlPlane::start_with_wasm(dir, repo, &wasm())
    }

    /// The same, serving the given build of the filter.
    pub fn start_for(dir: &Path, repo: &Path, runtime: Runtime) -> ControlPlane {
        ControlPlane::start_as(dir, repo, &wasm(), runtime)
    }

    /// The same, naming `wasm` as the filter's path to Envoy (which need not exist here).
    pub fn start_with_wasm(dir: &Path, repo: &Path, wasm: &Path) -> ControlPlane {
        ControlPlane::start_as(dir, repo, wasm, Runtime::Wasm)
    }

    /// The same, with more `ferry serve` flags (kept across restarts).
    pub fn start_with_args(dir: &Path, repo: &Path, extra: &[&str]) -> ControlPlane {
        let extra: Vec<std::ffi::OsString> = extra.iter().map(Into::into).collect();
        ControlPlane::start_full(dir, repo, &wasm(), Runtime::Wasm, extra)
    }

    fn start_as(dir: &Path, repo: &Path, wasm: &Path, runtime: Runtime) -> ControlPlane {
        ControlPlane::start_full(dir, repo, wasm, runtime, Vec::new())
    }

    fn start_full(
        dir: &Path,
        repo: &Path,
        wasm: &Path,
        runtime: Runtime,
        extra: Vec<std::ffi::OsString>,
    ) -> ControlPlane {
        let (xds_port, http_port) = (free_port(), free_port());
        let flags = [filter_flags(wasm, runtime), extra.clone()].concat();
        let mut cp = ControlPlane {
            proc: spawn(dir, repo, &flags, xds_port, http_port),
            xds_port,
            http_port,
            repo: repo.to_owned(),
            dir: dir.to_owned(),
            wasm: wasm.to_owned(),
            runtime,
            extra,
        };
        cp.wait_healthy();
        cp
    }

    fn wait_healthy(&mut self) {
        // `serve --allow-invalid` needs the ferry of `cargo build --workspace --bins`, built
        // with the test-switches feature: without it the process exits and its log says why.
        let port = self.http_port;
        self.proc.wait_ready(
            || crate::http::get_ok(port, "/healthz"),
            "control plane /healthz",
        );
    }

    /// (Re)starts the process on the same ports (and the same state directory, the default
    /// REPO/.ferry).
    pub fn restart(&mut self) {
        self.proc.kill();
        let flags = [filter_flags(&self.wasm, self.runtime), self.extra.clone()].concat();
        self.proc = spawn(&self.dir, &self.repo, &flags, self.xds_port, self.http_port);
        self.wait_healthy();
    }

    /// Restarts it naming another .wasm path to Envoy.
    pub fn restart_with_wasm(&mut self, wasm: &Path) {
        wasm.clone_into(&mut self.wasm);
        self.restart();
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// GET /status.
    pub fn status(&self) -> Status {
        let auth = format!("Bearer {READ_TOKEN}");
        let (code, body) = self.request("GET", "/status", &[("authorization", &auth)], b"");
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("not a Status ({e}): {body}"))
    }

    pub fn metrics(&self) -> String {
        self.request("GET", "/metrics", &[], b"").1
    }

    /// The current snapshot's version.
    pub fn version(&self) -> String {
        self.status().snapshot.expect("a current snapshot").version
    }

    /// One request over a fresh connection: (status, body).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String) {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-length: {}\r\n",
            body.len()
        )
        .into_bytes();
        for (n, v) in headers {
            req.extend_from_slice(format!("{n}: {v}\r\n").as_bytes());
        }
        req.extend_from_slice(b"\r\n");
        req.extend_from_slice(body);
        let text = raw(self.http_port, &req).expect("control plane answers");
        let code = text
            .get(9..12)
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("not HTTP: {text}"));
        let body = text
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_owned();
        (code, body)
    }

    /// `ferry apply REPO --push` to this control plane (with `--materialize`: the new
    /// fingerprints' vectors first, into `redis_url`); returns the version pushed.
    pub fn apply_push(&self, repo: &Path, redis_url: &str, materialize: bool) -> String {
        let mut cmd = Command::new(bin("ferry"));
        cmd.arg("apply")
            .arg(repo)
            .args([
                "--push",
                &self.url(),
                "--token",
                TOKEN,
                "--redis",
                redis_url,
            ])
            .env_remove("FERRY_PUSH_TOKEN");
        if materialize {
            cmd.arg("--materialize");
        }
        let text = crate::run(&mut cmd);
        text.lines()
            .find_map(|l| l.strip_prefix("pushed snapshot "))
            .and_then(|l| l.split(' ').next())
            .unwrap_or_else(|| panic!("{text}"))
            .to_owned()
    }

    /// Waits until `/status` satisfies `done`, up to `limit`; returns that status.
    pub fn wait_status(
        &self,
        what: &str,
        limit: Duration,
        done: impl Fn(&Status) -> bool,
    ) -> Status {
        let start = std::time::Instant::now();
        loop {
            let last = self.status();
            if done(&last) {
                return last;
            }
            assert!(
                start.elapsed() < limit,
                "{what}: not within {limit:?}: {last:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until every connected node ACKed `version` (and `nodes` are connected).
    pub fn wait_converged(&self, version: &str, nodes: usize, limit: Duration) -> Status {
        let start = std::time::Instant::now();
        loop {
            let last = self.status();
            let on = last.snapshot.as_ref().map(|s| s.version.as_str());
            if last.nodes.len() == nodes && last.converged && on == Some(version) {
                return last;
            }
            assert!(
                start.elapsed() < limit,
                "not converged on {version} with {nodes} node(s) in {limit:?}: {last:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `ferry serve`'s flags naming the filter: `--wasm PATH`, or the native module's.
fn filter_flags(wasm: &Path, runtime: Runtime) -> Vec<std::ffi::OsString> {
    match runtime {
        Runtime::Wasm => vec!["--wasm".into(), wasm.into()],
        Runtime::Native | Runtime::NativeInProcess => runtime.flags(),
    }
}

fn spawn(
    dir: &Path,
    repo: &Path,
    filter: &[std::ffi::OsString],
    xds_port: u16,
    http_port: u16,
) -> Proc {
    let mut cmd = Command::new(bin("ferry"));
    cmd.arg("serve")
        .arg(repo)
        .args(filter)
        .args(["--xds-listen", &format!("127.0.0.1:{xds_port}")])
        .args(["--http-listen", &format!("127.0.0.1:{http_port}")])
        .args([
            "--token",
            TOKEN,
            "--read-token",
            READ_TOKEN,
            "--watch-interval-ms",
            "200",
            "--allow-invalid",
        ])
        .env("RUST_LOG", "info,ferry_xds=debug");
    Proc::start("control-plane", cmd, dir)
}
