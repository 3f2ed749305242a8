//! Feature writes in Feast's layout (issue #23, part 2): a Feast-backed repo whose push source
//! is a Feast `PushSource`. Ferry's writes are byte for byte what Feast's own SDK writes for the
//! same rows (hash fields, `_ts:view`, `ValueProto` bytes, the key's expiry), Feast's skip rule
//! included; Feast's SDK reads what Ferry wrote; Ferry, through Envoy, serves what Feast's own
//! `/push` (`feast serve`) wrote.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use ferry_integration_tests::feast::{feast_venv, FeastStack, PROJECT};
use ferry_integration_tests::http::{self, post, Conn};
use ferry_integration_tests::resp::{command as resp, line};
use ferry_integration_tests::{free_port, rfc3339, root, Graceful, Proc};
use ferry_protos::v1::FeastJoinKey;
use serde_json::{json, Value as Json};

const WRITE_TOKEN: &str = "feast-write-token-0123456789abcdef";

const ROUTES: &str = "  - match: {path_prefix: /v1/models/scoring}
    service: scoring
    format: kserve_v1
    entity: {field: user_id}
    on_missing_entity: null
";

/// The fixture's features.py with `user_profile` fed by a PushSource, and no precompute_online
/// service (Feast's push also rewrites a precompute_online service's precomputed vector,
/// which Ferry neither reads nor writes: docs/limits.md).
fn features() -> String {
    let text = std::fs::read_to_string(root().join("tests/integration/feast_repo/features.py"))
        .expect("features.py");
    // user_profile's call to view() ends its schema list, then the call, before the next
    // view's comment: the push source goes in as view()'s `source` argument.
    let end = "    ],\n)\n\n# ttl of one hour";
    let start = "user_profile = view(";
    assert!(
        text.contains(end) && text.contains(start),
        "the fixture's user_profile view moved"
    );
    text.replace(end, &end.replace("    ],\n)", "    ],\n    source=profile_push,\n)"))
        .replace("precompute_online=True", "precompute_online=False")
        .replace(
            "from feast import Entity,",
            "from feast import PushSource, Entity,",
        )
        .replace(
            start,
            "profile_push = PushSource(name=\"profile_push\", batch_source=file_source(\"user_profile\"))\n\nuser_profile = view(",
        )
}

fn now_us() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(now.as_micros()).unwrap()
}

/// One batch of user_profile rows: (user, event time µs, age, segment).
fn batch(rows: &[(&str, i64, i64, Option<&str>)]) -> Json {
    json!({
        "user_id": rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        "event_timestamp": rows.iter().map(|r| rfc3339(r.1)).collect::<Vec<_>>(),
        "age": rows.iter().map(|r| r.2).collect::<Vec<_>>(),
        "credit_score": rows.iter().map(|r| r.2 as f64 / 4.0).collect::<Vec<_>>(),
        "segment": rows.iter().map(|r| r.3).collect::<Vec<_>>(),
    })
}

/// Pushes each batch through Ferry's `/push`; the rows written per push.
async fn ferry_push(stack: &FeastStack, batches: &[Json]) -> Vec<String> {
    let mut written = Vec::new();
    for df in batches {
        let body = json!({"push_source_name": "profile_push", "df": df, "to": "online"});
        let auth = format!("Bearer {WRITE_TOKEN}");
        let r = Conn::open(stack.control_plane.http_port)
            .await
            .send(
                "POST",
                "/push",
                &[("authorization", &auth)],
                body.to_string(),
            )
            .await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        written.push(r.header("x-ferry-rows-written").unwrap_or("?").to_owned());
    }
    written
}

/// Pushes each batch with Feast's own SDK (`FeatureStore.push`).
fn feast_push(stack: &FeastStack, batches: &[Json]) {
    let script = root().join("tests/integration/scripts/feast_push.py");
    let out = Command::new(feast_venv().join("bin/python"))
        .arg(script)
        .args([
            ".",
            "profile_push",
            &Json::from(batches.to_vec()).to_string(),
        ])
        .current_dir(&stack.feast_repo)
        .output()
        .expect("feast_push.py");
    assert!(
        out.status.success(),
        "feast_push.py: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn key(user: &str) -> Vec<u8> {
    let keys = [FeastJoinKey {
        name: "user_id".into(),
        int64: false,
    }];
    ferry_protos::feast::hash_key(PROJECT, &keys, user).unwrap()
}

/// A hash's fields and values, and whether its key expires.
type Hash = (BTreeMap<Vec<u8>, Vec<u8>>, bool);

/// A hash's fields and values (HGETALL), and whether the key expires (TTL > 0).
fn hash(port: u16, key: &[u8]) -> Hash {
    let out = resp(port, &[b"HGETALL", key]);
    let (head, mut rest) = line(&out);
    let n: usize = std::str::from_utf8(&head[1..]).unwrap().parse().unwrap();
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        let (len, after) = line(rest);
        let len: usize = std::str::from_utf8(&len[1..]).unwrap().parse().unwrap();
        items.push(after[..len].to_vec());
        rest = &after[len + 2..];
    }
    let fields = items
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    let ttl = resp(port, &[b"TTL", key]);
    let ttl: i64 = std::str::from_utf8(line(&ttl).0[1..].as_ref())
        .unwrap()
        .parse()
        .unwrap();
    (fields, ttl > 0)
}

fn dump(port: u16, users: &[&str]) -> Vec<Hash> {
    users.iter().map(|u| hash(port, &key(u))).collect()
}

fn delete(port: u16, users: &[&str]) {
    for u in users {
        resp(port, &[b"DEL", &key(u)]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ferrys_writes_in_feasts_layout_are_feasts_own_and_each_reads_the_other() {
    let stack = FeastStack::start_with(
        ROUTES,
        &features(),
        "  key_ttl_seconds: 86400\n",
        Some(WRITE_TOKEN),
    );
    let port = stack.redis.port;
    let t = now_us() - 60_000_000 + 123_456;

    // 1. The same rows, written by Ferry and by Feast's SDK: the same hashes, byte for byte.
    let users = ["p1", "p2"];
    let rows = [batch(&[
        ("p1", t, 41, Some("gold")),
        ("p2", t + 7, 52, None),
    ])];
    assert_eq!(ferry_push(&stack, &rows).await, ["2"]);
    let ferrys = dump(port, &users);
    assert!(
        ferrys.iter().all(|(h, ttl)| h.len() == 4 && *ttl),
        "{ferrys:?}"
    );
    delete(port, &users);
    feast_push(&stack, &rows);
    assert_eq!(
        ferrys,
        dump(port, &users),
        "Ferry's hashes differ from Feast's"
    );

    // 2. Feast's skip rule, push by push: an equal event time is skipped, a later one within
    // the same second is written, an older one is skipped; Feast's SDK does the same.
    let seq: Vec<Json> = [(t, 1), (t, 2), (t + 500_000, 3), (t - 1_000_000, 4)]
        .iter()
        .map(|&(ts, age)| batch(&[("p3", ts, age, Some("s"))]))
        .collect();
    assert_eq!(ferry_push(&stack, &seq).await, ["1", "0", "1", "0"]);
    let ferrys = dump(port, &["p3"]);
    delete(port, &["p3"]);
    feast_push(&stack, &seq);
    assert_eq!(
        ferrys,
        dump(port, &["p3"]),
        "the skip rule differs from Feast's"
    );

    // 3. Feast's SDK reads what Ferry wrote.
    delete(port, &["p1", "p2", "p3"]);
    ferry_push(&stack, &rows).await;
    ferry_push(&stack, &seq).await;
    let got = stack.feast_online(
        "scoring",
        &json!([{"user_id": "p1"}, {"user_id": "p2"}, {"user_id": "p3"}]),
    );
    let names: Vec<&str> = got["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let column = |name: &str| names.iter().position(|n| *n == name).unwrap();
    let (age, segment) = (column("user_profile__age"), column("user_profile__segment"));
    assert_eq!(got["values"][age], json!([41, 52, 3]), "{got}");
    assert_eq!(got["values"][segment], json!(["gold", null, "s"]), "{got}");

    // 4. Ferry, through Envoy, serves what Feast's own `/push` wrote.
    let feast_port = free_port();
    let mut cmd = Command::new(feast_venv().join("bin/feast"));
    cmd.args(["serve", "-h", "127.0.0.1", "-p", &feast_port.to_string()])
        .current_dir(&stack.feast_repo);
    let mut server = Graceful(Proc::start("feast-serve", cmd, stack.dir.path()));
    server.wait_ready(|| http::get_ok(feast_port, "/health"), "feast serve");
    let body = json!({
        "push_source_name": "profile_push",
        "df": batch(&[("p9", now_us() - 1_000_000, 77, Some("feast"))]),
        "to": "online",
    });
    let r = post(feast_port, "/push", body.to_string()).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let read = json!({"instances": [{"user_id": "p9"}, {"user_id": "p1"}]});
    let r = post(
        stack.listen_port,
        "/v1/models/scoring:predict",
        read.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let served = r.json();
    assert_eq!(
        served["instances"][0]["user_profile__age"],
        json!(77),
        "{served}"
    );
    assert_eq!(
        served["instances"][0]["user_profile__segment"],
        json!("feast")
    );
    assert_eq!(
        served["instances"][1]["user_profile__age"],
        json!(41),
        "{served}"
    );
}
