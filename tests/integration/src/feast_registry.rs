//! What the Feast registry tests share (`tests/feast_registry_*.rs`): a Feast repo of the
//! fixture applied by Feast into a given registry, a Ferry repo over it, and `ferry apply`'s
//! report compared as a set.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bin;
use crate::feast::{feast, fixture_named, write_fixture_data, PROJECT};

/// The routes of the Ferry repos these tests make.
pub const ROUTES: &str = "  - match: {path_prefix: /v1/models/scoring}
    service: scoring
    format: kserve_v1
    entity: {field: user_id}
    on_missing_entity: null
";

/// `registry:` of feature_store.yaml for Feast's SQL registry at `url` (no registry cache, so
/// that each `feast` command sees the database as it is).
pub fn sql_registry(url: &str) -> String {
    format!("{{registry_type: sql, path: \"{url}\", cache_ttl_seconds: 0}}")
}

/// A Feast repo of the fixture at `dir/feast` (registry `registry`, online store a Redis
/// nobody starts: `feast apply` does not connect to it) applied by Feast, and a Ferry repo at
/// `dir/ferry` over it; returns the Ferry repo.
pub fn applied_repo(dir: &Path, registry: &str) -> PathBuf {
    let repo = feast_repo(dir, "feast", registry);
    feast(&repo, "feast", &["apply"]);
    ferry_repo(dir, "ferry", "feast")
}

/// A Feast repo of the fixture at `dir/name`, with `registry`, its data written, not applied.
pub fn feast_repo(dir: &Path, name: &str, registry: &str) -> PathBuf {
    let fixture = fixture_named("feast_repo");
    let feast_repo = dir.join(name);
    std::fs::create_dir_all(feast_repo.join("data")).unwrap();
    std::fs::copy(fixture.join("features.py"), feast_repo.join("features.py")).unwrap();
    std::fs::write(
        feast_repo.join("feature_store.yaml"),
        format!(
            "project: {PROJECT}\nprovider: local\nregistry: {registry}\nonline_store:\n  \
             type: redis\n  connection_string: \"127.0.0.1:1\"\noffline_store:\n  type: file\n\
             entity_key_serialization_version: 3\n"
        ),
    )
    .unwrap();
    write_fixture_data(&fixture, &feast_repo);
    feast_repo
}

/// A Ferry repo at `dir/name` over the Feast repo `dir/feast_name`, with [`ROUTES`].
pub fn ferry_repo(dir: &Path, name: &str, feast_name: &str) -> PathBuf {
    let repo = dir.join(name);
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(
        repo.join("ferry.yaml"),
        format!("project: {PROJECT}\nfeast: {{repo: ../{feast_name}}}\nroutes:\n{ROUTES}"),
    )
    .unwrap();
    repo
}

/// `ferry apply REPO`'s output, or its error.
pub fn ferry_apply(repo: &Path) -> Result<String, String> {
    let out = Command::new(bin("ferry"))
        .arg("apply")
        .arg(repo)
        .output()
        .expect("ferry apply");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        Ok(text)
    } else {
        Err(text)
    }
}

/// `ferry apply`'s report as a set: one entry per service (with its views) or route, without
/// the snapshot version.
pub fn blocks(report: &str) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    let mut block = String::new();
    for line in report.lines().filter(|l| !l.starts_with("project ")) {
        if !line.starts_with(' ') && !block.is_empty() {
            out.insert(std::mem::take(&mut block));
        }
        block.push_str(line);
        block.push('\n');
    }
    out.insert(block);
    out
}
