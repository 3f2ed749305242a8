//! The load loop: one task per connection (HTTP/1.1 keep-alive, one request in flight on each).
//!
//! - Closed loop: every connection sends its next request as soon as the previous one answered;
//!   a request's latency runs from its send to its last response byte.
//! - Open loop: request i is due at `start + i / rate`, whichever connection is free takes it,
//!   and its latency runs from when it was *due* whenever no connection was free at that time.
//!   A stalled server therefore shows in the tail instead of silently slowing the sender down
//!   (coordinated omission). A free connection that sleeps until a request is due measures from
//!   its actual send, so the timer's millisecond granularity is not charged to the server.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt as _, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::bodies::{BodySpec, Rng};

/// Longest latency the histograms hold; slower answers are clamped to it.
const MAX_LATENCY_US: u64 = 120_000_000;

/// One run: where to send, what, how hard and for how long.
#[derive(Debug, Clone)]
pub struct Plan {
    pub addr: SocketAddr,
    pub authority: String,
    pub path: String,
    pub spec: BodySpec,
    pub connections: usize,
    /// Requests per second over all connections (open loop); None = closed loop.
    pub rate: Option<f64>,
    /// Sent but not measured, so that pools, caches and the JIT of the servers are warm.
    pub warmup: Duration,
    pub duration: Duration,
    /// Past the end of the run, how long an open-loop backlog may still be worked off before
    /// the rest is dropped (and counted as such).
    pub drain: Duration,
    pub timeout: Duration,
    pub seed: u64,
}

/// What one run measured (successful requests only in the histogram).
#[derive(Debug)]
pub struct Outcome {
    pub hist: Histogram<u64>,
    pub ok: u64,
    /// Non-2xx answers, connection failures and timeouts during the measured window.
    pub errors: u64,
    /// Open loop: requests that came due but were never sent before the drain ran out.
    pub dropped: u64,
    /// From the end of the warm-up to the last measured completion (at least `duration`).
    pub elapsed: Duration,
    pub first_error: Option<String>,
}

impl Outcome {
    fn new() -> Result<Self> {
        Ok(Outcome {
            hist: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)?,
            ok: 0,
            errors: 0,
            dropped: 0,
            elapsed: Duration::ZERO,
            first_error: None,
        })
    }

    fn merge(&mut self, other: Outcome) -> Result<()> {
        self.hist.add(&other.hist)?;
        self.ok += other.ok;
        self.errors += other.errors;
        self.dropped += other.dropped;
        self.elapsed = self.elapsed.max(other.elapsed);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        Ok(())
    }

    fn error(&mut self, what: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(what);
        }
    }

    pub fn rps(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

pub async fn run(plan: Plan) -> Result<Outcome> {
    let plan = Arc::new(plan);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(plan.connections);
    for index in 0..plan.connections {
        let (plan, next) = (plan.clone(), next.clone());
        tasks.push(tokio::spawn(connection(plan, index, next, start)));
    }
    let mut total = Outcome::new()?;
    for t in tasks {
        total.merge(t.await.context("load task panicked")??)?;
    }
    total.elapsed = total.elapsed.max(plan.duration);
    Ok(total)
}

/// One keep-alive connection's loop.
async fn connection(
    plan: Arc<Plan>,
    index: usize,
    next: Arc<AtomicU64>,
    start: Instant,
) -> Result<Outcome> {
    let mut out = Outcome::new()?;
    let warm_end = start + plan.warmup;
    let end = warm_end + plan.duration;
    let drain_end = end + plan.drain;
    let mut rng = Rng::new(plan.seed ^ (index as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut sender: Option<SendRequest<Full<Bytes>>> = None;
    loop {
        let (due, from) = match plan.rate {
            Some(rate) => {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let due = start + Duration::from_secs_f64(i as f64 / rate);
                if due >= end {
                    break;
                }
                let now = Instant::now();
                if now >= drain_end {
                    // The backlog outlived the drain: what is still due is dropped.
                    out.dropped += u64::from(due >= warm_end);
                    continue;
                }
                if now < due {
                    tokio::time::sleep_until(due.into()).await;
                    (due, Instant::now())
                } else {
                    (due, due)
                }
            }
            None => {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                (now, now)
            }
        };
        let measured = due >= warm_end;
        let body = plan.spec.build(&mut rng);
        let result = tokio::time::timeout(plan.timeout, send(&plan, &mut sender, body)).await;
        let done = Instant::now();
        if !measured {
            if !matches!(result, Ok(Ok(_))) {
                sender = None;
            }
            continue;
        }
        match result {
            Ok(Ok(status)) if (200..300).contains(&status) => {
                let us = done.saturating_duration_since(from).as_micros() as u64;
                out.hist.saturating_record(us.clamp(1, MAX_LATENCY_US));
                out.ok += 1;
                out.elapsed = out.elapsed.max(done.saturating_duration_since(warm_end));
            }
            Ok(Ok(status)) => out.error(format!("HTTP {status}")),
            Ok(Err(e)) => {
                sender = None;
                out.error(format!("{e:#}"));
                // Do not spin on a refused connection.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(_) => {
                sender = None;
                out.error(format!("no answer within {:?}", plan.timeout));
            }
        }
    }
    Ok(out)
}

/// Sends one request on the connection (opening it first if needed) and reads the whole answer.
async fn send(
    plan: &Plan,
    sender: &mut Option<SendRequest<Full<Bytes>>>,
    body: Bytes,
) -> Result<u16> {
    let s = match sender {
        Some(s) => s,
        None => {
            let stream = TcpStream::connect(plan.addr)
                .await
                .with_context(|| format!("connecting to {}", plan.addr))?;
            stream.set_nodelay(true)?;
            let (s, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            sender.insert(s)
        }
    };
    s.ready().await?;
    let request = Request::post(plan.path.as_str())
        .header(HOST, plan.authority.as_str())
        .header(CONTENT_TYPE, plan.spec.content_type())
        .body(Full::new(body))?;
    let response = s.send_request(request).await?;
    let status = response.status().as_u16();
    response.into_body().collect().await?;
    Ok(status)
}
