//! `ferry log-sink`: receives served-feature records from Envoy's gRPC access-log service and
//! writes them as Parquet files in Feast's feature-logging layout (`ferry_log_sink`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, Result};
use ferry_http_serve::exposure::{self, Lack};
use ferry_http_serve::{ClientAuth, Tls};
use ferry_log_sink::{self as log_sink, Allowed, FileOptions, RetentionOptions, SinkOptions};

use super::{TlsArgs, TlsListener};

/// The listeners `ferry log-sink`'s TLS flags apply to.
pub struct LogSinkListeners;

impl TlsListener for LogSinkListeners {
    const CERT_HELP: &'static str =
        "Serve TLS on the gRPC listener with this certificate chain (PEM), with --tls-key; \
         reloaded when the file changes";
    const CLIENT_CA_HELP: &'static str =
        "Envoy's client certificates must chain to these CAs (PEM bundle): mTLS";
}

#[derive(clap::Args)]
pub struct LogSinkArgs {
    /// Where the files go: DIR/<service>/log_date=YYYY-MM-DD/*.parquet.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// The access-log gRPC listener Envoy sends to (`ferry envoy-config --log-sink`). A
    /// non-loopback address needs mTLS (--tls-cert, --tls-key, --client-ca) or --insecure.
    #[arg(long, default_value = "127.0.0.1:18090")]
    listen: SocketAddr,
    /// `/metrics` (records written and dropped, files, errors, retention).
    #[arg(long, default_value = "127.0.0.1:8093")]
    http_listen: SocketAddr,
    /// Access-log connections served at once (Envoy opens one per worker thread); a connection
    /// beyond it waits in the kernel's accept queue until a served one closes. A plaintext
    /// client must send within 10 s, a TLS one finish its handshake, or it is closed.
    #[arg(long, default_value_t = log_sink::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// `/metrics` connections served at once; beyond it a connection waits in the accept
    /// queue. Headers must arrive within 10 s; a connection idle for 90 s is closed.
    #[arg(long, default_value_t = log_sink::DEFAULT_MAX_HTTP_CONNECTIONS)]
    max_http_connections: usize,
    /// A file is written at most this many seconds after its first row.
    #[arg(long, default_value_t = 60)]
    window_secs: u64,
    /// A file is written once it holds this many rows.
    #[arg(long, default_value_t = 100_000)]
    max_rows: usize,
    /// Rows held in memory over all open files; beyond it rows are dropped and counted.
    #[arg(long, default_value_t = 1_000_000)]
    max_buffered_rows: usize,
    /// Complete files older than this many seconds are removed (0: kept however old).
    #[arg(long, default_value_t = 30 * 86_400)]
    retain_secs: u64,
    /// The files under --dir hold at most this many bytes: past it, the oldest files are
    /// removed first (0: no bound).
    #[arg(long, default_value_t = 10 << 30)]
    max_bytes: u64,
    /// Access-log streams open at once (Envoy opens one per worker thread); one more is
    /// refused with RESOURCE_EXHAUSTED and counted in ferry_log_sink_streams_refused.
    #[arg(long, default_value_t = log_sink::DEFAULT_MAX_STREAMS)]
    max_streams: usize,
    #[command(flatten)]
    tls: TlsArgs<LogSinkListeners>,
    /// IDENTITY: only client certificates with a URI or DNS SAN matching it may send logs (`*`
    /// matches any run of characters but `/`); repeatable. Others of the client CA are closed
    /// after the handshake and counted. Required with mTLS on a non-loopback --listen.
    #[arg(
        long = "allow-identity",
        value_name = "IDENTITY",
        requires = "client_ca"
    )]
    allow_identities: Vec<String>,
    /// Listen on a network address without mTLS: anyone who reaches it can write log files.
    #[arg(long)]
    insecure: bool,
}

pub fn run(args: LogSinkArgs) -> Result<()> {
    ferry_http_serve::logging::init(ferry_http_serve::logging::LogTo::Stderr);
    let lack = lack(args.tls.mtls(), !args.allow_identities.is_empty());
    let files = args.tls.files();
    if exposure::check("the log sink", args.listen, lack, args.insecure)? {
        tracing::warn!(listen = %args.listen, "INSECURE: the log sink listens on a network address without mTLS or without --allow-identity (--insecure)");
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
        retention: RetentionOptions {
            max_age: (args.retain_secs > 0).then(|| Duration::from_secs(args.retain_secs)),
            max_bytes: (args.max_bytes > 0).then_some(args.max_bytes),
        },
    };
    let (max_connections, max_http_connections) = (
        args.max_connections.max(1),
        args.max_http_connections.max(1),
    );
    ferry::serve::open_files::raise_open_files(
        max_connections.saturating_add(max_http_connections),
    );
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
                allowed: Allowed::new(args.allow_identities),
                max_streams: args.max_streams,
                max_connections,
                max_http_connections,
            };
            log_sink::run(opts, stop).await
        })
}

/// What the gRPC listener lacks to know its clients: mTLS, or with it an identity allow-list
/// (every certificate of a mesh's CA would otherwise write log files).
fn lack(mtls: bool, allow_list: bool) -> Option<Lack> {
    match (mtls, allow_list) {
        (true, true) => None,
        (true, false) => Some(Lack {
            missing: "with mTLS but no --allow-identity".to_owned(),
            risk: "write served-feature log files with any certificate of the client CA (in a \
                   mesh, every workload holds one)"
                .to_owned(),
            remedy: "--allow-identity (Envoy's SPIFFE id or DNS name)".to_owned(),
        }),
        (false, _) => Some(Lack {
            missing: "without mTLS".to_owned(),
            risk: "let anyone who reaches it write served-feature log files".to_owned(),
            remedy: "--tls-cert, --tls-key, --client-ca and --allow-identity".to_owned(),
        }),
    }
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
