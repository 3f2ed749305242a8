//! A sink in trouble, through real Envoy (Wasm build): its directory on a full disk (a small
//! tmpfs), and the sink process stopped (SIGSTOP) while requests run. Requests are answered and
//! enriched either way; what is lost is counted.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ferry_integration_tests::http::Response;
use ferry_integration_tests::{free_port, Options, Runtime, Stack};

use super::harness::{envoy_stat, get, logging_envoy, read_back, send, Sink, ROUTES};

/// A tmpfs mounted for the test, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    /// `mount -t tmpfs -o size=SIZE`, or why it cannot be.
    fn tmpfs(dir: &Path, size: &str) -> Result<Mount, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if out.status.success() {
            Ok(Mount(dir.to_path_buf()))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system under `path` with one file until it is full.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = [0u8; 1024];
    while f.write_all(&chunk).and_then(|()| f.flush()).is_ok() {}
}

fn every_file(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(every_file(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool, log: impl Fn() -> String) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(30), "{what}:\n{}", log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_is_an_error_counted_and_the_sink_writes_again_once_freed() {
    let stack = Stack::start(Options {
        runtime: Runtime::Wasm,
        extra_routes: ROUTES,
        entities: Some(50),
    });
    let dir = stack.dir.path().join("served");
    let _mount = match Mount::tmpfs(&dir, "256k") {
        Ok(m) => m,
        Err(why) => {
            eprintln!("SKIPPED: cannot mount a tmpfs for the full disk ({why})");
            return;
        }
    };
    let filler = dir.join("filler");
    fill(&filler);
    let mut sink = Sink::start(&stack, &dir, free_port());
    let (_envoy, port, _admin) = logging_envoy(&stack, sink.grpc);
    let enriched = |r: &Response| {
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert!(r.json()["instances"][0]["user_profile__age"].is_i64());
    };
    let errors = "ferry_log_sink_write_errors_total";
    let dropped = r#"ferry_log_sink_records_dropped_total{reason="write_error"}"#;
    // Two windows of 5 requests × 3 instances, each a file that cannot be written.
    for round in 1..=2u64 {
        for _ in 0..5 {
            enriched(&send(port, "/t/logged", &["u000008", "u000009", "u000010"]).await);
        }
        wait_for(
            "the full disk's rows counted as dropped",
            || sink.metric(dropped) >= 15 * round,
            || get(sink.http, "/metrics"),
        );
    }
    assert!(sink.metric(errors) >= 2, "{}", get(sink.http, "/metrics"));
    assert_eq!(sink.metric(dropped), 30);
    assert_eq!(sink.metric("ferry_log_sink_records_written_total"), 0);
    assert!(sink.proc.is_running(), "no crash");
    let log = sink.proc.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("cannot write a served-feature log file"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one line per interval, not per file:\n{log}"
    );
    assert!(lines[0].contains("No space left on device"), "{}", lines[0]);
    assert_eq!(
        log.matches("served-feature log sink:").count(),
        1,
        "started once"
    );
    // No half file: only the filler is left (the temporary files were removed).
    assert_eq!(every_file(&dir), vec![filler.clone()]);
    eprintln!(
        "full disk: {} write errors, {} rows dropped (write_error), one error line: {}",
        sink.metric(errors),
        sink.metric(dropped),
        lines[0]
    );

    // Space freed: the next window is written, complete.
    std::fs::remove_file(&filler).unwrap();
    for _ in 0..5 {
        enriched(&send(port, "/t/logged", &["u000011", "u000012", "u000013"]).await);
    }
    sink.wait_written(15);
    std::thread::sleep(Duration::from_millis(1500));
    let rows = read_back(&dir);
    assert_eq!(rows.len(), 15, "only the rows after the space was freed");
    assert!(rows.iter().all(|r| r["user_id"]
        .as_str()
        .is_some_and(|u| ["u000011", "u000012", "u000013"].contains(&u))));
    assert!(every_file(&dir)
        .iter()
        .all(|p| p.extension().is_some_and(|x| x == "parquet")));
}

/// Sends SIGCONT when dropped, so a failed assertion never leaves the sink stopped.
struct Stopped(u32);

impl Stopped {
    fn stop(pid: u32) -> Stopped {
        signal("-STOP", pid);
        Stopped(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        signal("-CONT", self.0);
    }
}

fn signal(sig: &str, pid: u32) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// Users of one request: ~10 KB of record each.
const BATCH: usize = 50;

/// Checks one answer: enriched, every instance.
fn check(r: &Response) {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("x-ferry-status").is_some());
    let json = r.json();
    let instances = json["instances"].as_array().unwrap();
    assert_eq!(instances.len(), BATCH);
    assert!(instances
        .iter()
        .all(|i| i.as_object().unwrap().contains_key("user_profile__age")));
    assert!(instances[0]["user_profile__age"].is_i64(), "enriched");
}

/// Sends requests of BATCH users, four at a time, for `secs`, checking each; how many.
async fn load(port: u16, secs: u64) -> u64 {
    let owned: Vec<String> = (1..=BATCH).map(|i| format!("u{i:06}")).collect();
    let t = Instant::now();
    let mut sent = 0;
    while t.elapsed() < Duration::from_secs(secs) {
        let batch: Vec<_> = (0..4)
            .map(|_| {
                let owned = owned.clone();
                tokio::spawn(async move {
                    let users: Vec<&str> = owned.iter().map(String::as_str).collect();
                    send(port, "/t/logged", &users).await
                })
            })
            .collect();
        for h in batch {
            check(&h.await.unwrap());
            sent += 1;
        }
    }
    sent
}

/// Envoy's view of the logger and the sink's connection.
struct EnvoyLog {
    written: u64,
    dropped: u64,
    tx_bytes: u64,
    keepalive_timeouts: u64,
}

fn envoy_log(admin: u16) -> EnvoyLog {
    EnvoyLog {
        written: envoy_stat(admin, "access_logs.grpc_access_log.logs_written"),
        dropped: envoy_stat(admin, "access_logs.grpc_access_log.logs_dropped"),
        tx_bytes: envoy_stat(admin, "cluster.ferry_log_sink.upstream_cx_tx_bytes_total"),
        keepalive_timeouts: envoy_stat(admin, "cluster.ferry_log_sink.http2.keepalive_timeout"),
    }
}

/// Rows written by the sink once they stop moving.
fn settled_rows(sink: &Sink) -> u64 {
    let mut last = u64::MAX;
    loop {
        std::thread::sleep(Duration::from_millis(2500));
        let now = sink.metric("ferry_log_sink_records_written_total");
        if now == last {
            return now;
        }
        last = now;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_sink_costs_records_never_requests() {
    let stack = Stack::start(Options {
        runtime: Runtime::Wasm,
        extra_routes: ROUTES,
        entities: Some(50),
    });
    let sink = Sink::start(&stack, &stack.dir.path().join("served"), free_port());
    let (_envoy, port, admin) = logging_envoy(&stack, sink.grpc);
    let rows = |requests: u64| requests * BATCH as u64;
    let warm = load(port, 1).await;
    sink.wait_written(rows(warm));

    // 1. Stopped for 3 s (less than the HTTP/2 keepalive's interval): Envoy's logger sees no
    // back-pressure and holds what the sink does not read; it is all written once the sink
    // reads again.
    let before = envoy_log(admin);
    let stopped = Stopped::stop(sink.proc.pid().unwrap());
    let short = load(port, 3).await;
    let during = envoy_log(admin);
    drop(stopped);
    assert_eq!(
        (during.written - before.written) + (during.dropped - before.dropped),
        short,
        "every logged request is an entry Envoy kept or one it dropped"
    );
    let written = settled_rows(&sink);
    assert_eq!(written, rows(during.written), "nothing lost");
    eprintln!(
        "stopped sink, 3 s: {short} requests, all answered and enriched; Envoy logs_written \
         +{}, logs_dropped +{}, {} bytes into the stopped sink's socket; all {} rows written \
         after SIGCONT",
        during.written - before.written,
        during.dropped - before.dropped,
        during.tx_bytes - before.tx_bytes,
        rows(short)
    );

    // 2. Stopped for 12 s: the sink does not answer Envoy's PINGs, Envoy closes the
    // connection (what it held is lost) and reconnects when the sink reads again.
    let before = envoy_log(admin);
    let stopped = Stopped::stop(sink.proc.pid().unwrap());
    let long = load(port, 12).await;
    let during = envoy_log(admin);
    drop(stopped);
    assert!(
        during.keepalive_timeouts > before.keepalive_timeouts,
        "Envoy closed the silent connection"
    );
    let after = load(port, 2).await;
    let end = envoy_log(admin);
    let total = settled_rows(&sink);
    let lost = rows(end.written) - total;
    assert!(lost > 0, "the held records died with the connection");
    assert!(
        lost <= rows(long),
        "only records sent while stopped are lost"
    );
    assert_eq!(
        end.written + end.dropped,
        warm + short + long + after,
        "Envoy accounts for every logged request"
    );
    assert_eq!(
        sink.metric(r#"ferry_log_sink_records_dropped_total{reason="buffer_full"}"#),
        0
    );
    eprintln!(
        "stopped sink, 12 s: {long} requests, all answered and enriched; Envoy logs_written \
         +{}, logs_dropped +{}, http2 keepalive timeouts +{}; {} of their {} rows lost ({} \
         requests), every record after the sink came back written ({after} requests)",
        during.written - before.written,
        during.dropped - before.dropped,
        during.keepalive_timeouts - before.keepalive_timeouts,
        lost,
        rows(long),
        lost / BATCH as u64
    );
}
