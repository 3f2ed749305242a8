//! `ferry-fleet`: the fleet simulator (issue #26). Starts a `ferry serve`, connects N simulated
//! Envoys to it over ADS (or N pollers of `GET /v1/snapshot`), pushes snapshots of the sizes
//! given, and appends one JSON row per run to `--out`, printing a table. `bench/fleet.sh` runs
//! it for N = 100, 1,000 and 10,000 and draws the curve. `--mode replicas`: two
//! `ferry serve --shared-state` on a Redis of the run, half the fleet on each, pushes to one.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Parser;
use ferry_fleet::scenario::{self, Options};
use ferry_fleet::transport::raise_open_files;

#[derive(Debug, Parser)]
#[command(name = "ferry-fleet", version)]
struct Args {
    /// The `ferry` binary to run as the control plane.
    #[arg(long)]
    ferry: PathBuf,
    /// The filter's .wasm (named to real Envoys).
    #[arg(long)]
    wasm: PathBuf,
    /// Scratch folder of the runs.
    #[arg(long, default_value = "target/fleet")]
    dir: PathBuf,
    /// Simulated Envoys.
    #[arg(long, default_value_t = 100)]
    n: usize,
    /// ads: streams held and pushes; pull: pollers of GET /v1/snapshot; replicas: ADS over
    /// two replicas sharing their state through Redis (redis-server on PATH).
    #[arg(long, value_parser = ["ads", "pull", "replicas"], default_value = "ads")]
    mode: String,
    /// TLS on both listeners, client certificates (one identity per 100 Envoys) on xDS.
    #[arg(long)]
    mtls: bool,
    /// Snapshot sizes to push, in bytes (ADS: each --pushes times; pull: the first, once).
    #[arg(long, value_delimiter = ',', default_value = "100000")]
    sizes: Vec<usize>,
    #[arg(long, default_value_t = 3)]
    pushes: usize,
    /// Envoy binary; with --real-envoys, real Envoys join an ADS run.
    #[arg(long, env = "FERRY_ENVOY")]
    envoy: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    real_envoys: usize,
    /// `ferry serve --max-streams` (default: ferry's own).
    #[arg(long)]
    max_streams: Option<usize>,
    /// `ferry serve --max-http-connections` (default: ferry's own).
    #[arg(long)]
    max_http_connections: Option<usize>,
    /// RUST_LOG of `ferry serve`.
    #[arg(long, default_value = "info")]
    log: String,
    /// Validate every received config in full (default: once per distinct payload).
    #[arg(long)]
    validate_every: bool,
    /// Pull: seconds measured.
    #[arg(long, default_value_t = 12.0)]
    measure_seconds: f64,
    /// Pull: the filter's snapshot_poll_ms (default: the filter's, 5 s).
    #[arg(long)]
    poll_ms: Option<u64>,
    /// Seconds to wait for a convergence.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
    /// Append the run's JSON row here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let a = Args::parse();
    // One socket per simulated Envoy in this process and in ferry serve, plus room.
    let want = a.n as u64 + a.real_envoys as u64 + 4096;
    let limit = raise_open_files(want);
    if limit < want {
        eprintln!("ferry-fleet: the open-file limit is {limit}, under the {want} wanted (the hard limit could not be raised: not root, or no CAP_SYS_RESOURCE)");
    }
    let dir = scenario::run_dir(&a.dir, &a.mode, a.mtls, a.n);
    scenario::fresh(&dir)?;
    let o = Options {
        ferry: a.ferry,
        wasm: a.wasm,
        dir,
        n: a.n,
        mtls: a.mtls,
        sizes: a.sizes,
        pushes: a.pushes,
        envoy: a.envoy,
        real_envoys: a.real_envoys,
        log: a.log,
        max_streams: a.max_streams,
        max_http_connections: a.max_http_connections,
        validate_every: a.validate_every,
        measure_seconds: a.measure_seconds,
        poll_ms: a.poll_ms,
        timeout: Duration::from_secs(a.timeout),
    };
    eprintln!(
        "ferry-fleet: {} {} n={} (open files {limit})",
        a.mode,
        if o.mtls { "mtls" } else { "plaintext" },
        o.n
    );
    let row = if a.mode == "ads" {
        let row = scenario::ads(&o).await?;
        print_ads(&row);
        serde_json::to_value(&row)?
    } else if a.mode == "replicas" {
        let row = ferry_fleet::replicas::replicas(&o).await?;
        print_replicas(&row);
        serde_json::to_value(&row)?
    } else {
        let row = scenario::pull(&o).await?;
        print_pull(&row);
        serde_json::to_value(&row)?
    };
    if let Some(out) = a.out {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&out)
            .with_context(|| out.display().to_string())?;
        writeln!(f, "{row}")?;
    }
    Ok(())
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".to_owned(), |v| format!("{v:.1}"))
}

fn print_ads(r: &scenario::AdsRow) {
    println!(
        "ads {} n={}: connected {} in {} s, all ACKed in {} s, {:.0} bytes/stream (RSS {:.1} MB idle), {} reconnects",
        r.transport,
        r.n,
        r.connected,
        opt(r.connect_s),
        opt(r.first_ack_all_s),
        r.bytes_per_stream,
        r.idle.rss_bytes as f64 / 1e6,
        r.reconnects
    );
    println!("  size      post ms  ack p50  ack p99  ack all  acked  cpu s  peak MB  real Envoys ms (same version)");
    for p in &r.pushes {
        let real: Vec<String> = p
            .real_envoy_ms
            .iter()
            .zip(&p.real_envoy_same_version)
            .map(|(t, same)| format!("{}{}", opt(*t), if *same { "" } else { "(DIFFERENT)" }))
            .collect();
        println!(
            "  {:>8}  {:>7.1}  {:>7}  {:>7}  {:>7}  {:>5}  {:>5.2}  {:>7.1}  {}",
            p.size_bytes,
            p.post_ms,
            opt(p.ack_p50_ms),
            opt(p.ack_p99_ms),
            opt(p.ack_all_ms),
            p.acked,
            p.cpu_s,
            p.peak_rss_bytes as f64 / 1e6,
            real.join(" ")
        );
    }
}

fn print_replicas(r: &ferry_fleet::replicas::ReplicasRow) {
    println!(
        "replicas {} n={} on {} replicas: all ACKed the first snapshot in {} s",
        r.transport,
        r.n,
        r.replicas,
        opt(r.first_ack_all_s)
    );
    println!("  size      post ms  A half all  B half all  p99 ms  all ms");
    for p in &r.pushes {
        println!(
            "  {:>8}  {:>7.1}  {:>10}  {:>10}  {:>6}  {:>6}",
            p.size_bytes,
            p.post_ms,
            opt(p.own_half_all_ms),
            opt(p.other_half_all_ms),
            opt(p.ack_p99_ms),
            opt(p.ack_all_ms)
        );
    }
}

fn print_pull(r: &scenario::PullRow) {
    println!(
        "pull {} n={} every {} ms: all loaded in {} s, {:.0} bytes/poller; {} polls ({} 200, {} 304, {} failed): p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2} ms; cpu {:.2} s; push loaded by all in {} ms",
        r.transport,
        r.n,
        r.poll_ms,
        opt(r.connect_s),
        r.bytes_per_poller,
        r.polls,
        r.answered_200,
        r.answered_304,
        r.failed,
        r.p50_ms,
        r.p99_ms,
        r.p999_ms,
        r.max_ms,
        r.cpu_s,
        opt(r.push_all_loaded_ms)
    );
}
