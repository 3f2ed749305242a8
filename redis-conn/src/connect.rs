//! Connections to a [`Target`]: one multiplexed, self-reconnecting connection to a single Redis
//! (redis-rs `ConnectionManager`) or a Cluster connection (redis-rs `cluster-async`, which keeps
//! one multiplexed connection per node and splits a multi-key command by hash slot). Both get
//! TCP keepalive, TLS with the system's roots or a private CA, and the target's credentials.

use std::fmt;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::{socket2, TcpSettings};
use redis::{
    Client, Cmd, ConnectionInfo, Pipeline, RedisFuture, RedisResult, TlsCertificates, Value,
};

use crate::{SetupError, Target};

/// An idle connection is probed after this long without traffic...
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// ...every this often...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// ...and given up after this many unanswered probes: a Redis host that vanished (crash,
/// partition) is noticed in about 25 s instead of the kernel's default two hours.
const KEEPALIVE_PROBES: u32 = 3;
/// Data written but not acknowledged for this long kills the connection (`TCP_USER_TIMEOUT`):
/// keepalive only probes idle connections, and a busy one to a vanished host would otherwise
/// retransmit for ~15 minutes.
const USER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to wait for a connection and for each answer.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// One connection attempt, TLS handshake and AUTH included.
    pub connect: Duration,
    /// One command's answer; `None` waits as long as the connection lives.
    pub response: Option<Duration>,
}

/// A connection to one Redis or to a Redis Cluster. A clone shares the underlying connections.
#[derive(Clone)]
pub enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Single(_) => "Connection::Single",
            Self::Cluster(_) => "Connection::Cluster",
        })
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

impl Target {
    /// A connection that connects on first use (and reconnects after an I/O error), so that a
    /// service can start while Redis is away. Fails only on a TLS setup problem.
    pub fn connect_lazy(&self, timeouts: Timeouts) -> Result<Connection, SetupError> {
        let setup = |e: redis::RedisError| SetupError::Tls(e.to_string());
        if self.cluster {
            let client = self.cluster_client(timeouts).map_err(setup)?;
            let config = cluster_config(timeouts);
            Ok(Connection::Cluster(
                client.get_pending_async_connection_with_config(config),
            ))
        } else {
            let client = self.single_client().map_err(setup)?;
            let manager = ConnectionManager::new_lazy_with_config(client, manager_config(timeouts))
                .map_err(setup)?;
            Ok(Connection::Single(manager))
        }
    }

    /// A connection established now: the caller learns at once whether Redis is there and
    /// accepts the credentials.
    pub async fn connect(&self, timeouts: Timeouts) -> RedisResult<Connection> {
        if self.cluster {
            let client = self.cluster_client(timeouts)?;
            let connection = client
                .get_async_connection_with_config(cluster_config(timeouts))
                .await?;
            Ok(Connection::Cluster(connection))
        } else {
            let client = self.single_client()?;
            let manager =
                ConnectionManager::new_with_config(client, manager_config(timeouts)).await?;
            Ok(Connection::Single(manager))
        }
    }

    /// A Pub/Sub connection (its own, not shared): to the first node of a Cluster, which
    /// receives what is published on any node.
    pub async fn pubsub(&self) -> RedisResult<redis::aio::PubSub> {
        self.single_client()?.get_async_pubsub().await
    }

    fn single_client(&self) -> RedisResult<Client> {
        let node = self.nodes.first().cloned().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no Redis node"))
        })?;
        let node = with_tcp_settings(node);
        if self.is_tls() {
            install_crypto_provider();
        }
        match self.certificates() {
            Some(certs) => Client::build_with_tls(node, certs),
            None => Client::open(node),
        }
    }

    fn cluster_client(&self, timeouts: Timeouts) -> RedisResult<ClusterClient> {
        if self.is_tls() {
            install_crypto_provider();
        }
        let mut builder = ClusterClientBuilder::new(self.nodes.clone())
            .tcp_settings(tcp_settings())
            .connection_timeout(timeouts.connect);
        if let Some(response) = timeouts.response {
            builder = builder.response_timeout(response);
        }
        if let Some(certs) = self.certificates() {
            builder = builder.certs(certs);
        }
        builder.build()
    }

    fn certificates(&self) -> Option<TlsCertificates> {
        self.ca.as_ref().map(|ca| TlsCertificates {
            client_tls: None,
            root_cert: Some(ca.clone()),
        })
    }
}

fn manager_config(timeouts: Timeouts) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        // One attempt per reconnect: while Redis is down each call fails fast and the next call
        // tries again, instead of callers queueing behind a backoff.
        .set_number_of_retries(0)
        .set_connection_timeout(Some(timeouts.connect))
        .set_response_timeout(timeouts.response)
}

fn cluster_config(timeouts: Timeouts) -> ClusterConfig {
    let config = ClusterConfig::new().set_connection_timeout(timeouts.connect);
    match timeouts.response {
        Some(response) => config.set_response_timeout(response),
        None => config,
    }
}

fn with_tcp_settings(node: ConnectionInfo) -> ConnectionInfo {
    node.set_tcp_settings(tcp_settings())
}

fn tcp_settings() -> TcpSettings {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL);
    #[cfg(target_os = "linux")]
    let keepalive = keepalive.with_retries(KEEPALIVE_PROBES);
    // Commands are small and answered one by one: Nagle would only hold them back.
    let settings = TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive);
    #[cfg(target_os = "linux")]
    let settings = settings.set_user_timeout(USER_TIMEOUT);
    settings
}

/// redis-rs builds its rustls config from the process-wide crypto provider; ring is the one this
/// build carries. Installing twice is harmless (the second call reports the first one).
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
