//! The matrix's cases on `ferry log-sink` (issue #37): a connection flood on both listeners, a
//! record naming services with no instances, a certificate of the right CA with another
//! identity, and retention past `--max-bytes`. Each case runs a sink of its own over mTLS (the
//! stack's CA, `--allow-identity` Envoy's SPIFFE id) and speaks to it as Envoy's gRPC access
//! logger does, with records written by hand: what a hostile or broken filter could send.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ferry_integration_tests::secure::{block_on, refused_start, tls_flags, ENVOY};
use ferry_integration_tests::{bin, free_port, tls, Proc};
use ferry_protos::v1::{
    value::Kind, FeatureStatus, ServedInstance, ServedLog, ServedService, Value, ValueType,
};
use ferry_test_support::certs::LeafFiles;
use prost::Message;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{Ctx, Fut};

/// The sink's DNS name (its certificate's SAN).
const SINK_NAME: &str = "ferry-log-sink.test";
/// `--max-connections` and `--max-http-connections` of the flood case.
const GRPC_CAP: usize = 8;
const HTTP_CAP: usize = 4;
/// 2026-11-26T10:00:00Z, in µs: the records' time.
const T: i64 = 1_795_687_200_000_000;

/// The access-log messages, as Envoy's gRPC access logger sends them (the few fields used).
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Common {
    #[prost(map = "string, message", tag = "21")]
    filter_state_objects: std::collections::HashMap<String, Any>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HttpEntry {
    #[prost(message, optional, tag = "1")]
    common_properties: Option<Common>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct HttpEntries {
    #[prost(message, repeated, tag = "1")]
    log_entry: Vec<HttpEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StreamMessage {
    #[prost(message, optional, tag = "2")]
    http_logs: Option<HttpEntries>,
}

/// A running `ferry log-sink` over mTLS, killed on drop.
struct Sink {
    proc: Proc,
    grpc: u16,
    http: u16,
    dir: PathBuf,
}

impl Sink {
    /// A sink writing under `<stack dir>/<name>/`, with `extra` flags.
    fn start(c: &Ctx, name: &'static str, extra: &[&str]) -> Sink {
        let d = c.stack.dir.path();
        let leaf = c.stack.ca.issue(&[SINK_NAME], &[]).write(d, name);
        let (grpc, http) = (free_port(), free_port());
        let dir = d.join(name);
        let mut cmd = Command::new(bin("ferry"));
        cmd.arg("log-sink")
            .arg("--dir")
            .arg(&dir)
            .args(["--listen", &format!("127.0.0.1:{grpc}")])
            .args(["--http-listen", &format!("127.0.0.1:{http}")])
            .args(["--allow-identity", ENVOY])
            .args(tls_flags(&leaf, &c.stack.envoy_tls.0.ca()))
            .args(extra.iter().map(OsString::from));
        let mut proc = Proc::start(name, cmd, d);
        tokio::task::block_in_place(|| {
            let up = || block_on(metrics(http)).is_ok();
            proc.wait_ready(up, "log sink /metrics");
        });
        Sink {
            proc,
            grpc,
            http,
            dir,
        }
    }

    /// One series of its `/metrics`.
    async fn metric(&self, series: &str) -> Result<u64, String> {
        let text = metrics(self.http).await?;
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{series} "))?.trim().parse().ok())
            .ok_or_else(|| format!("no {series} in:\n{text}"))
    }

    /// Waits (20 s at most) until `series` is at least `want`.
    async fn wait_metric(&self, series: &str, want: u64) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let got = self.metric(series).await?;
            if got >= want {
                return Ok(());
            }
            if start.elapsed() > Duration::from_secs(20) {
                let log = self.proc.log_text();
                return Err(format!("{series} is {got}, not {want}; sink log:\n{log}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// `GET /metrics` on a fresh connection (5 s at most).
async fn metrics(port: u16) -> Result<String, String> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await?;
        let mut text = String::new();
        s.read_to_string(&mut text).await?;
        Ok::<_, std::io::Error>(text)
    };
    match tokio::time::timeout(Duration::from_secs(5), get).await {
        Ok(Ok(text)) if text.starts_with("HTTP/1.1 200") => Ok(text),
        Ok(Ok(text)) => Err(format!("answered {text}")),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in 5 s".into()),
    }
}

/// A record of request `id` at `T + n` µs: `services` services, each with `instances` rows.
fn record(id: &str, n: i64, services: usize, instances: usize) -> ServedLog {
    let instance = |i: usize| ServedInstance {
        entity_values: vec![format!("user{i}")],
        values: vec![Value {
            kind: Some(Kind::Int64Val(41)),
        }],
        statuses: vec![FeatureStatus::Present as i32],
        event_times_us: vec![T - 5],
    };
    ServedLog {
        request_id: id.into(),
        time_us: T + n,
        route: "fraud".into(),
        status: "ok".into(),
        services: (0..services)
            .map(|s| ServedService {
                name: format!("svc{s}"),
                fingerprint: 0x1234,
                derived_version: "dv1".into(),
                join_keys: vec!["user_id".into()],
                join_key_types: vec![ValueType::String as i32],
                feature_names: vec!["p__age".into()],
                feature_types: vec![ValueType::Int64 as i32],
                instances: (0..instances).map(instance).collect(),
            })
            .collect(),
    }
}

/// One `StreamAccessLogs` call over mTLS as `client`, carrying `records` as the Wasm build's
/// filter state: the gRPC status it ended with, or the error that ended it.
async fn send(
    port: u16,
    client: &LeafFiles,
    c: &Ctx,
    records: &[ServedLog],
) -> Result<u32, String> {
    let entry = |r: &ServedLog| HttpEntry {
        common_properties: Some(Common {
            filter_state_objects: [(
                "wasm.ferry.log".to_owned(),
                Any {
                    type_url: "type.googleapis.com/google.protobuf.BytesValue".into(),
                    value: r.encode_to_vec().encode_to_vec(),
                },
            )]
            .into(),
        }),
    };
    let msg = StreamMessage {
        http_logs: Some(HttpEntries {
            log_entry: records.iter().map(entry).collect(),
        }),
    }
    .encode_to_vec();
    tls::grpc_status(
        port,
        (&c.stack.ca, Some(client)),
        SINK_NAME,
        "/envoy.service.accesslog.v3.AccessLogService/StreamAccessLogs",
        &msg,
    )
    .await
}

/// Every file and folder under `dir` (relative paths, sorted).
fn tree(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap_or(&p).display().to_string());
            if p.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// Envoy's client certificate (the identity the sinks allow).
fn envoy(c: &Ctx) -> LeafFiles {
    c.stack.envoy_tls.0.files()
}

pub fn connection_flood(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let grpc_cap = GRPC_CAP.to_string();
        let http_cap = HTTP_CAP.to_string();
        let sink = Sink::start(
            c,
            "sink-flood",
            &[
                "--max-connections",
                &grpc_cap,
                "--max-http-connections",
                &http_cap,
            ],
        );
        // Silent connections: the first take every slot of both listeners (a TLS one holds its
        // slot up to the 10 s handshake bound, an HTTP one up to the 10 s header bound), the
        // rest wait in the kernel's accept queue.
        let mut flood = Vec::new();
        for (port, n) in [(sink.grpc, GRPC_CAP + 16), (sink.http, HTTP_CAP + 16)] {
            for _ in 0..n {
                let s = tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .map_err(|e| format!("flood connection: {e}"))?;
                flood.push(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let envoy = envoy(c);
        let one = [record("flood", 0, 1, 1)];
        let wait = Duration::from_millis(1500);
        if let Ok(answer) = tokio::time::timeout(wait, send(sink.grpc, &envoy, c, &one)).await {
            return Err(format!(
                "an access-log connection over the cap was served: {answer:?}"
            ));
        }
        if let Ok(answer) = tokio::time::timeout(wait, metrics(sink.http)).await {
            return Err(format!(
                "a /metrics connection over the cap was served: {answer:?}"
            ));
        }
        drop(flood);
        let start = Instant::now();
        loop {
            let sent =
                tokio::time::timeout(Duration::from_secs(2), send(sink.grpc, &envoy, c, &one));
            if let Ok(Ok(0)) = sent.await {
                break;
            }
            if start.elapsed() > Duration::from_secs(20) {
                return Err("the sink did not serve Envoy again after the flood".into());
            }
        }
        let written = sink.metric("ferry_log_sink_records_buffered").await?
            + sink.metric("ferry_log_sink_records_written_total").await?;
        Ok(format!(
            "{} + {} silent connections over --max-connections {GRPC_CAP} / \
             --max-http-connections {HTTP_CAP}: a new access-log stream and a scrape not \
             served within 1.5 s; after the flood left, Envoy's record taken ({written} row)",
            GRPC_CAP + 16,
            HTTP_CAP + 16
        ))
    })
}

pub fn zero_instance_record(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let sink = Sink::start(c, "sink-empty", &["--window-secs", "1"]);
        let envoy = envoy(c);
        // 200 services, not one instance; then a record with one row, as a marker.
        let empty = record("empty", 0, 200, 0);
        let code = send(sink.grpc, &envoy, c, &[empty]).await?;
        let marker = record("marker", 1, 1, 1);
        let code2 = send(sink.grpc, &envoy, c, &[marker]).await?;
        if (code, code2) != (0, 0) {
            return Err(format!("gRPC statuses {code}, {code2}"));
        }
        sink.wait_metric("ferry_log_sink_files_written_total", 1)
            .await?;
        let rejected = r#"ferry_log_sink_requests_rejected_total{reason="no_instances"}"#;
        let n = sink.metric(rejected).await?;
        let tree = tree(&sink.dir);
        let only_marker = tree.iter().all(|p| p.starts_with("svc0"));
        if n != 1 || !only_marker || tree.len() != 3 {
            return Err(format!("rejected {n}; files: {tree:?}"));
        }
        Ok(format!(
            "a record naming 200 services with no instance: no group, file or folder \
             ({rejected} 1); the next record's row written: {}",
            tree.last().map_or("", String::as_str)
        ))
    })
}

pub fn another_identity(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let sink = Sink::start(c, "sink-identity", &["--max-rows", "1"]);
        // The mesh's `web` workload: a certificate of the sink's client CA, another SAN.
        let web = c.stack.web.clone();
        let refused = send(sink.grpc, &web, c, &[record("web", 0, 1, 1)]).await;
        let counted = sink
            .metric("ferry_log_sink_connections_refused_identity_total")
            .await?;
        if refused.is_ok() || counted != 1 {
            return Err(format!("web's call: {refused:?}, refused {counted}"));
        }
        let written = sink.metric("ferry_log_sink_records_written_total").await?;
        let envoy = send(sink.grpc, &envoy(c), c, &[record("envoy", 1, 1, 1)]).await;
        sink.wait_metric("ferry_log_sink_records_written_total", 1)
            .await?;
        if written != 0 || envoy != Ok(0) {
            return Err(format!(
                "written {written} before Envoy's; Envoy's call: {envoy:?}"
            ));
        }
        let start = mtls_without_allow_list_off_loopback(c);
        if !start.contains("--allow-identity") || !start.contains("--insecure") {
            return Err(format!("mTLS without --allow-identity on 0.0.0.0: {start}"));
        }
        Ok(format!(
            "a certificate of the client CA for web: closed after the handshake ({}), \
             counted (ferry_log_sink_connections_refused_identity_total 1), nothing written; \
             Envoy's identity written; mTLS without --allow-identity on 0.0.0.0 refused at start",
            refused.err().unwrap_or_default()
        ))
    })
}

/// The complete files under `dir`, by name.
fn parquet_names(dir: &Path) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|p| p.ends_with(".parquet"))
        .filter_map(|p| Some(Path::new(&p).file_name()?.to_str()?.to_owned()))
        .collect()
}

/// `ferry log-sink` on 0.0.0.0 with mTLS but no `--allow-identity`: its refusal (stderr).
fn mtls_without_allow_list_off_loopback(c: &Ctx) -> String {
    let d = c.stack.dir.path();
    let leaf = c.stack.ca.issue(&[SINK_NAME], &[]).write(d, "sink-open");
    let mut cmd = Command::new(bin("ferry"));
    cmd.arg("log-sink")
        .arg("--dir")
        .arg(d.join("sink-open"))
        .args(["--listen", &format!("0.0.0.0:{}", free_port())])
        .args(["--http-listen", &format!("127.0.0.1:{}", free_port())])
        .args(tls_flags(&leaf, &c.stack.envoy_tls.0.ca()))
        .env_remove("FERRY_TLS_CERT")
        .env_remove("FERRY_TLS_KEY")
        .env_remove("FERRY_CLIENT_CA");
    tokio::task::block_in_place(|| refused_start(&mut cmd))
}

pub fn retention_past_max_bytes(c: &mut Ctx) -> Fut<'_> {
    Box::pin(async move {
        let envoy = envoy(c);
        // A first sink writes one file (each record's row at once: --max-rows 1): its size.
        let first = Sink::start(
            c,
            "sink-retention",
            &["--max-rows", "1", "--max-bytes", "0"],
        );
        send(first.grpc, &envoy, c, &[record("r1", 1, 1, 1)]).await?;
        first
            .wait_metric("ferry_log_sink_files_written_total", 1)
            .await?;
        let size = first.metric("ferry_log_sink_held_bytes").await?;
        drop(first);
        // The next, on the same folder, holds three such files at most.
        let cap = (3 * size + size / 2).to_string();
        let sink = Sink::start(
            c,
            "sink-retention",
            &["--max-rows", "1", "--max-bytes", &cap],
        );
        let held_at_start = sink.metric("ferry_log_sink_held_bytes").await?;
        for n in 2..=6 {
            let code = send(sink.grpc, &envoy, c, &[record(&format!("r{n}"), n, 1, 1)]).await?;
            if code != 0 {
                return Err(format!("record {n}: gRPC status {code}"));
            }
            let written = u64::try_from(n - 1).unwrap_or_default();
            sink.wait_metric("ferry_log_sink_files_written_total", written)
                .await?;
        }
        let removed = sink
            .metric(r#"ferry_log_sink_files_removed_total{reason="bytes"}"#)
            .await?;
        let held = sink.metric("ferry_log_sink_held_bytes").await?;
        let mut names = parquet_names(&sink.dir);
        names.sort_by_key(|n| n.split('-').nth(1).map(str::to_owned));
        let newest: Vec<String> = (4..=6).map(|n| format!("-{}-", T + n)).collect();
        let kept_newest = names.len() == 3 && names.iter().zip(&newest).all(|(f, n)| f.contains(n));
        if held_at_start != size || removed != 3 || !kept_newest || held > 3 * size + size / 2 {
            return Err(format!(
                "held at start {held_at_start} (file {size}), removed {removed}, held {held}, \
                 files {names:?}"
            ));
        }
        Ok(format!(
            "6 files of ~{size} bytes under --max-bytes {cap}: the 3 oldest removed first (the \
             first one indexed at start), files_removed{{bytes}} 3, {held} bytes held"
        ))
    })
}
