//! The reader against a Redis that speaks TLS only (a test CA, `--redis-ca-file`) and against
//! Redis with a password and an ACL user: values served, and no credential in any answer.

// The whole file is test code (helpers included), for clippy's allow-panic-in-tests.
#![cfg(test)]

mod support;

use ferry_protos::{redis_key, READER_PATH};
use ferry_reader::Config;
use ferry_redis::{RedisArgs, Timeouts};
use hyper::StatusCode;
use std::time::Duration;
use support::*;

const TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(5),
    response: Some(Duration::from_secs(5)),
};

/// Writes two vectors through a connection made from `args`.
async fn seed(args: &RedisArgs) {
    let mut conn = args.target().unwrap().connect(TIMEOUTS).await.unwrap();
    for (entity, value) in [("u1", "vec-u1"), ("u2", "vec-u2")] {
        redis::cmd("SET")
            .arg(redis_key("bank", "scoring", 0xab, entity))
            .arg(value)
            .exec_async(&mut conn)
            .await
            .unwrap();
    }
}

async fn answer(mut config: Config) -> (Answer, Answer) {
    // What is tested is TLS and credentials, not the budget: a loaded CI machine may need more
    // than the 50 ms default for a first call that also connects (and handshakes).
    config.redis_timeout_ms = config.redis_timeout_ms.max(2000);
    let reader = ReaderServer::start(config).await;
    let client = http1_client();
    let batch = request("bank", &[("scoring", 0xab, &["u1", "nobody", "u2"])]);
    let vectors = post(&client, &reader.url(READER_PATH), &batch).await;
    let health = get(&client, &reader.url("/healthz")).await;
    reader.stop().await;
    (vectors, health)
}

fn assert_served(vectors: &Answer) {
    assert_eq!(
        vectors.vectors().results[0].vectors,
        vec![b"vec-u1".to_vec(), Vec::new(), b"vec-u2".to_vec()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_a_private_ca_is_served() {
    let (redis, tls) = RedisServer::start_tls();
    let mut args = RedisArgs::with_url(format!("rediss://127.0.0.1:{}", redis.port));
    args.ca_file = Some(tls.ca_cert.clone());
    seed(&args).await;

    let mut config = Config::with_redis(args.url.clone());
    config.redis = args.clone();
    let (vectors, health) = answer(config).await;
    assert_served(&vectors);
    assert_eq!(health.status, StatusCode::OK);

    // Without the CA, the system's roots do not trust the test CA: the certificate is refused.
    let mut untrusted = Config::with_redis(args.url.clone());
    untrusted.redis_timeout_ms = 2000;
    let (vectors, health) = answer(untrusted).await;
    assert_eq!(
        vectors.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        vectors.text()
    );
    assert_eq!(vectors.json()["error"], "redis_unavailable");
    assert_eq!(health.status, StatusCode::SERVICE_UNAVAILABLE);
    let message = health.json()["message"].as_str().unwrap().to_owned();
    assert!(message.to_lowercase().contains("certificate"), "{message}");

    // Plain TCP to a TLS-only port is no Redis either.
    let plain = Config::with_redis(format!("redis://127.0.0.1:{}", redis.port));
    let (vectors, _) = answer(plain).await;
    assert_ne!(vectors.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_and_acl_users_are_served_and_never_shown() {
    let redis = RedisServer::start_with_password("s3cret-default");
    let in_url = RedisArgs::with_url(format!("redis://:s3cret-default@127.0.0.1:{}", redis.port));
    seed(&in_url).await;

    // The default user's password in the URL.
    let mut config = Config::with_redis(String::new());
    config.redis = in_url;
    assert_served(&answer(config).await.0);

    // An ACL user from the environment's settings (FERRY_REDIS_USERNAME/PASSWORD fill these).
    let mut config = Config::with_redis(redis.url());
    config.redis.username = Some("ferry".into());
    config.redis.password = Some("ferry-pass".into());
    let (vectors, health) = answer(config).await;
    assert_served(&vectors);
    assert_eq!(health.status, StatusCode::OK);

    // A wrong password: refused, and the answer names the problem without the password.
    let mut config = Config::with_redis(redis.url());
    config.redis.username = Some("ferry".into());
    config.redis.password = Some("wrong-pass-123".into());
    let (vectors, health) = answer(config.clone()).await;
    assert_eq!(
        vectors.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        vectors.text()
    );
    assert_eq!(health.status, StatusCode::SERVICE_UNAVAILABLE);
    for text in [vectors.text(), health.text(), format!("{config:?}")] {
        assert!(!text.contains("wrong-pass-123"), "{text}");
    }
    assert!(
        health.text().to_lowercase().contains("auth"),
        "{}",
        health.text()
    );

    // No password at all.
    let (vectors, _) = answer(Config::with_redis(redis.url())).await;
    assert_eq!(
        vectors.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        vectors.text()
    );
}
