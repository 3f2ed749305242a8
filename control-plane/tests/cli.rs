//! The `ferry` binary as a user runs it: help, apply, errors and exit codes, envoy-config
//! checked by the real Envoy when it is installed.
// Test helpers outside #[test] functions may fail loudly too (clippy.toml only covers those).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{banking_repo, ferry, stderr, stdout};

#[test]
fn every_subcommand_has_help() {
    for sub in [
        vec!["--help"],
        vec!["apply", "--help"],
        vec!["materialize", "--help"],
        vec!["envoy-config", "--help"],
    ] {
        let out = ferry(&sub);
        assert!(out.status.success(), "{sub:?}: {}", stderr(&out));
        assert!(stdout(&out).contains("Usage: ferry"), "{sub:?}");
    }
    let help = stdout(&ferry(&["materialize", "--help"]));
    assert!(
        help.contains("FERRY_REDIS") && help.contains("redis://127.0.0.1:6379"),
        "{help}"
    );
}

#[test]
fn apply_prints_services_fingerprints_views_and_routes() {
    let repo = banking_repo(50);
    let out = ferry(&["apply", repo.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("project banking  snapshot "), "{text}");
    assert!(
        lines[1].starts_with("feature service realtime_scoring  fingerprint "),
        "{text}"
    );
    assert!(
        lines[1].ends_with("keys: user_id (string)  10 features"),
        "{text}"
    );
    assert_eq!(
        &lines[2..5],
        [
            "  view transactions             ttl 1d     4 feature(s)",
            "  view user_embedding           ttl 30d    1 feature(s)",
            "  view user_profile             ttl 365d   5 feature(s)",
        ]
    );
    // Routes come after every service, in repo order.
    let first_route = lines.iter().position(|l| l.starts_with("route ")).unwrap();
    assert!(
        lines[first_route..].iter().all(|l| l.starts_with("route ")),
        "{text}"
    );
    assert!(lines[first_route].starts_with("route fraud-lenient  prefix /v1/models/fraud-lenient  -> realtime_scoring  format kserve_v1  entity [user_id]  names full  missing null"), "{text}");
    assert!(lines[first_route + 1].starts_with("route fraud  prefix /v1/models/fraud  -> realtime_scoring  format kserve_v1  entity [user_id]  names full  missing reject"), "{text}");
}

#[test]
fn an_invalid_repo_exits_1_with_every_problem_on_stderr() {
    let repo = banking_repo(5);
    let yaml_path = repo.path().join("ferry.yaml");
    let yaml = std::fs::read_to_string(&yaml_path).unwrap();
    let bad = yaml
        .replace("{name: age, type: int64}", "{name: age, type: int46}")
        .replacen("format: kserve_v1\n", "format: kserve_v3\n", 1)
        .replace("ttl: 1d", "ttl: 1y");
    std::fs::write(&yaml_path, bad).unwrap();
    let out = ferry(&["apply", repo.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stdout(&out).is_empty());
    let err = stderr(&out);
    let file = yaml_path.display().to_string();
    for want in [
        format!("{file}: feature_views[0] 'user_profile': feature 'age': unknown type 'int46'"),
        format!("{file}: feature_views[1] 'transactions': ttl '1y': expected a number with unit s, m, h or d (e.g. 30d)"),
        format!("{file}: routes[0] 'fraud-lenient': unknown format 'kserve_v3' (expected one of kserve_v1, kserve_v2, kserve_v2_grpc, json, header, feast_rest)"),
        "3 problem(s) in the feature repo".to_owned(),
    ] {
        assert!(err.contains(&want), "stderr lacks {want:?}:\n{err}");
    }
    let missing = ferry(&["apply", "/nonexistent/repo"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        stderr(&missing).contains("/nonexistent/repo/ferry.yaml"),
        "{}",
        stderr(&missing)
    );
}

/// The smallest module Envoy's validation accepts as a proxy-wasm plugin (it loads the plugin
/// and starts its VM): the ABI version marker, an allocator, and context/VM/configure hooks
/// that succeed. Hand-encoded so the test needs no wasm toolchain.
fn stub_proxy_wasm_module() -> Vec<u8> {
    fn vec(items: &[&[u8]]) -> Vec<u8> {
        let mut out = vec![items.len() as u8];
        items.iter().for_each(|i| out.extend_from_slice(i));
        out
    }
    fn section(id: u8, body: Vec<u8>) -> Vec<u8> {
        // Section sizes here stay below 16384, so two LEB128 bytes at most.
        let mut out = vec![id];
        let n = body.len();
        if n < 0x80 {
            out.push(n as u8);
        } else {
            out.extend_from_slice(&[(n as u8 & 0x7f) | 0x80, (n >> 7) as u8]);
        }
        out.extend(body);
        out
    }
    fn export(name: &str, kind: u8, index: u8) -> Vec<u8> {
        let mut out = vec![name.len() as u8];
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&[kind, index]);
        out
    }
    fn body(code: &[u8]) -> Vec<u8> {
        let mut out = vec![code.len() as u8 + 2, 0x00];
        out.extend_from_slice(code);
        out.push(0x0b);
        out
    }
    let i32_to_i32: &[u8] = &[0x60, 1, 0x7f, 1, 0x7f];
    let i32i32_to_void: &[u8] = &[0x60, 2, 0x7f, 0x7f, 0];
    let i32i32_to_i32: &[u8] = &[0x60, 2, 0x7f, 0x7f, 1, 0x7f];
    let void_to_void: &[u8] = &[0x60, 0, 0];
    let exports = [
        export("proxy_abi_version_0_2_0", 0, 0),
        export("proxy_on_memory_allocate", 0, 1),
        export("proxy_on_context_create", 0, 2),
        export("proxy_on_vm_start", 0, 3),
        export("proxy_on_configure", 0, 4),
        export("memory", 2, 0),
    ];
    let bodies = [
        body(&[]),                 // abi marker
        body(&[0x41, 0x80, 0x08]), // allocate: i32.const 1024
        body(&[]),                 // context create
        body(&[0x41, 0x01]),       // vm start: true
        body(&[0x41, 0x01]),       // configure: true
    ];
    let mut m = b"\0asm\x01\0\0\0".to_vec();
    m.extend(section(
        1,
        vec(&[i32_to_i32, i32i32_to_void, i32i32_to_i32, void_to_void]),
    ));
    m.extend(section(3, vec(&[&[3], &[0], &[1], &[2], &[2]])));
    m.extend(section(5, vec(&[&[0, 1]])));
    m.extend(section(
        7,
        vec(&exports.iter().map(Vec::as_slice).collect::<Vec<_>>()),
    ));
    m.extend(section(
        10,
        vec(&bodies.iter().map(Vec::as_slice).collect::<Vec<_>>()),
    ));
    m
}

fn envoy_binary() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("FERRY_ENVOY") {
        return Some(PathBuf::from(p));
    }
    let candidates = [
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/envoy"),
        PathBuf::from("/tmp/setup/venv/bin/envoy"),
    ];
    candidates.into_iter().find(|p| p.is_file()).or_else(|| {
        let found = Command::new("sh")
            .args(["-c", "command -v envoy"])
            .output()
            .ok()?;
        let path = String::from_utf8(found.stdout).ok()?.trim().to_owned();
        (!path.is_empty()).then(|| PathBuf::from(path))
    })
}

#[test]
fn envoy_config_renders_a_bootstrap_envoy_accepts() {
    let repo = banking_repo(5);
    let wasm = repo.path().join("ferry_filter.wasm");
    std::fs::write(&wasm, stub_proxy_wasm_module()).unwrap();
    let cfg = repo.path().join("envoy.yaml");
    let out = ferry(&[
        "envoy-config",
        repo.path().to_str().unwrap(),
        "--wasm",
        wasm.to_str().unwrap(),
        "--listen-port",
        "10123",
        "-o",
        cfg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(text.contains("port_value: 10123"));

    let small = ferry(&[
        "envoy-config",
        repo.path().to_str().unwrap(),
        "--wasm",
        wasm.to_str().unwrap(),
        "--buffer-limit-bytes",
        "4096",
    ]);
    assert_eq!(small.status.code(), Some(1));
    assert!(
        stderr(&small).contains("max_body_bytes 1048576 exceeds the Envoy buffer limit 4096"),
        "{}",
        stderr(&small)
    );

    let Some(envoy) = envoy_binary() else {
        eprintln!("NOTE: no envoy binary found (set FERRY_ENVOY); skipped `envoy --mode validate`");
        return;
    };
    let out = Command::new(&envoy)
        .args(["--mode", "validate", "-c"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "envoy rejected the config:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The test-only switch exists only in builds with the `test-switches` feature (the workspace
/// build the integration tests use); `ferry` built alone, as released, refuses it.
#[cfg(not(feature = "test-switches"))]
#[test]
fn a_build_without_test_switches_has_no_allow_invalid() {
    let repo = banking_repo(1);
    let out = ferry(&[
        "serve",
        repo.path().to_str().unwrap(),
        "--wasm",
        "/nonexistent.wasm",
        "--allow-invalid",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("unexpected argument '--allow-invalid'"),
        "{}",
        stderr(&out)
    );
}
