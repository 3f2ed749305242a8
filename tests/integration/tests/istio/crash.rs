//! A Wasm VM that crashed and was reloaded still refuses a replayed older signed snapshot
//! (issue #31): the held sequence is kept in Envoy's shared data, which outlives the VM. The
//! filter is the test-only build with `--features fault-injection` (a request carrying
//! `x-wasm-fault: crash` traps its VM, as a failed allocation would), Envoy runs it with
//! `failure_policy: FAIL_RELOAD`, and a man in the middle answers the pulls (`signed.rs`).

use std::time::{Duration, Instant};

use ferry_integration_tests::process::Proc;
use ferry_integration_tests::root;

use super::pull::{enriched, WAIT};
use super::signed::SignedPull;
use super::support::{instances, post, send};

/// The filter built with its crash switch (`cargo build --profile wasm-faults -p ferry-filter
/// --features fault-injection --target wasm32-wasip1`, as `scripts/test.sh` does).
fn faults_wasm() -> String {
    let p = root().join("target/wasm32-wasip1/wasm-faults/ferry_filter.wasm");
    assert!(p.exists(), "{} is not built", p.display());
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_vm_still_refuses_a_replayed_older_snapshot() {
    let release = root().join("target/wasm32-wasip1/release/ferry_filter.wasm");
    let faults = faults_wasm();
    let pull = SignedPull::start(|y| {
        assert!(y.contains(&release.display().to_string()), "{y}");
        assert!(y.contains("failure_policy: FAIL_RELOAD"), "{y}");
        y.replace(&release.display().to_string(), &faults)
    })
    .await;
    let (envoy, p) = (&pull.envoy, pull.envoy.listen_port);

    // The man in the middle replays the older envelope: refused by the running VMs.
    pull.replay_first();
    let refusal = pull.replay_refusal();
    wait_for_log(&envoy.proc, &refusal, 1).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before_crash = envoy.proc.log_text().matches(&refusal).count();

    // Crash a worker's VM while the replay is what the pull gets: Envoy reloads it on that
    // worker's next request, and the reloaded VM's first pull gets the replay. It is refused
    // (logged anew by the new VM), and no request is ever served by the older snapshot:
    // /t/added-later, which it does not route, is enriched (a VM holding the newer one) or
    // refused as not loaded (the reloaded VM, which holds no snapshot yet), never passed
    // through unenriched.
    let crash = send(
        p,
        "POST",
        "/v1/models/fraud:predict",
        &[("x-wasm-fault", "crash")],
        instances(&["u000001"]),
    )
    .await;
    assert_eq!(crash.status, 503, "the VM trapped: {:?}", crash.body);
    assert!(
        envoy.proc.log_text().contains("wasm"),
        "Envoy logged the trap"
    );
    // Envoy reloads a failed VM at most once per its reload backoff (1 s by default,
    // `ReloadConfig`): a request landing on the crashed worker before that is refused 503
    // `wasm_fail_stream`, closed too. Requests go on until the reloaded VM has logged its refusal.
    let (mut not_loaded, mut failed_vm, mut sent) = (0, 0, 0);
    let start = Instant::now();
    while envoy.proc.log_text().matches(&refusal).count() <= before_crash || sent < 20 {
        assert!(
            start.elapsed() < WAIT,
            "the reloaded VM never logged the refusal:\n{}",
            envoy.proc.log_text()
        );
        let resp = post(p, "/t/added-later", instances(&["u000001"])).await;
        sent += 1;
        if resp.status == 503 && resp.header("x-ferry-error") == Some("snapshot_not_loaded") {
            not_loaded += 1;
        } else if resp.status == 503 && resp.body.starts_with(b"{\"error\":\"wasm_fail_stream\"") {
            failed_vm += 1;
        } else {
            assert!(enriched(&resp), "{} {:?}", resp.status, resp.body);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "after the crash, of {sent}: {not_loaded} answered by a VM holding no snapshot yet, \
         {failed_vm} refused inside the reload backoff"
    );

    // The real snapshot back: the reloaded VM loads it at its next poll (the same sequence as
    // the shared one, the same bytes), and then every VM serves it: 20 in a row enriched.
    pull.mitm.set(pull.second.clone());
    let start = Instant::now();
    let mut in_a_row = 0;
    while in_a_row < 20 {
        let resp = post(p, "/t/added-later", instances(&["u000001"])).await;
        if enriched(&resp) {
            in_a_row += 1;
        } else {
            assert_eq!(resp.header("x-ferry-error"), Some("snapshot_not_loaded"));
            assert!(
                start.elapsed() < WAIT,
                "the reloaded VM never loaded the snapshot"
            );
            in_a_row = 0;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn wait_for_log(proc: &Proc, text: &str, count: usize) {
    let start = Instant::now();
    while proc.log_text().matches(text).count() < count {
        assert!(
            start.elapsed() < WAIT,
            "{count} x {text}:\n{}",
            proc.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
