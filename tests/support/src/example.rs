//! The banking example (`examples/banking`) as a feature repo of a test's own: its ferry.yaml,
//! and data from its generator (`generate_data.py`, run with python3).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `examples/banking` in the source tree.
pub fn banking_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/banking")
}

/// Writes the banking repo to `repo` (created if missing): the example's ferry.yaml rewritten
/// by `edit`, and `entities` users of generated data, anchored at `anchor` (RFC 3339), in
/// `repo/data`.
pub fn banking_repo(
    repo: &Path,
    entities: usize,
    anchor: &str,
    edit: impl FnOnce(String) -> String,
) {
    let example = banking_dir();
    std::fs::create_dir_all(repo)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", repo.display()));
    let yaml = std::fs::read_to_string(example.join("ferry.yaml"))
        .unwrap_or_else(|e| panic!("cannot read the example's ferry.yaml: {e}"));
    std::fs::write(repo.join("ferry.yaml"), edit(yaml))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", repo.display()));
    let out = Command::new("python3")
        .arg(example.join("generate_data.py"))
        .args(["--entities", &entities.to_string(), "--anchor", anchor])
        .arg("--out")
        .arg(repo.join("data"))
        .output()
        .unwrap_or_else(|e| panic!("python3 must be installed to generate the example data: {e}"));
    assert!(
        out.status.success(),
        "generate_data.py failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
