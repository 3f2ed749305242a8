//! The Docker demo's Envoy bootstrap (docker/envoy.yaml, and the SDS files in docker/sds/) and
//! files, without a Docker engine (the stack itself runs in docker_stack.rs, `make
//! test-docker`): Envoy validates the committed file (its SDS and certificate paths moved to a
//! scratch directory), the files are exactly what docker/envoy-config.sh renders today (so they
//! cannot drift from the generator), with the compose hostnames mapped to loopback ports it
//! enriches a request over mTLS through real Redis, reader, model and control plane processes,
//! and the compose files agree with it and with each other.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ferry_integration_tests::control_plane::TOKEN;
use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::http::{get_ok, post};
use ferry_integration_tests::process::tcp_open;
use ferry_integration_tests::secure::{self, block_on, tls_flags, CP_NAME};
use ferry_integration_tests::{
    bin, envoy_bin, envoy_validate, example_repo_with, free_port, root, run, start_model, tls,
    Proc, RedisServer,
};
use ferry_test_support::certs::{Ca, LeafFiles};
use serde_json::{json, Value as Json};

/// The node id docker/envoy-config.sh gives the compose Envoy.
const NODE_ID: &str = "ferry-docker";

fn docker(file: &str) -> PathBuf {
    root().join("docker").join(file)
}

fn committed() -> String {
    std::fs::read_to_string(docker("envoy.yaml")).expect("docker/envoy.yaml")
}

/// The stack's certificates as docker/certs.sh makes them (the names the bootstrap checks),
/// here from a test CA, and the bootstrap's SDS files and PEM paths moved under `dir`.
struct Hosted {
    ca: Ca,
    ca_file: PathBuf,
    reader: LeafFiles,
    cp: LeafFiles,
    config: String,
}

fn hosted(dir: &Path) -> Hosted {
    let ca = Ca::new("compose test CA");
    let (tls, sds) = (dir.join("tls"), dir.join("sds"));
    std::fs::create_dir_all(&tls).expect("mkdir");
    std::fs::create_dir_all(&sds).expect("mkdir");
    let ca_file = ca.write(&tls.join("ca.crt"));
    let envoy = ca.issue(&[NODE_ID], &[]);
    let files = envoy.write(&tls, "envoy");
    // The names docker/envoy-config.sh gives the PEM files (tls.crt, tls.key).
    std::fs::rename(&files.cert, tls.join("tls.crt")).expect("rename");
    std::fs::rename(&files.key, tls.join("tls.key")).expect("rename");
    // Each SDS file names the folder once per PEM file, and once as its watched directory.
    for (name, times) in [
        ("ferry_client_certificate.sds.yaml", 3),
        ("ferry_server_ca.sds.yaml", 2),
    ] {
        let text = std::fs::read_to_string(docker("sds").join(name)).expect("docker/sds");
        let moved = replace_each(&text, "/etc/ferry/tls", &tls.display().to_string(), times);
        std::fs::write(sds.join(name), moved).expect("write sds");
    }
    let config = replace_each(
        &committed(),
        "\"/etc/envoy/sds/",
        &format!("\"{}/", sds.display()),
        4,
    );
    let config = replace_each(&config, "/etc/ferry/tls", &tls.display().to_string(), 4);
    Hosted {
        reader: ca.issue(&["reader"], &[]).write(dir, "reader"),
        cp: ca.issue(&["control-plane", CP_NAME], &[]).write(dir, "cp"),
        ca,
        ca_file,
        config,
    }
}

/// `old` must occur exactly `times` times in `text`; returns the text with each replaced.
fn replace_each(text: &str, old: &str, new: &str, times: usize) -> String {
    assert_eq!(
        text.matches(old).count(),
        times,
        "expected {times} of {old:?} in docker/envoy.yaml"
    );
    text.replace(old, new)
}

fn addr(host: &str, port: u16) -> String {
    format!("socket_address: {{address: {host}, port_value: {port}}}")
}

#[test]
fn envoy_validates_the_committed_docker_bootstrap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("envoy.yaml");
    std::fs::write(&path, hosted(dir.path()).config).expect("write");
    if let Err(text) = envoy_validate(&path) {
        panic!("envoy --mode validate refused it:\n{text}");
    }
}

#[test]
fn the_committed_docker_bootstrap_is_what_the_generator_renders() {
    let sds = tempfile::tempdir().expect("tempdir");
    let out = Command::new("bash")
        .arg(docker("envoy-config.sh"))
        .env("FERRY", bin("ferry"))
        .env("SDS_OUT", sds.path())
        .output()
        .expect("run docker/envoy-config.sh");
    assert!(
        out.status.success(),
        "docker/envoy-config.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).expect("UTF-8");
    let committed = committed();
    if generated != committed {
        let first = generated
            .lines()
            .zip(committed.lines())
            .position(|(g, c)| g != c)
            .map_or_else(
                || "one is a prefix of the other".to_owned(),
                |i| {
                    format!(
                        "line {}: generated {:?}, committed {:?}",
                        i + 1,
                        generated.lines().nth(i).unwrap_or_default(),
                        committed.lines().nth(i).unwrap_or_default()
                    )
                },
            );
        panic!(
            "docker/envoy.yaml is not what the generator renders today ({first}); regenerate it: \
             bash docker/envoy-config.sh -o docker/envoy.yaml"
        );
    }
    let mut names = Vec::new();
    for e in std::fs::read_dir(sds.path()).expect("SDS_OUT") {
        let name = e.expect("entry").file_name();
        let generated = std::fs::read_to_string(sds.path().join(&name)).expect("read");
        let committed = std::fs::read_to_string(docker("sds").join(&name)).unwrap_or_default();
        assert_eq!(
            generated, committed,
            "docker/sds/{name:?} is not what the generator renders today; regenerate: \
             bash docker/envoy-config.sh -o docker/envoy.yaml"
        );
        names.push(name);
    }
    assert_eq!(names.len(), 2, "{names:?}");
}

/// The compose file runs each service where the bootstrap looks for it, and mounts this very
/// bootstrap; the Dockerfile puts the filter where the control plane says it is.
#[test]
fn the_compose_file_agrees_with_the_bootstrap() {
    let compose = std::fs::read_to_string(docker("docker-compose.yml")).expect("compose file");
    let dockerfile = std::fs::read_to_string(docker("Dockerfile")).expect("Dockerfile");
    let envoy = committed();
    for (host, port) in [("control-plane", 18000), ("reader", 8090), ("model", 8080)] {
        assert!(
            envoy.contains(&addr(host, port)),
            "bootstrap: {host}:{port}"
        );
        assert!(
            compose.contains(&format!("\n  {host}:\n")),
            "compose has no service {host}"
        );
        assert!(
            compose.contains(&format!("0.0.0.0:{port}")),
            "compose: {host} does not listen on 0.0.0.0:{port}"
        );
    }
    assert!(envoy.contains(&addr("0.0.0.0", 10000)));
    assert!(
        compose.contains(":10000\""),
        "compose does not publish 10000"
    );
    // The admin interface: the container's loopback only, never published.
    assert!(envoy.contains(&addr("127.0.0.1", 9901)));
    assert!(
        !compose.contains(":9901"),
        "compose publishes Envoy's admin"
    );
    assert!(compose.contains("./envoy.yaml:/etc/envoy/envoy.yaml:ro"));
    // Closed: every server of the stack serves mTLS (certs.sh's certificates), none plaintext.
    assert!(compose.contains("./sds:/etc/envoy/sds:ro"));
    assert!(
        !compose.contains("--insecure"),
        "a plaintext server in compose"
    );
    assert_eq!(
        compose.matches("- --client-ca\n").count(),
        2,
        "reader and control plane"
    );
    for party in ["reader", "control-plane", "envoy", "redis"] {
        assert!(
            compose.contains(&format!("- certs-{party}:/etc/ferry/tls:ro\n")),
            "{party} does not mount its certificate"
        );
    }
    assert!(
        !compose.contains("--protected-mode"),
        "Redis's protected mode is on"
    );
    assert!(
        compose.contains("--requirepass"),
        "Redis requires a password"
    );
    // Redis over TLS only: no plaintext port, every client's URL rediss:// with the stack's CA.
    assert!(
        compose.contains(" --port 0 --tls-port 6380 "),
        "Redis serves plaintext"
    );
    assert!(!compose.contains("redis://"), "a plaintext Redis URL");
    let services = yaml("docker-compose.yml");
    for name in ["init", "reader", "control-plane"] {
        let env = &services["services"][name]["environment"];
        assert_eq!(
            env["FERRY_REDIS"].as_str(),
            Some("rediss://redis:6380"),
            "{name}"
        );
        let ca = env["FERRY_REDIS_CA_FILE"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no CA"));
        let dir = ca.rsplit_once('/').unwrap().0;
        let volumes = services["services"][name]["volumes"].as_sequence().unwrap();
        assert!(
            volumes
                .iter()
                .any(|v| v.as_str().unwrap().ends_with(&format!(":{dir}:ro"))),
            "{name}: {ca} is on no mounted volume"
        );
    }
    assert!(compose.contains("command: [\"envoy\", \"-c\", \"/etc/envoy/envoy.yaml\""));
    let wasm = "/opt/ferry/ferry_filter.wasm";
    assert!(compose.contains(&format!("- --wasm\n      - {wasm}\n")));
    assert!(dockerfile.contains(&format!(
        "COPY --from=binaries /out/ferry_filter.wasm {wasm}\n"
    )));
    assert!(
        dockerfile.contains("envoyproxy/envoy:v1.40"),
        "Envoy 1.40, as tested here"
    );
}

fn yaml(file: &str) -> serde_norway::Value {
    let text = std::fs::read_to_string(docker(file)).expect(file);
    let mut value: serde_norway::Value = serde_norway::from_str(&text).expect(file);
    value.apply_merge().expect("YAML merge keys");
    value
}

fn keys(map: &serde_norway::Value) -> Vec<String> {
    map.as_mapping()
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// docker-compose.local.yml (the machine without a registry) changes only images and build
/// arguments, each an ARG of the Dockerfile; every service that builds gets them (so none
/// falls back to compiling in the rust image). All else is docker-compose.yml's, the file a
/// user runs elsewhere.
#[test]
fn the_local_override_changes_only_images_and_build_arguments() {
    let local = yaml("docker-compose.local.yml");
    let compose = yaml("docker-compose.yml");
    let dockerfile = std::fs::read_to_string(docker("Dockerfile")).expect("Dockerfile");
    for key in keys(&local) {
        assert!(
            key == "services" || key.starts_with("x-"),
            "top-level {key}"
        );
    }
    for name in keys(&compose["services"]) {
        let (base, over) = (&compose["services"][&name], &local["services"][&name]);
        for key in keys(over) {
            assert!(key == "image" || key == "build", "{name}: overrides {key}");
        }
        if base.get("build").is_none() {
            continue;
        }
        assert_eq!(
            keys(&over["build"]),
            ["args"],
            "{name}: only build arguments"
        );
        let args = keys(&over["build"]["args"]);
        assert!(args.contains(&"BINARIES".to_owned()), "{name}: {args:?}");
        for arg in args {
            assert!(
                dockerfile.contains(&format!("\nARG {arg}=")),
                "{name}: {arg} is not an ARG of the Dockerfile"
            );
        }
    }
    for name in keys(&local["services"]) {
        assert!(
            compose["services"].get(&name).is_some(),
            "no service {name}"
        );
    }
    assert!(dockerfile.contains("\nFROM ${BINARIES} AS binaries\n"));
}

/// docker/envoy.yaml run for real: compose hostnames → 127.0.0.1, ports → the free ports of the
/// processes started here; the data are written by the init service's command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docker_bootstrap_enriches_a_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = example_repo_with(dir.path(), 100);
    let redis = RedisServer::start();
    // What the compose `init` service runs (after generating the data).
    run(Command::new(bin("ferry"))
        .arg("apply")
        .arg(&repo)
        .arg("--materialize")
        .env("FERRY_REDIS", redis.url()));

    let hosted = hosted(dir.path());
    let (reader_port, model_port) = (free_port(), free_port());
    let mut cmd = Command::new(bin("ferry-reader"));
    cmd.args(["--listen", &format!("127.0.0.1:{reader_port}")])
        .args(tls_flags(&hosted.reader, &hosted.ca_file))
        .env("FERRY_REDIS", redis.url());
    let mut reader = Proc::start("reader", cmd, dir.path());
    let mut model = start_model(dir.path(), model_port);
    let (xds_port, http_port) = (free_port(), free_port());
    let trust = (&hosted.cp, hosted.ca_file.as_path(), &hosted.ca);
    let _cp = secure::control_plane(dir.path(), &repo, trust, (xds_port, http_port), &[]);

    let (listen_port, admin_port) = (free_port(), free_port());
    let mut config = hosted.config.clone();
    // The model twice: its HTTP/1.1 cluster and its gRPC (h2c) one.
    for (old, new, times) in [
        (addr("0.0.0.0", 10000), listen_port, 1),
        (addr("127.0.0.1", 9901), admin_port, 1),
        (addr("control-plane", 18000), xds_port, 1),
        (addr("reader", 8090), reader_port, 1),
        (addr("model", 8080), model_port, 2),
    ] {
        config = replace_each(&config, &old, &addr("127.0.0.1", new), times);
    }
    let path = dir.path().join("docker-envoy.yaml");
    std::fs::write(&path, &config).expect("write config");
    let mut cmd = Command::new(envoy_bin());
    cmd.arg("-c")
        .arg(&path)
        .args(["--disable-hot-restart", "--log-level", "warn"]);
    let mut envoy = Proc::start("envoy", cmd, dir.path());
    reader.wait_ready(|| tcp_open(reader_port), "reader (mTLS) listening");
    model.wait_ready(|| tcp_open(model_port), "demo model");
    envoy.wait_ready(
        || get_ok(admin_port, "/ready"),
        "the docker bootstrap's Envoy /ready",
    );

    let body = json!({"instances": [{"user_id": "u000001", "amount": 120.5}]}).to_string();
    let resp = post(listen_port, "/v1/models/fraud:predict", body).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    assert_eq!(resp.upstream_headers()["x-ferry-status"], "ok");
    let received = resp.json();
    assert_eq!(received["instances"][0]["amount"], 120.5);
    let counts = Store::load_repo(&repo).check_instances(
        Service::RealtimeScoring,
        &received,
        &[Entity::User("u000001".into())],
    );
    assert_eq!(counts.get("PRESENT"), Some(&10), "{counts:?}");

    // The control plane sees the compose Envoy under its node id, which its certificate names
    // (mTLS xDS), converged on the current snapshot.
    let start = Instant::now();
    loop {
        let status = block_on(tls::request(
            http_port,
            CP_NAME,
            (&hosted.ca, None),
            (
                "GET",
                "/status",
                &[("authorization", &format!("Bearer {TOKEN}"))],
            ),
            vec![],
        ))
        .expect("GET /status over TLS");
        let status: Json = serde_json::from_str(&status.1).expect("/status JSON");
        let node = &status["nodes"][0];
        if node["node"] == NODE_ID && node["converged"] == true {
            assert_eq!(node["identity"], NODE_ID, "{status}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
