//! A Redis Cluster of three masters on loopback, made with `redis-cli --cluster create`, each
//! node a [`RedisServer`] (killed on drop).

use std::process::Command;
use std::time::{Duration, Instant};

use super::RedisServer;
use crate::ports::free_port;

/// Three masters, no replicas, every slot covered.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the nodes, joins them and returns once every node reports `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                // The bus port is given: the default (port + 10000) may be taken or past 65535.
                let bus = free_port().to_string();
                RedisServer::start_args(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-port",
                    &bus,
                ])
            })
            .collect();
        let mut create = Command::new(cli());
        create.args(["--cluster", "create"]);
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let out = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli (install redis-tools): {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = RedisCluster { nodes };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cluster.nodes.iter().all(|n| cluster_ok(n.port)) {
            assert!(
                Instant::now() < deadline,
                "the cluster did not reach cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// The seed URLs, comma-separated (what `--redis` takes with `--redis-cluster`).
    pub fn urls(&self) -> String {
        let urls: Vec<String> = self.nodes.iter().map(RedisServer::url).collect();
        urls.join(",")
    }

    /// `redis-cli -p PORT ARGS...` on node `i`, its output.
    pub fn cli(&self, i: usize, args: &[&str]) -> String {
        let out = Command::new(cli())
            .args(["-p", &self.nodes[i].port.to_string()])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli: {e}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// How many times node `i` ran `command` (from `INFO commandstats`), e.g. "mget".
    pub fn calls(&self, i: usize, command: &str) -> u64 {
        let prefix = format!("cmdstat_{command}:calls=");
        self.cli(i, &["INFO", "commandstats"])
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().unwrap())
    }

    /// How many keys node `i` holds.
    pub fn keys(&self, i: usize) -> u64 {
        self.cli(i, &["DBSIZE"]).trim().parse().unwrap_or(0)
    }
}

fn cli() -> String {
    std::env::var("FERRY_REDIS_CLI").unwrap_or_else(|_| "redis-cli".into())
}

fn cluster_ok(port: u16) -> bool {
    Command::new(cli())
        .args(["-p", &port.to_string(), "CLUSTER", "INFO"])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok"))
}
