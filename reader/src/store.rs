//! Redis access: one multiplexed connection shared by every request that reconnects by itself, a
//! deadline on every call, errors classified as transient or not, and an up/down state that is
//! logged when it flips rather than on every failed request.

use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::time::Instant;

use crate::error::ReaderError;
use crate::metrics::{Metrics, RedisErrorKind};

/// Health states; `UNKNOWN` only until the first call.
const UNKNOWN: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

/// Connecting may take longer than one request's budget (a remote Redis, a TLS handshake);
/// requests stop waiting at their deadline while the attempt carries on.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The reader's view of Redis.
#[derive(Debug)]
pub struct Store {
    /// Multiplexed connection used by all requests at once (a clone is an `Arc` clone). After an
    /// I/O error it reconnects in the background: no per-request connection, no pool.
    conn: ConnectionManager,
    /// Budget of one call, including any wait for a (re)connection.
    timeout: Duration,
    /// Where Redis lives, for logs (the URL itself may carry a password).
    addr: String,
    /// `UNKNOWN`, `UP` or `DOWN`, as last observed; only changes are logged.
    state: AtomicU8,
    /// Where failed calls are counted.
    metrics: Arc<Metrics>,
}

impl Store {
    /// Prepares the connection without connecting: the reader starts (and answers 503) while
    /// Redis is away, and connects on first use.
    pub fn new(url: &str, timeout: Duration, metrics: Arc<Metrics>) -> Result<Self, RedisError> {
        let client = redis::Client::open(url)?;
        let addr = client.get_connection_info().addr().to_string();
        let config = ConnectionManagerConfig::new()
            // One attempt per reconnect: while Redis is down each failed call fails fast (503)
            // and the next call tries again, instead of requests queueing behind a backoff.
            .set_number_of_retries(0)
            .set_connection_timeout(Some(CONNECT_TIMEOUT.max(timeout)))
            // The deadline is enforced per call below; a second timer per command buys nothing.
            .set_response_timeout(None);
        let conn = ConnectionManager::new_lazy_with_config(client, config)?;
        Ok(Self {
            conn,
            timeout,
            addr,
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
        match self.call(command).await? {
            Value::Array(values) => Ok(values),
            other => Err(ReaderError::Internal(format!(
                "redis answered MGET with {other:?} instead of an array"
            ))),
        }
    }

    /// `PING`, for `/healthz` and the startup check.
    pub async fn ping(&self) -> Result<(), ReaderError> {
        self.call(&redis::cmd("PING")).await.map(drop)
    }

    /// One command under the deadline; records the outcome in the health state and metrics.
    async fn call(&self, command: &redis::Cmd) -> Result<Value, ReaderError> {
        let deadline = Instant::now() + self.timeout;
        let mut conn = self.conn.clone();
        let outcome = tokio::time::timeout_at(deadline, async {
            match command.query_async::<Value>(&mut conn).await {
                // A connection that died while idle is only noticed on use, and the manager is
                // already reconnecting; one retry within the same deadline lets the first request
                // after Redis comes back succeed. Only read-only commands come through here.
                Err(e) if e.is_io_error() && !e.is_timeout() => {
                    command.query_async::<Value>(&mut conn).await
                }
                other => other,
            }
        })
        .await;
        match outcome {
            Ok(Ok(value)) => {
                self.mark_up();
                Ok(value)
            }
            Ok(Err(e)) => {
                let kind = classify(&e);
                self.mark_down(kind, &e.to_string());
                Err(match kind {
                    RedisErrorKind::Timeout => ReaderError::RedisTimeout(self.timeout_ms()),
                    RedisErrorKind::Unavailable | RedisErrorKind::Other => {
                        ReaderError::RedisUnavailable(e.to_string())
                    }
                })
            }
            Err(_elapsed) => {
                self.mark_down(RedisErrorKind::Timeout, "deadline passed");
                Err(ReaderError::RedisTimeout(self.timeout_ms()))
            }
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
        let store = Store::new(
            "redis://127.0.0.1:1",
            Duration::from_millis(500),
            metrics.clone(),
        )
        .unwrap();
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

    #[test]
    fn a_malformed_url_is_refused_at_startup() {
        assert!(Store::new("http://x", Duration::from_millis(1), Arc::default()).is_err());
    }
}
