//! Ferry on a Redis Cluster, end to end: `ferry materialize` writes into a three-master Cluster,
//! the reader reads from it (`--redis-cluster`), and a batch through real Envoy whose keys live
//! on all three shards comes back with the source's values; the reader's `/readyz` finds the
//! completion markers materialize wrote. The same through a TLS-only Redis (`rediss://`, a test
//! CA given with `--redis-ca-file`).

use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::http::{post, raw, Response};
use ferry_integration_tests::{Options, Stack};
use serde_json::{json, Value as Json};

const STRICT: &str = "/v1/models/fraud:predict";

fn user(i: usize) -> String {
    format!("u{i:06}")
}

fn instances(users: &[String]) -> String {
    let v: Vec<Json> = users.iter().map(|u| json!({"user_id": u})).collect();
    json!({ "instances": v }).to_string()
}

/// Every feature of every instance the model received, value and status, against the source.
fn check_against_source(store: &Store, resp: &Response, users: &[String]) {
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let users: Vec<Entity> = users.iter().cloned().map(Entity::User).collect();
    store.check_instances(Service::RealtimeScoring, &resp.json(), &users);
}

/// `GET path` on the reader: status code and body.
fn reader_get(stack: &Stack, path: &str) -> (u16, Json) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    let answer = raw(stack.reader_port, request.as_bytes()).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    (status, serde_json::from_str(body).unwrap_or(Json::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_spread_over_three_shards_is_enriched_with_the_source_values() {
    let stack = Stack::start_on_redis_cluster(Options {
        entities: Some(300),
        ..Options::default()
    });
    let cluster = stack.redis_cluster.as_ref().unwrap();
    let keys: Vec<u64> = (0..3).map(|i| cluster.keys(i)).collect();
    assert!(
        keys.iter().all(|&n| n > 0),
        "materialize left a shard empty: {keys:?}"
    );
    let store = Store::load(&stack);

    let mgets = |c: &ferry_integration_tests::RedisCluster| -> Vec<u64> {
        (0..3).map(|i| c.calls(i, "mget")).collect()
    };
    let before = mgets(cluster);
    let users: Vec<String> = (1..=50).map(user).collect();
    let resp = post(stack.listen_port, STRICT, instances(&users)).await;
    check_against_source(&store, &resp, &users);
    assert_eq!(resp.upstream_headers()["x-ferry-entities"], "50");
    let after = mgets(cluster);
    let per_shard: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    // One reader call for the batch, and every shard answered part of it.
    assert!(
        per_shard.iter().all(|&n| n > 0),
        "MGETs per shard: {per_shard:?}"
    );
    println!(
        "MEASURED: one 50-entity batch on a 3-master cluster: keys per shard {keys:?} stored, \
         MGET commands per shard {per_shard:?} (redis-rs sends one MGET per hash slot)"
    );

    let text = raw(
        stack.reader_port,
        b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    )
    .unwrap();
    assert!(
        text.contains("ferry_reader_requests_total{route=\"vectors\",status=\"200\"} 1\n"),
        "{text}"
    );

    // Readiness: the marker of realtime_scoring at its fingerprint is there; a fingerprint
    // never materialized is not.
    let fingerprint = store.fingerprint(Service::RealtimeScoring);
    let ready =
        format!("/readyz?project=banking&service=realtime_scoring&fingerprint={fingerprint}");
    let (status, body) = reader_get(&stack, &ready);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["vectors"][0]["ready"], true);
    assert_eq!(
        body["vectors"][0]["materialized"]["entities"], 300,
        "{body}"
    );
    let (status, body) = reader_get(
        &stack,
        "/readyz?project=banking&service=realtime_scoring&fingerprint=0123456789abcdef",
    );
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"], "not_ready");
    assert_eq!(reader_get(&stack, "/healthz").0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_only_redis_serves_enriched_batches() {
    let stack = Stack::start_on_tls_redis(Options {
        entities: Some(100),
        ..Options::default()
    });
    let store = Store::load(&stack);
    for n in [1, 50] {
        let users: Vec<String> = (1..=n).map(user).collect();
        let resp = post(stack.listen_port, STRICT, instances(&users)).await;
        check_against_source(&store, &resp, &users);
    }
    // Materialize wrote through TLS too: its marker is there.
    let fingerprint = store.fingerprint(Service::RealtimeScoring);
    let ready =
        format!("/readyz?project=banking&service=realtime_scoring&fingerprint={fingerprint}");
    let (status, body) = reader_get(&stack, &ready);
    assert_eq!(status, 200, "{body}");
    assert_eq!(reader_get(&stack, "/healthz").0, 200);
}
