//! Shared helpers for the integration tests: the example repo with generated data in a temp
//! folder, and the `ferry` binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

pub const ANCHOR: &str = "2026-11-21T10:00:00Z";

/// The banking example's ferry.yaml in a temp folder, with `entities` users generated there.
pub fn banking_repo(entities: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    ferry_test_support::example::banking_repo(dir.path(), entities as usize, ANCHOR, |y| y);
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
