//! The reader against a Redis that goes silent (a frozen proxy: sockets open, nothing answered)
//! and against a Redis killed and restarted: requests fail fast with the reader's error while it
//! lasts, and the reader serves correct values again by itself afterwards.

// The whole file is test code (helpers included), for clippy's allow-panic-in-tests.
#![cfg(test)]

mod support;

use std::time::{Duration, Instant};

use ferry_protos::{redis_key, READER_PATH};
use ferry_reader::Config;
use ferry_test_support::proxy::FreezingProxy;
use hyper::StatusCode;
use support::*;

/// A client gives up on a reader answer after this long: a hanging request fails the test.
const CLIENT_PATIENCE: Duration = Duration::from_secs(5);
/// Generous bound on recovery; the measured time is printed.
const RECOVERY_BOUND: Duration = Duration::from_secs(15);

async fn seed(redis: &RedisServer) {
    let pairs: Vec<_> = (0..8)
        .map(|i| {
            (
                redis_key("bank", "scoring", 0xab, &format!("u{i}")),
                format!("vec-u{i}").into_bytes(),
            )
        })
        .collect();
    set(redis, &pairs).await;
}

fn batch() -> ferry_protos::v1::VectorRequest {
    request("bank", &[("scoring", 0xab, &["u0", "u3", "nobody", "u7"])])
}

/// The answer to `batch()`, checked value by value.
fn assert_correct(answer: &Answer) {
    let response = answer.vectors();
    assert_eq!(response.results.len(), 1);
    assert_eq!(
        response.results[0].vectors,
        vec![
            b"vec-u0".to_vec(),
            b"vec-u3".to_vec(),
            Vec::new(),
            b"vec-u7".to_vec()
        ]
    );
}

async fn ask(client: &HttpClient, url: &str) -> Answer {
    tokio::time::timeout(CLIENT_PATIENCE, post(client, url, &batch()))
        .await
        .unwrap_or_else(|_| panic!("the reader did not answer within {CLIENT_PATIENCE:?}"))
}

/// Asks until a correct answer comes; every answer before it must be one of the reader's Redis
/// errors. Returns how long that took.
async fn until_served(client: &HttpClient, url: &str) -> Duration {
    let start = Instant::now();
    loop {
        let answer = ask(client, url).await;
        if answer.status == StatusCode::OK {
            assert_correct(&answer);
            return start.elapsed();
        }
        let code = answer.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            matches!(code.as_str(), "redis_timeout" | "redis_unavailable"),
            "unexpected answer {}: {}",
            answer.status,
            answer.text()
        );
        assert!(
            start.elapsed() < RECOVERY_BOUND,
            "not served again within {RECOVERY_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_redis_gets_504s_fast_and_service_comes_back_after_it_answers_again() {
    let redis = RedisServer::start();
    seed(&redis).await;
    let proxy = FreezingProxy::start(redis.port);
    let mut config = Config::with_redis(proxy.url());
    config.redis_timeout_ms = 100;
    let reader = ReaderServer::start(config).await;
    let client = http1_client();
    let url = reader.url(READER_PATH);
    assert_correct(&ask(&client, &url).await);

    proxy.freeze();
    // Long enough for the reader to give up on its connection more than once.
    let mut slowest = Duration::ZERO;
    for _ in 0..15 {
        let start = Instant::now();
        let answer = ask(&client, &url).await;
        slowest = slowest.max(start.elapsed());
        assert_eq!(
            answer.status,
            StatusCode::GATEWAY_TIMEOUT,
            "{}",
            answer.text()
        );
        assert_eq!(answer.json()["error"], "redis_timeout");
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let health = get(&client, &reader.url("/healthz")).await;
    assert_eq!(health.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(health.json()["error"], "redis_timeout");
    println!("MEASURED: slowest answer while Redis was frozen: {slowest:?} (budget 100 ms)");

    proxy.thaw();
    let recovery = until_served(&client, &url).await;
    println!("MEASURED: served again {recovery:?} after Redis answered again");
    // And it stays served.
    for _ in 0..20 {
        assert_correct(&ask(&client, &url).await);
    }
    assert_eq!(
        get(&client, &reader.url("/healthz")).await.status,
        StatusCode::OK
    );
    reader.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_on_its_port_is_served_again() {
    let mut redis = RedisServer::start();
    seed(&redis).await;
    let reader = ReaderServer::start(Config::with_redis(redis.url())).await;
    let client = http1_client();
    let url = reader.url(READER_PATH);
    assert_correct(&ask(&client, &url).await);

    redis.stop();
    for _ in 0..5 {
        let answer = ask(&client, &url).await;
        assert_eq!(
            answer.status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{}",
            answer.text()
        );
        assert_eq!(answer.json()["error"], "redis_unavailable");
    }
    redis.restart();
    seed(&redis).await;
    let recovery = until_served(&client, &url).await;
    println!("MEASURED: served again {recovery:?} after Redis restarted");
    for _ in 0..20 {
        assert_correct(&ask(&client, &url).await);
    }
    reader.stop().await;
}
