//! Redis access: one multiplexed self-healing connection (or a Cluster connection) shared by
//! every request, a deadline on every call, a connection that stays silent past its deadlines
//! replaced by a new one, errors classified as transient or not, and an up/down state that is
//! logged when it flips rather than on every failed request.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ferry_redis::{Connection, SetupError, Target, Timeouts};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::time::Instant;

use crate::error::ReaderError;
use crate::metrics::{Metrics, RedisErrorKind};

/// The key `/healthz` asks Redis about: never written (the answer is 0), and inside Ferry's
/// `ferry:` key space so that an ACL user limited to it (`~ferry:*`) may read it. No vector
/// key has a single part after `ferry:`.
const HEALTH_KEY: &str = "ferry:health";

/// Health states; `UNKNOWN` only until the first call.
const UNKNOWN: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

/// Connecting may take longer than one request's budget (a remote Redis, a TLS handshake);
/// requests stop waiting at their deadline while the attempt carries on.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// What one call sends: a command, or a pipeline of them (one round trip either way).
#[derive(Clone, Copy)]
enum Query<'a> {
    Cmd(&'a redis::Cmd),
    Pipeline(&'a redis::Pipeline),
}

impl Query<'_> {
    async fn run(self, conn: &mut Connection) -> redis::RedisResult<Value> {
        match self {
            Query::Cmd(c) => c.query_async::<Value>(conn).await,
            Query::Pipeline(p) => p.query_async::<Value>(conn).await,
        }
    }
}

/// One connection and when it last proved alive.
#[derive(Debug)]
struct Link {
    /// Multiplexed: used by all requests at once (a clone is an `Arc` clone).
    conn: Connection,
    /// When it last answered anything, in ms since `Store::epoch` (starts at its creation).
    heard_ms: AtomicU64,
}

/// The reader's view of Redis.
#[derive(Debug)]
pub struct Store {
    /// The connection in use. A connection whose socket stays open while Redis answers nothing
    /// (host crash, partition, a frozen proxy) never fails with an I/O error, so redis-rs never
    /// reconnects it; the store swaps in a new one instead (see `replace_if_silent`).
    link: RwLock<Arc<Link>>,
    /// Where and how to connect, for new links.
    target: Target,
    /// Connect and response timeouts of every link.
    timeouts: Timeouts,
    /// Budget of one call, including any wait for a (re)connection.
    timeout: Duration,
    /// A link that missed a deadline and has answered nothing for this long is replaced: at
    /// least a connection attempt's own timeout, so a slow but healthy handshake can finish.
    silence_limit: Duration,
    /// Origin of the links' `heard_ms`.
    epoch: Instant,
    /// Where Redis lives, for logs, without credentials.
    addr: String,
    /// `UNKNOWN`, `UP` or `DOWN`, as last observed; only changes are logged.
    state: AtomicU8,
    /// Where failed calls are counted.
    metrics: Arc<Metrics>,
}

impl Store {
    /// Prepares the connection without connecting: the reader starts (and answers 503) while
    /// Redis is away, and connects on first use.
    pub fn new(
        target: Target,
        timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Result<Self, SetupError> {
        let connect = CONNECT_TIMEOUT.max(timeout);
        // redis-rs's own response timeout frees a command's slot on a silent connection; the
        // call's deadline below is what the client sees.
        let timeouts = Timeouts {
            connect,
            response: Some(timeout),
        };
        let epoch = Instant::now();
        let link = Link {
            conn: target.connect_lazy(timeouts)?,
            heard_ms: AtomicU64::new(0),
        };
        Ok(Self {
            link: RwLock::new(Arc::new(link)),
            addr: target.to_string(),
            target,
            timeouts,
            timeout,
            silence_limit: connect,
            epoch,
            state: AtomicU8::new(UNKNOWN),
            metrics,
        })
    }

    /// `host:port` of Redis.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the last Redis call succeeded.
    pub fn is_up(&self) -> bool {
        self.state.load(Relaxed) == UP
    }

    /// Runs one `MGET` (one round trip) and returns its values in key order.
    pub async fn mget(&self, command: &redis::Cmd) -> Result<Vec<Value>, ReaderError> {
        match self.call(Query::Cmd(command)).await? {
            Value::Array(values) => Ok(values),
            other => Err(ReaderError::Internal(format!(
                "redis answered MGET with {other:?} instead of an array"
            ))),
        }
    }

    /// Runs a pipeline (one round trip) and returns each command's answer in order.
    pub async fn pipeline(&self, pipeline: &redis::Pipeline) -> Result<Vec<Value>, ReaderError> {
        match self.call(Query::Pipeline(pipeline)).await? {
            Value::Array(values) => Ok(values),
            other => Err(ReaderError::Internal(format!(
                "redis answered a pipeline with {other:?} instead of an array"
            ))),
        }
    }

    /// A read that must reach a Redis, for `/healthz` and the startup check: `EXISTS` of a key
    /// Ferry never writes. Not `PING`, which Envoy's `redis_proxy` answers itself, so a reader
    /// behind one would look healthy with Redis down.
    pub async fn ping(&self) -> Result<(), ReaderError> {
        self.call(Query::Cmd(redis::cmd("EXISTS").arg(HEALTH_KEY)))
            .await
            .map(drop)
    }

    /// One command under the deadline; records the outcome in the health state and metrics.
    async fn call(&self, command: Query<'_>) -> Result<Value, ReaderError> {
        let deadline = Instant::now() + self.timeout;
        let link = self.current();
        let mut conn = link.conn.clone();
        let outcome = tokio::time::timeout_at(deadline, async {
            match command.run(&mut conn).await {
                // A connection that died while idle is only noticed on use, and the manager is
                // already reconnecting; one retry within the same deadline lets the first request
                // after Redis comes back succeed. Only read-only commands come through here.
                Err(e) if e.is_io_error() && !e.is_timeout() => command.run(&mut conn).await,
                other => other,
            }
        })
        .await;
        match outcome {
            Ok(Ok(value)) => {
                self.heard(&link);
                self.mark_up();
                Ok(value)
            }
            Ok(Err(e)) => {
                let kind = classify(&e);
                if kind == RedisErrorKind::Timeout {
                    self.replace_if_silent(&link);
                } else if e.kind() != ErrorKind::Io {
                    // Redis itself answered (an error reply): the connection is alive.
                    self.heard(&link);
                }
                self.mark_down(kind, &e.to_string());
                Err(match kind {
                    RedisErrorKind::Timeout => ReaderError::RedisTimeout(self.timeout_ms()),
                    RedisErrorKind::Unavailable | RedisErrorKind::Other => {
                        ReaderError::RedisUnavailable(e.to_string())
                    }
                })
            }
            Err(_elapsed) => {
                self.replace_if_silent(&link);
                self.mark_down(RedisErrorKind::Timeout, "deadline passed");
                Err(ReaderError::RedisTimeout(self.timeout_ms()))
            }
        }
    }

    /// The link in use (an `Arc` clone under a read lock held for no longer than that).
    fn current(&self) -> Arc<Link> {
        match self.link.read() {
            Ok(link) => link.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Records that `link` answered. Written at most every 10 ms, so that concurrent requests do
    /// not all write one shared cache line.
    fn heard(&self, link: &Link) {
        let now = self.now_ms();
        if now.saturating_sub(link.heard_ms.load(Relaxed)) >= 10 {
            link.heard_ms.store(now, Relaxed);
        }
    }

    /// After a missed deadline: if `link` is still the one in use and has answered nothing for
    /// `silence_limit`, a new (lazy) connection takes its place. Calls in flight on the old one
    /// finish or time out on it; it closes when the last of them lets go. Slow answers on a live
    /// connection do not trigger this, since any answer resets the silence.
    fn replace_if_silent(&self, link: &Arc<Link>) {
        let silent_ms = self.now_ms().saturating_sub(link.heard_ms.load(Relaxed));
        if u128::from(silent_ms) < self.silence_limit.as_millis() {
            return;
        }
        let Ok(mut current) = self.link.write() else {
            return;
        };
        // Another request may have replaced it already.
        if !Arc::ptr_eq(&current, link) {
            return;
        }
        match self.target.connect_lazy(self.timeouts) {
            Ok(conn) => {
                tracing::warn!(
                    redis = %self.addr, silent_ms,
                    "redis connection silent past its deadlines; replacing it"
                );
                *current = Arc::new(Link {
                    conn,
                    heard_ms: AtomicU64::new(self.now_ms()),
                });
            }
            // Cannot happen: the same target built the first link.
            Err(e) => tracing::error!(error = %e, "cannot build a new redis connection"),
        }
    }

    fn timeout_ms(&self) -> u64 {
        u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX)
    }

    fn mark_up(&self) {
        // A load first keeps the hot path from writing to a shared cache line on every request.
        if self.state.load(Relaxed) != UP && self.state.swap(UP, Relaxed) != UP {
            tracing::info!(redis = %self.addr, "redis is up");
        }
    }

    fn mark_down(&self, kind: RedisErrorKind, error: &str) {
        self.metrics.redis_error(kind);
        if self.state.swap(DOWN, Relaxed) == DOWN {
            return;
        }
        match kind {
            RedisErrorKind::Other => tracing::error!(
                redis = %self.addr, %error,
                "redis refuses to serve (not transient: check the URL, credentials and ACLs); answering 503"
            ),
            RedisErrorKind::Timeout => tracing::warn!(
                redis = %self.addr, %error, timeout_ms = self.timeout_ms(),
                "redis is down: no answer within the timeout; answering 504 until it is back"
            ),
            RedisErrorKind::Unavailable => tracing::warn!(
                redis = %self.addr, %error,
                "redis is down; answering 503 until it is back"
            ),
        }
    }
}

/// Transient errors are the ones that go away by themselves (Redis restarting, loading, failing
/// over, a dropped connection); the others need an operator.
fn classify(e: &RedisError) -> RedisErrorKind {
    if e.is_timeout() {
        RedisErrorKind::Timeout
    } else if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        )
    {
        RedisErrorKind::Unavailable
    } else {
        RedisErrorKind::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_are_transient_and_timeouts_are_timeouts() {
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(classify(&refused), RedisErrorKind::Unavailable);
        let timed_out = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert_eq!(classify(&timed_out), RedisErrorKind::Timeout);
        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "bad password"));
        assert_eq!(classify(&auth), RedisErrorKind::Other);
    }

    #[tokio::test]
    async fn an_unreachable_redis_is_unavailable_and_flips_the_state_once() {
        // Port 1 on loopback: nothing listens there, so the connect is refused at once.
        let metrics = Arc::new(Metrics::default());
        let target = ferry_redis::RedisArgs::with_url("redis://127.0.0.1:1")
            .target()
            .unwrap();
        let store = Store::new(target, Duration::from_millis(500), metrics.clone()).unwrap();
        for _ in 0..2 {
            let err = store.ping().await.unwrap_err();
            assert_eq!(err.code(), "redis_unavailable", "{err}");
        }
        assert!(!store.is_up());
        assert_eq!(store.state.load(Relaxed), DOWN);
        assert!(metrics
            .render(false)
            .contains("ferry_reader_redis_errors_total{kind=\"unavailable\"} 2"));
    }
}
