//! Python clients that are not ours (Triton's `tritonclient`), driven by a script in
//! `tests/integration/scripts/` that reads what to send as JSON on stdin and writes what came
//! back to a report file.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value as Json;

use crate::{python, root, Stack};

/// Runs `tests/integration/scripts/SCRIPT 127.0.0.1:LISTEN_PORT OUT` with the Triton clients'
/// Python, `spec` on its stdin; fails the test with the script's output if it fails, prints
/// what it said, and returns the JSON it wrote to `report`.
pub fn run(stack: &Stack, script: &str, out: &Path, spec: &Json, report: &Path) -> Json {
    let mut child = Command::new(python())
        .arg(root().join("tests/integration/scripts").join(script))
        .arg(format!("127.0.0.1:{}", stack.listen_port))
        .arg(out)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the client script's Python");
    child
        .stdin
        .take()
        .expect("the script's stdin")
        .write_all(spec.to_string().as_bytes())
        .expect("write the spec to the script");
    let done = child.wait_with_output().expect("the client script ends");
    let said = String::from_utf8_lossy(&done.stdout);
    assert!(
        done.status.success(),
        "{script} failed:\n{said}{}",
        String::from_utf8_lossy(&done.stderr)
    );
    println!("{}", said.trim());
    let text = std::fs::read(report).unwrap_or_else(|e| panic!("{}: {e}", report.display()));
    serde_json::from_slice(&text).expect("the script's report is JSON")
}
