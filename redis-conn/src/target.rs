//! The Redis flags every Ferry binary shares, and their check into a [`Target`]: every problem
//! (a malformed URL, an unreadable CA file, a CA file without TLS) is found at startup, named,
//! and reported without the password.

use std::fmt;
use std::path::PathBuf;

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::redact;

/// Where Redis is and how to authenticate, from flags or environment.
#[derive(Clone, clap::Args)]
pub struct RedisArgs {
    /// Redis URL: redis://[USER:PASSWORD@]HOST:PORT[/DB], or rediss:// for TLS. With
    /// --redis-cluster: the seed nodes of the Cluster, one URL or several separated by commas.
    #[arg(
        long = "redis",
        env = "FERRY_REDIS",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub url: String,

    /// The URL names Redis Cluster nodes: the slots are discovered from them, and a batch whose
    /// keys live on several shards goes to all of them in parallel.
    #[arg(long = "redis-cluster", env = "FERRY_REDIS_CLUSTER")]
    pub cluster: bool,

    /// PEM file of the CA that signed Redis's TLS certificate (a private CA), instead of the
    /// system's trusted roots. Needs a rediss:// URL.
    #[arg(
        long = "redis-ca-file",
        env = "FERRY_REDIS_CA_FILE",
        value_name = "PEM"
    )]
    pub ca_file: Option<PathBuf>,

    /// Redis ACL user (overrides the URL's).
    #[arg(long = "redis-username", env = "FERRY_REDIS_USERNAME")]
    pub username: Option<String>,

    /// Redis password (overrides the URL's). Prefer the environment variable: a flag is
    /// visible to every user of the machine in the process list.
    #[arg(
        long = "redis-password",
        env = "FERRY_REDIS_PASSWORD",
        hide_env_values = true
    )]
    pub password: Option<String>,
}

/// The password never reaches a log through `{:?}` either.
impl fmt::Debug for RedisArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisArgs")
            .field("url", &redact(&self.url))
            .field("cluster", &self.cluster)
            .field("ca_file", &self.ca_file)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl RedisArgs {
    /// The defaults (`redis://127.0.0.1:6379`, one Redis, no TLS, no credentials) pointed at
    /// another URL.
    pub fn with_url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            cluster: false,
            ca_file: None,
            username: None,
            password: None,
        }
    }

    /// Checks the flags and reads the CA file.
    pub fn target(&self) -> Result<Target, SetupError> {
        let urls: Vec<&str> = self
            .url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .collect();
        if urls.is_empty() {
            return Err(SetupError::NoUrl);
        }
        if urls.len() > 1 && !self.cluster {
            return Err(SetupError::SeveralUrls(redact(&self.url)));
        }
        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            let info = url.into_connection_info().map_err(|e| SetupError::Url {
                url: redact(url),
                reason: e.to_string(),
            })?;
            nodes.push(self.with_credentials(info));
        }
        let ca = match &self.ca_file {
            None => None,
            Some(path) => Some(std::fs::read(path).map_err(|e| SetupError::CaFile {
                path: path.clone(),
                reason: e.to_string(),
            })?),
        };
        let target = Target {
            nodes,
            cluster: self.cluster,
            ca,
        };
        if target.ca.is_some() && !target.is_tls() {
            return Err(SetupError::CaWithoutTls(target.to_string()));
        }
        Ok(target)
    }

    fn with_credentials(&self, info: ConnectionInfo) -> ConnectionInfo {
        let mut redis = info.redis_settings().clone();
        if let Some(username) = &self.username {
            redis = redis.set_username(username);
        }
        if let Some(password) = &self.password {
            redis = redis.set_password(password);
        }
        info.set_redis_settings(redis)
    }
}

/// A checked Redis location. `Display` shows scheme, hosts and ports, never credentials.
#[derive(Clone, Debug)]
pub struct Target {
    /// The one Redis, or the Cluster's seed nodes; credentials included.
    pub(crate) nodes: Vec<ConnectionInfo>,
    /// Whether `nodes` are Cluster seeds.
    pub(crate) cluster: bool,
    /// The private CA (PEM) from `--redis-ca-file`.
    pub(crate) ca: Option<Vec<u8>>,
}

impl Target {
    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Whether connections use TLS (`rediss://`).
    pub fn is_tls(&self) -> bool {
        self.nodes
            .iter()
            .any(|n| matches!(n.addr(), redis::ConnectionAddr::TcpTls { .. }))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cluster {
            f.write_str("cluster ")?;
        }
        let scheme = if self.is_tls() { "rediss" } else { "redis" };
        for (i, node) in self.nodes.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{scheme}://{}", node.addr())?;
        }
        Ok(())
    }
}

/// Why the Redis flags cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("--redis is empty")]
    NoUrl,
    #[error("--redis {0} names several nodes: that is a Redis Cluster, add --redis-cluster")]
    SeveralUrls(String),
    #[error("invalid redis URL {url}: {reason}")]
    Url { url: String, reason: String },
    #[error("--redis-ca-file {}: {reason}", path.display())]
    CaFile { path: PathBuf, reason: String },
    #[error("--redis-ca-file is set but {0} is not TLS: use rediss://")]
    CaWithoutTls(String),
    #[error("redis TLS setup: {0}")]
    Tls(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str) -> RedisArgs {
        RedisArgs::with_url(url)
    }

    #[test]
    fn one_url_is_one_redis_and_shows_without_password() {
        let target = args("redis://:s3cret@127.0.0.1:6390/2").target().unwrap();
        assert!(!target.is_cluster() && !target.is_tls());
        assert_eq!(target.to_string(), "redis://127.0.0.1:6390");
        assert!(!format!("{target:?} {:?}", args("redis://:s3cret@h:1")).contains("s3cret"));
    }

    #[test]
    fn several_urls_need_cluster() {
        let err = args("redis://a:1,redis://b:2").target().unwrap_err();
        assert!(err.to_string().contains("--redis-cluster"), "{err}");
        let mut cluster = args("redis://a:1, redis://b:2");
        cluster.cluster = true;
        let target = cluster.target().unwrap();
        assert_eq!(target.to_string(), "cluster redis://a:1,redis://b:2");
    }

    #[test]
    fn environment_credentials_override_the_url() {
        let mut a = args("redis://olduser:oldpass@h:1");
        a.username = Some("ferry".into());
        a.password = Some("newpass".into());
        let target = a.target().unwrap();
        let redis = target.nodes[0].redis_settings();
        assert_eq!(redis.username(), Some("ferry"));
        assert_eq!(redis.password(), Some("newpass"));
    }

    #[test]
    fn bad_flags_are_named_without_the_password() {
        let err = args("http://u:s3cret@h:1").target().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("invalid redis URL http://u:***@h:1"),
            "{err}"
        );
        let mut a = args("rediss://h:1");
        a.ca_file = Some("/nonexistent/ca.pem".into());
        let err = a.target().unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
        let mut a = args("redis://h:1");
        a.ca_file = Some(std::env::current_exe().unwrap());
        let err = a.target().unwrap_err();
        assert!(err.to_string().contains("use rediss://"), "{err}");
        assert!(matches!(args(" , ").target(), Err(SetupError::NoUrl)));
    }

    #[test]
    fn rediss_is_tls() {
        assert!(args("rediss://h:1").target().unwrap().is_tls());
    }
}
