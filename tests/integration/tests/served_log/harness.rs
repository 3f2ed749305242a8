//! The served-log tests' harness: the routes with `log:`, `ferry log-sink` as a process with
//! its `/metrics`, a second Envoy rendered with `--log-sink`, Envoy's stats, and the files read
//! back with pyarrow.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ferry_integration_tests::feast::feast_venv;
pub use ferry_integration_tests::http::get;
use ferry_integration_tests::http::{Conn, Response};
use ferry_integration_tests::{bin, free_port, http, run, start_envoy, Proc, Stack};
use serde_json::{json, Value as Json};

pub const ROUTES: &str = r#"
  - name: logged
    match: {path_prefix: /t/logged}
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
    on_missing_entity: "null"
    log: {sample: 1.0}
  - name: sampled
    match: {path_prefix: /t/sampled}
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
    on_missing_entity: "null"
    log: {sample: 0.1, statuses: {partial: 1.0}}
"#;

pub struct Sink {
    pub proc: Proc,
    pub grpc: u16,
    pub http: u16,
    pub dir: PathBuf,
}

impl Sink {
    pub fn start(stack: &Stack, dir: &Path, grpc: u16) -> Sink {
        let http = free_port();
        let mut cmd = Command::new(bin("ferry"));
        cmd.arg("log-sink")
            .arg("--dir")
            .arg(dir)
            .args(["--listen", &format!("127.0.0.1:{grpc}")])
            .args(["--http-listen", &format!("127.0.0.1:{http}")])
            .args(["--window-secs", "1"]);
        let mut proc = Proc::start("log-sink", cmd, stack.dir.path());
        proc.wait_ready(|| http::get_ok(http, "/metrics"), "log sink /metrics");
        Sink {
            proc,
            grpc,
            http,
            dir: dir.to_path_buf(),
        }
    }

    pub fn metric(&self, series: &str) -> u64 {
        let text = get(self.http, "/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{series} "))?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
    }

    /// Waits until `written` rows are in complete files.
    pub fn wait_written(&self, written: u64) {
        let t = Instant::now();
        while self.metric("ferry_log_sink_records_written_total") < written {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "{} of {written} rows written; sink log:\n{}",
                self.metric("ferry_log_sink_records_written_total"),
                self.proc.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A second Envoy on the stack's reader and model that sends served-feature logs to `sink`.
pub fn logging_envoy(stack: &Stack, sink: u16) -> (Proc, u16, u16) {
    let (listen, admin) = (free_port(), free_port());
    let config = stack.dir.path().join("envoy-log.yaml");
    run(Command::new(bin("ferry"))
        .arg("envoy-config")
        .arg(&stack.repo)
        .args(stack.runtime.flags())
        .args(["--listen-port", &listen.to_string()])
        .args(["--admin-port", &admin.to_string()])
        .args(["--reader-port", &stack.reader_port.to_string()])
        .args(["--model-port", &stack.model_port.to_string()])
        .args(["--log-sink", &format!("127.0.0.1:{sink}")])
        .arg("-o")
        .arg(&config));
    let mut proc = start_envoy(stack.dir.path(), &config, "envoy-log");
    proc.wait_ready(|| http::get_ok(admin, "/ready"), "logging envoy /ready");
    (proc, listen, admin)
}

/// An Envoy stat (`/stats` text: `name: value`), 0 when absent.
pub fn envoy_stat(admin: u16, name: &str) -> u64 {
    get(admin, "/stats")
        .lines()
        .filter_map(|l| l.split_once(": "))
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Every row of every file under `dir`, read by pyarrow (the directory as a dataset) into
/// pandas, as JSON records.
pub fn read_back(dir: &Path) -> Vec<Json> {
    let script = r#"
import glob, json, sys
import pyarrow.parquet as pq
d = sys.argv[1]
rows = []
for service in sorted(glob.glob(d + "/*/")):
    df = pq.read_table(service).to_pandas()
    df["__service"] = service.rstrip("/").split("/")[-1]
    df["__log_date"] = df["__log_date"].astype(str)
    rows.extend(json.loads(df.to_json(orient="records", double_precision=15)))
print(json.dumps(rows))
"#;
    let python = feast_venv().join("bin/python3");
    let out = run(Command::new(python).args(["-c", script]).arg(dir));
    let line = out.lines().last().unwrap_or_default();
    serde_json::from_str::<Vec<Json>>(line).unwrap_or_else(|e| panic!("{e}: {out}"))
}

pub fn body(users: &[&str]) -> String {
    let v: Vec<Json> = users.iter().map(|u| json!({ "user_id": u })).collect();
    json!({ "instances": v }).to_string()
}

/// A POST carrying a client-chosen `x-request-id`, which Envoy must replace.
pub async fn send(port: u16, path: &str, users: &[&str]) -> Response {
    let mut conn = Conn::open(port).await;
    let headers = [
        ("content-type", "application/json"),
        ("x-request-id", "client-chosen"),
    ];
    conn.send("POST", path, &headers, body(users)).await
}
