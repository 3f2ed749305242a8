//! The concurrency check of the write path, sized by [`Sizes`] (part 2 runs it at 8 writers ×
//! 100 entities × 30 s): writers push single rows of random entities and views with random
//! event times through Envoy, every feature of a row encoding the row's id, while readers
//! enrich through Envoy and check that each view they see holds one row (never features of two
//! rows); afterwards every stored vector holds, per view, the row with the latest event time.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferry_integration_tests::http::Conn;
use ferry_protos::v1::{value::Kind, StoredVector};
use serde_json::{json, Value as Json};

use super::harness::{WriteStack, WRITE_TOKEN};

#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub writers: usize,
    pub entities: usize,
    pub seconds: u64,
    pub readers: usize,
}

impl Sizes {
    pub const SMALL: Sizes = Sizes {
        writers: 4,
        entities: 20,
        seconds: 3,
        readers: 2,
    };

    /// Issue #23's size: 8 writers × 100 entities × 3 views for 30 s.
    pub const FULL: Sizes = Sizes {
        writers: 8,
        entities: 100,
        seconds: 30,
        readers: 2,
    };

    /// FULL when `FERRY_PUSH_FULL=1` (`make bench`), else SMALL (`make test`).
    pub fn from_env() -> Sizes {
        match std::env::var("FERRY_PUSH_FULL").as_deref() {
            Ok("1") => Sizes::FULL,
            _ => Sizes::SMALL,
        }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub pushes: u64,
    pub reads: u64,
    pub views_checked: u64,
}

const VIEWS: [&str; 3] = ["transactions", "user_embedding", "user_profile"];

fn user(e: usize) -> String {
    format!("u{:06}", e + 1)
}

/// One row of `view` for `user` at `t_us` whose every feature encodes `id` (< 2^24, exact in
/// float32).
fn row(view: &str, user: &str, t_us: i64, id: i64) -> Json {
    let ts = json!(ferry_integration_tests::rfc3339(t_us));
    let df = match view {
        "user_profile" => json!({
            "user_id": [user], "event_timestamp": [ts], "age": [id], "credit_score": [id],
            "account_tier": [format!("t{id}")], "is_verified": [id % 2 == 0], "signup_days": [id]
        }),
        "transactions" => json!({
            "user_id": [user], "event_timestamp": [ts], "txn_count_7d": [id],
            "txn_amount_avg_7d": [id], "last_txn_amount": [id], "has_chargeback": [id % 2 == 1]
        }),
        _ => json!({"user_id": [user], "event_timestamp": [ts], "embedding": [[id]]}),
    };
    json!({"feature_view_name": view, "df": df})
}

/// The row id a served instance holds for `view`, or a panic naming the torn vector.
fn served_id(instance: &Json, view: &str) -> i64 {
    let f = |name: &str| instance[format!("{view}__{name}")].clone();
    let num = |name: &str| {
        f(name)
            .as_f64()
            .unwrap_or_else(|| panic!("{view}__{name}: {instance}"))
    };
    let (id, all): (i64, Vec<bool>) = match view {
        "user_profile" => {
            let id = num("age") as i64;
            (
                id,
                vec![
                    num("credit_score") as i64 == id,
                    num("signup_days") as i64 == id,
                    f("account_tier") == json!(format!("t{id}")),
                    f("is_verified") == json!(id % 2 == 0),
                ],
            )
        }
        "transactions" => {
            let id = num("txn_count_7d") as i64;
            (
                id,
                vec![
                    num("txn_amount_avg_7d") as i64 == id,
                    num("last_txn_amount") as i64 == id,
                    f("has_chargeback") == json!(id % 2 == 1),
                ],
            )
        }
        _ => {
            let id = f("embedding")[0].as_f64().unwrap_or(-1.0) as i64;
            (id, vec![f("embedding").as_array().map(Vec::len) == Some(1)])
        }
    };
    assert!(all.iter().all(|&ok| ok), "torn {view}: {instance}");
    id
}

/// The row id a stored view part holds: txn_count_7d, embedding[0], age (a service stores
/// features sorted by name).
fn stored_id(vector: &StoredVector, slot: usize) -> i64 {
    let at = [3, 0, 1][slot];
    match &vector.views[slot].values[at].kind {
        Some(Kind::Int64Val(i)) => *i,
        Some(Kind::FloatListVal(l)) => l.values[0] as i64,
        other => panic!("unexpected first value {other:?}"),
    }
}

fn now_us() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_micros(),
    )
    .unwrap()
}

/// Latest (event time, id) per (entity, view), as the writers pushed them.
type Expected = HashMap<(usize, usize), (i64, i64)>;

pub async fn run(w: &WriteStack, sizes: Sizes) -> Report {
    let base = now_us() + 1_000_000;
    // Seed every (entity, view) so that every vector encodes row ids before readers start.
    let mut conn = Conn::open(w.port).await;
    let auth = format!("Bearer {WRITE_TOKEN}");
    let headers = [("authorization", auth.as_str())];
    let mut expected = Expected::new();
    for e in 0..sizes.entities {
        for (v, view) in VIEWS.iter().enumerate() {
            let id = 16_000_000 + (e * 3 + v) as i64;
            let r = conn
                .send(
                    "POST",
                    "/write-to-online-store",
                    &headers,
                    row(view, &user(e), base, id).to_string(),
                )
                .await;
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            expected.insert((e, v), (base, id));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(sizes.seconds);
    let mut tasks = Vec::new();
    for wi in 0..sizes.writers {
        let port = w.port;
        tasks.push(tokio::spawn(async move {
            let mut conn = Conn::open(port).await;
            let auth = format!("Bearer {WRITE_TOKEN}");
            let headers = [("authorization", auth.as_str())];
            let mut seen = Expected::new();
            let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (wi as u64 + 1);
            let mut next = || {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng
            };
            let mut id = (wi * 1_000_000) as i64;
            while Instant::now() < deadline {
                let (e, v) = (
                    (next() % sizes.entities as u64) as usize,
                    (next() % 3) as usize,
                );
                // Distinct across writers (the low digits are the writer's), random in order.
                let t = base + 1 + ((next() % 2_000_000) * sizes.writers as u64 + wi as u64) as i64;
                id += 1;
                let body = row(VIEWS[v], &user(e), t, id).to_string();
                let mut r = conn
                    .send("POST", "/write-to-online-store", &headers, body.clone())
                    .await;
                // More writers than the control plane's write slots: a refused write is
                // retried, as a client honouring 429 would (the same row: idempotent); so is
                // Envoy's 503 over `--write-max-requests` (x-envoy-overloaded), after which
                // Envoy has closed the connection.
                while r.status == 429 || r.header("x-envoy-overloaded").is_some() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    if r.status != 429 {
                        conn = Conn::open(port).await;
                    }
                    r = conn
                        .send("POST", "/write-to-online-store", &headers, body.clone())
                        .await;
                }
                assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                let slot = seen.entry((e, v)).or_insert((t, id));
                if t >= slot.0 {
                    *slot = (t, id);
                }
            }
            (seen, id - (wi * 1_000_000) as i64)
        }));
    }
    let mut readers = Vec::new();
    for ri in 0..sizes.readers {
        let (port, n) = (w.port, sizes.entities);
        readers.push(tokio::spawn(async move {
            let mut conn = Conn::open(port).await;
            let (mut reads, mut views) = (0u64, 0u64);
            let mut at = ri;
            while Instant::now() < deadline {
                let users: Vec<Json> = (0..4)
                    .map(|k| json!({"user_id": user((at + k) % n)}))
                    .collect();
                at += 4;
                let body = json!({"instances": users}).to_string();
                let r = conn
                    .send("POST", "/v1/models/fraud-lenient:predict", &[], body)
                    .await;
                assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
                for instance in r.json()["instances"].as_array().unwrap() {
                    for view in VIEWS {
                        served_id(instance, view);
                        views += 1;
                    }
                }
                reads += 1;
            }
            (reads, views)
        }));
    }
    let mut report = Report::default();
    for t in tasks {
        let (seen, pushes) = t.await.unwrap();
        report.pushes += pushes as u64;
        for (k, (t, id)) in seen {
            let slot = expected.get_mut(&k).unwrap();
            if t > slot.0 {
                *slot = (t, id);
            }
        }
    }
    for r in readers {
        let (reads, views) = r.await.unwrap();
        report.reads += reads;
        report.views_checked += views;
    }
    for e in 0..sizes.entities {
        let stored = w.vectors("realtime_scoring", &user(e));
        assert_eq!(stored.len(), 1);
        let vector = &stored[0].1;
        for v in 0..3 {
            let (t, id) = expected[&(e, v)];
            assert_eq!(
                (vector.views[v].event_time_us, stored_id(vector, v)),
                (t, id),
                "{} {}: the latest row is not the one stored",
                user(e),
                VIEWS[v]
            );
        }
    }
    report
}
