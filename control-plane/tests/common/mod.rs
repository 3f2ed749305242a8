//! Shared helpers for the integration tests: the example repo with generated data in a temp
//! folder, a throwaway redis-server, and the `ferry` binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const ANCHOR: &str = "2026-11-21T10:00:00Z";

pub fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/banking")
}

/// The banking example's ferry.yaml in a temp folder, with `entities` users generated there.
pub fn banking_repo(entities: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        example_dir().join("ferry.yaml"),
        dir.path().join("ferry.yaml"),
    )
    .unwrap();
    let out = Command::new("python3")
        .arg(example_dir().join("generate_data.py"))
        .args([
            "--entities",
            &entities.to_string(),
            "--anchor",
            ANCHOR,
            "--out",
        ])
        .arg(dir.path().join("data"))
        .output()
        .expect("python3 must be installed to generate the example data");
    assert!(
        out.status.success(),
        "generate_data.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

pub fn ferry(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferry"))
        .args(args)
        .env_remove("FERRY_REDIS")
        .output()
        .unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A redis-server on a free loopback port in a temp folder, killed on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let bin = std::env::var("FERRY_REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned());
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(&bin)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {bin} (install redis-server): {e}"));
        let server = RedisServer {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
