//! Feature writes (issue #23, part 1) end to end: Feast-shaped `POST /push` and `POST
//! /write-to-online-store` through real Envoy to `ferry serve`, into real Redis, served by the
//! next enriched request (the route's near cache is off); refusals with their status and body,
//! nothing written; ordering at microsecond precision; a push while a new fingerprint is held
//! back lands under both; concurrent writers lose nothing and no reader sees a torn vector;
//! the same on a Redis Cluster.

#[path = "push/concurrency.rs"]
mod concurrency;
#[path = "push/harness.rs"]
mod harness;

use std::time::{SystemTime, UNIX_EPOCH};

use ferry_integration_tests::rfc3339;
use ferry_protos::v1::{value::Kind, Value};
use harness::{WriteStack, PUSH_TOKEN, READ, WRITE_TOKEN};
use serde_json::{json, Value as Json};

/// Now + 1 minute, in microseconds: newer than any generated row, inside the 5 minutes of
/// clock skew a write may be ahead.
fn soon_us() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(now.as_micros()).unwrap() + 60_000_000
}

/// A user_profile push of one row for `user` whose features all encode `n`.
fn profile(user: &str, ts: Json, n: i64) -> Json {
    json!({
        "push_source_name": "profile_push",
        "df": {
            "user_id": [user],
            "event_timestamp": [ts],
            "age": [n],
            "credit_score": [n as f64],
            "account_tier": [format!("t{n}")],
            "is_verified": [n % 2 == 0],
            "signup_days": [n],
        },
        "to": "online"
    })
}

fn header<'a>(r: &'a ferry_integration_tests::http::Response, name: &str) -> &'a str {
    r.header(name).unwrap_or_else(|| panic!("no {name} header"))
}

fn int(v: &Value) -> i64 {
    match v.kind {
        Some(Kind::Int64Val(i)) => i,
        ref other => panic!("not an int64: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_through_envoy_is_served_by_the_next_request_in_microsecond_order() {
    let w = WriteStack::start(50, false);
    let t = soon_us();
    let r = w
        .write(
            "/push",
            Some(WRITE_TOKEN),
            &profile("u000001", json!(rfc3339(t)), 41),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.body.is_empty(), "Feast's /push answers no body");
    assert_eq!(header(&r, "x-ferry-rows-written"), "1");
    let served = w.served("u000001").await;
    assert_eq!(served["user_profile__age"], 41, "{served}");
    assert_eq!(served["user_profile__account_tier"], "t41");
    assert_eq!(served["user_profile__credit_score"], 41.0);

    // One microsecond older: skipped, the value stays; equal: overwrites (a re-push is
    // idempotent); two pushes in the same second both land, in order (epoch seconds with a
    // fraction this time).
    let r = w
        .write(
            "/push",
            Some(WRITE_TOKEN),
            &profile("u000001", json!(rfc3339(t - 1)), 1),
        )
        .await;
    assert_eq!(
        (r.status, header(&r, "x-ferry-rows-skipped-older")),
        (200, "1")
    );
    assert_eq!(w.served("u000001").await["user_profile__age"], 41);
    let r = w
        .write(
            "/push",
            Some(WRITE_TOKEN),
            &profile("u000001", json!(rfc3339(t)), 42),
        )
        .await;
    assert_eq!((r.status, header(&r, "x-ferry-rows-written")), (200, "1"));
    assert_eq!(w.served("u000001").await["user_profile__age"], 42);
    let secs = |us: i64| json!(us as f64 / 1e6);
    for (dt, n) in [(100, 43), (200, 44)] {
        let r = w
            .write(
                "/push",
                Some(WRITE_TOKEN),
                &profile("u000001", secs(t + dt), n),
            )
            .await;
        assert_eq!(
            (r.status, header(&r, "x-ferry-rows-written")),
            (200, "1"),
            "{n}"
        );
        assert_eq!(w.served("u000001").await["user_profile__age"], n);
    }
    let v = w.vectors("realtime_scoring", "u000001");
    assert_eq!(v.len(), 1);
    // realtime_scoring: transactions, user_embedding, user_profile (sorted by view name).
    assert_eq!(v[0].1.views[2].event_time_us, t + 200);

    // /write-to-online-store answers Feast's `null`; a new entity gets a vector whose other
    // views are absent (NOT_FOUND), never zero.
    let body = json!({
        "feature_view_name": "transactions",
        "df": {
            "user_id": ["u900001"], "event_timestamp": [t / 1_000_000],
            "txn_count_7d": [5], "txn_amount_avg_7d": [12.5], "last_txn_amount": [3.25],
            "has_chargeback": [false]
        }
    });
    let r = w
        .write("/write-to-online-store", Some(WRITE_TOKEN), &body)
        .await;
    assert_eq!((r.status, &r.body[..]), (200, &b"null"[..]), "{:?}", r.body);
    let v = w.vectors("realtime_scoring", "u900001");
    assert_eq!(v.len(), 1);
    // transactions' features by name: has_chargeback, last_txn_amount, txn_amount_avg_7d,
    // txn_count_7d.
    assert_eq!(int(&v[0].1.views[0].values[3]), 5, "{:?}", v[0].1);
    assert!(v[0].1.views[1].values.is_empty() && v[0].1.views[2].values.is_empty());
    let served = w.served("u900001").await;
    assert_eq!(served["transactions__txn_count_7d"], 5);
    assert_eq!(served["user_profile__age"], Json::Null);

    let m = w.cp.metrics();
    assert!(
        m.contains("ferry_write_rows_total{result=\"written\"} 5"),
        "{m}"
    );
    assert!(
        m.contains("ferry_write_rows_total{result=\"skipped_older\"} 1"),
        "{m}"
    );
    assert!(m.contains("ferry_write_duration_seconds_count 6"), "{m}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_problem_and_write_nothing() {
    let w = WriteStack::start(20, false);
    let before = w.dump();
    assert!(!before.is_empty());
    let ts = json!(rfc3339(soon_us()));
    let good = profile("u000002", ts.clone(), 7);
    let edited = |f: &dyn Fn(&mut Json)| {
        let mut b = good.clone();
        f(&mut b);
        b
    };
    // (path, token, body, status, x-ferry-error, a text the body holds)
    type Case<'a> = (&'a str, Option<&'a str>, Json, u16, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        (
            "/push",
            None,
            good.clone(),
            401,
            "unauthorized",
            "needs a credential",
        ),
        (
            "/push",
            Some(PUSH_TOKEN),
            good.clone(),
            403,
            "forbidden",
            "write role",
        ),
        (
            "/push",
            Some(READ),
            good.clone(),
            403,
            "forbidden",
            "write role",
        ),
        (
            "/push",
            Some("nope"),
            good.clone(),
            401,
            "unauthorized",
            "needs a credential",
        ),
        (
            "/push",
            Some(WRITE_TOKEN),
            edited(&|b| b["df"]["age"] = json!(["old"])),
            422,
            "invalid_rows",
            "row 0, column 'age': expected an int64, got",
        ),
        (
            "/push",
            Some(WRITE_TOKEN),
            edited(&|b| b["push_source_name"] = json!("nope")),
            422,
            "unknown_push_source",
            "Unable to find push source 'nope'.",
        ),
        (
            "/write-to-online-store",
            Some(WRITE_TOKEN),
            json!({"feature_view_name": "nope", "df": {}}),
            404,
            "unknown_view",
            "Feature view nope does not exist in project banking",
        ),
        (
            "/push",
            Some(WRITE_TOKEN),
            edited(&|b| {
                b["df"].as_object_mut().unwrap().remove("user_id");
            }),
            422,
            "invalid_rows",
            "column 'user_id' (of view 'user_profile') is missing",
        ),
        (
            "/push",
            Some(WRITE_TOKEN),
            edited(&|b| b["df"]["event_timestamp"] = json!([null])),
            422,
            "invalid_rows",
            "missing event timestamp",
        ),
        (
            "/push",
            Some(WRITE_TOKEN),
            edited(&|b| b["df"]["event_timestamp"] = json!(["last tuesday"])),
            422,
            "invalid_rows",
            "invalid timestamp 'last tuesday'",
        ),
        (
            "/push",
            Some(WRITE_TOKEN),
            edited(&|b| b["to"] = json!("offline")),
            422,
            "offline_write_refused",
            "Feast's offline store",
        ),
        (
            "/push",
            Some(WRITE_TOKEN),
            json!({"df": {}}),
            422,
            "invalid_request",
            "push_source_name",
        ),
    ];
    for (path, token, body, status, code, needle) in cases {
        let r = w.write(path, token, &body).await;
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, status, "{code}: {text}");
        assert_eq!(r.header("x-ferry-error"), Some(code), "{text}");
        assert!(text.contains(needle), "{needle} not in {text}");
    }
    // Every problem of a request at once: a bad type in one row, a bad id in another.
    let mut two = good.clone();
    for (_, v) in two["df"].as_object_mut().unwrap() {
        let first = v[0].clone();
        *v = json!([first.clone(), first]);
    }
    two["df"]["age"] = json!([1, "x"]);
    two["df"]["user_id"] = json!(["u000003", 7]);
    let r = w.write("/push", Some(WRITE_TOKEN), &two).await;
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 422, "{text}");
    assert!(
        text.contains("row 1, column 'age'") && text.contains("row 1, column 'user_id'"),
        "{text}"
    );
    // Oversize: over the 8 MiB the API reads.
    let big = format!(
        r#"{{"push_source_name": "profile_push", "df": {{"pad": ["{}"]}}}}"#,
        "x".repeat(9 << 20)
    );
    let r = w.write_raw("/push", Some(WRITE_TOKEN), big).await;
    assert_eq!(r.status, 413, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("x-ferry-error"), Some("body_too_large"));

    assert_eq!(w.dump(), before, "a refused write changed Redis");
    let m = w.cp.metrics();
    for line in [
        "ferry_write_refusals_total{reason=\"unauthorized\"} 2",
        "ferry_write_refusals_total{reason=\"forbidden\"} 2",
        "ferry_write_refusals_total{reason=\"invalid_rows\"} 5",
        "ferry_write_refusals_total{reason=\"body_too_large\"} 1",
        "ferry_write_rows_total{result=\"written\"} 0",
    ] {
        assert!(m.contains(line), "{line} not in\n{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_while_a_new_fingerprint_is_held_back_lands_under_both() {
    let w = WriteStack::start(20, false);
    // A new fingerprint for realtime_scoring (user_embedding dropped): ferry serve holds the
    // change back until it is materialized and pushed.
    let file = w.stack.repo.join("ferry.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap();
    let changed = yaml.replacen(
        "features: [user_profile, transactions, user_embedding]",
        "features: [user_profile, transactions]",
        1,
    );
    assert_ne!(changed, yaml);
    std::fs::write(&file, changed).unwrap();
    w.cp.wait_status(
        "the change held back",
        std::time::Duration::from_secs(10),
        |s| {
            s.last_refused
                .as_ref()
                .is_some_and(|r| r.error.contains("fingerprint"))
        },
    );
    let r = w
        .write(
            "/push",
            Some(WRITE_TOKEN),
            &profile("u000004", json!(rfc3339(soon_us())), 77),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = w.vectors("realtime_scoring", "u000004");
    assert_eq!(v.len(), 2, "one vector per fingerprint: {v:?}");
    for (key, vector) in &v {
        // user_profile's features by name: account_tier, age, ...
        let profile = vector.views.last().unwrap();
        assert_eq!(int(&profile.values[1]), 77, "{key}");
    }
    assert_eq!(
        v[0].1.views.len() + v[1].1.views.len(),
        5,
        "a 3-view and a 2-view layout"
    );
    assert_eq!(w.served("u000004").await["user_profile__age"], 77);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_lose_nothing_and_readers_see_no_torn_vector() {
    let sizes = concurrency::Sizes::from_env();
    let w = WriteStack::start(sizes.entities.max(30), false);
    let report = concurrency::run(&w, sizes).await;
    assert!(report.pushes > 0 && report.reads > 0, "{report:?}");
    let m = w.cp.metrics();
    let conflicts: u64 = m
        .lines()
        .find_map(|l| l.strip_prefix("ferry_write_conflicts_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no conflict counter in\n{m}"));
    // The retry rate: compare-and-set attempts that found the vector changed, per push.
    eprintln!(
        "concurrency {sizes:?}: {report:?}, {conflicts} conflicts ({:.2} % of pushes)",
        conflicts as f64 * 100.0 / report.pushes as f64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_to_a_redis_cluster_is_served() {
    let w = WriteStack::start(30, true);
    let r = w
        .write(
            "/push",
            Some(WRITE_TOKEN),
            &profile("u000005", json!(rfc3339(soon_us())), 55),
        )
        .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(w.served("u000005").await["user_profile__age"], 55);
    let v = w.vectors("realtime_scoring", "u000005");
    assert_eq!(v.len(), 1);
    assert_eq!(int(&v[0].1.views[2].values[1]), 55);
}

/// `ferry materialize` while pushes run: materialize merges into existing vectors under the
/// merge rule, so every push (its event times newer than the files') survives it, and the
/// files' rows still fill what no push touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn materialize_while_pushing_keeps_every_newer_push() {
    let w = WriteStack::start(200, false);
    let repo = w.stack.repo.clone();
    let url = w.stack.redis.url();
    let untouched = w.served("u000150").await;
    // A push before materialize runs again, then pushes during it.
    let first = w
        .write(
            "/push",
            Some(WRITE_TOKEN),
            &profile("u000001", json!(rfc3339(soon_us())), 901),
        )
        .await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let materialize = std::thread::spawn(move || {
        for _ in 0..3 {
            ferry_integration_tests::run(
                std::process::Command::new(ferry_integration_tests::bin("ferry"))
                    .arg("materialize")
                    .arg(&repo)
                    .args(["--redis", &url]),
            );
        }
    });
    let mut pushed = 0;
    while !materialize.is_finished() {
        for e in 2..=40 {
            let user = format!("u{e:06}");
            let n = 1000 + e as i64;
            let r = w
                .write(
                    "/push",
                    Some(WRITE_TOKEN),
                    &profile(&user, json!(rfc3339(soon_us())), n),
                )
                .await;
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            pushed += 1;
        }
    }
    materialize.join().unwrap();
    assert!(pushed > 0);
    assert_eq!(w.served("u000001").await["user_profile__age"], 901);
    for e in 2..=40 {
        let served = w.served(&format!("u{e:06}")).await;
        assert_eq!(served["user_profile__age"], 1000 + e, "{served}");
    }
    // An entity no push touched holds the files' rows, as before.
    assert_eq!(w.served("u000150").await, untouched);
    eprintln!("materialize x3 during {pushed} pushes: every push kept");
}
