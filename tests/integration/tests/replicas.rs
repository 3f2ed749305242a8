//! Issue #26, "not a single point": two `ferry serve --shared-state` replicas on one real
//! Redis, a few hundred simulated Envoys (`ferry_fleet`, real ADS) split across them. A push to
//! one replica reaches the streams of the other; two concurrent pushes to the two replicas get
//! distinct sequences and the higher one wins everywhere; the replica holding the watcher's
//! lease is killed (SIGKILL) right after acknowledging a push: its streams reconnect to the
//! other and end on that push, and the other takes the lease (re-applying the repo file's
//! held-back change under the same rule); Redis stopped: pushes are refused 503 while the
//! streams stay served; Redis back (empty): a push converges. No stream is ever sent a refused
//! or held-back version. A real Envoy on the surviving replica ACKs every version it serves;
//! both replicas serve the same signed envelope of a snapshot (`--signing-key`).

use std::path::Path;
use std::time::Duration;

use ferry::serve::api::{ApiError, ErrorCode, Pushed};
use ferry_fleet::record::{Recorder, SimRecord};
use ferry_fleet::verdict::Verdicts;
use ferry_fleet::{snapshots, AdsFleet, AdsOptions};
use ferry_integration_tests::control_plane::{ControlPlane, TOKEN};
use ferry_integration_tests::http::get_ok;
use ferry_integration_tests::process::{free_port, Proc};
use ferry_integration_tests::start_envoy;
use ferry_test_support::redis::RedisServer;
use prost::Message as _;

/// Simulated Envoys, half on each replica.
const N: usize = 200;
const SNAPSHOT_BYTES: usize = 20_000;
const ALL_VIEWS: &str = "features: [user_profile, transactions, user_embedding]";
const NO_EMBEDDING: &str = "features: [user_profile, transactions]";
const HELD_BACK: &str = "must be materialized";
/// The real Envoy's node id.
const ENVOY_NODE: &str = "real-envoy";

fn replica(dir: &Path, repo: &Path, redis: &RedisServer, name: &str) -> ControlPlane {
    let key = dir.join("signing.pem");
    if !key.exists() {
        ferry_integration_tests::run(
            std::process::Command::new(ferry_integration_tests::bin("ferry"))
                .arg("keygen")
                .arg("--out")
                .arg(&key),
        );
    }
    let key = key.display().to_string();
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let url = redis.url();
    ControlPlane::start_with_args(
        &dir,
        repo,
        &[
            "--shared-state",
            "--redis",
            &url,
            "--cluster-name",
            "replicas-test",
            "--shared-poll-ms",
            "250",
            "--lease-ms",
            "1500",
            "--signing-key",
            &key,
        ],
    )
}

/// POST /v1/snapshot: (status, body).
fn post(cp: &ControlPlane, snap: &ferry_protos::v1::Snapshot) -> (u16, String) {
    let auth = format!("Bearer {TOKEN}");
    cp.request(
        "POST",
        "/v1/snapshot",
        &[("authorization", &auth)],
        &snap.encode_to_vec(),
    )
}

fn push(cp: &ControlPlane, salt: u64) -> Pushed {
    let (code, text) = post(cp, &snapshots::of_size(SNAPSHOT_BYTES, salt));
    assert_eq!(code, 200, "{text}");
    serde_json::from_str(&text).unwrap()
}

fn shared(cp: &ControlPlane) -> ferry::serve::api::SharedStatus {
    cp.status()
        .shared_state
        .expect("a replica reports its shared state")
}

/// Every simulated Envoy that was sent `version`.
fn sent_anywhere(recs: &[SimRecord], version: &str) -> usize {
    recs.iter()
        .filter(|r| r.received.iter().any(|(v, _)| v == version))
        .count()
}

/// Waits until every simulated Envoy ACKed `version`; returns how long after `since` the last
/// one did.
fn converge(rt: &tokio::runtime::Runtime, rec: &Recorder, version: &str, since: Duration) -> f64 {
    let v = version.to_owned();
    let ok = rt.block_on(rec.wait(Duration::from_secs(20), move |r| {
        r.iter().all(|s| s.acked() == Some(v.as_str()))
    }));
    assert!(ok, "not every stream ACKed {version} within 20 s");
    let recs = rec.lock();
    let last = recs
        .iter()
        .filter_map(|r| r.acked_at(version))
        .max()
        .unwrap();
    last.saturating_sub(since).as_secs_f64()
}

#[test]
fn two_replicas_share_pushes_survive_a_kill_and_refuse_pushes_without_redis() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    ferry_test_support::example::banking_repo(&repo, 10, "2026-01-01T00:00:00Z", |y| y);
    let mut redis = RedisServer::start();
    let a = replica(dir.path(), &repo, &redis, "a");
    let b = replica(dir.path(), &repo, &redis, "b");

    // One shared snapshot at one sequence; exactly one replica watches the repo files.
    let v0 = a.version();
    assert_eq!(b.version(), v0);
    let (sa, sb) = (shared(&a), shared(&b));
    assert!(sa.available && sb.available, "{sa:?} {sb:?}");
    assert!(
        sa.sequence > 0 && sa.sequence == sb.sequence,
        "{sa:?} {sb:?}"
    );
    assert!(
        sa.watches_repo != sb.watches_repo,
        "one lease: {sa:?} {sb:?}"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let servers = [a.xds_port, b.xds_port].map(|p| format!("127.0.0.1:{p}").parse().unwrap());
    let options = AdsOptions {
        n: N,
        server: servers[0],
        filter_name: "ferry",
        stream_window: 65_535,
        pki: None,
        verdicts: Verdicts::new(false),
    };
    let fleet = AdsFleet::launch_across(options, &servers).unwrap();
    let rec = fleet.recorder().clone();
    converge(&rt, &rec, &v0, Duration::ZERO);
    assert_eq!(a.status().nodes.len(), N / 2);
    assert_eq!(b.status().nodes.len(), N / 2);

    // A push to A reaches the streams on B.
    let since = rec.now();
    let p1 = push(&a, 1);
    let took = converge(&rt, &rec, &p1.version, since);
    eprintln!("a push to replica A: all {N} streams (half on B) ACKed within {took:.3} s");
    assert_eq!(b.version(), p1.version);
    // Both replicas serve the same signed envelope (the same key signs the same bytes at the
    // same sequence).
    let (from_a, from_b) = (signed_snapshot(&a), signed_snapshot(&b));
    assert_eq!(from_a, from_b);
    let envelope = ferry_protos::v1::SignedSnapshot::decode(from_a.as_slice()).unwrap();
    assert_eq!(envelope.sequence, shared(&b).sequence);

    // A snapshot the filter refuses is refused by B: no stream sees it.
    let bad = snapshots::refused(2);
    let bad_version = ferry_repo::snapshot::content_version(&bad);
    let (code, text) = post(&b, &bad);
    assert_eq!(code, 422, "{text}");
    // A repo change to a fingerprint is held back by the lease holder: no stream sees it.
    let (leader, other, mut leader_cp, other_cp) = if sa.watches_repo {
        ("a", "b", a, b)
    } else {
        ("b", "a", b, a)
    };
    let yaml = std::fs::read_to_string(repo.join("ferry.yaml")).unwrap();
    assert!(yaml.contains(ALL_VIEWS));
    std::fs::write(
        repo.join("ferry.yaml"),
        yaml.replace(ALL_VIEWS, NO_EMBEDDING),
    )
    .unwrap();
    leader_cp.wait_status("the change held back", Duration::from_secs(10), |s| {
        s.last_refused
            .as_ref()
            .is_some_and(|r| r.error.contains(HELD_BACK))
    });
    assert_eq!(other_cp.version(), p1.version, "held back, not served");
    assert!(
        other_cp
            .status()
            .last_refused
            .is_none_or(|r| !r.error.contains(HELD_BACK)),
        "only the lease holder reads the files"
    );

    // A real Envoy joins the replica that will survive, and takes what it serves.
    let envoy = real_envoy(dir.path(), &repo, &other_cp);
    other_cp.wait_status("the real Envoy ACKed", Duration::from_secs(30), |s| {
        s.nodes
            .iter()
            .any(|n| n.node == ENVOY_NODE && n.acked_version.as_deref() == Some(&p1.version))
    });

    // Two pushes at once, one to each replica: distinct sequences, the higher one everywhere.
    let (pa, pb) = std::thread::scope(|s| {
        let x = s.spawn(|| push(&leader_cp, 3));
        let y = s.spawn(|| push(&other_cp, 4));
        (x.join().unwrap(), y.join().unwrap())
    });
    assert!(pa.changed && pb.changed, "{pa:?} {pb:?}");
    assert_ne!(pa.sequence, pb.sequence, "{pa:?} {pb:?}");
    let winner = if pa.sequence > pb.sequence { &pa } else { &pb };
    converge(&rt, &rec, &winner.version, Duration::ZERO);
    assert_eq!(leader_cp.version(), winner.version);
    assert_eq!(other_cp.version(), winner.version);
    assert_eq!(shared(&leader_cp).sequence, winner.sequence);
    assert_eq!(shared(&other_cp).sequence, winner.sequence);
    // The winner pushed again, to the replica that did not take it: nothing changes.
    let (salt, to) = if pa.sequence > pb.sequence {
        (3, &other_cp)
    } else {
        (4, &leader_cp)
    };
    let again = push(to, salt);
    assert!(!again.changed, "{again:?}");
    assert_eq!(
        (again.version.as_str(), again.sequence),
        (winner.version.as_str(), winner.sequence)
    );

    // The lease holder acknowledges a push and is killed at once: every stream ends on it, the
    // killed replica's ones after one reconnect to the other replica.
    let p5 = push(&leader_cp, 5);
    leader_cp.proc.kill();
    let killed_first = usize::from(leader == "b");
    let on_killed = move |i: usize| i % 2 == killed_first;
    let reconnected = rt.block_on(rec.wait(Duration::from_secs(20), move |r| {
        r.iter()
            .enumerate()
            .all(|(i, s)| !on_killed(i) || s.connects >= 2)
    }));
    assert!(
        reconnected,
        "the killed replica's streams did not reconnect within 20 s"
    );
    converge(&rt, &rec, &p5.version, Duration::ZERO);
    eprintln!("replica {leader} killed after acknowledging a push; replica {other} serves all");
    let recs = rec.lock().clone();
    for (i, r) in recs.iter().enumerate() {
        let expected = if on_killed(i) { 2 } else { 1 };
        assert_eq!(r.connects, expected, "stream {i}: {r:?}");
    }
    assert_eq!(other_cp.status().nodes.len(), N + 1, "and the real Envoy");
    // The other replica takes the lease, and with it the file: its change is held back there.
    other_cp.wait_status("the lease taken over", Duration::from_secs(10), |s| {
        s.shared_state.as_ref().is_some_and(|x| x.watches_repo)
            && s.last_refused
                .as_ref()
                .is_some_and(|r| r.error.contains(HELD_BACK))
    });
    assert_eq!(other_cp.version(), p5.version);

    // Redis away: a push is refused 503, the streams stay served.
    redis.stop();
    let (code, text) = post(&other_cp, &snapshots::of_size(SNAPSHOT_BYTES, 6));
    assert_eq!(code, 503, "{text}");
    let e: ApiError = serde_json::from_str(&text).unwrap();
    assert_eq!(e.error, ErrorCode::SharedStateUnavailable, "{text}");
    assert_eq!(e.current_version.as_deref(), Some(p5.version.as_str()));
    let status = other_cp.status();
    let s = status.shared_state.as_ref().unwrap();
    assert!(!s.available && s.error.is_some(), "{s:?}");
    let metrics = other_cp.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l == "ferry_shared_state_available 0"),
        "{metrics}"
    );
    assert_eq!(status.nodes.len(), N + 1);
    assert!(status.converged, "{status:?}");

    // A replica started while Redis is away serves nothing (the repo could roll a push back).
    let late = replica(dir.path(), &repo, &redis, "c");
    let status = late.status();
    assert!(status.snapshot.is_none(), "{status:?}");
    assert!(!status.shared_state.unwrap().available);
    // Its readiness keeps a Service's Envoys off it; the replicas serving a snapshot are ready.
    let (code, body) = late.request("GET", "/readyz", &[], b"");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("\"no_snapshot\""), "{body}");
    assert_eq!(other_cp.request("GET", "/readyz", &[], b"").0, 200);

    // Redis back (empty: no persistence): a push is stored again, above the last sequence.
    redis.restart();
    other_cp.wait_status("Redis back", Duration::from_secs(10), |s| {
        s.shared_state.as_ref().is_some_and(|x| x.available)
    });
    let p7 = push(&other_cp, 7);
    let metrics = other_cp.metrics();
    assert!(
        metrics
            .lines()
            .any(|l| l == "ferry_shared_state_available 1"),
        "{metrics}"
    );
    assert!(p7.sequence > p5.sequence, "{p7:?} {p5:?}");
    converge(&rt, &rec, &p7.version, Duration::ZERO);
    late.wait_status("the late replica caught up", Duration::from_secs(10), |s| {
        s.snapshot.as_ref().is_some_and(|x| x.version == p7.version)
    });
    let (code, body) = late.request("GET", "/readyz", &[], b"");
    assert_eq!(code, 200, "{body}");

    other_cp.wait_status(
        "the real Envoy on the last push",
        Duration::from_secs(20),
        |s| {
            s.nodes
                .iter()
                .any(|n| n.node == ENVOY_NODE && n.acked_version.as_deref() == Some(&p7.version))
        },
    );
    drop(envoy);

    let recs = rec.lock().clone();
    for r in &recs {
        assert!(r.nacks.is_empty(), "no valid snapshot is NACKed: {r:?}");
    }
    assert_eq!(
        sent_anywhere(&recs, &bad_version),
        0,
        "a refused version reached a stream"
    );
    let held = held_back_version(dir.path(), &repo);
    assert_eq!(
        sent_anywhere(&recs, &held),
        0,
        "a held-back version reached a stream"
    );
    rt.block_on(fleet.stop());
}

/// The body of `GET /v1/snapshot` (a signed envelope), bytes as sent.
fn signed_snapshot(cp: &ControlPlane) -> Vec<u8> {
    use std::io::{Read as _, Write as _};
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", cp.http_port)).unwrap();
    let request = format!(
        "GET /v1/snapshot HTTP/1.1\r\nhost: x\r\nconnection: close\r\nauthorization: Bearer {TOKEN}\r\n\r\n"
    );
    conn.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    conn.read_to_end(&mut out).unwrap();
    let at = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&out[..at]).to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("signed"), "a signed snapshot: {head}");
    out[at + 4..].to_vec()
}

/// A real Envoy on `cp`'s xDS (its reader and model ports lead nowhere: no request is sent).
fn real_envoy(dir: &Path, repo: &Path, cp: &ControlPlane) -> Proc {
    let config = dir.join("envoy.yaml");
    let admin = free_port();
    ferry_integration_tests::run(
        std::process::Command::new(ferry_integration_tests::bin("ferry"))
            .arg("envoy-config")
            .arg(repo)
            .arg("--xds")
            .args(["--xds-address", &format!("127.0.0.1:{}", cp.xds_port)])
            .args(["--node-id", ENVOY_NODE])
            .args(["--listen-port", &free_port().to_string()])
            .args(["--admin-port", &admin.to_string()])
            .args(["--reader-port", &free_port().to_string()])
            .args(["--model-port", &free_port().to_string()])
            .arg("-o")
            .arg(&config),
    );
    let mut proc = start_envoy(dir, &config, "envoy");
    proc.wait_ready(|| get_ok(admin, "/ready"), "envoy /ready");
    proc
}

/// The version `ferry apply` builds from `repo` (what the held-back change would serve).
fn held_back_version(dir: &Path, repo: &Path) -> String {
    let out = dir.join("held.snapshot");
    ferry_integration_tests::run(
        std::process::Command::new(ferry_integration_tests::bin("ferry"))
            .arg("apply")
            .arg(repo)
            .arg("--output")
            .arg(&out),
    );
    let snap = ferry_protos::v1::Snapshot::decode(std::fs::read(&out).unwrap().as_slice()).unwrap();
    ferry_repo::snapshot::content_version(&snap)
}
