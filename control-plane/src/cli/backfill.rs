//! `ferry backfill`: one view's rows from a file into Redis through the write path of `/push`
//! (the merge rule; Feast's layout for a Feast-backed repo). Prints what the rows did.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use ferry::write::backfill;
use ferry_redis::{RedisArgs, Timeouts};

use super::load;

#[derive(clap::Args)]
pub struct BackfillArgs {
    /// Feature repo folder (holding ferry.yaml).
    repo: PathBuf,
    /// The feature view the rows belong to.
    view: String,
    /// The rows: .parquet, .csv, or .jsonl / .ndjson (one JSON object per line).
    file: PathBuf,
    #[command(flatten)]
    redis: RedisArgs,
}

pub fn run(args: BackfillArgs) -> Result<()> {
    let started = Instant::now();
    let reg = load(&args.repo)?;
    let checked = backfill::check(&reg, &args.view, &args.file)?;
    eprintln!(
        "read {}: {} rows, {} entities",
        args.file.display(),
        checked.rows_read,
        checked.rows.rows.len()
    );
    let target = args.redis.target()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let counts = runtime.block_on(async {
        let timeouts = Timeouts {
            connect: Duration::from_secs(5),
            response: Some(Duration::from_secs(30)),
        };
        let conn = target
            .connect(timeouts)
            .await
            .map_err(|e| anyhow::anyhow!("redis {target}: {e}"))?;
        anyhow::Ok(backfill::write(conn, &checked).await?)
    })?;
    println!(
        "backfilled {}: {} row(s) written, {} skipped as older, {} refused, in {:.2}s",
        args.view,
        counts.written,
        counts.skipped_older,
        counts.refused,
        started.elapsed().as_secs_f64()
    );
    if counts.refused > 0 {
        anyhow::bail!(
            "{} row(s) were refused by a stored vector (another fingerprint or undecodable \
             bytes); ferry serve's /metrics names the reason on a push",
            counts.refused
        );
    }
    Ok(())
}
