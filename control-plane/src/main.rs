//! The `ferry` command line: thin clap wiring over the library; errors become one message on
//! stderr and exit code 1.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use ferry::envoy_config::{self, StaticOptions};
use ferry::materialize::{self, WriteOptions};
use ferry::repo::{self, scalars::format_ttl, PathMatch, Registry};
use ferry::snapshot;

/// Ferry: feature vectors injected into ML inference requests by Envoy.
#[derive(Parser)]
#[command(name = "ferry", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a feature repo and print its snapshot: services, fingerprints, views, routes.
    Apply {
        /// Feature repo folder (holding ferry.yaml).
        repo: PathBuf,
        /// Write the encoded snapshot (ferry.v1.Snapshot protobuf bytes) to this file.
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Write one vector per entity per FeatureService from the views' sources into Redis.
    Materialize {
        /// Feature repo folder (holding ferry.yaml).
        repo: PathBuf,
        /// Redis URL.
        #[arg(long, env = "FERRY_REDIS", default_value = "redis://127.0.0.1:6379")]
        redis: String,
        /// SETs per pipelined round trip.
        #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        batch_size: u64,
        /// Expire written keys after this long (e.g. 7d), so vectors of an old fingerprint
        /// disappear by themselves; default: keys never expire.
        #[arg(long)]
        key_ttl: Option<String>,
    },
    /// Render a static Envoy bootstrap with the ferry filter and this repo's snapshot.
    EnvoyConfig {
        /// Feature repo folder (holding ferry.yaml).
        repo: PathBuf,
        /// The ferry filter's .wasm file.
        #[arg(long)]
        wasm: PathBuf,
        #[arg(long, default_value_t = 10000)]
        listen_port: u16,
        #[arg(long, default_value_t = 9901)]
        admin_port: u16,
        #[arg(long, default_value_t = 8090)]
        reader_port: u16,
        #[arg(long, default_value_t = 8080)]
        model_port: u16,
        /// Envoy's per-connection buffer limit; every route's max_body_bytes must fit in it.
        #[arg(long, default_value_t = 8 * 1024 * 1024)]
        buffer_limit_bytes: u64,
        /// Write the config here instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Apply { repo, output } => apply(&repo, output.as_deref()),
        Command::Materialize {
            repo,
            redis,
            batch_size,
            key_ttl,
        } => {
            let mut opts = WriteOptions::new(redis);
            opts.batch_size = usize::try_from(batch_size)?;
            opts.key_ttl_seconds = key_ttl
                .map(|t| {
                    repo::scalars::parse_duration(&t)
                        .map(|s| s.unsigned_abs())
                        .map_err(|e| anyhow::anyhow!("--key-ttl: {e}"))
                })
                .transpose()?;
            materialize_cmd(&repo, &opts)
        }
        Command::EnvoyConfig {
            repo,
            wasm,
            listen_port,
            admin_port,
            reader_port,
            model_port,
            buffer_limit_bytes,
            output,
        } => {
            let reg = load(&repo)?;
            if !wasm.is_file() {
                eprintln!(
                    "warning: {} does not exist (yet); Envoy needs it at start",
                    wasm.display()
                );
            }
            let opts = StaticOptions {
                wasm_path: envoy_config::absolute_wasm_path(&wasm)?,
                listen_port,
                admin_port,
                reader_port,
                model_port,
                buffer_limit_bytes,
            };
            let text = envoy_config::render_static(&reg, &opts)?;
            match output {
                Some(p) => {
                    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?
                }
                None => print!("{text}"),
            }
            Ok(())
        }
    }
}

fn load(repo: &Path) -> Result<Registry> {
    // Validation errors are already one precise line each: print them as they are.
    repo::load(repo).map_err(|e| match e {
        repo::RepoError::Invalid { ref issues, .. } => {
            anyhow::anyhow!("{e}\n{} problem(s) in the feature repo", issues.len())
        }
        other => other.into(),
    })
}

fn apply(repo: &Path, output: Option<&Path>) -> Result<()> {
    let reg = load(repo)?;
    let snap = snapshot::build(&reg);
    println!("project {}  snapshot {}", reg.project, snap.version);
    for s in &reg.services {
        let keys: Vec<String> = s
            .keys
            .iter()
            .map(|k| format!("{} ({})", k.join_key, k.key_type.as_str()))
            .collect();
        let total: usize = s.views.iter().map(|v| v.features.len()).sum();
        println!(
            "feature service {}  fingerprint {}  keys: {}  {} features",
            s.name,
            ferry_protos::fingerprint_hex(s.fingerprint),
            keys.join(", "),
            total
        );
        for sv in &s.views {
            let v = &reg.views[sv.view];
            println!(
                "  view {:<24} ttl {:<6} {} feature(s)",
                v.name,
                format_ttl(v.ttl_seconds),
                sv.features.len()
            );
        }
    }
    for r in &reg.routes {
        let m = match &r.path {
            PathMatch::Prefix(p) => format!("prefix {p}"),
            PathMatch::Exact(p) => format!("exact {p}"),
        };
        println!(
            "route {}  {}  -> {}  format {}  entity [{}]  names {}  missing {}  stale {}  reader error {}  max body {} B, {} entities, timeout {} ms",
            r.name,
            m,
            reg.services[r.service].name,
            r.format.as_str_name().to_ascii_lowercase(),
            r.entity_fields.join(", "),
            r.feature_names.as_str_name().to_ascii_lowercase(),
            policy(r.on_missing_entity.as_str_name()),
            policy(r.on_stale.as_str_name()),
            policy(r.on_reader_error.as_str_name()),
            r.max_body_bytes,
            r.max_entities,
            r.reader_timeout_ms
        );
    }
    if let Some(path) = output {
        std::fs::write(path, snapshot::encode(&snap))
            .with_context(|| format!("writing {}", path.display()))?;
        println!(
            "wrote {} ({} bytes)",
            path.display(),
            snapshot::encode(&snap).len()
        );
    }
    Ok(())
}

/// `MISSING_REJECT` → `reject`.
fn policy(name: &str) -> String {
    name.rsplit('_').next().unwrap_or(name).to_ascii_lowercase()
}

fn materialize_cmd(repo: &Path, opts: &WriteOptions) -> Result<()> {
    let reg = load(repo)?;
    let started = Instant::now();
    let tables = materialize::load_tables(&reg)?;
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
    let summaries = runtime.block_on(materialize::run(&reg, &tables, opts, &progress))?;
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
    }
    println!("done in {:.2}s", started.elapsed().as_secs_f64());
    Ok(())
}
