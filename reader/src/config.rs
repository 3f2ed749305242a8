//! The reader's settings: every bound the service enforces, from flags or environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use ferry_http_serve::exposure::Lack;
use ferry_http_serve::{ClientAuth, Tls, TlsError, TlsFiles};
use ferry_protos::limits::{MAX_KEYS_PER_CALL, MAX_READER_REQUEST_BYTES};
use ferry_redis::RedisArgs;
use tokio::sync::Semaphore;

/// Command line of `ferry-reader`. Each limit exists so that one client cannot make the reader
/// (or Redis behind it) do unbounded work.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "ferry-reader",
    version,
    about = "Serves Ferry's precomputed feature vectors from Redis to the Envoy filter over HTTP"
)]
pub struct Config {
    /// Address to listen on (HTTP/1.1 and h2c on the same port). Loopback by default: the
    /// reader is meant to sit next to Envoy, not on the open network.
    #[arg(long, env = "FERRY_READER_LISTEN", default_value = "127.0.0.1:8090")]
    pub listen: SocketAddr,

    /// Where Redis is: one URL or a Cluster, TLS, credentials (shared with `ferry materialize`).
    #[command(flatten)]
    pub redis: RedisArgs,

    /// Most entity keys accepted in one request, summed over its lookups; more is 413. At
    /// least `ferry_protos::limits::MAX_KEYS_PER_CALL`, the most `ferry apply` lets a route ask
    /// for (max_entities × its services): the reader never refuses a call the filter may make.
    #[arg(long, default_value_t = MAX_KEYS_PER_CALL,
          value_parser = clap::value_parser!(u32).range(i64::from(MAX_KEYS_PER_CALL)..))]
    pub max_batch: u32,

    /// Largest request body accepted, in bytes; more is 413. At least
    /// `ferry_protos::limits::MAX_READER_REQUEST_BYTES` (every key at its longest), for the
    /// same reason.
    #[arg(long, default_value_t = MAX_READER_REQUEST_BYTES,
          value_parser = clap::value_parser!(u64).range(MAX_READER_REQUEST_BYTES..))]
    pub max_body_bytes: u64,

    /// Budget of one Redis call, in milliseconds, including any wait for a (re)connection.
    /// A call over budget is answered 504; a connection that has answered nothing for a second
    /// (or this budget, if longer) while calls miss their budget is replaced by a new one.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    pub redis_timeout_ms: u64,

    /// Most requests handled at once; further requests wait for a slot.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrency: u32,

    /// Bytes of request bodies held at once while they are read, over every connection;
    /// further bytes wait. At least `--max-body-bytes` (one largest request always fits).
    #[arg(long, default_value_t = 256 << 20, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_body_memory: u64,

    /// Most connections served at once; a connection beyond it waits in the kernel's accept
    /// queue until a served one closes. Each Envoy opens at most its reader cluster's
    /// circuit-breaker `max_connections` (1,024 in our rendered configs) and usually far fewer
    /// (one pool per worker). Keep the process's open-file limit (`ulimit -n`) above it.
    #[arg(long, env = "FERRY_READER_MAX_CONNECTIONS", default_value_t = 4096,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_connections: u64,

    /// Close a connection that has carried no request for this long, in milliseconds (a
    /// request in flight is never cut). Longer than the `idle_timeout` of the reader cluster in
    /// the Envoy configs `ferry envoy-config` renders (300 s): Envoy's pool closes its idle
    /// connections first, so it never sends a request on one the reader is closing, while a
    /// client that opens connections and leaves them silent loses them.
    #[arg(long, env = "FERRY_READER_IDLE_TIMEOUT_MS", default_value_t = 330_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,

    /// Tokio worker threads: 0 = one per core (tokio's default), 1 = a single-threaded
    /// runtime (no hand-offs between threads: the request task and Redis' connection task
    /// run on the same one). In the native module's in-process reader, 0 and 1 both give one
    /// current-thread runtime on a thread of its own (measured faster there, issue #34).
    #[arg(long, env = "FERRY_READER_THREADS", default_value_t = 0)]
    pub threads: usize,

    /// Serve TLS with this certificate chain (PEM, leaf first); with --tls-key. Reloaded when
    /// the file changes (new connections use it).
    #[arg(long, env = "FERRY_READER_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long, env = "FERRY_READER_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Require client certificates signed by these CAs (PEM bundle): only such clients (Envoy's
    /// reader cluster) are served. Needs --tls-cert.
    #[arg(long, env = "FERRY_READER_CLIENT_CA", requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,

    /// Listen on a non-loopback address without mTLS (--tls-cert, --tls-key, --client-ca):
    /// anyone who reaches the port reads features. Logged loudly at start.
    #[arg(long, env = "FERRY_READER_INSECURE")]
    pub insecure: bool,
}

impl Config {
    /// The defaults, pointed at the given Redis (tests and embedders).
    pub fn with_redis(redis: impl Into<String>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8090)),
            redis: RedisArgs::with_url(redis),
            max_batch: MAX_KEYS_PER_CALL,
            max_body_bytes: MAX_READER_REQUEST_BYTES,
            redis_timeout_ms: 50,
            max_concurrency: 256,
            max_body_memory: 256 << 20,
            max_connections: 4096,
            idle_timeout_ms: 330_000,
            threads: 0,
            tls_cert: None,
            tls_key: None,
            client_ca: None,
            insecure: false,
        }
    }

    /// The TLS the flags ask for (None: plaintext), its files loaded.
    pub fn tls(&self) -> Result<Option<Tls>, TlsError> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.client_ca.clone(),
        };
        Tls::load(files, ClientAuth::Required, &[b"h2", b"http/1.1"]).map(Some)
    }

    /// What the listener lacks to know its clients (see `ferry_http_serve::exposure`).
    pub fn lack(&self) -> Option<Lack> {
        let missing = match (&self.tls_cert, &self.client_ca) {
            (Some(_), Some(_)) => return None,
            (None, _) => "without TLS",
            (Some(_), None) => "without client certificates",
        };
        Some(Lack {
            missing: missing.to_owned(),
            risk: "read any entity's features".to_owned(),
            remedy: "--tls-cert, --tls-key and --client-ca (mTLS)".to_owned(),
        })
    }

    /// The body memory budget in bytes: `--max-body-memory`, raised to `--max-body-bytes` so
    /// the largest request allowed can always be read.
    pub fn body_memory(&self) -> usize {
        let bytes = self.max_body_memory.max(self.max_body_bytes);
        usize::try_from(bytes)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS)
    }

    /// The runtime `--threads` asks for.
    pub fn runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        let mut builder = match self.threads {
            1 => tokio::runtime::Builder::new_current_thread(),
            n => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                if n > 0 {
                    b.worker_threads(n);
                }
                b
            }
        };
        builder.enable_all().build()
    }

    /// `--idle-timeout-ms` as a duration.
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }

    /// `--redis-timeout-ms` as a duration.
    pub fn redis_timeout(&self) -> Duration {
        Duration::from_millis(self.redis_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_documented_ones() {
        let parsed = Config::try_parse_from(["ferry-reader", "--redis", "redis://x:1"]).unwrap();
        let built = Config::with_redis("redis://x:1");
        assert_eq!(format!("{parsed:?}"), format!("{built:?}"));
    }

    /// docs/cli.md's table of `ferry-reader` is clap's own definition of it.
    #[test]
    fn the_cli_page_lists_every_flag_with_its_default() {
        use clap::CommandFactory;
        ferry_test_support::docs::check_block(
            "docs/cli.md",
            "ferry-reader",
            &ferry_test_support::docs::cli_table(&Config::command()),
        );
    }

    /// docs/cli.md's prose on `ferry-reader` states clap's defaults where it states one.
    #[test]
    fn the_cli_page_prose_states_the_defaults_clap_has() {
        use clap::CommandFactory;
        let wrong = ferry_test_support::docs::prose_defaults(
            "docs/cli.md",
            "ferry-reader",
            &Config::command(),
        );
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// docs/environment.md's tables of the reader's ports and variables.
    #[test]
    fn the_ports_and_environment_pages_hold_every_default_port_and_variable() {
        use clap::CommandFactory;
        use ferry_test_support::docs::{check_block, env_table, ports_table};
        let cmd = Config::command();
        let docs = "docs/environment.md";
        check_block(
            docs,
            "ports: ferry-reader",
            &ports_table("ferry-reader", &cmd),
        );
        check_block(
            docs,
            "environment: ferry-reader",
            &env_table("ferry-reader", &cmd),
        );
    }

    #[test]
    fn zero_limits_are_refused() {
        assert!(Config::try_parse_from(["ferry-reader", "--max-batch", "0"]).is_err());
        assert!(Config::try_parse_from(["ferry-reader", "--redis-timeout-ms", "0"]).is_err());
        assert!(Config::try_parse_from(["ferry-reader", "--max-connections", "0"]).is_err());
        assert!(Config::try_parse_from(["ferry-reader", "--idle-timeout-ms", "0"]).is_err());
    }

    #[test]
    fn tls_flags_go_together_and_a_network_address_needs_mtls_or_insecure() {
        let parse = |args: &[&str]| {
            let mut argv = vec!["ferry-reader"];
            argv.extend_from_slice(args);
            Config::try_parse_from(argv)
        };
        assert!(parse(&["--tls-cert", "c.pem"]).is_err(), "no key");
        assert!(parse(&["--client-ca", "ca.pem"]).is_err(), "no certificate");
        let check = |c: &Config| {
            ferry_http_serve::exposure::check("the reader", c.listen, c.lack(), c.insecure)
        };
        let any = ["--listen", "0.0.0.0:8090"];
        let e = check(&parse(&any).unwrap()).unwrap_err().to_string();
        assert!(e.contains("without TLS") && e.contains("--insecure"), "{e}");
        let tls_only = parse(&[&any[..], &["--tls-cert", "c", "--tls-key", "k"]].concat()).unwrap();
        let e = check(&tls_only).unwrap_err().to_string();
        assert!(e.contains("without client certificates"), "{e}");
        let mtls = [
            &any[..],
            &["--tls-cert", "c", "--tls-key", "k", "--client-ca", "ca"],
        ]
        .concat();
        assert_eq!(check(&parse(&mtls).unwrap()), Ok(false));
        assert_eq!(
            check(&parse(&[&any[..], &["--insecure"]].concat()).unwrap()),
            Ok(true)
        );
        assert_eq!(check(&parse(&[]).unwrap()), Ok(false), "loopback");
    }

    #[test]
    fn limits_cannot_go_below_what_the_filter_may_send() {
        let below = (MAX_KEYS_PER_CALL - 1).to_string();
        assert!(Config::try_parse_from(["ferry-reader", "--max-batch", &below]).is_err());
        let below = (MAX_READER_REQUEST_BYTES - 1).to_string();
        assert!(Config::try_parse_from(["ferry-reader", "--max-body-bytes", &below]).is_err());
        let above = (MAX_KEYS_PER_CALL * 2).to_string();
        assert!(Config::try_parse_from(["ferry-reader", "--max-batch", &above]).is_ok());
    }

    #[test]
    fn threads_picks_the_runtime_flavor() {
        use tokio::runtime::RuntimeFlavor;
        let flavor = |args: &[&str]| {
            let mut argv = vec!["ferry-reader"];
            argv.extend_from_slice(args);
            let rt = Config::try_parse_from(argv).unwrap().runtime().unwrap();
            let (flavor, workers) = (rt.handle().runtime_flavor(), rt.metrics().num_workers());
            (flavor, workers)
        };
        assert_eq!(
            flavor(&["--threads", "1"]),
            (RuntimeFlavor::CurrentThread, 1)
        );
        assert_eq!(flavor(&["--threads", "3"]), (RuntimeFlavor::MultiThread, 3));
        assert_eq!(flavor(&[]).0, RuntimeFlavor::MultiThread);
    }
}
