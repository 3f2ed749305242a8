//! The two-replica run (issue #26, "not a single point"): two `ferry serve --shared-state` on
//! one Redis (a throwaway `redis-server` of this run), half the fleet on each, every push to
//! replica A: how long A took to acknowledge it, and until every stream, A's half and B's
//! half, ACKed it.

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use bytes::Bytes;
use ferry_test_support::redis::RedisServer;
use prost::Message as _;
use serde::Serialize;

use super::record::{quantile, SimRecord};
use super::scenario::Options;
use super::server::{ControlPlane, Start};
use super::snapshots;
use super::verdict::Verdicts;
use super::{AdsFleet, AdsOptions};

/// One push to replica A.
#[derive(Debug, Serialize)]
pub struct ReplicaPush {
    pub size_bytes: usize,
    /// `POST /v1/snapshot` on A: validated, stored in Redis, served by A.
    pub post_ms: f64,
    /// From the push's start until every stream on A, and on B, ACKed it (ms).
    pub own_half_all_ms: Option<f64>,
    pub other_half_all_ms: Option<f64>,
    /// p99 and all of the whole fleet.
    pub ack_p99_ms: Option<f64>,
    pub ack_all_ms: Option<f64>,
}

/// One two-replica run.
#[derive(Debug, Serialize)]
pub struct ReplicasRow {
    pub mode: &'static str,
    pub transport: &'static str,
    pub n: usize,
    pub replicas: usize,
    /// From launch until every stream ACKed the first snapshot (s).
    pub first_ack_all_s: Option<f64>,
    pub pushes: Vec<ReplicaPush>,
}

/// Runs it: plaintext only.
pub async fn replicas(o: &Options) -> Result<ReplicasRow> {
    if o.mtls {
        bail!("the replicas run is plaintext only");
    }
    let redis = RedisServer::start();
    let url = redis.url();
    let cluster = format!("fleet-{}", std::process::id());
    // Replicas sign the shared record (#35): one key for the deployment.
    std::fs::create_dir_all(&o.dir)?;
    let key = o.dir.join("signing.pem");
    let made = std::process::Command::new(&o.ferry)
        .args(["keygen", "--out"])
        .arg(&key)
        .stdout(std::process::Stdio::null())
        .status()?;
    if !made.success() {
        bail!("ferry keygen failed: {made}");
    }
    let key = key.display().to_string();
    let extra: Vec<String> = [
        "--shared-state",
        "--redis",
        &url,
        "--cluster-name",
        &cluster,
        "--signing-key",
        &key,
    ]
    .map(str::to_owned)
    .to_vec();
    let mut cps = Vec::new();
    for name in ["a", "b"] {
        let dir = o.dir.join(name);
        std::fs::create_dir_all(&dir)?;
        cps.push(
            ControlPlane::start(Start {
                ferry: &o.ferry,
                wasm: &o.wasm,
                dir: &dir,
                pki: None,
                max_streams: o.max_streams,
                max_http_connections: o.max_http_connections,
                log: &o.log,
                extra: &extra,
            })
            .await?,
        );
    }
    let servers: Vec<_> = cps.iter().map(|c| c.xds).collect();
    let fleet = AdsFleet::launch_across(
        AdsOptions {
            n: o.n,
            server: servers[0],
            filter_name: "ferry",
            stream_window: 256 << 20,
            pki: None,
            verdicts: Verdicts::new(o.validate_every),
        },
        &servers,
    )?;
    let rec = fleet.recorder().clone();
    let launched = rec.now();
    let acked = rec
        .wait(o.timeout, |r| r.iter().all(|s| s.acked().is_some()))
        .await;
    let first_ack_all_s = acked
        .then(|| {
            let recs = rec.lock();
            recs.iter()
                .filter_map(|s| s.acks.first().map(|a| a.1))
                .max()
                .map(|t| (t - launched).as_secs_f64())
        })
        .flatten();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut pushes = Vec::new();
    let mut salt = 1;
    for &size in &o.sizes {
        for _ in 0..o.pushes {
            let body = Bytes::from(snapshots::of_size(size, salt).encode_to_vec());
            salt += 1;
            let size_bytes = body.len();
            let t0 = rec.now();
            let started = Instant::now();
            let version = match cps[0].push(body).await? {
                Ok(v) => v,
                Err(e) => bail!("push of {size_bytes} bytes refused: {e}"),
            };
            let post_ms = started.elapsed().as_secs_f64() * 1000.0;
            let v = version.clone();
            rec.wait(o.timeout, move |r| {
                r.iter().all(|s| s.acked_at(&v).is_some())
            })
            .await;
            let recs = rec.lock();
            let half = |on_a: bool| all_of(&recs, t0, &version, |i| (i % 2 == 0) == on_a);
            let mut every: Vec<f64> = times(&recs, t0, &version, |_| true);
            pushes.push(ReplicaPush {
                size_bytes,
                post_ms,
                own_half_all_ms: half(true),
                other_half_all_ms: half(false),
                ack_p99_ms: quantile(&mut every, 0.99),
                ack_all_ms: all_of(&recs, t0, &version, |_| true),
            });
        }
    }
    fleet.stop().await;
    drop(cps);
    drop(redis);
    Ok(ReplicasRow {
        mode: "replicas",
        transport: "plaintext",
        n: o.n,
        replicas: servers.len(),
        first_ack_all_s,
        pushes,
    })
}

/// Ms from `t0` until each chosen stream ACKed `version`.
fn times(
    recs: &[SimRecord],
    t0: Duration,
    version: &str,
    pick: impl Fn(usize) -> bool,
) -> Vec<f64> {
    recs.iter()
        .enumerate()
        .filter(|(i, _)| pick(*i))
        .filter_map(|(_, r)| r.acked_at(version))
        .map(|t| t.saturating_sub(t0).as_secs_f64() * 1000.0)
        .collect()
}

/// Ms until the last chosen stream ACKed; None if one did not.
fn all_of(
    recs: &[SimRecord],
    t0: Duration,
    version: &str,
    pick: impl Fn(usize) -> bool,
) -> Option<f64> {
    let chosen = (0..recs.len()).filter(|i| pick(*i)).count();
    let mut t = times(recs, t0, version, pick);
    (t.len() == chosen).then(|| quantile(&mut t, 1.0)).flatten()
}
