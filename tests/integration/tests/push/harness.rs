//! The write stack of the push tests: the example stack (Redis, reader, model, static Envoy),
//! `ferry serve` with a write token over the same Redis, and a second Envoy whose bootstrap
//! routes Feast's write endpoints to it (`ferry envoy-config --write-address`).

use std::process::Command;

use ferry_integration_tests::control_plane::{READ_TOKEN, TOKEN};
use ferry_integration_tests::http::{Conn, Response};
use ferry_integration_tests::resp::{command as resp, line};
use ferry_integration_tests::{
    bin, free_port, http, run, start_envoy, ControlPlane, Options, Proc, Stack,
};
use ferry_protos::v1::StoredVector;
use prost::Message as _;

pub use ferry_integration_tests::control_plane::WRITE_TOKEN;
/// The example's push sources, which the tests push to.
pub const PUSH_SOURCES: &str = "\npush_sources:\n  - {name: profile_push, views: [user_profile]}\n  - {name: activity_push, views: [transactions, user_embedding]}\n";

pub struct WriteStack {
    pub stack: Stack,
    pub cp: ControlPlane,
    /// The Envoy with the write routes (kept running while the stack lives).
    _envoy: Proc,
    pub port: u16,
    /// Redis nodes to read vectors from (one, or a Cluster's three).
    pub redis_ports: Vec<u16>,
}

impl WriteStack {
    pub fn start(entities: usize, cluster: bool) -> WriteStack {
        let opts = Options {
            entities: Some(entities),
            ..Options::default()
        };
        let with_push = |y: String| {
            assert!(
                y.contains(PUSH_SOURCES),
                "the example's push_sources changed: update push/harness.rs"
            );
            y
        };
        let stack = if cluster {
            Stack::start_on_redis_cluster_edited(opts, with_push)
        } else {
            Stack::start_edited(opts, with_push)
        };
        let (redis_flags, redis_ports) = match &stack.redis_cluster {
            Some(c) => (
                vec!["--redis".to_owned(), c.urls(), "--redis-cluster".to_owned()],
                c.nodes.iter().map(|n| n.port).collect(),
            ),
            None => (
                vec!["--redis".to_owned(), stack.redis.url()],
                vec![stack.redis.port],
            ),
        };
        let mut args = vec!["--write-token", WRITE_TOKEN];
        args.extend(redis_flags.iter().map(String::as_str));
        let cp = ControlPlane::start_with_args(stack.dir.path(), &stack.repo, &args);
        let (port, admin) = (free_port(), free_port());
        let config = stack.dir.path().join("envoy-write.yaml");
        run(Command::new(bin("ferry"))
            .arg("envoy-config")
            .arg(&stack.repo)
            .args(stack.runtime.flags())
            .args(["--listen-port", &port.to_string()])
            .args(["--admin-port", &admin.to_string()])
            .args(["--reader-port", &stack.reader_port.to_string()])
            .args(["--model-port", &stack.model_port.to_string()])
            .args(["--write-address", &format!("127.0.0.1:{}", cp.http_port)])
            .arg("-o")
            .arg(&config));
        let mut envoy = start_envoy(stack.dir.path(), &config, "envoy-write");
        envoy.wait_ready(|| http::get_ok(admin, "/ready"), "write envoy /ready");
        WriteStack {
            stack,
            cp,
            _envoy: envoy,
            port,
            redis_ports,
        }
    }

    /// POST a write through Envoy with `token` (None: no credential).
    pub async fn write(
        &self,
        path: &str,
        token: Option<&str>,
        body: &serde_json::Value,
    ) -> Response {
        self.write_raw(path, token, body.to_string()).await
    }

    pub async fn write_raw(&self, path: &str, token: Option<&str>, body: String) -> Response {
        let auth = token.map(|t| format!("Bearer {t}"));
        let headers: Vec<(&str, &str)> =
            auth.iter().map(|a| ("authorization", a.as_str())).collect();
        Conn::open(self.port)
            .await
            .send("POST", path, &headers, body)
            .await
    }

    /// The features the model received for `user` through the strict KServe v1 route.
    pub async fn served(&self, user: &str) -> serde_json::Value {
        let body = serde_json::json!({"instances": [{"user_id": user}]}).to_string();
        let r = Conn::open(self.port)
            .await
            .send("POST", "/v1/models/fraud-lenient:predict", &[], body)
            .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        r.json()["instances"][0].clone()
    }

    /// The vectors of `service` stored for `entity`, under every fingerprint (key, vector).
    pub fn vectors(&self, service: &str, entity: &str) -> Vec<(String, StoredVector)> {
        let pattern = format!("ferry:banking:{service}:*:{entity}");
        let mut out = Vec::new();
        for &port in &self.redis_ports {
            for key in keys(port, &pattern) {
                if let Some(bytes) = get(port, &key) {
                    out.push((
                        key,
                        StoredVector::decode(bytes.as_slice()).expect("a StoredVector"),
                    ));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Every key and value in Redis, to show a refused write changed nothing.
    pub fn dump(&self) -> Vec<(String, Vec<u8>)> {
        let mut out: Vec<(String, Vec<u8>)> = self
            .redis_ports
            .iter()
            .flat_map(|&p| keys(p, "*").into_iter().map(move |k| (p, k)))
            .filter_map(|(p, k)| get(p, &k).map(|v| (k, v)))
            .collect();
        out.sort();
        out
    }
}

/// Tokens of the write stack's control plane, for the refusal tests.
pub const PUSH_TOKEN: &str = TOKEN;
pub const READ: &str = READ_TOKEN;

/// GET: the bytes, or None (absent, or on another Cluster node: MOVED).
fn get(port: u16, key: &str) -> Option<Vec<u8>> {
    let out = resp(port, &[b"GET", key.as_bytes()]);
    let (head, rest) = line(&out);
    let n: i64 = std::str::from_utf8(head.strip_prefix(b"$")?)
        .ok()?
        .parse()
        .ok()?;
    (n >= 0).then(|| rest[..n as usize].to_vec())
}

fn keys(port: u16, pattern: &str) -> Vec<String> {
    let out = resp(port, &[b"KEYS", pattern.as_bytes()]);
    let (head, mut rest) = line(&out);
    let n: usize = std::str::from_utf8(&head[1..]).unwrap().parse().unwrap();
    let mut keys = Vec::with_capacity(n);
    for _ in 0..n {
        let (len, after) = line(rest);
        let len: usize = std::str::from_utf8(&len[1..]).unwrap().parse().unwrap();
        keys.push(String::from_utf8_lossy(&after[..len]).into_owned());
        rest = &after[len + 2..];
    }
    keys
}
