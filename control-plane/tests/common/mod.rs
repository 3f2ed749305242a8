//! Shared helpers for the integration tests: the example repo with generated data in a temp
//! folder, and the `ferry` binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
