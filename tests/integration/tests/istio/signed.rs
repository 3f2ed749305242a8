//! A signed pull through real Envoy and `ferry serve --signing-key`, with a man in the middle
//! between them (a small HTTP server of this test that answers what the test tells it): the
//! signed snapshot is taken and enriches requests; a newer one is taken; a replay of the older
//! signed envelope is refused while the filter keeps serving the newer one; a restart of
//! `ferry serve` keeps the restored snapshot's sequence and signs the next one above it.

use std::process::Command;
use std::time::Instant;

use ferry_integration_tests::control_plane::ControlPlane;
use ferry_integration_tests::mitm::{fetch, Answer, Mitm};
use ferry_integration_tests::{bin, run, Envoy, Options, Stack};
use serde_json::Value as Json;

use super::pull::{enriched, keygen, post_until, with_cp_cluster, CP_CLUSTER, NEW_ROUTE, WAIT};
use super::support::{as_istio, post, ISTIO_CLUSTER};

/// A stack whose Envoy runs the filter as Istio does, pulling signed snapshots from `ferry
/// serve --signing-key` through the man in the middle, which has served the first snapshot and
/// then a newer one (with the route `/t/added-later`), both taken.
pub struct SignedPull {
    pub stack: Stack,
    pub cp: ControlPlane,
    pub mitm: Mitm,
    pub envoy: Envoy,
    pub first: Answer,
    pub second: Answer,
}

impl SignedPull {
    /// `edit` changes Envoy's bootstrap before anything else does (e.g. which `.wasm` it runs).
    pub async fn start(edit: impl FnOnce(String) -> String) -> SignedPull {
        let stack = Stack::start(Options {
            extra_routes: "",
            entities: Some(50),
            ..Options::default()
        });
        let key = keygen(stack.dir.path());
        let key_arg = key.display().to_string();
        let cp = ControlPlane::start_with_args(
            stack.dir.path(),
            &stack.repo,
            &["--signing-key", &key_arg],
        );
        let first = fetch(&cp);
        let mitm = Mitm::start();
        mitm.set(first.clone());

        let url = format!("http://127.0.0.1:{}/v1/snapshot", mitm.port);
        let plugin_config = run(Command::new(bin("ferry"))
            .arg("plugin-config")
            .arg(&stack.repo)
            .args(["--reader-cluster", ISTIO_CLUSTER])
            .args(["--snapshot-url", &url, "--snapshot-cluster", CP_CLUSTER])
            .args(["--snapshot-poll-ms", "200", "--snapshot-key", &key_arg])
            .arg("--insecure"));
        let entry = &serde_json::from_str::<Json>(&plugin_config).unwrap()["snapshot_keys"][0];
        assert!(entry["id"].as_str().unwrap().starts_with("k-"), "{entry}");
        let port = mitm.port;
        let envoy =
            stack.static_envoy_edited(|y| with_cp_cluster(as_istio(edit(y), &plugin_config), port));
        let p = envoy.listen_port;
        post_until(
            p,
            "/v1/models/fraud:predict",
            "the signed snapshot",
            enriched,
        )
        .await;

        // A newer snapshot: a higher sequence, taken.
        let yaml = stack.repo.join("ferry.yaml");
        let text = std::fs::read_to_string(&yaml).unwrap() + NEW_ROUTE;
        std::fs::write(&yaml, text).unwrap();
        cp.apply_push(&stack.repo, &stack.redis.url(), false);
        let second = fetch(&cp);
        let (s1, s2) = (first.sequence(), second.sequence());
        assert!(s2 > s1, "{s2} > {s1}");
        mitm.set(second.clone());
        post_until(p, "/t/added-later", "the newer snapshot", enriched).await;
        SignedPull {
            stack,
            cp,
            mitm,
            envoy,
            first,
            second,
        }
    }

    /// The refusal the filter logs for a replay of the first snapshot.
    pub fn replay_refusal(&self) -> String {
        format!(
            "sequence {} is lower than the held snapshot's {}",
            self.first.sequence(),
            self.second.sequence()
        )
    }

    /// The man in the middle answers the first snapshot again (under a new ETag, so that the
    /// filter takes it for a change).
    pub fn replay_first(&self) {
        self.mitm.set(Answer {
            etag: "\"replayed\"".into(),
            ..self.first.clone()
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_snapshot_is_taken_and_a_replayed_older_one_refused() {
    let mut pull = SignedPull::start(|y| y).await;
    let s2 = pull.second.sequence();
    let p = pull.envoy.listen_port;
    let yaml = pull.stack.repo.join("ferry.yaml");

    // The man in the middle replays the older signed envelope: refused, the newer snapshot
    // serves on.
    pull.replay_first();
    let refusal = pull.replay_refusal();
    let SignedPull {
        stack,
        cp,
        mitm,
        envoy,
        second,
        ..
    } = &mut pull;
    let start = Instant::now();
    while !envoy.proc.log_text().contains(&refusal) {
        assert!(start.elapsed() < WAIT, "{}", envoy.proc.log_text());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for _ in 0..5 {
        let resp = post(p, "/t/added-later", super::support::instances(&["u000001"])).await;
        assert!(enriched(&resp), "{} {:?}", resp.status, resp.body);
    }
    // Every root context (the main thread's, each worker's) polls every 200 ms and logs the
    // refusal once while it repeats.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let logged = envoy.proc.log_text().matches(&refusal).count();
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    assert_eq!(envoy.proc.log_text().matches(&refusal).count(), logged);
    assert!((1..=3).contains(&logged), "{logged}");

    // `ferry serve` restarted: the restored snapshot keeps its sequence and its bytes; the next
    // one is signed above it.
    cp.restart();
    let restored = fetch(cp);
    assert_eq!((restored.sequence(), &restored.body), (s2, &second.body));
    let text = std::fs::read_to_string(&yaml).unwrap();
    std::fs::write(&yaml, text.replace("added-later", "added-again")).unwrap();
    cp.apply_push(&stack.repo, &stack.redis.url(), false);
    let third = fetch(cp);
    assert!(third.sequence() > s2, "{} > {s2}", third.sequence());
    mitm.set(third);
    post_until(
        p,
        "/t/added-again",
        "the snapshot after the restart",
        enriched,
    )
    .await;
    assert!(!envoy.proc.log_text().contains("panicked"));
}
