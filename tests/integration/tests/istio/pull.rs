//! The filter pulling its snapshot from `ferry serve` (`snapshot_url` in its JSON plugin
//! config), through real Envoy without `allow_on_headers_stop_iteration`, as Istio or Envoy
//! Gateway would run it: a JSON 503 until the control plane answers, then enriched requests;
//! a repo change pushed to `ferry serve` reaches the filter by re-pull, without an Envoy
//! restart; a snapshot the filter refuses leaves the last good one serving, with a warning.
//! Signing is on (`ferry serve --signing-key`, the filter's `snapshot_keys`); the URL is
//! `http://` with `insecure`, as the cluster to `ferry serve` has no TLS here.

use std::process::Command;
use std::time::{Duration, Instant};

use ferry::serve::api::{SNAPSHOT_PATH, UNCHECKED_HEADER};
use ferry_integration_tests::control_plane::READ_TOKEN;
use ferry_integration_tests::control_plane::{ControlPlane, TOKEN};
use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::http::Response;
use ferry_integration_tests::{bin, run, Options, Stack};
use ferry_protos::v1;
use prost::Message;

pub use ferry_integration_tests::mitm::{with_cp_cluster, CP_CLUSTER};

use super::support::{as_istio, check_unheld, error_of, instances, post, ISTIO_CLUSTER};

/// A route only the pushed repo change has.
pub const NEW_ROUTE: &str = "
  - name: added-later
    match: {path_prefix: /t/added-later}
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
";
/// Upper bound on each wait for the filter to see a change (polls every 200 ms).
pub const WAIT: Duration = Duration::from_secs(30);

/// Posts until `done` holds for the answer, up to [`WAIT`]; returns that answer.
pub async fn post_until(
    port: u16,
    path: &str,
    what: &str,
    done: impl Fn(&Response) -> bool,
) -> Response {
    let start = Instant::now();
    loop {
        let resp = post(port, path, instances(&["u000001", "u000002"])).await;
        if done(&resp) {
            return resp;
        }
        assert!(
            start.elapsed() < WAIT,
            "{what}: not within {WAIT:?}; last {} {}",
            resp.status,
            String::from_utf8_lossy(&resp.body)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn enriched(resp: &Response) -> bool {
    resp.status == 200 && resp.header("x-ferry-status") == Some("ok")
}

/// The users every pull test asks for.
pub const USERS: [&str; 2] = ["u000001", "u000002"];

/// A signing `ferry serve` on a stack's repo, down until the test restarts it, and the plugin
/// config of a filter that pulls from it.
pub struct Puller {
    pub cp: ControlPlane,
    /// The snapshot URL the filter polls.
    pub url: String,
    /// `ferry plugin-config`'s output: polls every 200 ms, with the read token and the key.
    pub plugin_config: String,
}

impl Puller {
    /// Down when Envoy starts (its ports are known, nothing listens on them); `extra` goes to
    /// `ferry plugin-config` before the pull's flags.
    pub fn down(stack: &Stack, extra: &[&str]) -> Puller {
        let key = keygen(stack.dir.path());
        let mut cp = ControlPlane::start_with_args(
            stack.dir.path(),
            &stack.repo,
            &["--signing-key", &key.display().to_string()],
        );
        cp.proc.kill();
        let url = format!("{}/v1/snapshot", cp.url());
        let plugin_config = run(Command::new(bin("ferry"))
            .arg("plugin-config")
            .arg(&stack.repo)
            .args(extra)
            .args(["--snapshot-url", &url, "--snapshot-cluster", CP_CLUSTER])
            .args(["--snapshot-poll-ms", "200"])
            .args(["--snapshot-token", READ_TOKEN])
            .arg("--snapshot-key")
            .arg(&key)
            .arg("--insecure"));
        Puller {
            cp,
            url,
            plugin_config,
        }
    }

    /// Before the control plane answers, every request on Envoy's port `p`, on a Ferry route
    /// or not, gets the JSON 503 naming the snapshot URL; once it comes up, the next poll
    /// loads the snapshot: that first enriched answer, its values checked against `store`.
    pub async fn first_pull(&mut self, p: u16, store: &Store) -> Response {
        for path in ["/v1/models/fraud:predict", "/elsewhere"] {
            let resp = post(p, path, instances(&["u000001"])).await;
            assert_eq!(error_of(&resp), (503, "snapshot_not_loaded".into()));
            let message = resp.json()["message"].as_str().unwrap_or("").to_owned();
            assert!(message.contains(&self.url), "{message}");
        }
        self.cp.restart();
        let resp = post_until(p, "/v1/models/fraud:predict", "first pull", enriched).await;
        store.check_instances(Service::RealtimeScoring, &resp.json(), &users());
        resp
    }
}

/// [`USERS`] as the store's entities.
pub fn users() -> [Entity; 2] {
    USERS.map(|u| Entity::User(u.into()))
}

/// Appends [`NEW_ROUTE`] to the stack repo's ferry.yaml (the change a test then pushes).
pub fn add_new_route(stack: &Stack) {
    let yaml = stack.repo.join("ferry.yaml");
    let text = std::fs::read_to_string(&yaml).unwrap() + NEW_ROUTE;
    std::fs::write(&yaml, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filter_pulls_its_snapshot_from_ferry_serve_and_follows_its_changes() {
    let stack = Stack::start(Options {
        extra_routes: "",
        entities: Some(50),
        ..Options::default()
    });
    let mut pull = Puller::down(&stack, &["--reader-cluster", ISTIO_CLUSTER]);
    let plugin_config = &pull.plugin_config;
    assert!(
        plugin_config.contains("\"snapshot_keys\""),
        "{plugin_config}"
    );
    let cp_port = pull.cp.http_port;
    let envoy = stack.static_envoy_edited(|y| with_cp_cluster(as_istio(y, plugin_config), cp_port));
    let p = envoy.listen_port;

    // The control plane comes up: the next poll loads the snapshot, values as in the store.
    let store = Store::load(&stack);
    let resp = pull.first_pull(p, &store).await;
    check_unheld(&resp, Some("ok"));
    let users = users();
    let before = post(p, "/t/added-later", instances(&["u000001"])).await;
    assert_eq!(before.status, 200);
    assert!(
        before.header("x-ferry-status").is_none(),
        "no such route yet"
    );

    // A repo change pushed to ferry serve reaches the filter by re-pull.
    add_new_route(&stack);
    let Puller { cp, url, .. } = &mut pull;
    let v2 = cp.apply_push(&stack.repo, &stack.redis.url(), false);
    assert_eq!(cp.version(), v2);
    // What a poll costs once the filter has it: a 304 without a body.
    let etag = format!("\"{v2}\"");
    let read = format!("Bearer {READ_TOKEN}");
    let (code, _) = cp.request("GET", SNAPSHOT_PATH, &[], b"");
    assert_eq!(code, 401, "the snapshot is read with a token");
    let tagged = |etag| [("authorization", read.as_str()), ("if-none-match", etag)];
    let (code, body) = cp.request("GET", SNAPSHOT_PATH, &tagged(&etag), b"");
    assert_eq!((code, body.as_str()), (304, ""));
    let (code, body) = cp.request("GET", SNAPSHOT_PATH, &tagged("\"old\""), b"");
    assert_eq!(code, 200);
    assert!(body.contains("added-later"), "the snapshot's bytes");
    let resp = post_until(p, "/t/added-later", "the pushed route", enriched).await;
    store.check_instances(Service::RealtimeScoring, &resp.json(), &users);

    // A snapshot the filter refuses (forced past the control plane's own check): the last
    // good one keeps serving, and Envoy's log says why.
    let bad = v1::Snapshot {
        project: "banking".into(),
        reader_cluster: "ferry_reader".into(),
        routes: vec![v1::Route {
            name: "broken".into(),
            service: "nope".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let auth = format!("Bearer {TOKEN}");
    let (code, text) = cp.request(
        "POST",
        SNAPSHOT_PATH,
        &[("authorization", &auth), (UNCHECKED_HEADER, "1")],
        &bad.encode_to_vec(),
    );
    assert_eq!(code, 200, "{text}");
    let start = Instant::now();
    while !envoy
        .proc
        .log_text()
        .contains("refused, the last good one stays")
    {
        assert!(
            start.elapsed() < WAIT,
            "no warning:\n{}",
            envoy.proc.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(envoy.proc.log_text().contains(url.as_str()));
    let resp = post(p, "/t/added-later", instances(&["u000001", "u000002"])).await;
    check_unheld(&resp, Some("ok"));
    store.check_instances(Service::RealtimeScoring, &resp.json(), &users);
    // Polls, 304s, failures and the refusal never crashed a VM (a panic would be logged).
    assert!(
        !envoy.proc.log_text().contains("panicked"),
        "{}",
        envoy.proc.log_text()
    );
}

/// `ferry keygen` into DIR/signing.pem: the key's path (the printed entry is checked by the
/// signed-pull test).
pub fn keygen(dir: &std::path::Path) -> std::path::PathBuf {
    let key = dir.join("signing.pem");
    run(Command::new(bin("ferry"))
        .arg("keygen")
        .arg("--out")
        .arg(&key));
    key
}
