//! `ferry-reader`: parses the command line, sets up logging, serves until SIGINT/SIGTERM.

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let config = ferry_reader::Config::parse();
    config
        .runtime()?
        .block_on(ferry_reader::run(config, ferry_reader::shutdown_signal()))?;
    Ok(())
}
