//! The reader over real HTTP against a real Redis.

#[cfg(test)] // marks the harness as test code for clippy's allow-unwrap-in-tests
mod support;

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferry_protos::{entity_key, redis_key, READER_PATH};
use ferry_reader::Config;
use http_body_util::BodyExt;
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::*;

async fn setup(config: impl FnOnce(&mut Config)) -> (RedisServer, ReaderServer) {
    let redis = RedisServer::start();
    let mut cfg = Config::with_redis(redis.url());
    config(&mut cfg);
    let reader = ReaderServer::start(cfg).await;
    (redis, reader)
}

async fn seed(redis: &RedisServer) {
    set(
        redis,
        &[
            (redis_key("bank", "scoring", 0xab, "u1"), b"vec-u1".to_vec()),
            (redis_key("bank", "scoring", 0xab, "u3"), b"vec-u3".to_vec()),
            (
                redis_key("bank", "fraud", 7, &entity_key(&["u1", "m9"])),
                vec![0, 1, 2, 255],
            ),
            // Same entity under another fingerprint: must not be returned for 0xab.
            (
                redis_key("bank", "scoring", 0xac, "u2"),
                b"old-schema".to_vec(),
            ),
        ],
    )
    .await;
}

fn two_lookups() -> ferry_protos::v1::VectorRequest {
    let composite = entity_key(&["u1", "m9"]);
    let composite_missing = entity_key(&["u2", "m9"]);
    request(
        "bank",
        &[
            ("scoring", 0xab, &["u1", "u2", "u3", "nobody"]),
            (
                "fraud",
                7,
                &[composite_missing.as_str(), composite.as_str()],
            ),
        ],
    )
}

fn assert_two_lookups(answer: &Answer) {
    let response = answer.vectors();
    assert_eq!(response.results.len(), 2);
    assert_eq!(
        response.results[0].vectors,
        vec![b"vec-u1".to_vec(), vec![], b"vec-u3".to_vec(), vec![]]
    );
    assert_eq!(
        response.results[1].vectors,
        vec![vec![], vec![0, 1, 2, 255]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn found_and_missing_keys_come_back_in_order_across_two_lookups() {
    let (redis, reader) = setup(|_| {}).await;
    seed(&redis).await;
    let client = http1_client();
    let answer = post(&client, &reader.url(READER_PATH), &two_lookups()).await;
    assert_two_lookups(&answer);
    reader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge_request_works() {
    let (redis, reader) = setup(|_| {}).await;
    seed(&redis).await;
    let client = h2c_client();
    for _ in 0..3 {
        let answer = post(&client, &reader.url(READER_PATH), &two_lookups()).await;
        assert_two_lookups(&answer);
    }
    let health = get(&client, &reader.url("/healthz")).await;
    assert_eq!(health.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_keep_alive_serves_many_requests_on_one_connection() {
    let (redis, reader) = setup(|_| {}).await;
    seed(&redis).await;
    let stream = tokio::net::TcpStream::connect(reader.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let body = prost::Message::encode_to_vec(&two_lookups());
    for _ in 0..5 {
        sender.ready().await.unwrap();
        let request = Request::post(READER_PATH)
            .header("host", "reader")
            .body(http_body_util::Full::new(Bytes::from(body.clone())))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_ne!(
            response.headers().get("connection").map(|v| v.as_bytes()),
            Some(&b"close"[..])
        );
        response.into_body().collect().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_protobuf_is_400_json() {
    let (_redis, reader) = setup(|_| {}).await;
    let answer = send(
        &http1_client(),
        Method::POST,
        &reader.url(READER_PATH),
        vec![0xff, 0xff, 0xff],
    )
    .await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);
    assert_eq!(answer.headers["content-type"], "application/json");
    let json = answer.json();
    assert_eq!(json["error"], "bad_request");
    assert!(
        json["message"]
            .as_str()
            .unwrap()
            .contains("not a VectorRequest"),
        "{json}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_names_keys_and_empty_requests_are_400() {
    let (_redis, reader) = setup(|_| {}).await;
    let client = http1_client();
    let url = reader.url(READER_PATH);
    for (req, expected) in [
        (
            request("bank", &[("scoring:x", 1, &["u1"])]),
            "lookups[0].service \"scoring:x\"",
        ),
        (
            request("bank/x", &[("scoring", 1, &["u1"])]),
            "project \"bank/x\"",
        ),
        (
            request("bank", &[("scoring", 1, &["u\r\n1"])]),
            "control character U+000D",
        ),
        (request("bank", &[]), "no lookups"),
    ] {
        let answer = post(&client, &url, &req).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST);
        let json = answer.json();
        assert_eq!(json["error"], "bad_request");
        assert!(
            json["message"].as_str().unwrap().contains(expected),
            "{json} lacks {expected}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_keys_is_413_batch_too_large() {
    let (_redis, reader) = setup(|c| c.max_batch = 3).await;
    let client = http1_client();
    let answer = post(
        &client,
        &reader.url(READER_PATH),
        &request("bank", &[("a", 1, &["1", "2"]), ("b", 1, &["3", "4"])]),
    )
    .await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    let json = answer.json();
    assert_eq!(json["error"], "batch_too_large");
    assert_eq!(
        json["message"],
        "request has 4 entity keys; this reader accepts at most 3 per request"
    );
    // Exactly at the limit is fine.
    let answer = post(
        &client,
        &reader.url(READER_PATH),
        &request("bank", &[("a", 1, &["1", "2", "3"])]),
    )
    .await;
    assert_eq!(answer.vectors().results[0].vectors.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_body_is_413_whether_declared_or_streamed() {
    let (_redis, reader) = setup(|c| c.max_body_bytes = 1024).await;
    // Declared by Content-Length: refused before reading.
    let answer = send(
        &http1_client(),
        Method::POST,
        &reader.url(READER_PATH),
        vec![0u8; 2048],
    )
    .await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(answer.json()["error"], "body_too_large");

    // Chunked, no length: capped while reading.
    let client: Client<_, Chunked> = Client::builder(TokioExecutor::new()).build_http();
    let chunks: VecDeque<Bytes> = (0..4).map(|_| Bytes::from(vec![0u8; 512])).collect();
    let request = Request::post(reader.url(READER_PATH))
        .body(Chunked(chunks))
        .unwrap();
    let response = client.request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["error"], "body_too_large");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_are_404_and_wrong_methods_405() {
    let (_redis, reader) = setup(|_| {}).await;
    let client = http1_client();
    let answer = get(&client, &reader.url("/nope")).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
    assert_eq!(answer.json()["error"], "not_found");
    let answer = get(&client, &reader.url(READER_PATH)).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(answer.headers["allow"], "POST");
    assert_eq!(answer.json()["error"], "method_not_allowed");
    let answer = send(&client, Method::POST, &reader.url("/healthz"), vec![]).await;
    assert_eq!(answer.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_is_503_and_the_reader_recovers_when_it_is_back() {
    let (mut redis, reader) = setup(|_| {}).await;
    seed(&redis).await;
    let client = http1_client();
    let url = reader.url(READER_PATH);
    assert_two_lookups(&post(&client, &url, &two_lookups()).await);

    redis.stop();
    let answer = post(&client, &url, &two_lookups()).await;
    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
    let json = answer.json();
    assert_eq!(json["error"], "redis_unavailable");
    assert!(!json["message"].as_str().unwrap().is_empty());
    let health = get(&client, &reader.url("/healthz")).await;
    assert_eq!(health.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(health.json()["redis"], "down");
    assert!(get(&client, &reader.url("/metrics"))
        .await
        .text()
        .contains("ferry_reader_redis_up 0\n"));

    // Back on the same port, empty (no persistence): the reader reconnects by itself.
    redis.restart();
    seed(&redis).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let answer = loop {
        let answer = post(&client, &url, &two_lookups()).await;
        if answer.status == StatusCode::OK || Instant::now() > deadline {
            break answer;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_two_lookups(&answer);
    let health = get(&client, &reader.url("/healthz")).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(
        health.json(),
        serde_json::json!({"status": "ok", "redis": "up"})
    );
    assert!(get(&client, &reader.url("/metrics"))
        .await
        .text()
        .contains("ferry_reader_redis_up 1\n"));
    reader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_request_after_redis_restarts_succeeds() {
    // The reader's connection died while idle; the one retry in `Store::call` hides that.
    let (mut redis, reader) = setup(|_| {}).await;
    seed(&redis).await;
    let client = http1_client();
    let url = reader.url(READER_PATH);
    assert_two_lookups(&post(&client, &url, &two_lookups()).await);
    redis.restart();
    seed(&redis).await;
    assert_two_lookups(&post(&client, &url, &two_lookups()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_is_504_redis_timeout() {
    let (redis, reader) = setup(|c| c.redis_timeout_ms = 50).await;
    seed(&redis).await;
    let client = http1_client();
    let url = reader.url(READER_PATH);
    assert_two_lookups(&post(&client, &url, &two_lookups()).await);
    let mut admin = connection(&redis).await;
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(400)
        .arg("ALL")
        .query_async::<()>(&mut admin)
        .await
        .unwrap();
    // Answered at the 50 ms deadline, not when the 400 ms pause ends.
    let answer = post(&client, &url, &two_lookups()).await;
    assert_eq!(answer.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(answer.json()["error"], "redis_timeout");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_two_lookups(&post(&client, &url, &two_lookups()).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_text_contains_the_counters() {
    let (redis, reader) = setup(|c| c.max_batch = 10).await;
    seed(&redis).await;
    let client = http1_client();
    let url = reader.url(READER_PATH);
    assert_two_lookups(&post(&client, &url, &two_lookups()).await);
    send(&client, Method::POST, &url, vec![0xff]).await;
    let answer = get(&client, &reader.url("/metrics")).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = answer.text();
    for line in [
        "ferry_reader_requests_total{route=\"vectors\",status=\"200\"} 1",
        "ferry_reader_requests_total{route=\"vectors\",status=\"400\"} 1",
        "ferry_reader_keys_requested_total 6",
        "ferry_reader_keys_found_total 3",
        "ferry_reader_redis_errors_total{kind=\"unavailable\"} 0",
        "ferry_reader_redis_up 1",
        "ferry_reader_request_duration_seconds_count 2",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    assert!(text.contains("ferry_reader_request_duration_seconds_bucket{le=\"+Inf\"} 2"));
    assert!(text.ends_with("\n# EOF\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_server_return() {
    let (_redis, reader) = setup(|_| {}).await;
    let addr = reader.addr;
    assert_eq!(
        get(&http1_client(), &reader.url("/healthz")).await.status,
        StatusCode::OK
    );
    reader.stop().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
