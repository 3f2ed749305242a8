//! The reader's bounds on the real binary (spawned, so its memory and file descriptors are its
//! own, read from /proc): #22's memory bomb and its variants near the limits are refused while
//! normal lookups keep succeeding, the peak RSS stays within 64 MiB of idle, and a flood of
//! silent connections is capped and reaped.

// The whole file is test code (helpers included), for clippy's allow-panic-in-tests.
#![cfg(test)]

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_protos::v1::{FeastJoinKey, FeastLayout, FeastView, Lookup, VectorRequest};
use ferry_protos::{redis_key, READER_PATH};
use ferry_test_support::ports::free_port;
use hyper::StatusCode;
use support::*;

/// The reader binary, killed when dropped.
struct Spawned {
    child: Child,
    addr: SocketAddr,
}

impl Spawned {
    fn start(redis: &RedisServer, extra: &[&str]) -> Self {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut args = vec![
            "--listen".to_string(),
            addr.to_string(),
            "--redis".into(),
            redis.url(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let child = Command::new(env!("CARGO_BIN_EXE_ferry-reader"))
            .args(&args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        Self { child, addr }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// A line of /proc/PID/status, in KiB (VmRSS, VmHWM).
    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    /// Open file descriptors (sockets included).
    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .unwrap()
            .count()
    }

    /// Waits until `/healthz` answers 200 (listening, Redis reachable).
    async fn ready(&self, client: &HttpClient) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let request = hyper::Request::get(self.url("/healthz"))
                .body(http_body_util::Full::default())
                .unwrap();
            if let Ok(Ok(r)) =
                tokio::time::timeout(Duration::from_secs(1), client.request(request)).await
            {
                if r.status() == StatusCode::OK {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "the reader did not become ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn normal() -> VectorRequest {
    request("bank", &[("scoring", 0xab, &["u1", "u2"])])
}

async fn assert_normal(client: &HttpClient, reader: &Spawned) {
    let answer = post(client, &reader.url(READER_PATH), &normal()).await;
    assert_eq!(answer.vectors().results[0].vectors[0], b"vec-u1".to_vec());
}

/// A Feast lookup of `keys` entities, `views` views of `features` features each; view names
/// of `name_len` characters.
fn feast(keys: usize, views: usize, features: usize, name_len: usize) -> VectorRequest {
    let view = FeastView {
        timestamp_field: format!("_ts:{}", "v".repeat(name_len)).into_bytes(),
        feature_fields: vec![vec![1, 2, 3, 4]; features],
        ..Default::default()
    };
    let entity_keys = (0..keys).map(|i| format!("e{i}")).collect();
    VectorRequest {
        project: "bank".into(),
        lookups: vec![Lookup {
            service: "scoring".into(),
            fingerprint: 1,
            entity_keys,
            feast: Some(FeastLayout {
                project: "bank".into(),
                join_keys: vec![FeastJoinKey {
                    name: "user_id".into(),
                    int64: false,
                }],
                views: vec![view; views],
                ..Default::default()
            }),
        }],
    }
}

/// #22's bomb: 50 keys × 1,000,000 empty field names, a 2 MB body.
fn bomb() -> VectorRequest {
    let mut bomb = feast(50, 1, 0, 1);
    bomb.lookups[0].feast.as_mut().unwrap().views[0].feature_fields = vec![Vec::new(); 1_000_000];
    bomb
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_bomb_is_refused_while_lookups_keep_succeeding_and_memory_stays_bounded() {
    let redis = RedisServer::start();
    let seeded = [(redis_key("bank", "scoring", 0xab, "u1"), b"vec-u1".to_vec())];
    set(&redis, &seeded).await;
    // A generous Redis budget: the largest allowed Feast call below is packed by a debug build.
    let reader = Spawned::start(&redis, &["--redis-timeout-ms", "2000"]);
    let client = http1_client();
    reader.ready(&client).await;
    for _ in 0..20 {
        assert_normal(&client, &reader).await;
    }
    let idle_kib = reader.status_kib("VmHWM:");

    // Normal lookups on their own connection all along.
    let stop = Arc::new(AtomicBool::new(false));
    let background = {
        let (stop, url) = (stop.clone(), reader.url(READER_PATH));
        tokio::spawn(async move {
            let client = http1_client();
            let mut statuses = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                statuses.push(post(&client, &url, &normal()).await.status);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            statuses
        })
    };

    let refused: [(VectorRequest, &str); 5] = [
        (bomb(), "feast_fields_per_entity"),
        (feast(10_000, 1, 26, 1), "feast_fields_per_call"),
        (feast(121, 256, 1, 128), "feast_name_bytes_per_call"),
        (feast(1, 257, 1, 1), "feast_views"),
        (
            VectorRequest {
                project: "bank".into(),
                lookups: vec![Lookup::default(); 10_001],
            },
            "lookups_per_call",
        ),
    ];
    for _ in 0..3 {
        for (request, limit) in &refused {
            let answer = post(&client, &reader.url(READER_PATH), request).await;
            assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
            let json = answer.json();
            assert_eq!(json["error"], "lookup_too_large");
            assert_eq!(json["limit"], *limit, "{json}");
        }
    }
    let refused_kib = reader.status_kib("VmHWM:");
    // Just within the limits: answered (Feast has nothing for these entities).
    for request in [feast(10_000, 1, 25, 1), feast(120, 256, 1, 128)] {
        let answer = post(&client, &reader.url(READER_PATH), &request).await;
        assert_eq!(
            answer.vectors().results[0].vectors.len(),
            request.lookups[0].entity_keys.len()
        );
    }
    let peak_kib = reader.status_kib("VmHWM:");

    stop.store(true, Ordering::Relaxed);
    let statuses = background.await.unwrap();
    assert!(statuses.len() >= 10, "only {} lookups ran", statuses.len());
    assert!(
        statuses.iter().all(|s| *s == StatusCode::OK),
        "{statuses:?}"
    );
    assert_normal(&client, &reader).await;
    eprintln!(
        "reader VmHWM: idle {} KiB, after the refused bombs {} KiB, after the largest \
         allowed Feast calls {} KiB; {} normal lookups during, all 200",
        idle_kib,
        refused_kib,
        peak_kib,
        statuses.len()
    );
    assert!(
        peak_kib <= idle_kib + 64 * 1024,
        "peak {peak_kib} KiB is over idle {idle_kib} KiB + 64 MiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_connections_is_capped_and_reaped() {
    const CAP: usize = 32;
    let redis = RedisServer::start();
    let seeded = [(redis_key("bank", "scoring", 0xab, "u1"), b"vec-u1".to_vec())];
    set(&redis, &seeded).await;
    let cap = CAP.to_string();
    let reader = Spawned::start(
        &redis,
        &["--max-connections", &cap, "--idle-timeout-ms", "300"],
    );
    let client = http1_client();
    reader.ready(&client).await;
    let idle_fds = reader.fds();

    // Ten times the cap, opened and held silent (they sit in the accept queue past the cap).
    let mut flood = Vec::new();
    for _ in 0..10 * CAP {
        flood.push(tokio::net::TcpStream::connect(reader.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let flooded_fds = reader.fds();

    // A lookup on a new connection is answered once the silent ones ahead of it are reaped.
    let started = Instant::now();
    let fresh = http1_client();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        post(&fresh, &reader.url(READER_PATH), &normal()),
    )
    .await
    .expect("no answer within 10 s behind the flood");
    assert_eq!(answer.vectors().results[0].vectors[0], b"vec-u1".to_vec());
    let waited = started.elapsed();
    let peak_fds = flooded_fds.max(reader.fds());
    eprintln!(
        "fds: idle {idle_fds}, flooded {flooded_fds}, peak {peak_fds}; lookup behind {} \
         silent connections answered after {waited:?}",
        flood.len()
    );
    assert!(
        peak_fds <= idle_fds + CAP + 2,
        "{peak_fds} fds with a cap of {CAP} (idle: {idle_fds})"
    );
    drop(flood);
}
