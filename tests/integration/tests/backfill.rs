//! `ferry backfill` (issue #23, part 3) end to end: a view's rows from CSV, JSON lines and
//! Parquet files into real Redis through the write path of `/push`, served through real Envoy
//! by the next request; the merge rule (an older row is skipped, also inside one file); a file
//! with bad rows is refused with every problem named and nothing written.

#[path = "push/harness.rs"]
#[allow(dead_code)]
mod harness;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

use ferry_integration_tests::bin;
use ferry_integration_tests::feast::feast;
use harness::WriteStack;

/// Now + 1 minute, in epoch seconds: newer than any generated row.
fn soon() -> i64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(now.as_secs()).unwrap() + 60
}

/// `s` seconds since the epoch as RFC 3339.
fn rfc3339(s: i64) -> String {
    ferry_integration_tests::rfc3339(s * 1_000_000)
}

fn backfill(w: &WriteStack, file: &Path) -> Output {
    Command::new(bin("ferry"))
        .arg("backfill")
        .arg(&w.stack.repo)
        .arg("user_profile")
        .arg(file)
        .args(["--redis", &w.stack.redis.url()])
        .output()
        .unwrap()
}

/// Runs a backfill that must succeed; its stdout.
fn backfill_ok(w: &WriteStack, file: &Path) -> String {
    let out = backfill(w, file);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

const HEADER: &str =
    "user_id,event_timestamp,age,credit_score,account_tier,is_verified,signup_days";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_json_lines_and_parquet_backfills_are_served_under_the_merge_rule() {
    let w = WriteStack::start(50, false);
    let dir = w.stack.dir.path();
    let t = soon();

    // CSV: two rows of u000001 (the later one wins inside the file), one of u000002.
    let csv = dir.join("rows.csv");
    std::fs::write(
        &csv,
        format!(
            "{HEADER}\nu000001,{},40,640.5,gold,true,10\nu000001,{},41,641.5,gold,true,11\n\
             u000002,{},42,642.5,silver,false,12\n",
            rfc3339(t - 1),
            rfc3339(t),
            rfc3339(t)
        ),
    )
    .unwrap();
    let out = backfill_ok(&w, &csv);
    assert!(
        out.contains("2 row(s) written, 1 skipped as older, 0 refused"),
        "{out}"
    );
    let served = w.served("u000001").await;
    assert_eq!(served["user_profile__age"], 41, "{served}");
    assert_eq!(served["user_profile__account_tier"], "gold");
    assert_eq!(w.served("u000002").await["user_profile__signup_days"], 12);

    // JSON lines: u000001 one second older is skipped as older (Redis holds a newer row);
    // u000003 is written; epoch seconds and RFC 3339 both read.
    let jsonl = dir.join("rows.jsonl");
    std::fs::write(
        &jsonl,
        format!(
            "{{\"user_id\": \"u000001\", \"event_timestamp\": {}, \"age\": 7, \"credit_score\": 1.0, \"account_tier\": \"x\", \"is_verified\": false, \"signup_days\": 1}}\n\
             {{\"user_id\": \"u000003\", \"event_timestamp\": \"{}\", \"age\": 43, \"credit_score\": 643.0, \"account_tier\": \"bronze\", \"is_verified\": true, \"signup_days\": 13}}\n",
            t - 1,
            rfc3339(t)
        ),
    )
    .unwrap();
    let out = backfill_ok(&w, &jsonl);
    assert!(
        out.contains("1 row(s) written, 1 skipped as older"),
        "{out}"
    );
    assert_eq!(w.served("u000001").await["user_profile__age"], 41);
    assert_eq!(w.served("u000003").await["user_profile__age"], 43);

    // Parquet (written by pyarrow of the Feast venv), a typed timestamp column.
    let parquet = dir.join("rows.parquet");
    let script = format!(
        "import pyarrow as pa, pyarrow.parquet as pq\n\
         pq.write_table(pa.table({{\
         'user_id': pa.array(['u000004']),\
         'event_timestamp': pa.array([{t}000000], pa.timestamp('us', tz='UTC')),\
         'age': pa.array([44], pa.int64()),\
         'credit_score': pa.array([644.0], pa.float32()),\
         'account_tier': pa.array(['platinum']),\
         'is_verified': pa.array([True]),\
         'signup_days': pa.array([14], pa.int32())}}), '{}')\n",
        parquet.display()
    );
    feast(dir, "python", &["-c", &script]);
    let out = backfill_ok(&w, &parquet);
    assert!(out.contains("1 row(s) written, 0 skipped"), "{out}");
    let served = w.served("u000004").await;
    assert_eq!(served["user_profile__age"], 44, "{served}");
    assert_eq!(served["user_profile__account_tier"], "platinum");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_bad_rows_is_refused_whole_with_every_problem_named() {
    let w = WriteStack::start(20, false);
    let dir = w.stack.dir.path();
    let t = soon();
    let before = w.dump();
    let jsonl = dir.join("bad.jsonl");
    std::fs::write(
        &jsonl,
        format!(
            "{{\"user_id\": \"u000001\", \"event_timestamp\": {t}, \"age\": 50, \"credit_score\": 1.0, \"account_tier\": \"a\", \"is_verified\": true, \"signup_days\": 1}}\n\
             {{\"user_id\": \"u000002\", \"event_timestamp\": {t}, \"age\": \"old\", \"credit_score\": 1.0, \"account_tier\": \"a\", \"is_verified\": true, \"signup_days\": 1}}\n\
             not json\n\
             {{\"user_id\": \"u000003\", \"age\": 5, \"credit_score\": 1.0, \"account_tier\": \"a\", \"is_verified\": true, \"signup_days\": 1}}\n"
        ),
    )
    .unwrap();
    let out = backfill(&w, &jsonl);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("3 problem(s), nothing was written"), "{err}");
    assert!(
        err.contains("row 1, column 'age': expected an int64"),
        "{err}"
    );
    assert!(err.contains("line 3:"), "{err}");
    assert!(
        err.contains("row 2, column 'event_timestamp': missing event timestamp"),
        "{err}"
    );
    // The good first row was not written either.
    assert_eq!(w.dump(), before, "a refused backfill changed Redis");

    // A CSV cell the reader cannot parse, and an unknown view: refused by name.
    let csv = dir.join("bad.csv");
    std::fs::write(
        &csv,
        format!("{HEADER}\nu000001,{},many,1.0,a,true,1\n", rfc3339(t)),
    )
    .unwrap();
    let out = backfill(&w, &csv);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("column 'age'"), "{err}");
    let out = Command::new(bin("ferry"))
        .arg("backfill")
        .arg(&w.stack.repo)
        .arg("no_such_view")
        .arg(&csv)
        .args(["--redis", &w.stack.redis.url()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("view 'no_such_view' is not a feature view"),
        "{err}"
    );
    assert_eq!(w.dump(), before);
}
