//! Issue #22: every certificate of every link replaced on disk while ~200 requests/s run through
//! Envoy, with 0 failed requests. The links: Envoy → `ferry serve` (xDS) and Envoy → the
//! reader, each over mTLS. Each party's files are a Kubernetes-style secret volume, updated as
//! the kubelet does (a `..data` symlink swap); the rotation is the one an operator follows:
//! the CA bundles to old + new CA, then every leaf to one of the new CA, then the bundles to
//! the new CA only. Envoy reads its files through file-based SDS, the servers reload theirs.
//!
//! The reader cluster closes a connection after 25 requests (a test edit of the bootstrap), so
//! Envoy makes new handshakes all through the run: each phase is tried by new connections, not
//! only by the ones opened before it. After the run: the reader and `ferry serve` (API and xDS)
//! present the new certificates (compared byte for byte, serials included), Envoy's `/certs`
//! shows its new client certificate's serial, and a restarted `ferry serve`, trusting the new CA
//! only, gets Envoy back over xDS with its new certificate.
//!
//! `FERRY_ROTATION_SECS` sets the run's length (default 30, the issue's figure).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_integration_tests::data::Source;
use ferry_integration_tests::http::post;
use ferry_integration_tests::secure::{SecureOptions, SecureStack, CP_NAME, ENVOY, READER_NAME};
use ferry_integration_tests::tls;
use ferry_test_support::certs::Ca;
use serde_json::Value as Json;

/// Requests per second through Envoy.
const RATE: u64 = 200;

/// The reader cluster closes each connection after 25 requests: new handshakes all the time.
fn short_connections(yaml: String) -> String {
    let at = yaml
        .find("  - name: ferry_reader\n")
        .expect("the reader cluster");
    let idle = "          idle_timeout: 300s\n";
    let pos = at
        + yaml[at..]
            .find(idle)
            .expect("the reader's protocol options");
    let mut out = yaml;
    out.insert_str(
        pos + idle.len(),
        "          max_requests_per_connection: 25\n",
    );
    out
}

/// One request on its own connection: 200 and the store's age for u000001.
async fn one(port: u16, want: Json) -> Result<(), String> {
    let body = r#"{"instances": [{"user_id": "u000001"}]}"#;
    let resp = tokio::time::timeout(
        Duration::from_secs(5),
        post(port, "/v1/models/fraud:predict", body),
    )
    .await
    .map_err(|_| "no answer within 5 s".to_owned())?;
    if resp.status != 200 || resp.json()["instances"][0]["user_profile__age"] != want {
        return Err(format!(
            "{} {}",
            resp.status,
            String::from_utf8_lossy(&resp.body)
        ));
    }
    Ok(())
}

/// Counts of the load.
#[derive(Default)]
struct Load {
    sent: AtomicU64,
    failed: AtomicU64,
    first_error: std::sync::Mutex<Option<String>>,
}

/// `RATE` requests per second for `secs`, each its own task.
async fn load(port: u16, want: Json, secs: u64, counts: Arc<Load>) {
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    let mut tasks = Vec::new();
    for _ in 0..RATE * secs {
        tick.tick().await;
        let (want, counts) = (want.clone(), counts.clone());
        tasks.push(tokio::spawn(async move {
            counts.sent.fetch_add(1, Ordering::Relaxed);
            if let Err(e) = one(port, want).await {
                counts.failed.fetch_add(1, Ordering::Relaxed);
                counts.first_error.lock().unwrap().get_or_insert(e);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_certificate_rotates_under_load_without_a_failed_request() {
    let secs: u64 = std::env::var("FERRY_ROTATION_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let mut stack = tokio::task::block_in_place(|| {
        SecureStack::start(SecureOptions {
            envoy_edit: Some(short_connections),
            ..SecureOptions::default()
        })
    });
    let want = Source::load(&stack.repo.join("data"))
        .value("user_profile", "age", "u000001")
        .unwrap();
    let old_envoy_serial = stack.envoy_tls.1.serial.clone();
    let next = Ca::new("next CA");
    let both = format!("{}{}", stack.ca.pem, next.pem);
    let new_cp = next.issue(&[CP_NAME, "127.0.0.1"], &[]);
    let new_reader = next.issue(&[READER_NAME], &[]);
    let new_envoy = next.issue(&["envoy.ml.svc"], &[ENVOY]);

    let handshakes_before = reader_handshakes(stack.envoy_ports.admin).await;
    let counts = Arc::new(Load::default());
    let port = stack.envoy_ports.listen;
    let running = tokio::spawn(load(port, want.clone(), secs, counts.clone()));
    let phase = Duration::from_millis(secs * 1000 / 4);
    let start = Instant::now();
    tokio::time::sleep(phase).await;
    // 1. Every CA bundle: old + new.
    for (volume, leaf) in [
        &mut stack.envoy_tls,
        &mut stack.reader_tls,
        &mut stack.cp_tls,
    ] {
        volume.update(leaf, &both);
    }
    tokio::time::sleep(phase).await;
    // 2. Every leaf from the new CA, Envoy's first.
    for ((volume, leaf), new) in [
        (&mut stack.envoy_tls, &new_envoy),
        (&mut stack.reader_tls, &new_reader),
        (&mut stack.cp_tls, &new_cp),
    ] {
        volume.update(new, &both);
        *leaf = new.clone();
    }
    tokio::time::sleep(phase).await;
    // 3. Every bundle: the new CA only, Envoy's first (the servers already show new leaves).
    for (volume, leaf) in [
        &mut stack.envoy_tls,
        &mut stack.reader_tls,
        &mut stack.cp_tls,
    ] {
        volume.update(leaf, &next.pem);
    }
    running.await.unwrap();
    let (sent, failed) = (
        counts.sent.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
    );
    let elapsed = start.elapsed().as_secs_f64();
    println!(
        "MEASURED: {sent} requests in {elapsed:.1} s ({:.0}/s) across the rotation, {failed} failed",
        sent as f64 / elapsed
    );
    assert_eq!(failed, 0, "{:?}", counts.first_error.lock().unwrap());
    assert!(sent >= RATE * secs, "{sent}");
    // New connections all through the run (25 requests each): each phase met new handshakes.
    let handshakes = reader_handshakes(stack.envoy_ports.admin).await - handshakes_before;
    println!("MEASURED: {handshakes} TLS handshakes from Envoy to the reader during the run");
    assert!(
        handshakes >= sent / 50,
        "{handshakes} handshakes for {sent} requests"
    );

    // The new certificates are the ones presented: the reader's and ferry serve's, by a client
    // of the new CA only...
    let client = stack.envoy_tls.0.files();
    let trust = (&next, Some(&client));
    for (port, name, leaf, alpn) in [
        (
            stack.reader_port,
            READER_NAME,
            &new_reader,
            &b"http/1.1"[..],
        ),
        (stack.http_port, CP_NAME, &new_cp, &b"http/1.1"[..]),
        (stack.xds_port, CP_NAME, &new_cp, &b"h2"[..]),
    ] {
        let served = tls::served_certificate(port, name, trust, alpn)
            .await
            .unwrap();
        assert_eq!(served, tls::der_of(&leaf.cert_pem), "{name} on {port}");
    }
    // ... Envoy's, on its admin page ...
    let certs = envoy_certs(stack.envoy_ports.admin).await;
    assert!(certs.contains(&new_envoy.serial), "{certs}");
    assert!(!certs.contains(&old_envoy_serial), "{certs}");
    // ... and a restarted ferry serve trusting the new CA only has Envoy back over xDS.
    stack.ca = next;
    tokio::task::block_in_place(|| stack.restart_control_plane());
    let start = Instant::now();
    loop {
        let status = status_nodes(&stack).await;
        if status
            .iter()
            .any(|(node, identity)| node == ENVOY && identity == ENVOY)
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "Envoy did not reconnect: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stack
        .wait_enriched_async(Duration::from_secs(10))
        .await
        .unwrap();
}

/// Envoy's admin `/certs` (the certificates its TLS contexts hold, with serials).
async fn envoy_certs(admin: u16) -> String {
    let resp = ferry_integration_tests::http::Conn::open(admin)
        .await
        .send("GET", "/certs", &[], "")
        .await;
    String::from_utf8_lossy(&resp.body).into_owned()
}

/// Envoy's count of TLS handshakes to the reader (`cluster.ferry_reader.ssl.handshake`).
async fn reader_handshakes(admin: u16) -> u64 {
    let resp = ferry_integration_tests::http::Conn::open(admin)
        .await
        .send(
            "GET",
            "/stats?filter=^cluster.ferry_reader.ssl.handshake$",
            &[],
            "",
        )
        .await;
    let text = String::from_utf8_lossy(&resp.body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("cluster.ferry_reader.ssl.handshake: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no handshake count: {text}"))
}

/// `/status`'s nodes as (node id, verified identity).
async fn status_nodes(stack: &SecureStack) -> Vec<(String, String)> {
    let read = format!(
        "Bearer {}",
        ferry_integration_tests::control_plane::READ_TOKEN
    );
    let req = ("GET", "/status", &[("authorization", read.as_str())][..]);
    let Ok((200, body)) = stack.api(None, req, Vec::new()).await else {
        return Vec::new();
    };
    let status: ferry::serve::api::Status = serde_json::from_str(&body).unwrap();
    status
        .nodes
        .into_iter()
        .map(|n| (n.node, n.identity.unwrap_or_default()))
        .collect()
}
