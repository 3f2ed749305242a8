//! `ferry materialize --prune` against a real Redis: an entity removed from the sources keeps
//! its vector without `--prune` and loses it with it, while every other vector stays exactly as
//! it was (bytes compared, event times checked against the source); a service whose sources
//! hold no entity at all is not pruned to nothing.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use ferry_integration_tests::data::{Source, VIEWS};
use ferry_integration_tests::{bin, example_repo_with, run, RedisServer};
use ferry_protos::v1::StoredVector;
use prost::Message as _;

const SERVICE: &str = "realtime_scoring";

/// The keys of one service (every fingerprint), by `redis-cli --scan`.
fn keys(redis: &RedisServer, service: &str) -> Vec<String> {
    let out = Command::new("redis-cli")
        .args(["-p", &redis.port.to_string(), "--scan", "--pattern"])
        .arg(format!("ferry:banking:{service}:*"))
        .output()
        .expect("redis-cli (install redis-tools)");
    assert!(out.status.success());
    let mut keys: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    keys.sort();
    keys
}

/// GET over RESP, binary-safe (a stored vector is protobuf bytes).
fn get(redis: &RedisServer, key: &str) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", redis.port)).expect("connect redis");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write!(s, "*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()).expect("send GET");
    let mut r = BufReader::new(s);
    let mut head = String::new();
    r.read_line(&mut head).expect("reply");
    let len: i64 = head
        .trim_end()
        .strip_prefix('$')
        .unwrap_or_else(|| panic!("GET {key}: {head}"))
        .parse()
        .expect("bulk length");
    let len = usize::try_from(len).ok()?;
    let mut body = vec![0u8; len + 2];
    r.read_exact(&mut body).expect("bulk body");
    body.truncate(len);
    Some(body)
}

/// Every vector of the service: entity → bytes.
fn vectors(redis: &RedisServer) -> BTreeMap<String, Vec<u8>> {
    keys(redis, SERVICE)
        .into_iter()
        .map(|k| {
            let entity = k.rsplit(':').next().expect("entity").to_owned();
            let v = get(redis, &k).expect("a scanned key has a value");
            (entity, v)
        })
        .collect()
}

fn materialize(repo: &Path, redis: &RedisServer, prune: bool) -> String {
    let mut cmd = Command::new(bin("ferry"));
    cmd.arg("materialize")
        .arg(repo)
        .args(["--redis", &redis.url()]);
    if prune {
        cmd.arg("--prune");
    }
    run(&mut cmd)
}

/// Removes every row of `user` from the repo's CSV sources (user_id is their first column).
fn remove_user(repo: &Path, user: &str) {
    for entry in std::fs::read_dir(repo.join("data")).expect("data dir") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("source");
        let kept: String = text
            .split_inclusive('\n')
            .filter(|l| !l.starts_with(&format!("{user},")))
            .collect();
        std::fs::write(&path, kept).expect("write source");
    }
}

#[test]
fn prune_removes_only_the_vectors_of_entities_gone_from_the_sources() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = example_repo_with(dir.path(), 50);
    let redis = RedisServer::start();
    materialize(&repo, &redis, false);
    let before = vectors(&redis);
    let source = Source::load(&repo.join("data"));
    let mut views: Vec<&str> = VIEWS.iter().map(|(v, _)| *v).collect();
    views.sort(); // the vector's views are in canonical (name) order
    let in_every_view = |u: &String| views.iter().all(|v| source.event_time(v, u).is_some());
    let gone = before
        .keys()
        .find(|u| in_every_view(u))
        .expect("a user with a row in every view")
        .clone();
    let merchant_pairs_before = keys(&redis, "user_merchant_scoring").len();

    remove_user(&repo, &gone);
    let out = materialize(&repo, &redis, false);
    assert!(!out.contains("pruned"), "{out}");
    assert_eq!(
        vectors(&redis),
        before,
        "without --prune nothing is deleted"
    );

    let out = materialize(&repo, &redis, true);
    assert!(
        out.contains(&format!(
            "pruned {SERVICE}: 1 vector(s) of entities no longer in the sources removed"
        )),
        "{out}"
    );
    assert!(
        out.contains("pruned merchant_risk: 0 vector(s)"),
        "merchants all remain: {out}"
    );
    let after = vectors(&redis);
    assert!(!after.contains_key(&gone), "{gone}'s vector is still there");
    let mut expected = before.clone();
    expected.remove(&gone);
    assert_eq!(after, expected, "every other vector is untouched");
    // The user's (user, merchant) pairs went too; the other pairs stay.
    let merchant_pairs = keys(&redis, "user_merchant_scoring");
    assert!(merchant_pairs.len() < merchant_pairs_before);
    assert!(merchant_pairs.iter().all(|k| !k.contains(&gone)));

    // The remaining vectors hold the source's event times.
    let mut checked = 0;
    for (user, bytes) in &after {
        let v = StoredVector::decode(bytes.as_slice()).expect("a stored vector");
        for (view, part) in views.iter().zip(&v.views) {
            let want = source
                .event_time(view, user)
                .map_or(0, |t| (t * 1e6).round() as i64);
            assert_eq!(part.event_time_us, want, "{user} {view}");
            checked += 1;
        }
    }
    assert_eq!(checked, after.len() * 3);
    assert_eq!(after.len(), 49);
}

#[test]
fn prune_refuses_to_remove_every_vector_of_a_service() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = example_repo_with(dir.path(), 20);
    let redis = RedisServer::start();
    materialize(&repo, &redis, false);
    let merchants = keys(&redis, "merchant_risk");
    assert!(!merchants.is_empty());
    // merchant_risk's only view, emptied to its header: a truncated export, say.
    let path = repo.join("data/merchant_profile.csv");
    let text = std::fs::read_to_string(&path).expect("source");
    let header = text.lines().next().expect("header");
    std::fs::write(&path, format!("{header}\n")).expect("write");

    let out = Command::new(bin("ferry"))
        .arg("materialize")
        .arg(&repo)
        .args(["--redis", &redis.url(), "--prune"])
        .output()
        .expect("run ferry");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "feature service 'merchant_risk': refusing to prune: its sources hold no entity at all"
        ),
        "{stderr}"
    );
    assert_eq!(keys(&redis, "merchant_risk"), merchants, "nothing deleted");
}
