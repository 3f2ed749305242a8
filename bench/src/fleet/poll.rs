//! Pull mode: simulated Envoy workers polling `GET /v1/snapshot` as the Wasm filter does under
//! Istio or Envoy Gateway: one keep-alive HTTP/1.1 connection each (one worker's pool), a GET
//! every `snapshot_poll_ms` (the filter's default, 5 s) starting at a random phase, with the
//! filter's own request and answer logic (`ferry_core::snapshot_pull::Puller`: `if-none-match`,
//! 304, validation of a new snapshot). Each poll's latency (request sent to body read) goes to
//! one histogram while the run measures.
//!
//! As on ADS ([`super::verdict`]), a new snapshot is validated once per version (by the
//! filter's `Puller::answered`, on a puller of its own) and every other poller compares the
//! bytes it received with those: 10,000 validations of a 100 KB snapshot would make the
//! simulator's CPU, not the control plane, the figure. Each poller keeps the ETag of what it
//! loaded and sends it as `if-none-match`, as the filter does.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use bytes::Bytes;
use ferry_core::plugin_config::{parse_plugin, Plugin};
use ferry_core::snapshot_pull::{Answer, Pulled, Puller, VERSION_HEADER};
use hdrhistogram::Histogram;
use http_body_util::{BodyExt as _, Empty};
use tokio::sync::watch;
use tonic::codegen::http;

use super::record::Recorder;
use super::transport::{connect, http1, TlsClient};

/// What every poller of a run shares.
pub struct PollFleet {
    pub server: SocketAddr,
    /// The filter's JSON plugin configuration naming `snapshot_url` (and its poll period).
    pub plugin_json: String,
    pub recorder: Recorder,
    /// Poll latencies in µs, recorded while `measuring`.
    pub latency: Mutex<Histogram<u64>>,
    pub measuring: AtomicBool,
    /// Answers while measuring: 200, 304, anything else (or no answer).
    pub ok: AtomicU64,
    pub not_modified: AtomicU64,
    pub failed: AtomicU64,
    pub stop: watch::Receiver<bool>,
    /// ETag → (the body validated under it, whether the filter loaded it).
    verdicts: Mutex<std::collections::HashMap<String, (Bytes, bool)>>,
}

impl PollFleet {
    pub fn new(
        server: SocketAddr,
        plugin_json: String,
        recorder: Recorder,
        stop: watch::Receiver<bool>,
    ) -> Result<PollFleet> {
        Ok(PollFleet {
            server,
            plugin_json,
            recorder,
            latency: Mutex::new(Histogram::new_with_bounds(1, 60_000_000, 3)?),
            measuring: AtomicBool::new(false),
            ok: AtomicU64::new(0),
            not_modified: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            stop,
            verdicts: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// The poll period the plugin configuration gives.
    pub fn period(&self) -> Result<Duration> {
        Ok(self.puller()?.pull().poll)
    }

    /// Whether the filter loads `body` (a 200 under `answer`'s ETag): validated once per ETag
    /// by the filter's own puller, then by comparing bytes.
    fn loads(&self, answer: &Answer, body: &Bytes) -> bool {
        let Some(etag) = answer.etag.clone() else {
            return false;
        };
        if let Ok(seen) = self.verdicts.lock() {
            if let Some((validated, loaded)) = seen.get(&etag) {
                if validated == body {
                    return *loaded;
                }
            }
        }
        let Ok(mut fresh) = self.puller() else {
            return false;
        };
        let loaded = matches!(
            fresh.answered(answer, |n| body.slice(..n.min(body.len())).to_vec()),
            Pulled::Loaded { .. }
        );
        if let Ok(mut seen) = self.verdicts.lock() {
            seen.entry(etag).or_insert_with(|| (body.clone(), loaded));
        }
        loaded
    }

    fn puller(&self) -> Result<Puller> {
        match parse_plugin(self.plugin_json.as_bytes()) {
            Ok(Plugin::Pull(p)) => Ok(Puller::new(p)),
            Ok(Plugin::Snapshot(_)) => {
                Err(anyhow!("the plugin configuration names no snapshot_url"))
            }
            Err(e) => Err(anyhow!("plugin configuration: {e}")),
        }
    }
}

/// Runs poller `index` from `source` until the fleet stops.
pub async fn run(index: usize, source: IpAddr, tls: Option<TlsClient>, fleet: Arc<PollFleet>) {
    let Ok(mut puller) = fleet.puller() else {
        return;
    };
    let period = puller.pull().poll;
    let mut stop = fleet.stop.clone();
    // A random phase, as workers started at different times poll at different times.
    let phase =
        (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) % period.as_millis().max(1) as u64;
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_millis(phase),
        period,
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut conn = None;
    let mut etag = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let polled = poll_once(
            &mut conn,
            source,
            tls.as_ref(),
            &mut puller,
            &mut etag,
            &fleet,
            index,
        )
        .await;
        if let Err(e) = polled {
            conn = None;
            fleet.recorder.with(index, |r, _| {
                r.failures += 1;
                r.last_error = Some(format!("{e:#}"));
            });
            if fleet.measuring.load(Ordering::Relaxed) {
                fleet.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

type Conn = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// One GET on the kept connection (opened first when there is none), its answer handed to the
/// filter's puller.
async fn poll_once(
    conn: &mut Option<Conn>,
    source: IpAddr,
    tls: Option<&TlsClient>,
    puller: &mut Puller,
    etag: &mut Option<String>,
    fleet: &PollFleet,
    index: usize,
) -> Result<()> {
    let Some(mut headers) = puller.next_request() else {
        return Ok(());
    };
    headers.retain(|(n, _)| n != "if-none-match");
    if let Some(tag) = etag.as_ref() {
        headers.push(("if-none-match".to_owned(), tag.clone()));
    }
    if conn.as_ref().is_none_or(|c| c.is_closed()) {
        let io = connect(source, fleet.server, tls).await?;
        *conn = Some(http1(io).await?);
        fleet.recorder.with(index, |r, now| {
            r.connects += 1;
            r.first_connected.get_or_insert(now);
        });
    }
    let Some(c) = conn.as_mut() else {
        return Ok(());
    };
    let mut req = http::Request::builder().method("GET");
    for (name, value) in &headers {
        match name.as_str() {
            ":path" => req = req.uri(value.as_str()),
            ":authority" => req = req.header("host", value),
            ":method" => {}
            _ => req = req.header(name, value),
        }
    }
    let req = req.body(Empty::new())?;
    puller.sent();
    let started = Instant::now();
    c.ready().await?;
    let resp = c.send_request(req).await?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await?.to_bytes();
    let micros = started.elapsed().as_micros() as u64;
    let header = |n: &str| {
        parts
            .headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let answer = Answer {
        status: Some(parts.status.as_u16()),
        etag: header("etag"),
        content_type: header("content-type"),
        body_size: body.len(),
    };
    if fleet.measuring.load(Ordering::Relaxed) {
        if let Ok(mut h) = fleet.latency.lock() {
            let _ = h.record(micros.max(1));
        }
        match answer.status {
            Some(200) => fleet.ok.fetch_add(1, Ordering::Relaxed),
            Some(304) => fleet.not_modified.fetch_add(1, Ordering::Relaxed),
            _ => fleet.failed.fetch_add(1, Ordering::Relaxed),
        };
    }
    let version = header(VERSION_HEADER).unwrap_or_default();
    // The puller's request is answered (its in-flight flag cleared); a 200 is judged above.
    let unchanged = Answer {
        status: Some(304),
        ..Answer::default()
    };
    puller.answered(&unchanged, |_| Vec::new());
    if answer.status != Some(200) {
        return Ok(());
    }
    fleet
        .recorder
        .with(index, |r, now| r.received.push((version.clone(), now)));
    // Loaded or refused, its ETag is asked with next (the filter's rule for unsigned pulls).
    *etag = answer.etag.clone();
    if fleet.loads(&answer, &body) {
        fleet
            .recorder
            .with(index, |r, now| r.acks.push((version, now)));
    } else {
        fleet
            .recorder
            .with(index, |r, now| r.nacks.push((version, now)));
    }
    Ok(())
}
