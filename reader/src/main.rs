//! `ferry-reader`: parses the command line, sets up logging, serves until SIGINT/SIGTERM.

use clap::Parser;

fn main() -> anyhow::Result<()> {
    ferry_http_serve::logging::init(ferry_http_serve::logging::LogTo::Stdout);
    let config = ferry_reader::Config::parse();
    config
        .runtime()?
        .block_on(ferry_reader::run(config, ferry_reader::shutdown_signal()))?;
    Ok(())
}
