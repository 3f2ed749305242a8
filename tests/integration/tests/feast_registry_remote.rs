//! Feast's registry server (`feast serve_registry`, gRPC, no auth) in front of the fixture's
//! registry: `ferry apply` over a Feast repo whose registry is `registry_type: remote` reads the
//! same services and views as over the file itself, in plain text and over TLS (`is_tls`,
//! `cert`); `ferry serve` notices a `feast apply` behind the server, and one made through the
//! server (Feast's own client writing to it) reaches a running Envoy without a restart; a
//! server that is down or whose certificate is not trusted gives an error naming it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ferry_integration_tests::feast::{feast, feast_venv, FeastSetup, FeastStack};
use ferry_integration_tests::feast_registry::{
    blocks, feast_repo, ferry_apply, ferry_repo, ROUTES,
};
use ferry_integration_tests::process::{free_port, tcp_open};
use ferry_integration_tests::{ControlPlane, Proc};
use ferry_test_support::redis::{make_tls_files, TlsFiles};

/// `feast serve_registry` in `feast_repo` on `port`, over TLS with `tls`.
fn serve_registry(dir: &Path, feast_repo: &Path, port: u16, tls: Option<&TlsFiles>) -> Proc {
    let mut cmd = Command::new(feast_venv().join("bin/feast"));
    cmd.current_dir(feast_repo)
        .args(["serve_registry", "--port", &port.to_string()]);
    if let Some(t) = tls {
        cmd.arg("--key").arg(&t.key).arg("--cert").arg(&t.cert);
    }
    let mut server = Proc::start("feast-registry", cmd, dir);
    server.wait_ready(|| tcp_open(port), "feast serve_registry");
    server
}

/// A Feast repo (`client`) whose registry is the server at `registry`, and a Ferry repo
/// (`ferry_remote`) over it.
fn remote_repo(dir: &Path, registry: &str) -> std::path::PathBuf {
    let client = dir.join("client");
    std::fs::create_dir_all(&client).unwrap();
    let store = std::fs::read_to_string(dir.join("feast/feature_store.yaml")).unwrap();
    let store: String = store
        .lines()
        .map(|l| match l.starts_with("registry:") {
            true => format!("registry: {registry}\n"),
            false => format!("{l}\n"),
        })
        .collect();
    std::fs::write(client.join("feature_store.yaml"), store).unwrap();
    ferry_repo(dir, "ferry_remote", "client")
}

#[test]
fn ferry_apply_reads_through_feasts_registry_server_as_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // The server re-reads its file when it changes (Feast's sync cache mode; no ttl).
    let registry = "{path: data/registry.db, cache_ttl_seconds: 0}";
    let served = feast_repo(dir.path(), "feast", registry);
    feast(&served, "feast", &["apply"]);
    let from_file = ferry_apply(&ferry_repo(dir.path(), "ferry", "feast")).unwrap();

    let port = free_port();
    let mut server = serve_registry(dir.path(), &served, port, None);
    let repo = remote_repo(
        dir.path(),
        &format!("{{registry_type: remote, path: \"127.0.0.1:{port}\"}}"),
    );
    let from_server = ferry_apply(&repo).unwrap();
    assert_eq!(blocks(&from_server), blocks(&from_file));
    assert!(
        from_server.contains("feature service scoring"),
        "{from_server}"
    );

    // Down: the error names the server.
    server.kill();
    let err = ferry_apply(&repo).unwrap_err();
    assert!(
        err.contains(&format!(
            "feast registry grpc://127.0.0.1:{port}: connecting"
        )),
        "{err}"
    );
}

#[test]
fn the_registry_server_is_read_over_tls_with_feasts_cert_setting() {
    let dir = tempfile::tempdir().unwrap();
    let served = feast_repo(dir.path(), "feast", "data/registry.db");
    feast(&served, "feast", &["apply"]);
    let from_file = ferry_apply(&ferry_repo(dir.path(), "ferry", "feast")).unwrap();
    let tls = make_tls_files(&dir.path().join("tls"));
    let port = free_port();
    let _server = serve_registry(dir.path(), &served, port, Some(&tls));
    let remote = |cert: &Path| {
        format!(
            "{{registry_type: remote, path: \"localhost:{port}\", is_tls: true, cert: \"{}\"}}",
            cert.display()
        )
    };
    let repo = remote_repo(dir.path(), &remote(&tls.ca_cert));
    assert_eq!(blocks(&ferry_apply(&repo).unwrap()), blocks(&from_file));

    // Another CA: the server is not trusted, and the error says so.
    let other = make_tls_files(&dir.path().join("other"));
    let store = dir.path().join("client/feature_store.yaml");
    let text = std::fs::read_to_string(&store).unwrap();
    let ca = tls.ca_cert.display().to_string();
    std::fs::write(
        &store,
        text.replace(&ca, &other.ca_cert.display().to_string()),
    )
    .unwrap();
    let err = ferry_apply(&repo).unwrap_err();
    assert!(
        err.contains(&format!("grpcs://localhost:{port}: TLS")),
        "{err}"
    );
    assert!(err.contains("certificate"), "{err}");
}

#[test]
fn ferry_serve_notices_a_feast_apply_behind_the_registry_server() {
    let dir = tempfile::tempdir().unwrap();
    let registry = "{path: data/registry.db, cache_ttl_seconds: 0}";
    let served = feast_repo(dir.path(), "feast", registry);
    feast(&served, "feast", &["apply"]);
    let port = free_port();
    let _server = serve_registry(dir.path(), &served, port, None);
    let repo = remote_repo(
        dir.path(),
        &format!("{{registry_type: remote, path: \"127.0.0.1:{port}\"}}"),
    );
    let cp = ControlPlane::start(dir.path(), &repo);
    let version = cp.version();

    // A feature added to a view a service selects: a new fingerprint, which a Feast-backed
    // service never holds back (Feast's own materialization writes its values).
    let file = served.join("features.py");
    let text = std::fs::read_to_string(&file).unwrap();
    let added = text.replace(
        "Field(name=\"segment\", dtype=String),",
        "Field(name=\"segment\", dtype=String),\n        Field(name=\"tier\", dtype=Int64),",
    );
    assert_ne!(text, added, "the fixture's schema line moved");
    std::fs::write(&file, added).unwrap();
    feast(&served, "feast", &["apply"]);
    let status = cp.wait_status("new snapshot", Duration::from_secs(30), |s| {
        s.snapshot
            .as_ref()
            .is_some_and(|snap| snap.version != version)
    });
    assert!(status.last_refused.is_none(), "{:?}", status.last_refused);
    let report = ferry_apply(&repo).unwrap();
    assert!(report.contains("4 feature(s)"), "the new feature: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feast_apply_through_the_registry_server_reaches_envoy_through_ferry_serve() {
    // The server's own repo holds the registry file (nothing applied yet); the stack's Feast
    // repo is a client of the server: its `feast apply` and `feast materialize` write through
    // it, and `ferry serve` reads through it.
    let dir = tempfile::tempdir().unwrap();
    let served = feast_repo(
        dir.path(),
        "served",
        "{path: data/registry.db, cache_ttl_seconds: 0}",
    );
    let port = free_port();
    let _server = serve_registry(dir.path(), &served, port, None);
    let registry = format!("{{registry_type: remote, path: \"127.0.0.1:{port}\"}}");
    let setup = FeastSetup {
        registry: &registry,
        ..FeastSetup::default()
    };
    let stack = FeastStack::start_setup(ROUTES, setup);
    assert!(!stack.feast_repo.join("data/registry.db").exists());
    assert!(
        served.join("data/registry.db").exists(),
        "feast apply did not write through the registry server"
    );
    stack
        .a_feast_apply_adding_a_feature_reaches_envoy("/v1/models/scoring:predict")
        .await;
}
