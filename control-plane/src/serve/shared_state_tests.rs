//! The shared state's tests, on a real redis-server.

use super::*;
use ferry_protos::v1::SignedSnapshot;
use ferry_test_support::redis::RedisServer;

/// The deployment's key: every replica of a test signs with it.
fn deployment_key() -> std::sync::Arc<super::super::signing::Signer> {
    static KEY: std::sync::OnceLock<std::sync::Arc<super::super::signing::Signer>> =
        std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (_, pem) = super::super::signing::generate().unwrap();
        let path = dir.path().join("key.pem");
        std::fs::write(&path, pem).unwrap();
        std::sync::Arc::new(super::super::signing::Signer::from_file(&path, None).unwrap())
    })
    .clone()
}

fn replica(redis: &RedisServer, cluster: &str) -> Shared {
    let target = ferry_redis::RedisArgs::with_url(redis.url())
        .target()
        .unwrap();
    let timeouts = ferry_redis::Timeouts {
        connect: Duration::from_secs(2),
        response: Some(REDIS_TIMEOUT),
    };
    let conn = target.connect_lazy(timeouts).unwrap();
    let opts = SharedOptions {
        cluster: cluster.into(),
        poll: Duration::from_secs(1),
        lease: Duration::from_millis(600),
        keys: vec![],
    };
    Shared::new(
        target,
        conn,
        opts,
        Seal::new(deployment_key(), vec![]).unwrap(),
    )
}

fn install<'a>(encoded: &'a [u8], version: &'a str, now: u64) -> Install<'a> {
    Install {
        encoded,
        version,
        source: "push",
        accepted_ms: now,
        repo_sha256: None,
        releases: None,
    }
}

async fn commit(s: &Shared, expected: &Stored, seq: u64, i: &Install<'_>) -> Committed {
    s.commit(expected, seq, false, i).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_installs_get_distinct_ordered_sequences_and_one_lease_holder() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis, "t"), replica(&redis, "t"));
    let other = replica(&redis, "another-deployment");
    assert_eq!(a.heads().await.unwrap(), (Stored::None, String::new()));
    // A stale expectation is a conflict naming the stored sequence.
    let first = commit(&a, &Stored::None, 5_000, &install(b"x", "v1", 5_000)).await;
    assert_eq!(first, Committed::At(5_000));
    let v2 = install(b"y", "v2", 6_000);
    assert_eq!(
        commit(&b, &Stored::None, 6_000, &v2).await,
        Committed::Conflict(Stored::At(5_000))
    );
    assert_eq!(
        commit(&b, &Stored::At(5_000), 6_000, &install(b"x", "v1", 6_000)).await,
        Committed::Unchanged(Stored::At(5_000))
    );
    assert_eq!(
        commit(&b, &Stored::At(5_000), 5_001, &v2).await,
        Committed::At(5_001)
    );
    assert_eq!(
        other.heads().await.unwrap().0,
        Stored::None,
        "another deployment's keys"
    );

    // Two replicas installing as fast as they can, each catching up on a conflict.
    let run = |s: Shared, tag: &'static str| {
        tokio::spawn(async move {
            let mut expected = 5_001;
            let mut got = Vec::new();
            for i in 0..50 {
                let version = format!("{tag}{i}");
                loop {
                    let next = super::super::signing::next_sequence(expected, 1).unwrap();
                    let i = install(b"", &version, 1);
                    match commit(&s, &Stored::At(expected), next, &i).await {
                        Committed::At(n) => {
                            got.push(n);
                            expected = n;
                            break;
                        }
                        Committed::Conflict(Stored::At(n))
                        | Committed::Unchanged(Stored::At(n)) => expected = n,
                        other => panic!("{other:?}"),
                    }
                }
            }
            got
        })
    };
    let (x, y) = (run(a, "a"), run(b, "b"));
    let (x, y) = (x.await.unwrap(), y.await.unwrap());
    let mut all: Vec<u64> = x.iter().chain(&y).copied().collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 100, "every install its own sequence");
    assert!(x.windows(2).all(|w| w[0] < w[1]) && y.windows(2).all(|w| w[0] < w[1]));
    let (a, b) = (replica(&redis, "t"), replica(&redis, "t"));
    let Loaded::Record(record) = a.load().await.unwrap() else {
        panic!("no record");
    };
    assert_eq!(record.sequence, *all.last().unwrap());

    // One lease holder; the other takes over once it lapses.
    assert!(a.lease().await);
    assert!(!b.lease().await);
    assert!(a.lease().await, "renewed");
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(b.lease().await, "taken over after it lapsed");
    assert!(!a.lease().await, "lost");
    b.release().await;
    assert!(a.lease().await, "released at shutdown");
}

#[test]
fn a_stored_sequence_is_a_canonical_decimal_within_the_bound() {
    let max = ferry_protos::signed::MAX_SEQUENCE;
    assert_eq!(Stored::parse(None), Stored::None);
    assert_eq!(Stored::parse(Some("")), Stored::None);
    assert_eq!(Stored::parse(Some("42")), Stored::At(42));
    assert_eq!(Stored::parse(Some(&max.to_string())), Stored::At(max));
    for bad in [
        "0",
        "007",
        "-1",
        "1e18",
        "4.5",
        " 42",
        "1152921504606846976", // 2^60
        "18446744073709551616",
        "abc",
    ] {
        assert_eq!(
            Stored::parse(Some(bad)),
            Stored::OutOfRange(bad.to_owned()),
            "{bad}"
        );
    }
    assert_eq!(Stored::At(7).raw(), "7");
    assert_eq!(Stored::known(0), Stored::None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequence_written_at_two_to_the_60_is_refused_and_replaced_by_the_next_install() {
    let redis = RedisServer::start();
    let a = replica(&redis, "t");
    assert_eq!(
        commit(&a, &Stored::None, 5_000, &install(b"", "v1", 5_000)).await,
        Committed::At(5_000)
    );
    // Someone with write access to Redis, not a replica.
    let mut conn = a.conn.clone();
    let high = (1u64 << 60).to_string();
    redis::cmd("HSET")
        .arg(&a.keys.current)
        .arg("sequence")
        .arg(&high)
        .exec_async(&mut conn)
        .await
        .unwrap();
    let head = Stored::OutOfRange(high.clone());
    assert_eq!(a.heads().await.unwrap().0, head);
    match a.load().await.unwrap() {
        Loaded::Refused { reason, error, .. } => {
            assert_eq!(reason, "sequence_out_of_range");
            assert!(error.contains(&high), "{error}");
        }
        other => panic!("{other:?}"),
    }
    // The next install compares with the stored text and goes on from its own sequence.
    let v2 = install(b"", "v2", 6_000);
    assert_eq!(
        commit(&a, &Stored::At(5_000), 6_000, &v2).await,
        Committed::Conflict(head.clone())
    );
    assert_eq!(commit(&a, &head, 6_000, &v2).await, Committed::At(6_000));
    assert_eq!(a.heads().await.unwrap().0, Stored::At(6_000));
    assert!(a.mark_refused(&head, "x") && !a.mark_refused(&head, "x"));
    assert!(a.refused_already(&head) && a.status().refused_record.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_not_signed_by_the_deployment_is_refused_and_replaced_by_the_next_install() {
    let redis = RedisServer::start();
    let a = replica(&redis, "t");
    let snap = v1::Snapshot {
        version: "v1".into(),
        ..v1::Snapshot::default()
    };
    let encoded = snap.encode_to_vec();
    assert_eq!(
        commit(&a, &Stored::None, 5_000, &install(&encoded, "v1", 5_000)).await,
        Committed::At(5_000)
    );
    let Loaded::Record(record) = a.load().await.unwrap() else {
        panic!("the replica's own record is not served");
    };
    assert_eq!(
        (record.sequence, record.snapshot.version.as_str()),
        (5_000, "v1")
    );
    // Someone with write access to Redis and no key of the deployment's.
    let mut conn = a.conn.clone();
    let hset = |fields: Vec<(&'static str, Vec<u8>)>| {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(&a.keys.current);
        for (k, v) in fields {
            cmd.arg(k).arg(v);
        }
        cmd
    };
    let stranger = ferry_test_support::signed::sign(
        &ferry_test_support::signed::key(7),
        &deployment_key().key_id,
        6_000,
        &encoded,
    );
    let mut moved = SignedSnapshot::decode(a.seal.seal(5_000, &encoded).as_ref()).unwrap();
    moved.sequence = 6_000;
    for (what, fields, reason) in [
        (
            "a raw snapshot",
            vec![("signed", Vec::new()), ("snapshot", encoded.clone())],
            "unsigned",
        ),
        (
            "bytes that are no envelope",
            vec![("signed", b"\xff\xff".to_vec())],
            "undecodable",
        ),
        (
            "another key under the deployment's key id",
            vec![("signed", stranger.encode_to_vec())],
            "bad_signature",
        ),
        (
            "the replica's envelope moved to another sequence",
            vec![("signed", moved.encode_to_vec())],
            "bad_signature",
        ),
    ] {
        let mut fields = fields;
        fields.push(("sequence", b"6000".to_vec()));
        hset(fields).exec_async(&mut conn).await.unwrap();
        match a.load().await.unwrap() {
            Loaded::Refused { reason: r, .. } => assert_eq!(r, reason, "{what}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    redis::cmd("HDEL")
        .arg(&a.keys.current)
        .arg("signed")
        .exec_async(&mut conn)
        .await
        .unwrap();
    assert!(matches!(
        a.load().await.unwrap(),
        Loaded::Refused {
            reason: "unsigned",
            ..
        }
    ));
    // The next install compares with what is stored and replaces the whole record.
    let v2 = install(&encoded, "v2", 7_000);
    assert_eq!(
        commit(&a, &Stored::At(6_000), 7_000, &v2).await,
        Committed::At(7_000)
    );
    let Loaded::Record(record) = a.load().await.unwrap() else {
        panic!("the next install is not served");
    };
    assert_eq!(record.sequence, 7_000);
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&a.keys.current)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!fields.contains(&"snapshot".to_owned()), "{fields:?}");

    // The held-back record is signed too: a forged one is taken as none.
    a.hold_back(&snap).await.unwrap();
    assert_eq!(a.held_back().await.unwrap(), Some(snap.clone()));
    redis::cmd("HSET")
        .arg(&a.keys.held_back)
        .arg("signed")
        .arg(stranger.encode_to_vec())
        .exec_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(a.held_back().await.unwrap(), None);
}
