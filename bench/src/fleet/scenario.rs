//! The measured runs of `ferry-fleet`: ADS (N streams held, pushes of S bytes) and pull (N
//! pollers at the filter's period), each against a fresh `ferry serve`, plaintext or mTLS,
//! with two or three real Envoys joining an ADS run to show the simulation is faithful.
//! Each run is one JSON row.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use bytes::Bytes;
use prost::Message as _;
use serde::Serialize;

use super::poll::PollFleet;
use super::record::{quantile, Recorder, SimRecord};
use super::server::{ControlPlane, Pki, Start, Usage};
use super::snapshots;
use super::verdict::Verdicts;
use super::{envoys, identities, tls_clients, AdsFleet, AdsOptions};

/// What a run needs.
#[derive(Clone, Debug)]
pub struct Options {
    pub ferry: PathBuf,
    pub wasm: PathBuf,
    /// A scratch folder (repo, state, certificates, logs).
    pub dir: PathBuf,
    pub n: usize,
    pub mtls: bool,
    /// Snapshot sizes pushed (ADS), each `pushes` times.
    pub sizes: Vec<usize>,
    pub pushes: usize,
    /// Real Envoys joining an ADS run (with `envoy`).
    pub envoy: Option<PathBuf>,
    pub real_envoys: usize,
    /// `RUST_LOG` of `ferry serve`.
    pub log: String,
    /// `--max-streams` / `--max-http-connections` given to `ferry serve`; None: its defaults.
    pub max_streams: Option<usize>,
    pub max_http_connections: Option<usize>,
    pub validate_every: bool,
    /// Pull runs: seconds measured.
    pub measure_seconds: f64,
    /// Pull runs: the filter's JSON `snapshot_poll_ms` (None: its default).
    pub poll_ms: Option<u64>,
    /// How long to wait for a convergence before giving up.
    pub timeout: Duration,
}

/// One push, as the fleet saw it.
#[derive(Debug, Serialize)]
pub struct PushRow {
    pub size_bytes: usize,
    pub version: String,
    /// From the push's start to p50 / p99 / all of the fleet having ACKed it (ms).
    pub ack_p50_ms: Option<f64>,
    pub ack_p99_ms: Option<f64>,
    pub ack_all_ms: Option<f64>,
    /// The same for receiving it.
    pub recv_p50_ms: Option<f64>,
    pub recv_all_ms: Option<f64>,
    /// How many ACKed it (of n) before the timeout.
    pub acked: usize,
    /// `POST /v1/snapshot` itself (validation, save, swap).
    pub post_ms: f64,
    /// CPU seconds of `ferry serve` from the push to the last ACK.
    pub cpu_s: f64,
    pub peak_rss_bytes: u64,
    /// The real Envoys: ms from the push until each reloaded the config, and whether each
    /// holds the same version.
    pub real_envoy_ms: Vec<Option<f64>>,
    pub real_envoy_same_version: Vec<bool>,
}

/// One ADS run.
#[derive(Debug, Serialize)]
pub struct AdsRow {
    pub mode: &'static str,
    pub transport: &'static str,
    pub n: usize,
    pub identities: usize,
    /// From launch until all n streams were open, and until all ACKed the current snapshot (s).
    pub connect_s: Option<f64>,
    pub first_ack_all_s: Option<f64>,
    pub connected: usize,
    pub reconnects: u64,
    pub base: Usage,
    pub idle: Usage,
    /// (idle RSS - RSS before any stream) / n.
    pub bytes_per_stream: f64,
    pub cpu_connect_s: f64,
    pub full_validations: u64,
    pub pushes: Vec<PushRow>,
}

/// One pull run.
#[derive(Debug, Serialize)]
pub struct PullRow {
    pub mode: &'static str,
    pub transport: &'static str,
    pub n: usize,
    pub poll_ms: u64,
    pub connect_s: Option<f64>,
    pub base: Usage,
    pub idle: Usage,
    pub bytes_per_poller: f64,
    pub measure_s: f64,
    pub polls: u64,
    pub answered_200: u64,
    pub answered_304: u64,
    pub failed: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub cpu_s: f64,
    /// A push during the measure: from its start until every poller loaded it (ms).
    pub push_all_loaded_ms: Option<f64>,
    pub push_p50_loaded_ms: Option<f64>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `ferry serve` of a run, with its certificates.
async fn control_plane(o: &Options, streams: usize) -> Result<(ControlPlane, Option<Pki>)> {
    std::fs::create_dir_all(&o.dir)?;
    let pki = if o.mtls {
        Some(Pki::make(&o.dir.join("pki"), identities(streams))?)
    } else {
        None
    };
    let cp = ControlPlane::start(Start {
        ferry: &o.ferry,
        wasm: &o.wasm,
        dir: &o.dir,
        pki: pki.as_ref(),
        max_streams: o.max_streams,
        max_http_connections: o.max_http_connections,
        log: &o.log,
        extra: &[],
    })
    .await?;
    Ok((cp, pki))
}

fn transport(o: &Options) -> &'static str {
    if o.mtls {
        "mtls"
    } else {
        "plaintext"
    }
}

/// Times (ms since `t0`) at which each record reached `version`, by `pick`.
fn times(
    recs: &[SimRecord],
    t0: Duration,
    pick: impl Fn(&SimRecord) -> Option<Duration>,
) -> Vec<f64> {
    recs.iter()
        .filter_map(|r| pick(r).map(|t| ms(t.saturating_sub(t0))))
        .collect()
}

/// An ADS run: n simulated Envoys (and the real ones) connect, idle, then each size is pushed.
pub async fn ads(o: &Options) -> Result<AdsRow> {
    let (cp, pki) = control_plane(o, o.n + o.real_envoys).await?;
    let base = cp.usage()?;
    let fleet = AdsFleet::launch(AdsOptions {
        n: o.n,
        server: cp.xds,
        filter_name: "ferry",
        stream_window: 256 << 20,
        pki: pki.as_ref(),
        verdicts: Verdicts::new(o.validate_every),
    })?;
    let rec = fleet.recorder().clone();
    let launched = rec.now();
    let n = o.n;
    let connected = rec
        .wait(o.timeout, |r| r.iter().all(|s| s.first_connected.is_some()))
        .await;
    let connect_s = connected.then(|| {
        let recs = rec.lock();
        recs.iter()
            .filter_map(|s| s.first_connected)
            .max()
            .map(|t| (t - launched).as_secs_f64())
    });
    let acked = rec
        .wait(o.timeout, |r| r.iter().all(|s| s.acked().is_some()))
        .await;
    let first_ack_all_s = acked.then(|| {
        let recs = rec.lock();
        recs.iter()
            .filter_map(|s| s.acks.first().map(|a| a.1))
            .max()
            .map(|t| (t - launched).as_secs_f64())
    });
    let cpu_connect_s = cp.usage()?.cpu_seconds - base.cpu_seconds;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = cp.usage()?;
    let envoys = match &o.envoy {
        Some(bin) if o.real_envoys > 0 => {
            envoys::RealEnvoys::start(bin, &o.ferry, &o.dir, &cp, pki.as_ref(), o.real_envoys)
                .await?
        }
        _ => envoys::RealEnvoys::default(),
    };
    let mut pushes = Vec::new();
    let mut salt = 1;
    for &size in &o.sizes {
        for _ in 0..o.pushes {
            pushes.push(push(&cp, &rec, &envoys, size, salt, o).await?);
            salt += 1;
        }
    }
    let (connected_now, reconnects) = {
        let recs = rec.lock();
        (
            recs.iter().filter(|s| s.connects > 0).count(),
            recs.iter()
                .map(|s| u64::from(s.connects.saturating_sub(1)))
                .sum(),
        )
    };
    let full_validations = fleet.shared.verdicts.full.load(Ordering::Relaxed);
    fleet.stop().await;
    drop(envoys);
    Ok(AdsRow {
        mode: "ads",
        transport: transport(o),
        n,
        identities: pki.as_ref().map_or(0, |p| p.clients.len()),
        connect_s: connect_s.flatten(),
        first_ack_all_s: first_ack_all_s.flatten(),
        connected: connected_now,
        reconnects,
        base,
        idle,
        bytes_per_stream: (idle.rss_bytes as f64 - base.rss_bytes as f64) / n.max(1) as f64,
        cpu_connect_s,
        full_validations,
        pushes,
    })
}

/// One push of `size` bytes, until every simulated Envoy ACKed it (or the timeout).
async fn push(
    cp: &ControlPlane,
    rec: &Recorder,
    envoys: &envoys::RealEnvoys,
    size: usize,
    salt: u64,
    o: &Options,
) -> Result<PushRow> {
    let snap = snapshots::of_size(size, salt);
    let body = Bytes::from(snap.encode_to_vec());
    let size_bytes = body.len();
    let before = cp.usage()?;
    let watching = envoys.watch_reloads(o.timeout).await;
    let t0 = rec.now();
    let started = Instant::now();
    let version = match cp.push(body).await? {
        Ok(v) => v,
        Err(e) => bail!("push of {size_bytes} bytes refused: {e}"),
    };
    let post_ms = ms(started.elapsed());
    let v = version.clone();
    rec.wait(o.timeout, move |r| {
        r.iter().all(|s| s.acked_at(&v).is_some())
    })
    .await;
    let after = cp.usage()?;
    let real_envoy_ms = watching.await.unwrap_or_default();
    let real_envoy_same_version = envoys.holds(&version).await;
    let recs = rec.lock();
    let mut acks = times(&recs, t0, |r| r.acked_at(&version));
    let mut recv = times(&recs, t0, |r| {
        r.received.iter().find(|(v, _)| *v == version).map(|x| x.1)
    });
    Ok(PushRow {
        size_bytes,
        acked: acks.len(),
        ack_p50_ms: quantile(&mut acks, 0.5),
        ack_p99_ms: quantile(&mut acks, 0.99),
        ack_all_ms: (acks.len() == recs.len())
            .then(|| quantile(&mut acks, 1.0))
            .flatten(),
        recv_p50_ms: quantile(&mut recv, 0.5),
        recv_all_ms: quantile(&mut recv, 1.0),
        version,
        post_ms,
        cpu_s: after.cpu_seconds - before.cpu_seconds,
        peak_rss_bytes: after.peak_rss_bytes,
        real_envoy_ms: real_envoy_ms.into_iter().map(|t| t.map(ms)).collect(),
        real_envoy_same_version,
    })
}

/// A pull run: n pollers at the filter's period, measured for `measure_seconds`, with one push
/// of the first size halfway.
pub async fn pull(o: &Options) -> Result<PullRow> {
    let (cp, pki) = control_plane(o, o.n).await?;
    let base = cp.usage()?;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let rec = Recorder::new(o.n);
    let scheme = if o.mtls { "https" } else { "http" };
    let mut plugin = serde_json::json!({
        "snapshot_url": format!("{scheme}://127.0.0.1:{}/v1/snapshot", cp.http.port()),
        "snapshot_cluster": "ferry_control_plane",
        "insecure": true,
    });
    if let Some(p) = o.poll_ms {
        plugin["snapshot_poll_ms"] = p.into();
    }
    let fleet = Arc::new(PollFleet::new(
        cp.http,
        plugin.to_string(),
        rec.clone(),
        stop_rx,
    )?);
    let period = fleet.period()?;
    let clients = tls_clients(pki.as_ref(), b"http/1.1")?;
    let launched = rec.now();
    let mut tasks = Vec::with_capacity(o.n);
    for i in 0..o.n {
        let tls = (!clients.is_empty()).then(|| clients[i % clients.len()].clone());
        tasks.push(tokio::spawn(super::poll::run(
            i,
            super::transport::source(i),
            tls,
            fleet.clone(),
        )));
    }
    let loaded = rec
        .wait(o.timeout + period, |r| {
            r.iter().all(|s| s.acked().is_some())
        })
        .await;
    let connect_s = loaded.then(|| {
        let recs = rec.lock();
        recs.iter()
            .filter_map(|s| s.acks.first().map(|a| a.1))
            .max()
            .map(|t| (t - launched).as_secs_f64())
    });
    // One more period so every poller holds its connection and sits on 304s.
    tokio::time::sleep(period).await;
    let idle = cp.usage()?;
    fleet.measuring.store(true, Ordering::Relaxed);
    let measure = Duration::from_secs_f64(o.measure_seconds);
    tokio::time::sleep(measure / 2).await;
    let size = o.sizes.first().copied().unwrap_or(100_000);
    let body = Bytes::from(snapshots::of_size(size, 1).encode_to_vec());
    let t0 = rec.now();
    let pushed = cp.push(body).await?;
    tokio::time::sleep(measure / 2).await;
    fleet.measuring.store(false, Ordering::Relaxed);
    let after = cp.usage()?;
    let (push_all_loaded_ms, push_p50_loaded_ms) = match pushed {
        Ok(version) => {
            let v = version.clone();
            rec.wait(o.timeout + period, move |r| {
                r.iter().all(|s| s.acked_at(&v).is_some())
            })
            .await;
            let recs = rec.lock();
            let mut t = times(&recs, t0, |r| r.acked_at(&version));
            let all = (t.len() == recs.len())
                .then(|| quantile(&mut t, 1.0))
                .flatten();
            (all, quantile(&mut t, 0.5))
        }
        Err(e) => bail!("push refused: {e}"),
    };
    let _ = stop.send(true);
    for t in tasks {
        let _ = t.await;
    }
    let h = fleet
        .latency
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let q = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    Ok(PullRow {
        mode: "pull",
        transport: transport(o),
        n: o.n,
        poll_ms: period.as_millis() as u64,
        connect_s: connect_s.flatten(),
        base,
        idle,
        bytes_per_poller: (idle.rss_bytes as f64 - base.rss_bytes as f64) / o.n.max(1) as f64,
        measure_s: measure.as_secs_f64(),
        polls: h.len(),
        answered_200: fleet.ok.load(Ordering::Relaxed),
        answered_304: fleet.not_modified.load(Ordering::Relaxed),
        failed: fleet.failed.load(Ordering::Relaxed),
        p50_ms: q(0.5),
        p99_ms: q(0.99),
        p999_ms: q(0.999),
        max_ms: h.max() as f64 / 1000.0,
        cpu_s: after.cpu_seconds - idle.cpu_seconds,
        push_all_loaded_ms,
        push_p50_loaded_ms,
    })
}

/// The scratch folder of one run.
pub fn run_dir(root: &Path, mode: &str, mtls: bool, n: usize) -> PathBuf {
    root.join(format!(
        "{mode}-{}-{n}",
        if mtls { "mtls" } else { "plain" }
    ))
}

/// A fresh scratch folder.
pub fn fresh(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| dir.display().to_string())?;
    }
    std::fs::create_dir_all(dir)?;
    Ok(())
}
