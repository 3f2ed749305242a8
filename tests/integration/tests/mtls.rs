//! Issue #22, mTLS on the control links, through real processes (Envoy, `ferry serve`, the
//! reader, Redis) and certificates made by rcgen at test time: Envoy takes its filter config
//! from `ferry serve` over mTLS xDS and enriches a request through the reader over mTLS; each
//! link refuses a client without a certificate of its CA, a certificate whose identity may not
//! use the node id it sends, a request without the role it needs; a plaintext listener on a
//! network address does not start; a replaced certificate serves the next connection.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ferry_integration_tests::control_plane::READ_TOKEN;
use ferry_integration_tests::http::post;
use ferry_integration_tests::secure::{
    plaintext_on_a_network_address_is_refused, tls_flags, CI, CP_NAME, ENVOY, READER_NAME, WEB,
};
use ferry_integration_tests::{
    bin, example_repo_with, free_port, materialized_example, run, secure, start_envoy, start_model,
    tls, Proc,
};
use ferry_test_support::certs::{Ca, LeafFiles};
use serde_json::json;

/// Certificates of one test: the CA, and a leaf for each party.
struct Certs {
    ca: Ca,
    ca_file: PathBuf,
    cp: LeafFiles,
    reader: LeafFiles,
    envoy: LeafFiles,
    ci: LeafFiles,
    web: LeafFiles,
}

fn certs(dir: &Path) -> Certs {
    let ca = Ca::new("ferry test CA");
    Certs {
        ca_file: ca.write(&dir.join("ca.crt")),
        cp: ca.issue(&[CP_NAME, "127.0.0.1"], &[]).write(dir, "cp"),
        reader: ca.issue(&[READER_NAME], &[]).write(dir, "reader"),
        envoy: ca.issue(&["envoy.ml.svc"], &[ENVOY]).write(dir, "envoy"),
        ci: ca.issue(&[], &[CI]).write(dir, "ci"),
        web: ca.issue(&[], &[WEB]).write(dir, "web"),
        ca,
    }
}

/// The test certificates and a ten-user example repo, in `dir`.
fn certs_and_repo(dir: &Path) -> (Certs, PathBuf) {
    (certs(dir), example_repo_with(dir, 10))
}

/// `ferry serve` over mTLS, with tokens and a push grant for the CI identity.
fn control_plane(dir: &Path, repo: &Path, c: &Certs) -> (Proc, u16, u16) {
    let (xds, http) = (free_port(), free_port());
    let files = (&c.cp, c.ca_file.as_path(), &c.ca);
    let proc = secure::control_plane(dir, repo, files, (xds, http), &[]);
    (proc, xds, http)
}

async fn api(
    port: u16,
    ca: &Ca,
    client: Option<&LeafFiles>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String), String> {
    tls::request(
        port,
        CP_NAME,
        (ca, client),
        (method, path, headers),
        Vec::new(),
    )
    .await
}

/// An Envoy on the xDS bootstrap, speaking mTLS with `leaf` to the control plane and reader.
fn envoy(
    dir: &Path,
    repo: &Path,
    ports: (u16, u16, u16),
    leaf: &LeafFiles,
    ca: &Path,
    node: &str,
) -> (Proc, u16, u16) {
    let config = dir
        .join(format!("envoy-{}", free_port()))
        .join("envoy.yaml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let p = secure::envoy_config(repo, ports, (leaf, ca), node, &config);
    (start_envoy(dir, &config, "envoy"), p.listen, p.admin)
}

/// `GET /status` on the control plane with the read token (no client certificate).
async fn cp_status(http: u16, ca: &Ca) -> (u16, String) {
    let read = format!("Bearer {READ_TOKEN}");
    api(
        http,
        ca,
        None,
        "GET",
        "/status",
        &[("authorization", &read)],
    )
    .await
    .unwrap()
}

/// The count of `ferry_xds_refused_total{reason=...}` on the control plane's /metrics.
async fn refused(http: u16, ca: &Ca, reason: &str) -> u64 {
    let (_, text) = api(http, ca, None, "GET", "/metrics", &[]).await.unwrap();
    let prefix = format!("ferry_xds_refused_total{{reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_over_mtls_gets_its_config_and_enriches_and_every_link_refuses_strangers() {
    let dir = tempfile::tempdir().unwrap();
    let c = certs(dir.path());
    let (repo, redis) = materialized_example(dir.path(), 200);

    let reader_port = free_port();
    let mut cmd = Command::new(bin("ferry-reader"));
    cmd.args([
        "--listen",
        &format!("127.0.0.1:{reader_port}"),
        "--redis",
        &redis.url(),
    ])
    .args(tls_flags(&c.reader, &c.ca_file));
    let _reader = Proc::start("reader", cmd, dir.path());
    let model_port = free_port();
    let _model = start_model(dir.path(), model_port);
    let (_cp, xds, http) = control_plane(dir.path(), &repo, &c);

    // Envoy, with its SPIFFE id as node id: configured over mTLS xDS, enriching over mTLS.
    let ports = (xds, reader_port, model_port);
    let (mut envoy_a, listen, admin) = envoy(dir.path(), &repo, ports, &c.envoy, &c.ca_file, ENVOY);
    envoy_a.wait_ready(
        || ferry_integration_tests::http::get_ok(admin, "/ready"),
        "envoy /ready",
    );
    let body = json!({"instances": [{"user_id": "u000001"}]}).to_string();
    let start = Instant::now();
    let resp = loop {
        let resp = post(listen, "/v1/models/fraud:predict", body.clone()).await;
        if resp.status == 200 || start.elapsed() > Duration::from_secs(15) {
            break resp;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    assert!(
        resp.json()["instances"][0]["user_profile__age"].is_number(),
        "{}",
        resp.json()
    );
    let (code, status) = cp_status(http, &c.ca).await;
    assert_eq!(code, 200, "{status}");
    let status: ferry::serve::api::Status = serde_json::from_str(&status).unwrap();
    assert!(
        status
            .nodes
            .iter()
            .any(|n| n.node == ENVOY && n.identity.as_deref() == Some(ENVOY)),
        "{status:?}"
    );

    // xDS: a certificate whose identity may not use the node id it sends is refused.
    let before = refused(http, &c.ca, "node_identity").await;
    let (_envoy_web, _, _) = envoy(dir.path(), &repo, ports, &c.web, &c.ca_file, ENVOY);
    let start = Instant::now();
    while refused(http, &c.ca, "node_identity").await == before {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no node_identity refusal counted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, text) = cp_status(http, &c.ca).await;
    assert!(
        !text.contains(WEB),
        "the refused stream left no entry: {text}"
    );

    // xDS and the reader: no client certificate, or one from another CA, no handshake.
    let other = Ca::new("another CA");
    let stranger = other
        .issue(&["envoy.ml.svc"], &[ENVOY])
        .write(dir.path(), "stranger");
    for (port, name) in [(xds, CP_NAME), (reader_port, READER_NAME)] {
        for client in [None, Some(&stranger)] {
            let answer = tls::request(
                port,
                name,
                (&c.ca, client),
                ("GET", "/healthz", &[]),
                vec![],
            )
            .await;
            assert!(answer.is_err(), "{name} answered {answer:?} to {client:?}");
        }
    }
    let ok = tls::request(
        reader_port,
        READER_NAME,
        (&c.ca, Some(&c.envoy)),
        ("GET", "/healthz", &[]),
        vec![],
    )
    .await;
    assert_eq!(ok.unwrap().0, 200, "Envoy's certificate reaches the reader");

    // The API: no credential 401, a certificate without the role 403, a stranger no handshake;
    // the CI identity pushes with `ferry apply --push https://`.
    for (method, path) in [
        ("GET", "/status"),
        ("GET", "/v1/snapshot"),
        ("POST", "/v1/snapshot"),
    ] {
        let (code, body) = api(http, &c.ca, None, method, path, &[]).await.unwrap();
        assert_eq!(code, 401, "{method} {path}: {body}");
        assert!(body.contains("\"unauthorized\""), "{body}");
        let (code, body) = api(http, &c.ca, Some(&c.web), method, path, &[])
            .await
            .unwrap();
        assert_eq!(code, 403, "{method} {path}: {body}");
        assert!(body.contains("\"forbidden\""), "{body}");
    }
    assert!(api(http, &c.ca, Some(&stranger), "GET", "/healthz", &[])
        .await
        .is_err());
    let (code, _) = api(http, &c.ca, Some(&c.ci), "GET", "/status", &[])
        .await
        .unwrap();
    assert_eq!(code, 200, "push also reads");
    let out = run(Command::new(bin("ferry"))
        .arg("apply")
        .arg(&repo)
        .args(["--push", &format!("https://127.0.0.1:{http}")])
        .arg("--ca")
        .arg(&c.ca_file)
        .arg("--client-cert")
        .arg(&c.ci.cert)
        .arg("--client-key")
        .arg(&c.ci.key)
        .env_remove("FERRY_PUSH_TOKEN"));
    assert!(out.contains("pushed snapshot"), "{out}");
}

#[test]
fn a_plaintext_listener_on_a_network_address_does_not_start_without_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let (c, repo) = certs_and_repo(dir.path());
    let refusals = plaintext_on_a_network_address_is_refused(&repo, &c.reader);
    assert_eq!(refusals.len(), 4, "{refusals:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_certificate_and_client_ca_serve_the_next_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (c, repo) = certs_and_repo(dir.path());
    let (_cp, _, http) = control_plane(dir.path(), &repo, &c);
    let (code, _) = api(http, &c.ca, Some(&c.ci), "GET", "/status", &[])
        .await
        .unwrap();
    assert_eq!(code, 200);

    // Rotation to a new CA: the server certificate, then the client CA, replaced in place.
    let next = Ca::new("next CA");
    next.issue(&[CP_NAME], &[]).write_to(&c.cp);
    next.write(&c.ca_file);
    let next_ci = next.issue(&[], &[CI]).write(dir.path(), "next-ci");
    let start = Instant::now();
    loop {
        match api(http, &next, Some(&next_ci), "GET", "/status", &[]).await {
            Ok((200, _)) => break,
            other => assert!(
                start.elapsed() < Duration::from_secs(5),
                "the new files not used within 5 s: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "MEASURED: the rotated certificate served a new connection {:?} after the files changed",
        start.elapsed()
    );
    assert!(
        api(http, &c.ca, Some(&c.ci), "GET", "/status", &[])
            .await
            .is_err(),
        "the old CA's certificates are no longer trusted"
    );
}
