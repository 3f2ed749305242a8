//! `ferry materialize`: the views' sources into Redis, one vector per entity per service, with
//! a progress bar on stderr and a summary per service on stdout.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use ferry::materialize::{self, WriteOptions};
use ferry_redis::RedisArgs;
use ferry_repo::Registry;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{load, parse_key_ttl};

#[derive(clap::Args)]
pub struct MaterializeArgs {
    /// Feature repo folder (holding ferry.yaml).
    repo: PathBuf,
    #[command(flatten)]
    redis: RedisArgs,
    /// SETs per pipelined round trip.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    batch_size: u64,
    /// Expire written keys after this long (e.g. 7d), so vectors of an old fingerprint
    /// disappear by themselves; default: keys never expire.
    #[arg(long)]
    key_ttl: Option<String>,
    /// After writing each service, delete the vectors (at its current fingerprint) of entities
    /// no longer in its sources (SCAN, batched UNLINK), and report how many; without it
    /// nothing is deleted.
    #[arg(long)]
    prune: bool,
}

pub fn run(args: MaterializeArgs) -> Result<()> {
    let mut opts = WriteOptions::with_redis(args.redis);
    opts.batch_size = usize::try_from(args.batch_size)?;
    opts.key_ttl_seconds = parse_key_ttl(args.key_ttl)?;
    if args.prune && opts.redis.cluster {
        // SCAN walks one node of a Cluster: a prune there would miss most keys.
        anyhow::bail!(
            "--prune does not support --redis-cluster yet (SCAN walks one node of a \
             Cluster); materialize without --prune, older vectors expire with --key-ttl"
        );
    }
    opts.prune = args.prune;
    materialize(&load(&args.repo)?, &opts)
}

/// Materializes every service of `reg`, reporting as it goes.
pub fn materialize(reg: &Registry, opts: &WriteOptions) -> Result<()> {
    let started = Instant::now();
    let tables = ferry_repo::tables::load_tables(reg)?;
    for v in &tables.summaries {
        eprintln!(
            "read view {}: {} rows, {} entities in {:.2}s",
            v.view, v.rows_read, v.entities, v.seconds
        );
    }
    let progress = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    progress.set_style(
        ProgressStyle::with_template(
            "{msg} [{bar:30}] {human_pos}/{human_len} entities, eta {eta}",
        )?
        .progress_chars("=> "),
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let summaries = runtime.block_on(materialize::run(reg, &tables, opts, &progress))?;
    for s in &summaries {
        println!(
            "materialized {} (fingerprint {}): {} entities, {} bytes ({:.0} B/entity) in {:.3}s = {:.0} entities/s",
            s.service,
            ferry_protos::fingerprint_hex(s.fingerprint),
            s.entities,
            s.bytes,
            s.bytes as f64 / (s.entities.max(1)) as f64,
            s.seconds,
            s.entities_per_second()
        );
        if let Some(p) = s.pruned {
            println!(
                "pruned {}: {} vector(s) of entities no longer in the sources removed ({} key(s) scanned)",
                s.service, p.removed, p.scanned
            );
        }
    }
    println!("done in {:.2}s", started.elapsed().as_secs_f64());
    Ok(())
}
