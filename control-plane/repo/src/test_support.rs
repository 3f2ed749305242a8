//! Helpers for unit tests: small repos written into temp folders.
// Compiled for tests only (here, and in `ferry` through the `test-support` feature): a helper
// that cannot set a repo up fails the test.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::path::Path;

use crate::{self as repo, Registry, RepoError};

/// Writes `files` (relative path, content) and `ferry.yaml` into a new temp folder and loads it.
pub fn load_repo(
    yaml: &str,
    files: &[(&str, &str)],
) -> (tempfile::TempDir, Result<Registry, RepoError>) {
    let dir = tempfile::tempdir().unwrap();
    for (rel, body) in files {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body).unwrap();
    }
    std::fs::write(dir.path().join(repo::REPO_FILE), yaml).unwrap();
    let reg = repo::load(dir.path());
    (dir, reg)
}

/// The problems of an invalid repo as `path: reason` lines.
pub fn issues(result: Result<Registry, RepoError>) -> Vec<String> {
    match result {
        Err(RepoError::Invalid { issues, .. }) => issues.iter().map(ToString::to_string).collect(),
        Err(other) => panic!("expected validation issues, got {other}"),
        Ok(_) => panic!("expected validation issues, the repo loaded"),
    }
}

pub fn file_of(dir: &Path) -> String {
    dir.join(repo::REPO_FILE).display().to_string()
}

/// A two-entity repo exercising ordering: views and features listed out of order.
pub const ORDER_YAML: &str = r#"
project: shop
entities:
  - {name: user, join_key: user_id, type: string}
  - {name: merchant, join_key: merchant_id, type: int64}
feature_views:
  - name: zeta
    entities: [user, merchant]
    ttl: 2h
    source: {path: data/zeta.csv, timestamp_field: ts}
    features:
      - {name: z2, type: float64}
      - {name: z1, type: bool, default: true}
  - name: alpha
    entities: [merchant, user]
    source: {path: data/alpha.csv, timestamp_field: ts}
    features:
      - {name: b, type: string}
      - {name: a, type: float32_list}
      - {name: c, type: int32}
feature_services:
  - name: pair
    features: [zeta, "alpha:c", "alpha:a"]
routes:
  - match: {path_exact: /v1/models/pair:predict}
    service: pair
    format: kserve_v1
    entity: {fields: [mid, uid]}
    feature_names: short
    on_missing_entity: null
    on_stale: reject
    on_reader_error: forward
    max_body_bytes: 2048
    max_entities: 10
    reader_timeout_ms: 50
"#;

pub const ORDER_FILES: [(&str, &str); 2] = [
    (
        "data/zeta.csv",
        "user_id,merchant_id,ts,z1,z2\nu1,7,2026-01-01T00:00:00Z,true,1.5\nu2,8,2026-01-01T00:00:00Z,false,2.5\n",
    ),
    (
        "data/alpha.csv",
        "merchant_id,user_id,ts,a,b,c\n7,u1,100,\"[1, 2]\",x,3\n7,u1,50,\"[9]\",old,1\n9,u3,100,[],y,4\n",
    ),
];
