//! Feast's newer Redis layouts served by Ferry, compared with Feast 0.67's own
//! `get_online_features` (asked by FeatureService, so Feast takes its own fast paths) on the
//! same Redis, through a real Envoy: a `precompute_online` service read from its precomputed
//! vector (one field per entity), a precomputed vector under another schema refused, online
//! feature view versioning (the latest view stored as `VIEW_vN`, a service pinned to `@v0`,
//! read per field and from its precomputed vector), a
//! `MATERIALIZING` view (Feast refuses it, Ferry serves what Redis holds) and a disabled one
//! (refused by `ferry apply`).
//!
//! Expected differences, asserted as such: Feast's precomputed path reports the precompute
//! time as every feature's event time (Ferry: each view's own), PRESENT for a null or for a
//! view without a row (Ferry: NULL_VALUE, NOT_FOUND; a view without a row is even
//! OUTSIDE_MAX_AGE there, its precompute storing it at the epoch), and fails the whole call
//! for an entity without a vector (Ferry: that entity NOT_FOUND); a pinned view's columns are
//! named `view@v0__feature` by Feast and `view_v0__feature` by Ferry. A pinned precomputed
//! service holds, as Feast 0.67 precomputes it, the view's current version's values: Ferry
//! serves them as Feast does.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use ferry_integration_tests::bin;
use ferry_integration_tests::feast::{feast, materialize, FeastSetup, FeastStack};
use ferry_integration_tests::http::raw;
use serde_json::{json, Value as Json};

fn routes(extra_services: &str) -> String {
    format!(
        "  - match: {{path_exact: /get-online-features}}
    service: scoring
    feast_services: [merchant_risk{extra_services}]
    format: feast_rest
    entity: {{field: user_id}}
    on_missing_entity: null
"
    )
}

/// `feast_layouts.py ARGS...` on the stack's Feast repo: what it printed.
fn layouts_script(stack: &FeastStack, args: &[&str]) -> String {
    let script = stack.fixture.join("feast_layouts.py");
    let script = script.to_str().expect("utf-8 path");
    let all: Vec<&str> = std::iter::once(script)
        .chain(args.iter().copied())
        .collect();
    feast(&stack.feast_repo, "python", &all)
}

/// Feast's `get_online_features` for `service` (by FeatureService) over `rows`.
fn feast_by_service(stack: &FeastStack, service: &str, rows: &Json) -> Json {
    let out = layouts_script(stack, &["online", service, &rows.to_string()]);
    // Feast logs its warnings on the same output: the answer is the last JSON line.
    let last = out
        .lines()
        .rfind(|l| l.starts_with('{'))
        .unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("feast_layouts.py: {e}: {out}"))
}

/// One column of a Feast-shaped answer by name: (values, statuses, event times as strings or
/// seconds).
fn column<'a>(answer: &'a Json, name: &str) -> &'a Json {
    let names = answer["metadata"]["feature_names"]
        .as_array()
        .expect("names");
    let i = names
        .iter()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("{name} not in {names:?}"));
    &answer["results"][i]
}

/// Seconds since the epoch of Ferry's `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`.
fn epoch_seconds(rfc3339: &str) -> i64 {
    let n = |r: std::ops::Range<usize>| -> i64 { rfc3339[r].parse().expect("digits") };
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19)
}

fn same_value(a: &Json, b: &Json) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-6 * x.abs().max(1.0),
        _ => a == b,
    }
}

/// Feast's FieldStatus numbers.
const PRESENT: i64 = 1;
const OUTSIDE_MAX_AGE: i64 = 4;

/// How a service's event times are checked: against Feast's per-view read by reference (an
/// unpinned service, whose by-service answer, precomputed, reports the precompute time), its
/// by-service answer (pinned, per field), or not at all (pinned and precomputed: Feast reports
/// the precompute time, and no read by reference names the version its vector was made of).
#[derive(Clone, Copy, PartialEq)]
enum Times {
    PerView,
    ByService,
    Unchecked,
}

/// Compares Ferry's answer for `service` with Feast's own (by service: values and statuses)
/// and with each view's event time (see [`Times`]); counts the statuses compared and the
/// event times where Feast's by-service answer differs.
async fn compare(
    stack: &FeastStack,
    service: &str,
    rows: &Json,
    times: Times,
    counts: &mut BTreeMap<String, usize>,
) {
    let ferry = stack.rest(service, rows).await;
    let feast = feast_by_service(stack, service, rows);
    assert!(feast.get("error").is_none(), "Feast refused: {feast}");
    // By reference `view:feature` Feast reads each view's latest version: only for unpinned.
    let per_view = (times == Times::PerView).then(|| stack.feast_online(service, rows));
    let n = rows.as_array().expect("rows").len();
    let names = feast["names"].as_array().expect("names");
    for (f, name) in names.iter().enumerate() {
        let feast_name = name.as_str().expect("name");
        if !feast_name.contains("__") {
            continue; // a join key column
        }
        let got = column(&ferry, &feast_name.replace("@v", "_v"));
        for i in 0..n {
            let at = format!("{service} {} {feast_name}", rows[i]);
            let (fv, fs) = (&feast["values"][f][i], feast["statuses"][f][i].as_i64());
            let value = &got["values"][i];
            let status = got["statuses"][i].as_str().expect("status");
            let event = epoch_seconds(got["event_timestamps"][i].as_str().expect("time"));
            let feast_time = feast["event_seconds"][f][i].as_i64().expect("seconds");
            let view_time = match &per_view {
                Some(p) => {
                    let names = p["names"].as_array().expect("names");
                    let r = names.iter().position(|x| x == name).expect("same names");
                    p["event_seconds"][r][i].as_i64().expect("seconds")
                }
                None => feast_time,
            };
            let expected = match fs {
                // Feast's precompute stores a view without a row at the epoch, which its
                // ttl check then calls stale.
                Some(OUTSIDE_MAX_AGE) if view_time == 0 => "NOT_FOUND",
                Some(OUTSIDE_MAX_AGE) => "OUTSIDE_MAX_AGE",
                Some(PRESENT) if view_time == 0 => "NOT_FOUND",
                Some(PRESENT) if fv.is_null() => "NULL_VALUE",
                Some(PRESENT) => "PRESENT",
                other => panic!("{at}: Feast status {other:?}"),
            };
            assert_eq!(status, expected, "{at}: Feast {fv} {fs:?}, Ferry {value}");
            if fs != Some(OUTSIDE_MAX_AGE) {
                assert!(same_value(value, fv), "{at}: Ferry {value} vs Feast {fv}");
            }
            if times != Times::Unchecked {
                assert_eq!(
                    event, view_time,
                    "{at}: Ferry reports the view's event time"
                );
            }
            let differs = if feast_time != event {
                "feast time differs"
            } else {
                "same time"
            };
            *counts.entry(format!("{expected}, {differs}")).or_default() += 1;
        }
    }
}

/// `ferry_reader_fingerprint_mismatches_total` from the reader's `/metrics`.
fn reader_mismatches(stack: &FeastStack) -> u64 {
    let text = raw(
        stack.reader_port,
        b"GET /metrics HTTP/1.1\r\nHost: reader\r\nConnection: close\r\n\r\n",
    )
    .expect("reader /metrics");
    text.lines()
        .find_map(|l| l.strip_prefix("ferry_reader_fingerprint_mismatches_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no mismatch counter in {text}"))
}

/// Waits until `ferry serve` serves a snapshot other than `version`, held by Envoy.
fn wait_new_snapshot(stack: &FeastStack, version: &str) {
    stack
        .control_plane
        .wait_status("new snapshot", Duration::from_secs(30), |s| {
            s.snapshot
                .as_ref()
                .is_some_and(|snap| snap.version != version)
                && s.converged
        });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precomputed_versioned_and_materializing_views_against_feast() {
    let setup = FeastSetup {
        registry: "{path: data/registry.db, enable_online_feature_view_versioning: true}",
        ..FeastSetup::default()
    };
    let stack = FeastStack::start_setup(&routes(""), setup);
    let users = json!([{"user_id": "u1"}, {"user_id": "u2"}, {"user_id": "u3"}]);
    let mut counts = BTreeMap::new();

    // 1. `scoring` (precompute_online) is read from its precomputed vectors.
    compare(&stack, "scoring", &users, Times::PerView, &mut counts).await;
    let merchants = json!([{"merchant_id": 7}, {"merchant_id": 9}]);
    let merchant_before = feast_by_service(&stack, "merchant_risk", &merchants);
    // An unknown entity: Feast's precomputed path fails the whole call, Ferry answers it
    // NOT_FOUND alone.
    let with_unknown = json!([{"user_id": "u1"}, {"user_id": "nobody"}]);
    let refused = feast_by_service(&stack, "scoring", &with_unknown);
    assert!(refused["error"].as_str().is_some(), "{refused}");
    let ferry = stack.rest("scoring", &with_unknown).await;
    let age = column(&ferry, "user_profile__age");
    assert_eq!(age["values"], json!([34, null]));
    assert_eq!(age["statuses"], json!(["PRESENT", "NOT_FOUND"]));

    // 2. A second schema of user_profile (version 1: `tier` added, ages changed) and a
    // service pinned to version 0. Before `feast materialize` the precomputed vectors still
    // hold the old names: refused, as Feast refuses them.
    let version = stack.control_plane.version();
    let file = stack.feast_repo.join("features.py");
    let text = std::fs::read_to_string(&file).expect("features.py");
    let v1 = text.replace(
        "Field(name=\"segment\", dtype=String),",
        "Field(name=\"segment\", dtype=String),\n        Field(name=\"tier\", dtype=Int64),",
    )
        + "scoring_v0 = FeatureService(name=\"scoring_v0\", features=[\"user_profile@v0\"])\n"
        + "scoring_v0_pre = FeatureService(name=\"scoring_v0_pre\", \
           features=[\"user_profile@v0\"], precompute_online=True)\n";
    std::fs::write(&file, v1).expect("features.py");
    feast(
        &stack.feast_repo,
        "python",
        &[
            "-c",
            "import pandas as pd; p = 'data/user_profile.parquet'; d = pd.read_parquet(p); \
             d['age'] += 100; d['event_timestamp'] += pd.Timedelta(seconds=1); d.to_parquet(p)",
        ],
    );
    feast(&stack.feast_repo, "feast", &["apply"]);
    wait_new_snapshot(&stack, &version);
    let before = reader_mismatches(&stack);
    let stale = stack.rest("scoring", &json!([{"user_id": "u1"}])).await;
    let tier = column(&stale, "user_profile__tier");
    assert_eq!(tier["statuses"], json!(["NOT_FOUND"]), "{stale}");
    assert_eq!(
        column(&stale, "user_profile__age")["statuses"],
        json!(["NOT_FOUND"])
    );
    assert_eq!(reader_mismatches(&stack), before + 1);
    let refused = feast_by_service(&stack, "scoring", &json!([{"user_id": "u1"}]));
    assert!(refused["error"].as_str().is_some(), "{refused}");

    // 3. Materialized: `scoring` reads the new vectors (version 1 stored as user_profile_v1),
    // `scoring_v0` the version-0 fields, each as Feast does.
    std::thread::sleep(Duration::from_secs(1));
    materialize(&stack.feast_repo);
    let version = stack.control_plane.version();
    let ferry_yaml = stack.repo.join("ferry.yaml");
    let text = std::fs::read_to_string(&ferry_yaml).expect("ferry.yaml");
    let text = text.replace(
        "[merchant_risk]",
        "[merchant_risk, scoring_v0, scoring_v0_pre]",
    );
    std::fs::write(&ferry_yaml, text).expect("ferry.yaml");
    wait_new_snapshot(&stack, &version);
    compare(&stack, "scoring", &users, Times::PerView, &mut counts).await;
    compare(&stack, "scoring_v0", &users, Times::ByService, &mut counts).await;
    let now = stack.rest("scoring", &users).await;
    assert_eq!(
        column(&now, "user_profile__age")["values"],
        json!([134, 151, 127])
    );
    let old = stack.rest("scoring_v0", &users).await;
    assert_eq!(
        column(&old, "user_profile_v0__age")["values"],
        json!([34, 51, 27])
    );
    // Pinned and precomputed: Feast 0.67's precompute reads the view's current version under
    // the pinned names (`user_profile@v0__age`), and its by-service read serves that vector.
    // Ferry reads the same vector, so it serves the same values: version 1's, not version 0's.
    compare(
        &stack,
        "scoring_v0_pre",
        &users,
        Times::Unchecked,
        &mut counts,
    )
    .await;
    let pre = stack.rest("scoring_v0_pre", &users).await;
    assert_eq!(
        column(&pre, "user_profile_v0__age")["values"],
        json!([134, 151, 127])
    );

    // 4. MATERIALIZING: Feast refuses to serve the view; Ferry serves what Redis holds.
    layouts_script(&stack, &["state", "merchant_stats", "MATERIALIZING"]);
    let refused = feast_by_service(&stack, "merchant_risk", &merchants);
    let why = refused["error"].as_str().unwrap_or_default();
    assert!(why.contains("MATERIALIZING"), "{refused}");
    std::thread::sleep(Duration::from_secs(2)); // ferry serve re-reads the registry
    let served = stack.rest("merchant_risk", &merchants).await;
    let rate = column(&served, "merchant_stats__chargeback_rate");
    let f = merchant_before["names"]
        .as_array()
        .expect("names")
        .iter()
        .position(|n| n == "merchant_stats__chargeback_rate")
        .expect("column");
    assert_eq!(rate["values"], merchant_before["values"][f]);
    assert_eq!(rate["statuses"], json!(["PRESENT", "PRESENT"]));

    // 5. A disabled view: `ferry apply` refuses the service using it, by name.
    layouts_script(&stack, &["disable", "user_merchant"]);
    let out = Command::new(bin("ferry"))
        .args(["apply", stack.repo.to_str().expect("path")])
        .output()
        .expect("ferry apply");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "ferry apply accepted a disabled view"
    );
    assert!(
        err.contains("feast feature service 'pair': feature view 'user_merchant': is disabled"),
        "{err}"
    );

    println!("compared with Feast: {counts:?}");
    for kind in [
        "PRESENT, feast time differs",
        "NULL_VALUE, feast time differs",
        "NOT_FOUND, feast time differs",
        "OUTSIDE_MAX_AGE, feast time differs",
        "PRESENT, same time",
    ] {
        assert!(
            counts.get(kind).copied().unwrap_or(0) > 0,
            "no {kind}: {counts:?}"
        );
    }
}
