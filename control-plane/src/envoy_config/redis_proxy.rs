//! `ferry envoy-config --redis-proxy-port`: an extra listener with Envoy's redis_proxy network
//! filter (envoy/redis_proxy_listener.yaml.tmpl) and the cluster of Redis servers behind it
//! (envoy/redis_proxy_cluster.yaml.tmpl), so that the reader reaches Redis through Envoy.

use super::upstream::Upstream;
use super::{render_template, EnvoyConfigError};

const LISTENER_TEMPLATE: &str = include_str!("../../../envoy/redis_proxy_listener.yaml.tmpl");
const CLUSTER_TEMPLATE: &str = include_str!("../../../envoy/redis_proxy_cluster.yaml.tmpl");

/// What the redis_proxy listener fronts.
#[derive(Clone, Debug)]
pub struct RedisProxyOptions {
    /// The listener's port on 127.0.0.1: the reader's `--redis redis://127.0.0.1:PORT`.
    pub listen_port: u16,
    /// Standalone servers (shards), or the seeds of a Redis Cluster.
    pub upstreams: Vec<Upstream>,
    /// The upstreams are seeds of a Redis Cluster (`envoy.clusters.redis`).
    pub redis_cluster: bool,
}

/// How the cluster finds its hosts, indented as a cluster's fields.
fn cluster_kind(opts: &RedisProxyOptions) -> String {
    if opts.redis_cluster {
        "    # A Redis Cluster (`--redis-cluster`): the upstreams are seeds. Envoy reads the slot map\n\
         \x20   # (CLUSTER SLOTS) every 5 s and at once after a MOVED, and sends each key to the\n\
         \x20   # master that owns its slot.\n\
         \x20   lb_policy: CLUSTER_PROVIDED\n\
         \x20   cluster_type:\n\
         \x20     name: envoy.clusters.redis\n\
         \x20     typed_config:\n\
         \x20       \"@type\": type.googleapis.com/envoy.extensions.clusters.redis.v3.RedisClusterConfig\n\
         \x20       cluster_refresh_rate: 5s\n\
         \x20       cluster_refresh_timeout: 3s"
            .to_owned()
    } else {
        // One cluster type for all hosts: a name among them makes it STRICT_DNS (which takes IP
        // literals too), every address of a name being a shard of its own.
        let kind = if opts.upstreams.iter().any(Upstream::is_name) {
            "STRICT_DNS"
        } else {
            "STATIC"
        };
        format!(
            "    # Standalone Redis servers. Several are shards, not replicas: Envoy spreads the keys\n\
             \x20   # over them by consistent hash (MAGLEV), so vectors must be written through this same\n\
             \x20   # proxy (`ferry materialize --redis redis://127.0.0.1:PORT`).\n\
             \x20   type: {kind}\n\
             \x20   lb_policy: MAGLEV"
        )
    }
}

/// The listener (to go under `listeners:`) and the cluster (under `clusters:`).
pub fn render(opts: &RedisProxyOptions) -> Result<(String, String), EnvoyConfigError> {
    if opts.upstreams.is_empty() {
        return Err(EnvoyConfigError::NoRedisUpstream);
    }
    let listener = render_template(
        LISTENER_TEMPLATE,
        &[("REDIS_PROXY_PORT", opts.listen_port.to_string())],
    )?;
    let endpoints: String = opts.upstreams.iter().map(|u| u.lb_endpoint(8)).collect();
    let cluster = render_template(
        CLUSTER_TEMPLATE,
        &[
            ("REDIS_CLUSTER_KIND", cluster_kind(opts)),
            // The template's own line break follows the placeholder.
            ("REDIS_ENDPOINTS", endpoints.trim_end().to_owned()),
        ],
    )?;
    Ok((trim_newline(listener), trim_newline(cluster)))
}

/// Without its last line break: the placeholder's line supplies one.
fn trim_newline(mut s: String) -> String {
    if s.ends_with('\n') {
        s.pop();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(upstreams: &[&str], redis_cluster: bool) -> RedisProxyOptions {
        RedisProxyOptions {
            listen_port: 6380,
            upstreams: upstreams.iter().map(|u| u.parse().unwrap()).collect(),
            redis_cluster,
        }
    }

    #[test]
    fn standalone_servers_are_shards_behind_one_listener() {
        let (listener, cluster) = render(&opts(&["127.0.0.1:6379"], false)).unwrap();
        assert!(listener.starts_with("  # `--redis-proxy-port`"));
        assert!(listener.contains("socket_address: {address: 127.0.0.1, port_value: 6380}"));
        assert!(listener.contains("catch_all_route: {cluster: ferry_redis}"));
        assert!(listener.contains("op_timeout: 1s"));
        assert!(cluster.contains("    type: STATIC\n    lb_policy: MAGLEV\n"));
        assert!(cluster.ends_with(
            "      - lb_endpoints:\n        - endpoint:\n            address:\n              \
             socket_address: {address: 127.0.0.1, port_value: 6379}"
        ));
        let (_, cluster) = render(&opts(&["10.0.0.1:6379", "redis-b:6379"], false)).unwrap();
        assert!(cluster.contains("    type: STRICT_DNS\n"));
        assert_eq!(cluster.matches("- endpoint:").count(), 2);
    }

    #[test]
    fn a_redis_cluster_is_discovered_from_its_seeds() {
        let (_, cluster) = render(&opts(&["redis-0:6379", "redis-1:6379"], true)).unwrap();
        assert!(cluster.contains("lb_policy: CLUSTER_PROVIDED"));
        assert!(cluster.contains("name: envoy.clusters.redis"));
        assert!(!cluster.contains("    type:"));
        assert!(matches!(
            render(&opts(&[], false)),
            Err(EnvoyConfigError::NoRedisUpstream)
        ));
    }
}
