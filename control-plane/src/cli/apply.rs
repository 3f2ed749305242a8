//! `ferry apply`: validate a repo and print its snapshot; optionally write it, materialize
//! what the control plane does not serve yet, and push it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result};
use ferry::materialize::WriteOptions;
use ferry::serve::client;
use ferry_redis::RedisArgs;
use ferry_repo::{self as repo, snapshot};

use super::materialize::materialize;
use super::{load, parse_key_ttl};

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// Feature repo folder (holding ferry.yaml).
    repo: PathBuf,
    /// Write the encoded snapshot (ferry.v1.Snapshot protobuf bytes) to this file.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Push the snapshot to this control plane (its HTTP address, e.g. http://127.0.0.1:8091).
    #[arg(long, value_name = "URL")]
    push: Option<String>,
    /// The push token for --push, if the control plane requires one (also sent when reading
    /// its /status).
    #[arg(long, env = "FERRY_PUSH_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// For an https:// --push URL: the CA of the control plane's certificate (PEM).
    #[arg(long, env = "FERRY_CA", requires = "push")]
    ca: Option<PathBuf>,
    /// A client certificate (PEM) for mTLS with the control plane (`ferry serve --grant
    /// push=IDENTITY`); with --client-key.
    #[arg(long, env = "FERRY_CLIENT_CERT", requires_all = ["client_key", "ca"])]
    client_cert: Option<PathBuf>,
    /// The private key of --client-cert (PEM).
    #[arg(long, env = "FERRY_CLIENT_KEY", requires = "client_cert")]
    client_key: Option<PathBuf>,
    /// Before pushing, write the vectors of every service whose fingerprint is new to the
    /// control plane (without --push: of every service).
    #[arg(long)]
    materialize: bool,
    /// Redis (for --materialize).
    #[command(flatten)]
    redis: RedisArgs,
    /// Expire materialized keys after this long (e.g. 7d); see `materialize --key-ttl`.
    #[arg(long)]
    key_ttl: Option<String>,
}

pub fn run(args: ApplyArgs) -> Result<()> {
    let snap = apply(&args.repo, args.output.as_deref())?;
    if args.materialize || args.push.is_some() {
        let mut opts = WriteOptions::with_redis(args.redis);
        opts.key_ttl_seconds = parse_key_ttl(args.key_ttl)?;
        let client = client::Client {
            token: args.token,
            ca: args.ca,
            cert: args.client_cert.zip(args.client_key),
        };
        push_and_materialize(
            &args.repo,
            snap,
            args.push.as_deref(),
            &client,
            args.materialize,
            &opts,
        )?;
    }
    Ok(())
}

fn apply(repo: &Path, output: Option<&Path>) -> Result<ferry_protos::v1::Snapshot> {
    let reg = load(repo)?;
    let snap = snapshot::build(&reg);
    for notice in reg.feast.iter().flat_map(|f| &f.notices) {
        eprintln!("warning: {notice}");
    }
    print!("{}", repo::report::report(&reg, &snap.version));
    if let Some(path) = output {
        std::fs::write(path, snapshot::encode(&snap))
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "wrote {} ({} bytes)",
            path.display(),
            snapshot::encode(&snap).len()
        );
    }
    Ok(snap)
}

/// `apply --push/--materialize`: materialize what the control plane does not serve yet, then
/// push, so that no Envoy switches to a fingerprint whose vectors are not in Redis.
fn push_and_materialize(
    repo: &Path,
    snap: ferry_protos::v1::Snapshot,
    url: Option<&str>,
    client: &client::Client,
    materialize_first: bool,
    opts: &WriteOptions,
) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if materialize_first {
        let served = match url {
            Some(url) => runtime
                .block_on(client::status(url, client))
                .context("asking the control plane which fingerprints it serves")?
                .snapshot
                .map(|s| s.services)
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let reg = client::unserved(load(repo)?, &served);
        if reg.services.is_empty() {
            println!("every fingerprint is already served: nothing to materialize");
        } else {
            materialize(&reg, opts)?;
        }
    }
    let Some(url) = url else { return Ok(()) };
    let started = Instant::now();
    let pushed = match runtime.block_on(client::send_snapshot(url, client, snapshot::encode(&snap)))
    {
        Ok(p) => p,
        Err(client::ClientError::Refused { status, message }) => {
            anyhow::bail!("the control plane refused the snapshot (HTTP {status}): {message}")
        }
        Err(e) => return Err(e.into()),
    };
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    println!(
        "pushed snapshot {} to {url} in {ms:.1} ms ({})",
        pushed.version,
        if pushed.changed {
            "now current"
        } else {
            "already current"
        }
    );
    Ok(())
}
