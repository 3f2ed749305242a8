//! `ferry log-sink`: receives served-feature records from Envoy's gRPC access-log service and
//! writes them as Parquet files in Feast's feature-logging layout (`ferry::log_sink`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use ferry::log_sink::{self, FileOptions, SinkOptions};
use ferry_http_serve::exposure::{self, Lack};
use ferry_http_serve::{ClientAuth, Tls, TlsFiles};

#[derive(clap::Args)]
pub struct LogSinkArgs {
    /// Where the files go: DIR/<service>/log_date=YYYY-MM-DD/*.parquet.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// The access-log gRPC listener Envoy sends to (`ferry envoy-config --log-sink`). A
    /// non-loopback address needs mTLS (--tls-cert, --tls-key, --client-ca) or --insecure.
    #[arg(long, default_value = "127.0.0.1:18090")]
    listen: SocketAddr,
    /// `/metrics` (records written and dropped, files, errors).
    #[arg(long, default_value = "127.0.0.1:8093")]
    http_listen: SocketAddr,
    /// A file is written at most this many seconds after its first row.
    #[arg(long, default_value_t = 60)]
    window_secs: u64,
    /// A file is written once it holds this many rows.
    #[arg(long, default_value_t = 100_000)]
    max_rows: usize,
    /// Rows held in memory over all open files; beyond it rows are dropped and counted.
    #[arg(long, default_value_t = 1_000_000)]
    max_buffered_rows: usize,
    /// Access-log streams open at once (Envoy opens one per worker thread); one more is
    /// refused with RESOURCE_EXHAUSTED and counted in ferry_log_sink_streams_refused.
    #[arg(long, default_value_t = log_sink::DEFAULT_MAX_STREAMS)]
    max_streams: usize,
    /// Serve TLS on the gRPC listener with this certificate chain (PEM), with --tls-key;
    /// reloaded when the file changes.
    #[arg(long, env = "FERRY_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    #[arg(long, env = "FERRY_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Envoy's client certificates must chain to these CAs (PEM bundle): mTLS.
    #[arg(long, env = "FERRY_CLIENT_CA", requires = "tls_cert")]
    client_ca: Option<PathBuf>,
    /// Listen on a network address without mTLS: anyone who reaches it can write log files.
    #[arg(long)]
    insecure: bool,
}

pub fn run(args: LogSinkArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let files = args.tls_cert.zip(args.tls_key).map(|(cert, key)| TlsFiles {
        cert,
        key,
        client_ca: args.client_ca.clone(),
    });
    let lack = match &args.client_ca {
        Some(_) => None,
        None => Some(Lack {
            missing: "without mTLS".to_owned(),
            risk: "let anyone who reaches it write served-feature log files".to_owned(),
            remedy: "--tls-cert, --tls-key and --client-ca".to_owned(),
        }),
    };
    if exposure::check("the log sink", args.listen, lack, args.insecure)? {
        tracing::warn!(listen = %args.listen, "INSECURE: the log sink listens on a network address without mTLS (--insecure)");
    }
    let tls = files
        .map(|f| Tls::load(f, ClientAuth::Required, &[b"h2"]))
        .transpose()?;
    let file_opts = FileOptions {
        dir: args.dir,
        window: Duration::from_secs(args.window_secs.max(1)),
        max_rows: args.max_rows.max(1),
        max_buffered_rows: args.max_buffered_rows.max(1),
        error_log_interval: Duration::from_secs(30),
    };
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(async move {
            let grpc = tokio::net::TcpListener::bind(args.listen)
                .await
                .with_context(|| format!("binding {}", args.listen))?;
            let http = tokio::net::TcpListener::bind(args.http_listen)
                .await
                .with_context(|| format!("binding {}", args.http_listen))?;
            let (grpc_addr, http_addr) = (grpc.local_addr()?, http.local_addr()?);
            tracing::info!("{}", log_sink::describe(grpc_addr, http_addr, &file_opts));
            let (stop_tx, stop) = tokio::sync::watch::channel(false);
            tokio::spawn(async move {
                shutdown_signal().await;
                let _ = stop_tx.send(true);
            });
            let opts = SinkOptions {
                files: file_opts,
                grpc,
                http,
                tls,
                max_streams: args.max_streams,
            };
            log_sink::run(opts, stop).await
        })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
