//! The `feast_rest` route through real Envoy against Feast 0.67's own `feast serve`, both over
//! the same Parquet files: the bench's data set (`bench/repo/generate_data.py`, here 20 users)
//! read by the bench's two repos, Ferry's `bench/repo/ferry.yaml` (its routes replaced by one
//! `feast_rest` route) materialized into Redis db 0 and Feast's `bench/feast/` into db 1. Feast's
//! regular (not precomputed) service `scoring` is the peer. No model server runs behind Envoy:
//! an answer can only come from the filter.
//!
//! Where Ferry differs from Feast on purpose, the checks say so and check the rest exactly:
//! - an unknown entity: Feast 0.67 reports its features PRESENT (with null values and the epoch
//!   as event time), Ferry NOT_FOUND;
//! - column order: Feast 0.67 orders features by a Python set (it changes with
//!   PYTHONHASHSEED, so across restarts), Ferry in a stable order (a service's features in the
//!   snapshot's order, views and features sorted by name; a `features` list in the list's
//!   order); columns are compared by name, and both put the join key first;
//! - a malformed body: same status, shape, type, position and message, but `ctx.error` is
//!   Ferry's JSON parser's text, not Python's.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_integration_tests::http::{Conn, Response};
use ferry_integration_tests::{
    bin, free_port, http, now_rfc3339, root, run, start_envoy, start_reader, wasm, Graceful, Proc,
    RedisServer,
};
use serde_json::{json, Value as Json};

const USERS: usize = 20;

/// The Ferry route: the snapshot's one service behind Feast's path.
const ROUTE: &str = r#"
routes:
  - name: feast
    match: {path_exact: /get-online-features}
    service: scoring
    format: feast_rest
    entity: {field: user_id}
    on_missing_entity: "null"
    max_entities: 8
    max_body_bytes: 4096
"#;

/// The bench's features (sorted, they are Ferry's order for the service).
const FEATURES: [&str; 30] = [
    "user_stats:amount_avg_7d",
    "user_stats:amount_avg_30d",
    "user_stats:amount_std_30d",
    "user_stats:amount_max_30d",
    "user_stats:balance",
    "user_stats:credit_utilization",
    "user_stats:risk_score",
    "user_stats:device_trust",
    "user_stats:geo_velocity",
    "user_stats:merchant_risk_avg",
    "user_activity:txn_count_1h",
    "user_activity:txn_count_24h",
    "user_activity:txn_count_7d",
    "user_activity:txn_count_30d",
    "user_activity:declines_7d",
    "user_activity:chargebacks_365d",
    "user_activity:distinct_merchants_30d",
    "user_activity:distinct_devices_30d",
    "user_activity:account_age_days",
    "user_activity:days_since_last_login",
    "user_attrs:country",
    "user_attrs:city",
    "user_attrs:segment",
    "user_attrs:tier",
    "user_attrs:channel",
    "user_attrs:device_os",
    "user_attrs:browser",
    "user_attrs:email_domain",
    "user_attrs:kyc_level",
    "user_attrs:preferred_currency",
];

struct Peers {
    /// Holds the repos, logs and Feast's registry until the test ends.
    dir: tempfile::TempDir,
    venv: PathBuf,
    _redis: RedisServer,
    reader: Proc,
    envoy: Proc,
    feast: Graceful,
    envoy_port: u16,
    admin_port: u16,
    reader_port: u16,
    feast_port: u16,
}

/// Feast 0.67's virtualenv (`scripts/feast_venv.sh`; `make test` passes it).
fn feast_venv() -> PathBuf {
    let venv = std::env::var_os("FERRY_FEAST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv-feast"));
    assert!(
        venv.join("bin/feast").exists(),
        "no Feast at {}: run scripts/feast_venv.sh .venv-feast, or set FERRY_FEAST_VENV",
        venv.display()
    );
    venv
}

/// Ferry's repo: the bench's ferry.yaml with [`ROUTE`] instead of its routes, and its data.
fn ferry_repo(dir: &Path, python: &Path) -> PathBuf {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).expect("repo dir");
    let bench = root().join("bench/repo");
    run(Command::new(python)
        .arg(bench.join("generate_data.py"))
        .args(["--entities", &USERS.to_string(), "--anchor", &now_rfc3339()])
        .arg("--out")
        .arg(repo.join("data")));
    let yaml = std::fs::read_to_string(bench.join("ferry.yaml")).expect("bench ferry.yaml");
    let head = yaml.split("\nroutes:").next().unwrap_or_default();
    std::fs::write(repo.join("ferry.yaml"), format!("{head}\n{ROUTE}")).expect("ferry.yaml");
    repo
}

/// Feast's repo: the bench's definitions over the same files, its online store in Redis db 1.
fn feast_repo(dir: &Path, redis_port: u16) -> PathBuf {
    let feast = dir.join("feast");
    std::fs::create_dir_all(&feast).expect("feast dir");
    std::fs::copy(
        root().join("bench/feast/features.py"),
        feast.join("features.py"),
    )
    .expect("features.py");
    let store = format!(
        "project: bench\nprovider: local\nregistry: {}\nonline_store:\n  type: redis\n  \
         connection_string: 127.0.0.1:{redis_port},db=1\noffline_store:\n  type: file\n\
         entity_key_serialization_version: 3\n",
        feast.join("registry.db").display()
    );
    std::fs::write(feast.join("feature_store.yaml"), store).expect("feature_store.yaml");
    feast
}

impl Peers {
    fn start() -> Peers {
        let venv = feast_venv();
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = ferry_repo(dir.path(), &venv.join("bin/python"));
        let redis = RedisServer::start();
        let redis_flags = ["--redis".to_string(), redis.url()];
        run(Command::new(bin("ferry"))
            .arg("materialize")
            .arg(&repo)
            .args(&redis_flags));

        let feast_dir = feast_repo(dir.path(), redis.port);
        let feast = |args: &[&str]| {
            let mut cmd = Command::new(venv.join("bin/feast"));
            cmd.arg("-c")
                .arg(&feast_dir)
                .args(args)
                .env("FEAST_BENCH_DATA", repo.join("data"))
                .env("PYTHONHASHSEED", "0");
            cmd
        };
        run(&mut feast(&["apply"]));
        run(&mut feast(&[
            "materialize",
            "2000-01-01T00:00:00",
            "2100-01-01T00:00:00",
        ]));

        let reader_port = free_port();
        let reader = start_reader(dir.path(), reader_port, &redis_flags);
        let (envoy_port, admin_port, nobody) = (free_port(), free_port(), free_port());
        let config = dir.path().join("envoy.yaml");
        run(Command::new(bin("ferry"))
            .arg("envoy-config")
            .arg(&repo)
            .args(["--listen-port", &envoy_port.to_string()])
            .args(["--admin-port", &admin_port.to_string()])
            .args(["--reader-port", &reader_port.to_string()])
            .args(["--model-port", &nobody.to_string()])
            .arg("--wasm")
            .arg(wasm())
            .arg("-o")
            .arg(&config));
        let envoy = start_envoy(dir.path(), &config, "envoy");
        let feast_port = free_port();
        let serve = feast(&[
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            &feast_port.to_string(),
        ]);
        let feast = Graceful(Proc::start("feast", serve, dir.path()));
        let mut peers = Peers {
            dir,
            venv,
            _redis: redis,
            reader,
            envoy,
            feast,
            envoy_port,
            admin_port,
            reader_port,
            feast_port,
        };
        peers.wait_ready();
        peers
    }

    fn wait_ready(&mut self) {
        let (admin, reader, feast) = (self.admin_port, self.reader_port, self.feast_port);
        self.envoy
            .wait_ready(|| http::get_ok(admin, "/ready"), "envoy /ready");
        self.reader
            .wait_ready(|| http::get_ok(reader, "/healthz"), "reader /healthz");
        self.feast
            .0
            .wait_ready(|| http::get_ok(feast, "/health"), "feast /health");
    }

    /// The same request to Ferry (through Envoy) and to Feast.
    async fn both(&self, body: &str) -> (Response, Response) {
        let send = |port| async move {
            Conn::open(port)
                .await
                .send(
                    "POST",
                    "/get-online-features",
                    &[("content-type", "application/json")],
                    body.to_string(),
                )
                .await
        };
        (send(self.envoy_port).await, send(self.feast_port).await)
    }
}

/// The column named `name` of an answer.
fn column<'a>(answer: &'a Json, name: &str) -> &'a Json {
    let names = answer["metadata"]["feature_names"]
        .as_array()
        .expect("metadata.feature_names");
    let i = names
        .iter()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no column {name} in {names:?}"));
    &answer["results"][i]
}

/// Checks Ferry's answer against Feast's: the same names (join key first, Ferry's in
/// `expected` order), and per column the same values, event times and statuses, except the
/// statuses of `unknown` entities (see the module doc). Returns the number of values compared.
fn compare(ferry: &Json, feast: &Json, expected: &[String], unknown: &[usize]) -> usize {
    let names = |a: &Json| -> Vec<String> {
        a["metadata"]["feature_names"]
            .as_array()
            .unwrap_or_else(|| panic!("no metadata.feature_names in {a}"))
            .iter()
            .map(|n| n.as_str().unwrap_or_default().to_string())
            .collect()
    };
    let (ferry_names, mut feast_names) = (names(ferry), names(feast));
    assert_eq!(ferry_names, expected, "Ferry's column order");
    assert_eq!(
        feast_names[0], "user_id",
        "Feast puts the join key first too"
    );
    let mut sorted = ferry_names.clone();
    sorted.sort();
    feast_names.sort();
    assert_eq!(sorted, feast_names, "the same columns");
    assert_eq!(
        ferry["results"].as_array().map(Vec::len),
        Some(expected.len())
    );
    let mut compared = 0;
    for name in &ferry_names {
        let (ours, theirs) = (column(ferry, name), column(feast, name));
        assert_eq!(ours["values"], theirs["values"], "values of {name}");
        assert_eq!(
            ours["event_timestamps"], theirs["event_timestamps"],
            "event times of {name}"
        );
        let n = theirs["values"].as_array().map_or(0, Vec::len);
        for i in 0..n {
            let (s, t) = (&ours["statuses"][i], &theirs["statuses"][i]);
            if unknown.contains(&i) && name != "user_id" {
                assert_eq!(ours["values"][i], Json::Null, "{name}[{i}]");
                assert_eq!(
                    (s.as_str(), t.as_str()),
                    (Some("NOT_FOUND"), Some("PRESENT"))
                );
            } else {
                assert_eq!(s, t, "status of {name}[{i}]");
            }
        }
        compared += n;
    }
    compared
}

/// `view:feature` as Feast names it.
fn output_name(reference: &str, full: bool) -> String {
    match reference.split_once(':') {
        Some((view, feature)) if full => format!("{view}__{feature}"),
        Some((_, feature)) => feature.to_string(),
        None => reference.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feast_rest_answers_as_feast_serve_does() {
    let peers = Peers::start();
    let service_users = json!(["u000001", "u000002", "nobody", "u000020", "u000007"]);
    let list_users = json!(["u000003", "ghost", "u000010", "u000003"]);
    let list = [
        "user_activity:txn_count_7d",
        "user_stats:balance",
        "user_attrs:city",
        "user_activity:txn_count_1h",
    ];
    let mut compared = 0;
    let mut requests = 0;
    for full in [false, true] {
        let cases = [
            (
                json!({"feature_service": "scoring", "entities": {"user_id": service_users}, "full_feature_names": full}),
                &FEATURES[..],
                vec![2],
            ),
            (
                json!({"features": list, "entities": {"user_id": list_users}, "full_feature_names": full}),
                &list[..],
                vec![1],
            ),
        ];
        for (body, refs, unknown) in cases {
            let (ferry, feast) = peers.both(&body.to_string()).await;
            assert_eq!((ferry.status, feast.status), (200, 200), "{body}");
            assert_eq!(ferry.header("content-type"), Some("application/json"));
            let mut expected = vec!["user_id".to_string()];
            let mut refs = refs.to_vec();
            if body.get("feature_service").is_some() {
                refs.sort();
            }
            expected.extend(refs.iter().map(|r| output_name(r, full)));
            compared += compare(&ferry.json(), &feast.json(), &expected, &unknown);
            requests += 1;
        }
    }
    assert_eq!(requests, 4);
    // 2 × (31 columns × 5 entities + 5 columns × 4 entities)
    assert_eq!(compared, 2 * (31 * 5 + 5 * 4));
    eprintln!("compared {compared} values over {requests} requests");
    feasts_own_client_reads_the_same_through_envoy(&peers);
    feast_errors_are_feasts(&peers).await;
    ferrys_limits_answer_through_envoy(&peers).await;
}

/// Feast's Python SDK with its REST client (`online_store: type: remote`), unchanged, pointed at
/// Envoy and at `feast serve`: the same `to_dict()`.
fn feasts_own_client_reads_the_same_through_envoy(peers: &Peers) {
    let script = root().join("tests/integration/scripts/feast_remote_client.py");
    let registry = peers.dir.path().join("feast/registry.db");
    let ask = |port: u16, features: &str, full: &str| {
        let out = run(Command::new(peers.venv.join("bin/python"))
            .arg(&script)
            .arg(format!("http://127.0.0.1:{port}"))
            .arg(&registry)
            .args([features, full, "u000004", "nobody", "u000011"]));
        let last = out.lines().last().unwrap_or_default().to_string();
        serde_json::from_str::<Json>(&last).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    for (features, full) in [
        ("scoring", "false"),
        (
            "user_attrs:city,user_stats:balance,user_activity:txn_count_7d",
            "true",
        ),
    ] {
        let ours = ask(peers.envoy_port, features, full);
        assert_eq!(ours["user_id"], json!(["u000004", "nobody", "u000011"]));
        assert!(ours.as_object().is_some_and(|m| m.len() > 3), "{ours}");
        assert_eq!(ours, ask(peers.feast_port, features, full), "{features}");
    }
}

/// Each refusal Feast answers: the same status and the same body from Ferry.
async fn feast_errors_are_feasts(peers: &Peers) {
    let one = r#""entities": {"user_id": ["u000001"]}"#;
    let same = [
        format!(r#"{{"feature_service": "nope", {one}}}"#),
        format!(r#"{{"features": ["nope:x"], {one}}}"#),
        format!(r#"{{"features": ["user_stats:nope"], {one}}}"#),
        format!(r#"{{"features": ["user_stats"], {one}}}"#),
        format!(
            r#"{{"features": ["user_stats:balance", "user_attrs:city"], "feature_service": 5, {one}}}"#
        ),
        format!("{{{one}}}"),
        format!(r#"{{"features": ["user_stats:balance", "user_stats:balance"], {one}}}"#),
        format!(
            r#"{{"features": ["user_attrs:city", "user_attrs:city"], "full_feature_names": true, {one}}}"#
        ),
        r#"{"feature_service": "scoring", "entities": {"uid": ["u000001"]}}"#.to_string(),
        r#"{"feature_service": "scoring", "entities": {"user_id": ["u1"], "x": [1, 2]}}"#
            .to_string(),
        r#"{"feature_service": "scoring", "entities": {"user_id": "u1"}}"#.to_string(),
        "[1]".to_string(),
        format!(r#"{{"feature_service": "scoring", "full_feature_names": "maybe", {one}}}"#),
        format!(r#"{{"feature_service": "scoring", "full_feature_names": null, {one}}}"#),
        format!(r#"{{"features": null, {one}}}"#),
        r#"{"feature_service": "scoring", "entities": {}}"#.to_string(),
        r#"{"feature_service": "scoring", "entities": {"user_id": []}}"#.to_string(),
    ];
    for body in &same {
        let (ferry, feast) = peers.both(body).await;
        assert_eq!(ferry.status, feast.status, "{body}");
        assert_ne!(ferry.status, 200, "{body}");
        assert_eq!(ferry.json(), feast.json(), "{body}");
        assert!(ferry.header("x-ferry-error").is_some(), "{body}");
    }
    let (ferry, feast) = peers.both(r#"{"feature_service": "scoring", "#).await;
    assert_eq!((ferry.status, feast.status), (422, 422));
    let (mut ours, mut theirs) = (ferry.json(), feast.json());
    for d in [&mut ours, &mut theirs] {
        d["detail"][0]
            .as_object_mut()
            .expect("a detail")
            .remove("ctx")
            .expect("ctx.error: the parser's message, which differs");
    }
    assert_eq!(ours, theirs, "malformed JSON");
}

/// What Ferry bounds itself (no Feast counterpart): its own JSON errors, through Envoy.
async fn ferrys_limits_answer_through_envoy(peers: &Peers) {
    let ids: Vec<String> = (1..=9).map(|i| format!("u{i:06}")).collect();
    let body = json!({"feature_service": "scoring", "entities": {"user_id": ids}}).to_string();
    let resp = Conn::open(peers.envoy_port)
        .await
        .post("/get-online-features", body)
        .await;
    assert_eq!(resp.status, 413);
    assert_eq!(resp.json()["error"], "too_many_entities");
    let big = format!(
        r#"{{"feature_service": "scoring", "pad": "{}", {}}}"#,
        "x".repeat(5000),
        r#""entities": {"user_id": ["u000001"]}"#
    );
    let resp = Conn::open(peers.envoy_port)
        .await
        .post("/get-online-features", big)
        .await;
    assert_eq!(resp.status, 413);
    assert_eq!(resp.json()["error"], "body_too_large");
    // Any other path goes to the model, which does not run: Envoy's own 503, still given a
    // JSON body by its local-reply mapper.
    let resp = Conn::open(peers.envoy_port)
        .await
        .post("/elsewhere", "{}")
        .await;
    assert_eq!(resp.status, 503);
    assert_eq!(resp.json()["status"], 503, "{:?}", resp.body);
    assert!(resp.header("x-ferry-status").is_none());
}
