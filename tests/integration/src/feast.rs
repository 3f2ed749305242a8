//! A Feast-backed stack: a Feast repo fixture (`feast_repo/`, or `feast_repo_odfv/` with an
//! on-demand feature view) applied and materialized by Feast itself (from `FERRY_FEAST_VENV`)
//! into the stack's Redis, and a Ferry repo that only points at it and declares routes, served
//! by `ferry serve` to a real Envoy. Nothing is materialized by Ferry.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::process::{free_port, Proc};
use crate::{http, process, render_envoy_config, run, start_envoy, start_model, start_reader};
use crate::{ControlPlane, RedisServer, Runtime};

/// The Feast project of the fixture.
pub const PROJECT: &str = "ferrytest";

pub struct FeastStack {
    pub dir: tempfile::TempDir,
    /// The fixture folder the Feast repo was copied from.
    pub fixture: PathBuf,
    /// The Feast repo (a copy of the fixture, with this stack's feature_store.yaml).
    pub feast_repo: PathBuf,
    /// The Ferry repo: `ferry.yaml` with `feast: {repo: ../feast}` and the routes.
    pub repo: PathBuf,
    pub redis: RedisServer,
    pub reader: Proc,
    /// The reader's port (its `/metrics`).
    pub reader_port: u16,
    pub model: Proc,
    pub envoy: Proc,
    pub listen_port: u16,
    pub control_plane: ControlPlane,
}

/// The Feast virtualenv (`scripts/feast_venv.sh`): FERRY_FEAST_VENV, else the repo's
/// `.venv-feast`.
pub fn feast_venv() -> PathBuf {
    let venv = std::env::var_os("FERRY_FEAST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::root().join(".venv-feast"));
    assert!(
        venv.join("bin/feast").is_file(),
        "no Feast at {} (run scripts/feast_venv.sh or set FERRY_FEAST_VENV)",
        venv.display()
    );
    venv
}

fn fixture() -> PathBuf {
    fixture_named("feast_repo")
}

/// A Feast repo fixture under `tests/integration/`.
pub fn fixture_named(name: &str) -> PathBuf {
    crate::root().join("tests/integration").join(name)
}

/// Runs a command of the Feast venv (`feast ...` or `python ...`) in `dir`; its output.
/// The feature names of a Feast-shaped answer (`metadata.feature_names`), in column order.
pub fn feature_names(answer: &serde_json::Value) -> Vec<&str> {
    answer["metadata"]["feature_names"]
        .as_array()
        .expect("feature_names")
        .iter()
        .map(|n| n.as_str().expect("name"))
        .collect()
}

pub fn feast(dir: &Path, program: &str, args: &[&str]) -> String {
    run(Command::new(feast_venv().join("bin").join(program))
        .args(args)
        .current_dir(dir))
}

/// Writes the fixture's parquet files, with event times relative to now (`make_data.py`).
pub fn write_data(feast_repo: &Path) {
    write_fixture_data(&fixture(), feast_repo);
}

/// Writes a fixture's parquet files into `feast_repo` with its `make_data.py`.
pub fn write_fixture_data(fixture: &Path, feast_repo: &Path) {
    let make_data = fixture.join("make_data.py");
    feast(
        feast_repo,
        "python",
        &[make_data.to_str().expect("utf-8 path"), "."],
    );
}

/// `feast materialize` of everything up to now (from long ago, so that rows older than a
/// view's ttl are in Redis too: Ferry must report them OUTSIDE_MAX_AGE).
pub fn materialize(feast_repo: &Path) {
    let now = crate::now_rfc3339();
    let end = now.trim_end_matches('Z');
    feast(
        feast_repo,
        "feast",
        &["materialize", "2000-01-01T00:00:00", end],
    );
}

/// How a [`FeastStack`] is set up, beyond its routes.
pub struct FeastSetup<'a> {
    /// The Feast repo fixture: its `make_data.py` and `feast_online.py`, and its `features.py`
    /// unless `features` is given.
    pub fixture: PathBuf,
    /// `features.py` as text, instead of the fixture's.
    pub features: Option<&'a str>,
    /// The `feast:` block of `ferry.yaml` (its repo is `../feast`).
    pub feast_yaml: &'a str,
    /// Appended to `feature_store.yaml`'s `online_store:` section (e.g. `  key_ttl_seconds: 600\n`).
    pub store_extra: &'a str,
    /// `ferry serve` takes writes with this token (into the stack's Redis).
    pub write_token: Option<&'a str>,
    /// `registry:` of `feature_store.yaml` (YAML on one line): a file, or e.g. a SQL registry.
    pub registry: &'a str,
}

impl Default for FeastSetup<'_> {
    fn default() -> Self {
        FeastSetup {
            fixture: fixture(),
            features: None,
            feast_yaml: "feast: {repo: ../feast}\n",
            store_extra: "",
            write_token: None,
            registry: "data/registry.db",
        }
    }
}

impl FeastStack {
    /// A `feast apply` that adds `user_profile.tier`, then new data materialized by Feast:
    /// `ferry serve` must notice the registry change (wherever the registry lives) and push it
    /// over ECDS, so that the fixture's user u3 gets the new feature from the same Envoy
    /// process (no restart), beside the features it had.
    pub async fn a_feast_apply_adding_a_feature_reaches_envoy(&self, routes_path: &str) {
        use serde_json::json;
        let body = json!({"instances": [{"user_id": "u3"}]}).to_string();
        let before = http::post(self.listen_port, routes_path, body.clone())
            .await
            .json();
        assert_eq!(before["instances"][0]["user_profile__age"], json!(27));
        assert!(before["instances"][0].get("user_profile__tier").is_none());
        let version = self.control_plane.version();

        let file = self.feast_repo.join("features.py");
        let text = std::fs::read_to_string(&file).expect("features.py");
        let added = text.replace(
            "Field(name=\"segment\", dtype=String),",
            "Field(name=\"segment\", dtype=String),\n        Field(name=\"tier\", dtype=Int64),",
        );
        assert_ne!(text, added, "the fixture's schema line moved");
        std::fs::write(&file, added).expect("features.py");
        feast(&self.feast_repo, "feast", &["apply"]);
        // Feast skips rows not newer than what its Redis holds: new event times (the files are
        // rewritten at least a second later, their times being relative to now).
        std::thread::sleep(std::time::Duration::from_secs(1));
        write_data(&self.feast_repo);
        materialize(&self.feast_repo);

        let envoy_pid = self.envoy.pid();
        self.control_plane
            .wait_status("new snapshot", std::time::Duration::from_secs(30), |s| {
                s.snapshot
                    .as_ref()
                    .is_some_and(|snap| snap.version != version)
                    && s.converged
            });
        let after = http::post(self.listen_port, routes_path, body).await.json();
        assert_eq!(
            after["instances"][0]["user_profile__tier"],
            json!(3),
            "{after}"
        );
        assert_eq!(after["instances"][0]["user_profile__age"], json!(27));
        assert_eq!(self.envoy.pid(), envoy_pid, "Envoy was not restarted");
    }

    /// Envoy's `feast_rest` answer for `service` over `rows` (entity objects), asked as a Feast
    /// REST client does (`POST /get-online-features`, full feature names); must be a 200.
    pub async fn rest(&self, service: &str, rows: &serde_json::Value) -> serde_json::Value {
        let mut entities = serde_json::Map::new();
        for row in rows.as_array().expect("rows") {
            for (key, id) in row.as_object().expect("row") {
                let column = entities
                    .entry(key.clone())
                    .or_insert_with(|| serde_json::json!([]));
                column.as_array_mut().expect("column").push(id.clone());
            }
        }
        let body = serde_json::json!(
            {"feature_service": service, "entities": entities, "full_feature_names": true}
        );
        let resp = http::post(self.listen_port, "/get-online-features", body.to_string()).await;
        assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
        resp.json()
    }

    /// Applies and materializes the fixture with Feast, then starts the reader, the demo model,
    /// `ferry serve` on a Ferry repo holding `routes`, and Envoy taking its config over xDS.
    pub fn start(routes: &str) -> FeastStack {
        FeastStack::start_setup(routes, FeastSetup::default())
    }

    /// As [`FeastStack::start`], for the Feast repo `fixture` and `feast_yaml`, the `feast:`
    /// block of `ferry.yaml`.
    pub fn start_fixture(fixture: &Path, feast_yaml: &str, routes: &str) -> FeastStack {
        let setup = FeastSetup {
            fixture: fixture.to_path_buf(),
            feast_yaml,
            ..FeastSetup::default()
        };
        FeastStack::start_setup(routes, setup)
    }

    /// As [`FeastStack::start`], with `features.py` given, `store_extra` appended to its
    /// `online_store:` section, and `ferry serve` taking writes with `write_token` when given.
    pub fn start_with(
        routes: &str,
        features: &str,
        store_extra: &str,
        write_token: Option<&str>,
    ) -> FeastStack {
        let setup = FeastSetup {
            features: Some(features),
            store_extra,
            write_token,
            ..FeastSetup::default()
        };
        FeastStack::start_setup(routes, setup)
    }

    /// The stack as `setup` says.
    pub fn start_setup(routes: &str, setup: FeastSetup<'_>) -> FeastStack {
        let FeastSetup {
            fixture,
            features,
            feast_yaml,
            store_extra,
            write_token,
            registry,
        } = setup;
        let fixture = fixture.as_path();
        let dir = tempfile::tempdir().expect("tempdir");
        let redis = RedisServer::start();
        let feast_repo = dir.path().join("feast");
        std::fs::create_dir_all(feast_repo.join("data")).expect("feast repo dir");
        match features {
            Some(text) => std::fs::write(feast_repo.join("features.py"), text),
            None => std::fs::copy(fixture.join("features.py"), feast_repo.join("features.py"))
                .map(|_| ()),
        }
        .expect("features.py");
        std::fs::write(
            feast_repo.join("feature_store.yaml"),
            format!(
                "project: {PROJECT}\nprovider: local\nregistry: {registry}\n\
                 online_store:\n  type: redis\n  connection_string: \"127.0.0.1:{}\"\n{store_extra}\
                 offline_store:\n  type: file\nentity_key_serialization_version: 3\n",
                redis.port
            ),
        )
        .expect("feature_store.yaml");
        write_fixture_data(fixture, &feast_repo);
        feast(&feast_repo, "feast", &["apply"]);
        materialize(&feast_repo);

        let repo = dir.path().join("ferry");
        std::fs::create_dir_all(&repo).expect("ferry repo dir");
        std::fs::write(
            repo.join("ferry.yaml"),
            format!("project: {PROJECT}\n{feast_yaml}routes:\n{routes}"),
        )
        .expect("ferry.yaml");

        let reader_port = free_port();
        let reader = start_reader(dir.path(), reader_port, &["--redis".into(), redis.url()]);
        let model_port = free_port();
        let mut model = start_model(dir.path(), model_port);
        let url = redis.url();
        let serve_args: Vec<&str> = match write_token {
            Some(t) => vec!["--write-token", t, "--redis", &url],
            None => Vec::new(),
        };
        let control_plane = ControlPlane::start_with_args(dir.path(), &repo, &serve_args);
        let (listen_port, admin_port) = (free_port(), free_port());
        let config = dir.path().join("envoy.yaml");
        let ports = [listen_port, admin_port, reader_port, model_port];
        render_envoy_config(&repo, &config, ports, Some(&control_plane), Runtime::Wasm);
        let mut envoy = start_envoy(dir.path(), &config, "envoy");
        envoy.wait_ready(|| http::get_ok(admin_port, "/ready"), "envoy /ready");
        model.wait_ready(|| process::tcp_open(model_port), "demo model");
        FeastStack {
            dir,
            fixture: fixture.to_path_buf(),
            feast_repo,
            repo,
            redis,
            reader,
            reader_port,
            model,
            envoy,
            listen_port,
            control_plane,
        }
    }

    /// What Feast's own `get_online_features` answers for `service`'s features and `rows`
    /// (JSON entity rows), by `feast_repo/feast_online.py`.
    pub fn feast_online(&self, service: &str, rows: &serde_json::Value) -> serde_json::Value {
        self.feast_online_named(service, rows, true)
    }

    /// As [`FeastStack::feast_online`]; `full_names: false` asks Feast for short names (rows
    /// may carry request data for on-demand feature views).
    pub fn feast_online_named(
        &self,
        service: &str,
        rows: &serde_json::Value,
        full_names: bool,
    ) -> serde_json::Value {
        let short = if full_names { "full" } else { "short" };
        let out = Command::new(feast_venv().join("bin/python"))
            .arg(fixture().join("feast_online.py"))
            .args([".", service, &rows.to_string(), short])
            .current_dir(&self.feast_repo)
            .output()
            .expect("feast_online.py");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "feast_online.py failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let last = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| panic!("feast_online.py: {e}: {stdout}"))
    }
}
