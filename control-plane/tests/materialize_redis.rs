//! `ferry materialize` against a real redis-server: the vectors read back from Redis must hold
//! exactly the latest CSV row of every view for every user, in the snapshot's layout.
// Test helpers outside #[test] functions may fail loudly too (clippy.toml only covers those).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{banking_repo, ferry, stderr, stdout};
use ferry_protos::v1::{Snapshot, StoredVector, ValueType, ViewValues};
use ferry_repo::sources::cell::{parse_timestamp, parse_value};
use ferry_repo::sources::TimestampRules;
use ferry_repo::types::FeatureType;
use ferry_test_support::redis::RedisServer;
use prost::Message as _;

const USERS: u32 = 500;

fn feature_type(t: i32) -> FeatureType {
    let vt = ValueType::try_from(t).unwrap();
    FeatureType::ALL
        .into_iter()
        .find(|f| f.to_proto() == vt)
        .unwrap()
}

/// The latest row per user of one CSV, as (header, row) with the raw cells.
fn latest_rows(file: &Path) -> Latest {
    let mut rdr = csv::Reader::from_path(file).unwrap();
    let header: Vec<String> = rdr.headers().unwrap().iter().map(str::to_owned).collect();
    let ts = header.iter().position(|h| h == "event_timestamp").unwrap();
    let id = header.iter().position(|h| h == "user_id").unwrap();
    let mut latest: HashMap<String, (i64, Vec<String>)> = HashMap::new();
    for rec in rdr.records() {
        let row: Vec<String> = rec.unwrap().iter().map(str::to_owned).collect();
        let t = parse_timestamp_us(&row[ts]).unwrap();
        let keep = latest.get(&row[id]).is_none_or(|(kept, _)| *kept <= t);
        if keep {
            latest.insert(row[id].clone(), (t, row));
        }
    }
    (header, latest)
}

type Latest = (Vec<String>, HashMap<String, (i64, Vec<String>)>);

/// A timestamp cell as `ferry materialize` reads it (units detected, as the example declares
/// none).
fn parse_timestamp_us(raw: &str) -> Result<i64, String> {
    parse_timestamp(raw).and_then(|t| TimestampRules::now(None).resolve(t))
}

/// The latest rows of every view's CSV, by view name.
fn all_latest(dir: &Path) -> HashMap<&'static str, Latest> {
    [
        ("transactions", "transactions.csv"),
        ("user_embedding", "user_embedding.csv"),
        ("user_profile", "user_profile.csv"),
    ]
    .into_iter()
    .map(|(view, file)| (view, latest_rows(&dir.join("data").join(file))))
    .collect()
}

fn expected_vector(latest: &HashMap<&str, Latest>, snap: &Snapshot, user: &str) -> StoredVector {
    let service = &snap.services[0];
    let views = service
        .views
        .iter()
        .map(|v| {
            let (header, rows) = &latest[v.name.as_str()];
            match rows.get(user) {
                None => ViewValues::default(),
                Some((t, row)) => ViewValues {
                    event_time_us: *t,
                    values: v
                        .features
                        .iter()
                        .map(|f| {
                            let col = header.iter().position(|h| *h == f.name).unwrap();
                            parse_value(feature_type(f.r#type), &row[col]).unwrap()
                        })
                        .collect(),
                },
            }
        })
        .collect();
    StoredVector {
        fingerprint: service.fingerprint,
        views,
    }
}

async fn read_all(url: &str, keys: &[String]) -> Vec<Option<Vec<u8>>> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("MGET")
        .arg(keys)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// How many keys hold `service`'s vectors (the example repo has other services too).
async fn service_keys(url: &str, service: &str) -> usize {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("ferry:banking:{service}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn materialized_vectors_match_the_csv() {
    let redis = RedisServer::start();
    let repo = banking_repo(USERS);
    let dir = repo.path();
    let snap_file = dir.join("snapshot.bin");
    let out = ferry(&[
        "apply",
        dir.to_str().unwrap(),
        "--output",
        snap_file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let snap = Snapshot::decode(std::fs::read(&snap_file).unwrap().as_slice()).unwrap();
    let service = &snap.services[0];
    assert_eq!(service.name, "realtime_scoring");

    let out = ferry(&[
        "materialize",
        dir.to_str().unwrap(),
        "--redis",
        &redis.url(),
        "--batch-size",
        "64",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "materialized realtime_scoring (fingerprint {}): {USERS} entities",
            ferry_protos::fingerprint_hex(service.fingerprint)
        )),
        "{text}"
    );
    assert!(text.contains("entities/s"), "{text}");
    assert_eq!(
        service_keys(&redis.url(), &service.name).await,
        USERS as usize
    );

    let users: Vec<String> = (1..=USERS).map(|i| format!("u{i:06}")).collect();
    let keys: Vec<String> = users
        .iter()
        .map(|u| {
            ferry_protos::redis_key(
                "banking",
                &service.name,
                service.fingerprint,
                &ferry_protos::entity_key(&[u]),
            )
        })
        .collect();
    let first = read_all(&redis.url(), &keys).await;
    let anchor = parse_timestamp_us(common::ANCHOR).unwrap();
    let latest = all_latest(dir);
    for (i, (user, bytes)) in users.iter().zip(&first).enumerate() {
        let index = i + 1;
        let bytes = bytes
            .as_ref()
            .unwrap_or_else(|| panic!("no vector for {user}"));
        let got = StoredVector::decode(bytes.as_slice()).unwrap();
        assert_eq!(got, expected_vector(&latest, &snap, user), "{user}");
        // views: transactions, user_embedding, user_profile
        let txn = &got.views[0];
        if index % 100 == 42 {
            assert!(
                txn.values.is_empty(),
                "{user} should have no transactions row"
            );
        } else {
            assert_eq!(txn.values.len(), 4);
            let age_s = (anchor - txn.event_time_us) / 1_000_000;
            if index % 50 == 7 {
                assert!(
                    age_s > 2 * 86_400,
                    "{user}: stale row should be > 2 days old, is {age_s}s"
                );
            } else {
                assert!(
                    age_s > 0 && age_s < 86_400,
                    "{user}: row should be fresh, is {age_s}s"
                );
            }
        }
        assert_eq!(got.views[1].values.len(), 1);
        assert_eq!(got.views[2].values.len(), 5);
    }

    // Idempotent: a second run writes the same bytes under the same keys.
    let out = ferry(&[
        "materialize",
        dir.to_str().unwrap(),
        "--redis",
        &redis.url(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read_all(&redis.url(), &keys).await, first);
    assert_eq!(
        service_keys(&redis.url(), &service.name).await,
        USERS as usize
    );
}

#[test]
fn unreachable_redis_is_a_clear_error() {
    let repo = banking_repo(20);
    let port = ferry_test_support::ports::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let out = ferry(&[
        "materialize",
        repo.path().to_str().unwrap(),
        "--redis",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains(&format!("error: redis {url}:")), "{err}");
}
