//! `ferry-bench`: the load generator of `make bench`. Runs one scenario (closed loop at N
//! connections, or open loop at a fixed rate) against one target and appends one JSON row with
//! its latency percentiles (HdrHistogram, µs), throughput and error count to a file.

mod bodies;
mod load;

use std::io::Write as _;
use std::net::{SocketAddr, ToSocketAddrs as _};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use serde::Serialize;

use bodies::{BodySpec, Protocol};

/// Drives one benchmark scenario and reports its latency distribution.
#[derive(Debug, Parser)]
#[command(name = "ferry-bench", version)]
struct Args {
    /// Target URL, e.g. http://127.0.0.1:10100/v1/models/scoring:predict.
    #[arg(long)]
    url: String,
    /// What to send: KServe v1 to Envoy, Feast's /get-online-features, or the reader's protobuf.
    #[arg(long, value_enum)]
    protocol: Protocol,
    /// Scenario name written into the row.
    #[arg(long)]
    scenario: String,
    /// Entities per request.
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Keep-alive connections, one request in flight on each.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Open loop at this many requests per second; absent = closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Unmeasured seconds before.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Ids are drawn uniformly from u000001 ..= u{id_space}.
    #[arg(long, default_value_t = 100_000)]
    id_space: u64,
    #[arg(long, default_value_t = 20261122)]
    seed: u64,
    /// Feast: the FeatureService to ask for.
    #[arg(long, default_value = "scoring_precomputed")]
    feature_service: String,
    /// Feast: send each row's request data (amount, request_channel) for an on-demand view,
    /// with short feature names.
    #[arg(long)]
    request_data: bool,
    /// Reader: the lookup's project, service and fingerprint (hex).
    #[arg(long, default_value = "bench")]
    project: String,
    #[arg(long, default_value = "scoring")]
    service: String,
    #[arg(long, default_value = "0")]
    fingerprint: String,
    /// Per-request timeout in milliseconds (counted as an error).
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Runtime threads of the load generator (it shares the machine with the servers).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Append the row (one JSON object per line) to this file; it is printed either way.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// One row of `bench/results/latest.json`.
#[derive(Debug, Serialize)]
struct Row {
    scenario: String,
    batch: usize,
    connections: usize,
    rate: Option<f64>,
    p50_us: u64,
    p90_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    mean_us: f64,
    rps: f64,
    errors: u64,
    requests: u64,
    dropped: u64,
    duration_s: f64,
}

fn target(url: &str) -> Result<(SocketAddr, String, String)> {
    let uri: hyper::Uri = url.parse().with_context(|| format!("bad --url {url}"))?;
    if uri.scheme_str() != Some("http") {
        bail!("--url must be http://host:port/path");
    }
    let authority = uri.authority().context("--url has no host")?.to_string();
    let addr = authority
        .to_socket_addrs()
        .with_context(|| format!("resolving {authority}"))?
        .next()
        .context("no address")?;
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
    Ok((addr, authority, path))
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.batch == 0 || args.connections == 0 {
        bail!("--batch and --connections must be at least 1");
    }
    if matches!(args.rate, Some(r) if r <= 0.0 || !r.is_finite()) {
        bail!("--rate must be positive");
    }
    let (addr, authority, path) = target(&args.url)?;
    let fingerprint = u64::from_str_radix(args.fingerprint.trim_start_matches("0x"), 16)
        .context("--fingerprint must be hex")?;
    let plan = load::Plan {
        addr,
        authority,
        path,
        spec: BodySpec {
            protocol: args.protocol,
            batch: args.batch,
            id_space: args.id_space,
            feature_service: args.feature_service.clone(),
            request_data: args.request_data,
            project: args.project.clone(),
            service: args.service.clone(),
            fingerprint,
        },
        connections: args.connections,
        rate: args.rate,
        warmup: Duration::from_secs_f64(args.warmup),
        duration: Duration::from_secs_f64(args.duration),
        drain: Duration::from_secs(2),
        timeout: Duration::from_millis(args.timeout_ms),
        seed: args.seed,
    };
    let runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    let outcome = runtime.block_on(load::run(plan))?;
    let h = &outcome.hist;
    let q = |x: f64| {
        if h.is_empty() {
            0
        } else {
            h.value_at_quantile(x)
        }
    };
    let row = Row {
        scenario: args.scenario,
        batch: args.batch,
        connections: args.connections,
        rate: args.rate,
        p50_us: q(0.50),
        p90_us: q(0.90),
        p99_us: q(0.99),
        p999_us: q(0.999),
        max_us: if h.is_empty() { 0 } else { h.max() },
        mean_us: (h.mean() * 10.0).round() / 10.0,
        rps: (outcome.rps() * 10.0).round() / 10.0,
        errors: outcome.errors,
        requests: outcome.ok,
        dropped: outcome.dropped,
        duration_s: outcome.elapsed.as_secs_f64(),
    };
    let line = serde_json::to_string(&row)?;
    println!("{line}");
    if let Some(e) = &outcome.first_error {
        eprintln!("{} errors, first: {e}", outcome.errors);
    }
    if let Some(path) = &args.out {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening {}", path.display()))?;
        writeln!(f, "{line}")?;
    }
    Ok(())
}
