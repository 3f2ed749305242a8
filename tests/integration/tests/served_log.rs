//! Served-feature logs through real Envoy on both builds: routes with `log:`, Envoy's gRPC
//! access-log service (`ferry envoy-config --log-sink`) and `ferry log-sink` writing Parquet,
//! read back with pandas/pyarrow (FERRY_FEAST_VENV). Every value equals what the echo model
//! received; sampling follows the hash of Envoy's request id; a dead sink costs records, never
//! requests; an unwritable directory is an error in the sink's metrics and log; a full disk and
//! a stopped sink (`served_log/faults.rs`) lose records, counted, never requests.

#[path = "served_log/faults.rs"]
mod faults;
#[path = "served_log/harness.rs"]
mod harness;

use std::time::{Duration, Instant};

use ferry_integration_tests::http::Response;
use ferry_integration_tests::{each_runtime, free_port, Options, Runtime, Stack};
use harness::{envoy_stat, get, logging_envoy, read_back, send, Sink, ROUTES};
use serde_json::Value as Json;

/// Equal, floats to float32's precision (the model's JSON has the shortest float32 text, the
/// file the float32 itself, which pandas widens).
fn same(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= 1e-6 * y.abs().max(1.0),
            _ => a == b,
        },
    }
}

async fn every_logged_value_is_what_the_model_received(runtime: Runtime) {
    let stack = Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(50),
    });
    let files = stack.dir.path().join("served");
    let sink = Sink::start(&stack, &files, free_port());
    let (_envoy, port, admin) = logging_envoy(&stack, sink.grpc);
    let users = ["u000001", "nobody", "u000002"];
    let mut sent = Vec::new();
    for _ in 0..10 {
        let r = send(port, "/t/logged", &users).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.header("x-ferry-status"), Some("partial"));
        let id = r.upstream_headers()["x-request-id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_ne!(id, "client-chosen", "Envoy assigns the request id");
        sent.push((id, r.json()));
    }
    sink.wait_written(30);
    let rows = read_back(&sink.dir);
    assert_eq!(rows.len(), 30, "10 requests × 3 instances");
    for (id, model) in &sent {
        let mine: Vec<&Json> = rows.iter().filter(|r| r["__request_id"] == *id).collect();
        assert_eq!(mine.len(), 3, "request {id}");
        for (i, user) in users.iter().enumerate() {
            let row = mine.iter().find(|r| r["user_id"] == *user).unwrap();
            let got = &model["instances"][i];
            assert_eq!(row["__route"], "logged");
            assert_eq!(row["__request_status"], "partial");
            assert_eq!(row["__service"], "realtime_scoring");
            assert!(row["__log_date"].as_str().unwrap().starts_with("20"));
            let features: Vec<&String> = got
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| *k != "user_id")
                .collect();
            assert!(features.len() >= 5, "{got}");
            for f in features {
                assert!(
                    same(&row[f.as_str()], &got[f]),
                    "{f} of {user}: {} vs {}",
                    row[f.as_str()],
                    got[f]
                );
                let status = row[format!("{f}__status")].as_i64().unwrap();
                if *user == "nobody" {
                    assert_eq!(status, 3, "NOT_FOUND");
                    assert!(row[format!("{f}__timestamp")].is_null());
                } else if got[f].is_null() {
                    assert!((2..=4).contains(&status), "{f}: {status}");
                } else {
                    assert_eq!(status, 1, "PRESENT");
                    assert!(row[format!("{f}__timestamp")].as_i64().unwrap() > 0);
                }
            }
        }
    }
    assert_eq!(
        envoy_stat(admin, "access_logs.grpc_access_log.logs_dropped"),
        0
    );
    // Only logged requests become access-log entries: an unlogged route sends none.
    let written = envoy_stat(admin, "access_logs.grpc_access_log.logs_written");
    let r = send(port, "/v1/models/fraud:predict", &["u000001"]).await;
    assert_eq!(r.status, 200);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        envoy_stat(admin, "access_logs.grpc_access_log.logs_written"),
        written
    );
}

async fn sampling_follows_the_request_id_hash(runtime: Runtime) {
    let stack = Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(50),
    });
    let sink = Sink::start(&stack, &stack.dir.path().join("served"), free_port());
    let (_envoy, port, _admin) = logging_envoy(&stack, sink.grpc);
    let policy =
        ferry_core::config::log_policy::LogPolicy::from_proto(&ferry_protos::v1::RouteLog {
            sample: 0.1,
            statuses: [("partial".to_string(), 1.0)].into(),
        })
        .unwrap();
    let n = 300;
    let mut picked = Vec::new();
    for _ in 0..n {
        let r = send(port, "/t/sampled", &["u000003"]).await;
        assert_eq!(r.status, 200);
        let id = r.upstream_headers()["x-request-id"]
            .as_str()
            .unwrap()
            .to_owned();
        if policy.picks(&id, ferry_core::config::log_policy::ServedStatus::Ok) {
            picked.push(id);
        }
    }
    // Binomial(300, 0.1): mean 30, sd 5.2; 5 sd either side.
    assert!((4..=56).contains(&picked.len()), "{}", picked.len());
    sink.wait_written(picked.len() as u64);
    std::thread::sleep(Duration::from_millis(1500));
    let rows = read_back(&sink.dir);
    let mut logged: Vec<String> = rows
        .iter()
        .map(|r| r["__request_id"].as_str().unwrap().to_owned())
        .collect();
    logged.sort();
    picked.sort();
    assert_eq!(logged, picked, "exactly the ids the hash picks");
}

async fn a_dead_sink_costs_records_never_requests(runtime: Runtime) {
    let stack = Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(50),
    });
    let dir = stack.dir.path().join("served");
    let grpc = free_port();
    let mut sink = Sink::start(&stack, &dir, grpc);
    let (_envoy, port, admin) = logging_envoy(&stack, grpc);
    let enriched = |r: &Response| {
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert!(r.json()["instances"][0]["user_profile__age"].is_i64());
    };
    for _ in 0..20 {
        enriched(&send(port, "/t/logged", &["u000004"]).await);
    }
    sink.wait_written(20);
    let before = sink.metric("ferry_log_sink_records_written_total");
    sink.proc.kill();
    let down = Instant::now();
    for _ in 0..20 {
        enriched(&send(port, "/t/logged", &["u000005"]).await);
    }
    assert!(
        down.elapsed() < Duration::from_secs(10),
        "no request waits for the sink"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let sink = Sink::start(&stack, &dir, grpc);
    let t = Instant::now();
    let mut after = 0;
    // Envoy reconnects on its own: keep sending until the new sink writes.
    while sink.metric("ferry_log_sink_records_written_total") == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "Envoy never came back to the sink"
        );
        enriched(&send(port, "/t/logged", &["u000006"]).await);
        after += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    sink.wait_written(after);
    std::thread::sleep(Duration::from_millis(1500));
    let rows = read_back(&dir);
    let by = |u: &str| rows.iter().filter(|r| r["user_id"] == u).count() as u64;
    assert_eq!(by("u000004"), 20, "written before the kill");
    assert_eq!(by("u000006"), after, "every record after the restart");
    // Envoy counts entries it sent into the dead stream as written: the loss is what Envoy
    // wrote minus what the sinks wrote, and the failed connections are in the cluster's stats.
    let sent = envoy_stat(admin, "access_logs.grpc_access_log.logs_written");
    let written = before + sink.metric("ferry_log_sink_records_written_total");
    let connect_fail = envoy_stat(admin, "cluster.ferry_log_sink.upstream_cx_connect_fail");
    let dropped = envoy_stat(admin, "access_logs.grpc_access_log.logs_dropped");
    eprintln!(
        "kill test ({runtime:?}): 20 before the kill written; 20 sent while the sink was down, \
         {} written; {after} after the restart, all written; Envoy: logs_written {sent}, \
         logs_dropped {dropped}, ferry_log_sink upstream_cx_connect_fail {connect_fail}",
        by("u000005")
    );
    assert_eq!(sent - written, 20 - by("u000005"), "the loss is counted");
    assert!(
        by("u000005") < 20,
        "records sent while the sink was down are lost"
    );
    assert!(connect_fail >= 1, "Envoy counted the failed connections");
}

each_runtime!(
    every_logged_value_is_what_the_model_received,
    sampling_follows_the_request_id_hash,
    a_dead_sink_costs_records_never_requests,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwritable_directory_is_an_error_metric_not_a_crash() {
    let stack = Stack::start(Options {
        runtime: Runtime::Wasm,
        extra_routes: ROUTES,
        entities: Some(50),
    });
    let dir = stack.dir.path().join("served");
    let mut sink = Sink::start(&stack, &dir, free_port());
    let (_envoy, port, _admin) = logging_envoy(&stack, sink.grpc);
    // The folder goes away and a file takes its name: no service folder can be made.
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, b"not a folder").unwrap();
    for _ in 0..5 {
        let r = send(port, "/t/logged", &["u000007"]).await;
        assert_eq!(r.status, 200);
    }
    let t = Instant::now();
    while sink.metric("ferry_log_sink_write_errors_total") == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{}",
            sink.proc.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(sink.proc.is_running(), "no crash");
    let log = sink.proc.log_text();
    assert!(
        log.contains("cannot write a served-feature log file"),
        "{log}"
    );
    let t = Instant::now();
    let series = r#"ferry_log_sink_records_dropped_total{reason="write_error"}"#;
    while sink.metric(series) < 5 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{}",
            get(sink.http, "/metrics")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(sink.metric("ferry_log_sink_records_written_total"), 0);
}
