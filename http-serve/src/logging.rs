//! The log set-up every Ferry server binary shares (`ferry serve`, `ferry log-sink`, the
//! reader, the demo model): `tracing` lines filtered by `RUST_LOG`, `info` when it is unset or
//! does not parse.

use tracing_subscriber::EnvFilter;

/// Where a binary writes its log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogTo {
    /// Standard output, in the formatter's default colours (the reader, the demo model).
    Stdout,
    /// Standard error, coloured only on a terminal (the `ferry` subcommands, whose standard
    /// output is their answer).
    Stderr,
}

/// Installs the global subscriber; once per process, at the start of `main` (or of the
/// subcommand).
pub fn init(to: LogTo) {
    let logs = tracing_subscriber::fmt().with_env_filter(
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    );
    match to {
        LogTo::Stdout => logs.init(),
        LogTo::Stderr => logs
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
}
