//! Issue #26, the fleet simulator's small run in `make test`: a few hundred simulated Envoys
//! (`ferry_fleet`, real ADS with ACK/NACK, each judging its config with ferry-core) on a real
//! `ferry serve`. Pushes converge on every stream; a pushed snapshot the control plane
//! refuses, and a repo change it holds back for a new fingerprint, reach no stream; a stream
//! that stops reading gets the current version when it reads again, without the versions
//! pushed in between queued for it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use ferry_fleet::record::SimRecord;
use ferry_fleet::verdict::Verdicts;
use ferry_fleet::{snapshots, AdsFleet, AdsOptions};
use ferry_integration_tests::control_plane::{ControlPlane, TOKEN};
use ferry_integration_tests::{bin, run};
use prost::Message as _;

/// Simulated Envoys.
const N: usize = 300;
/// The ones that stop reading mid-run.
const PAUSED: usize = 3;
/// Pushes while they do not read.
const PUSHES_WHILE_PAUSED: usize = 10;
/// Each paused stream's HTTP/2 window (64 KiB) against ~50 KB snapshots: its connection holds
/// about one response, so what it is sent later waits on the server.
const WINDOW: u32 = 65_535;
const SNAPSHOT_BYTES: usize = 50_000;
const ALL_VIEWS: &str = "features: [user_profile, transactions, user_embedding]";
const NO_EMBEDDING: &str = "features: [user_profile, transactions]";

fn push(cp: &ControlPlane, salt: u64) -> String {
    let body = snapshots::of_size(SNAPSHOT_BYTES, salt).encode_to_vec();
    let auth = format!("Bearer {TOKEN}");
    let (code, text) = cp.request("POST", "/v1/snapshot", &[("authorization", &auth)], &body);
    assert_eq!(code, 200, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["version"].as_str().unwrap().to_owned()
}

/// Every version any simulated Envoy was sent.
fn sent_anywhere(recs: &[SimRecord], version: &str) -> usize {
    recs.iter()
        .filter(|r| r.received.iter().any(|(v, _)| v == version))
        .count()
}

/// The version `ferry apply` builds from `repo` (what the file watcher would serve).
fn repo_version(dir: &Path, repo: &Path) -> String {
    let out = dir.join("held.snapshot");
    run(Command::new(bin("ferry"))
        .arg("apply")
        .arg(repo)
        .arg("--output")
        .arg(&out));
    let snap =
        ferry_protos::v1::Snapshot::decode(Bytes::from(std::fs::read(&out).unwrap())).unwrap();
    ferry_repo::snapshot::content_version(&snap)
}

#[test]
fn a_few_hundred_streams_converge_never_see_refused_or_held_back_versions_and_a_paused_one_skips_to_the_latest(
) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    ferry_test_support::example::banking_repo(&repo, 10, "2026-01-01T00:00:00Z", |y| y);
    assert!(std::fs::read_to_string(repo.join("ferry.yaml"))
        .unwrap()
        .contains(ALL_VIEWS));
    let cp = ControlPlane::start(dir.path(), &repo);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let fleet = AdsFleet::launch(AdsOptions {
        n: N,
        server: format!("127.0.0.1:{}", cp.xds_port).parse().unwrap(),
        filter_name: "ferry",
        stream_window: WINDOW,
        pki: None,
        verdicts: Verdicts::new(false),
    })
    .unwrap();
    let rec = fleet.recorder().clone();
    let wait = |version: &str, who: std::ops::Range<usize>, what: &str| {
        let v = version.to_owned();
        let ok = rt.block_on(rec.wait(Duration::from_secs(20), move |r| {
            r[who.clone()].iter().all(|s| s.acked() == Some(v.as_str()))
        }));
        assert!(ok, "{what}: not every stream ACKed {version} within 20 s");
    };
    let v0 = cp.version();
    wait(&v0, 0..N, "the first snapshot");

    // A push converges on every stream.
    let v1 = push(&cp, 1);
    wait(&v1, 0..N, "a push");

    // A snapshot the filter refuses is refused by the control plane: no stream sees it.
    let bad = snapshots::refused(2);
    let bad_version = ferry_repo::snapshot::content_version(&bad);
    let auth = format!("Bearer {TOKEN}");
    let (code, text) = cp.request(
        "POST",
        "/v1/snapshot",
        &[("authorization", &auth)],
        &bad.encode_to_vec(),
    );
    assert_eq!(code, 422, "{text}");
    assert_eq!(cp.version(), v1);

    // A repo change to a fingerprint is held back: no stream sees it either.
    let yaml = std::fs::read_to_string(repo.join("ferry.yaml")).unwrap();
    std::fs::write(
        repo.join("ferry.yaml"),
        yaml.replace(ALL_VIEWS, NO_EMBEDDING),
    )
    .unwrap();
    let held_version = repo_version(dir.path(), &repo);
    cp.wait_status("the change held back", Duration::from_secs(10), |s| {
        s.last_refused
            .as_ref()
            .is_some_and(|r| r.error.contains("must be materialized"))
    });
    assert_eq!(cp.version(), v1, "held back, not served");

    // Some streams stop reading; pushes go on; the others converge on each.
    for i in 0..PAUSED {
        fleet.pause(i, true);
    }
    let received_before: Vec<usize> = rec.lock()[..PAUSED]
        .iter()
        .map(|r| r.received.len())
        .collect();
    let mut latest = v1.clone();
    for salt in 0..PUSHES_WHILE_PAUSED as u64 {
        latest = push(&cp, 10 + salt);
        wait(&latest, PAUSED..N, "a push while some streams do not read");
    }
    // They read again: each gets the latest, not every version pushed meanwhile.
    for i in 0..PAUSED {
        fleet.pause(i, false);
    }
    wait(&latest, 0..N, "the paused streams once they read again");
    let recs = rec.lock().clone();
    for (i, before) in received_before.iter().enumerate() {
        let got = &recs[i].received[*before..];
        assert_eq!(got.last().map(|(v, _)| v.as_str()), Some(latest.as_str()));
        // At most: the one it was reading when paused, what its window holds (one and a part),
        // the one queued on the server, and the latest.
        assert!(
            got.len() <= 5,
            "stream {i} was sent {} of the {PUSHES_WHILE_PAUSED} versions pushed while it did not \
             read: a queue of old versions ({got:?})",
            got.len()
        );
        eprintln!(
            "paused stream {i}: sent {} of the {PUSHES_WHILE_PAUSED} versions pushed meanwhile",
            got.len()
        );
    }
    for r in &recs {
        assert!(r.nacks.is_empty(), "no valid snapshot is NACKed: {r:?}");
        assert_eq!(r.connects, 1, "no stream was dropped: {r:?}");
    }
    assert_eq!(
        sent_anywhere(&recs, &bad_version),
        0,
        "a refused version reached a stream"
    );
    assert_eq!(
        sent_anywhere(&recs, &held_version),
        0,
        "a held-back version reached a stream"
    );
    // A stream's record shows a version when it arrives; the control plane counts it once the
    // ACK is processed, a moment later on a loaded machine.
    cp.wait_converged(&latest, N, Duration::from_secs(10));
    rt.block_on(fleet.stop());
}
