//! Issue #11, the control plane's half, end to end: a pushed snapshot survives a restart of
//! `ferry serve`; one Envoy's NACK does not keep a version from the others (not even from an
//! Envoy that shares its node id); a half-written `ferry.yaml` is never applied. Real Envoy,
//! Redis, reader and model on loopback, as in xds.rs.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ferry_integration_tests::http::{get_ok, post, Response};
use ferry_integration_tests::{
    bin, envoy_bin, example_repo_with, free_port, run, wasm, ControlPlane, Options, Proc, Stack,
};
use serde_json::json;

const STRICT: &str = "/v1/models/fraud:predict";
const ALL_VIEWS: &str = "features: [user_profile, transactions, user_embedding]";
const NO_EMBEDDING: &str = "features: [user_profile, transactions]";
const WAIT: Duration = Duration::from_secs(30);

/// An xDS stack whose repo is v1: the service without the embedding view.
fn xds_stack() -> Stack {
    Stack::start_xds(
        Options {
            extra_routes: "",
            entities: Some(100),
            ..Options::default()
        },
        |y| y.replace(ALL_VIEWS, NO_EMBEDDING),
    )
}

fn has_embedding(resp: &Response) -> bool {
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    resp.json()["instances"][0]
        .get("user_embedding__embedding")
        .is_some()
}

async fn enriched_with_embedding(port: u16) -> bool {
    let body = json!({"instances": [{"user_id": "u000001"}]}).to_string();
    has_embedding(&post(port, STRICT, body).await)
}

/// A copy of the repo (ferry.yaml and its data) in `dir`, ferry.yaml rewritten by `edit`.
fn copy_repo(repo: &Path, dir: &Path, edit: impl FnOnce(String) -> String) -> PathBuf {
    run(Command::new("cp").arg("-r").arg(repo).arg(dir));
    let yaml = std::fs::read_to_string(dir.join("ferry.yaml")).unwrap();
    std::fs::write(dir.join("ferry.yaml"), edit(yaml)).unwrap();
    dir.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_snapshot_is_restored_after_a_restart() {
    let mut stack = xds_stack();
    let a = stack.cp().version();
    stack.cp().wait_converged(&a, 1, WAIT);
    assert!(!enriched_with_embedding(stack.listen_port).await);

    // B (v2, a new fingerprint) is pushed from another checkout: the served repo stays at A.
    let other = copy_repo(&stack.repo, &stack.dir.path().join("other"), |y| {
        y.replace(NO_EMBEDDING, ALL_VIEWS)
    });
    let b = stack.cp().apply_push(&other, &stack.redis.url(), true);
    assert_ne!(a, b);
    stack.cp().wait_converged(&b, 1, WAIT);
    assert!(enriched_with_embedding(stack.listen_port).await);

    stack.control_plane.as_mut().unwrap().restart();
    let status = stack.cp().wait_converged(&b, 1, WAIT);
    let snapshot = status.snapshot.as_ref().unwrap();
    assert_eq!(snapshot.source, "push", "{status:?}");
    let from = snapshot.restored_from.as_deref().expect("restored");
    assert!(from.ends_with(".ferry/current.snapshot"), "{from}");
    assert!(status.last_refused.is_none(), "{status:?}");
    let log = stack.cp().proc.log_text();
    assert!(
        log.contains("restored the saved snapshot") && log.contains(&b),
        "{log}"
    );
    assert!(enriched_with_embedding(stack.listen_port).await);
}

/// An Envoy started in a folder of its own holding a copy of the filter. The control plane
/// names the filter `/proc/self/cwd/ferry_filter.wasm`, so each Envoy opens its own copy, and
/// removing one copy makes only that Envoy refuse (NACK) the next snapshot.
struct CwdEnvoy {
    /// Killed on drop.
    _proc: Proc,
    dir: PathBuf,
    listen_port: u16,
    node: String,
}

impl CwdEnvoy {
    /// Renders its bootstrap with `ferry envoy-config --xds` and the default node id, or
    /// reuses `like`'s bootstrap (its node id) on new ports.
    fn start(stack: &Stack, name: &'static str, like: Option<&CwdEnvoy>) -> CwdEnvoy {
        let dir = stack.dir.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(wasm(), dir.join("ferry_filter.wasm")).unwrap();
        let (listen_port, admin_port) = (free_port(), free_port());
        let config = dir.join("envoy.yaml");
        run(Command::new(bin("ferry"))
            .arg("envoy-config")
            .arg(&stack.repo)
            .arg("--xds")
            .args([
                "--xds-address",
                &format!("127.0.0.1:{}", stack.cp().xds_port),
            ])
            .args(["--listen-port", &listen_port.to_string()])
            .args(["--admin-port", &admin_port.to_string()])
            .args(["--reader-port", &stack.reader_port.to_string()])
            .args(["--model-port", &stack.model_port.to_string()])
            .arg("-o")
            .arg(&config));
        let mut yaml = std::fs::read_to_string(&config).unwrap();
        if let Some(like) = like {
            let own = node_id(&yaml);
            yaml = yaml.replace(&own, &like.node);
            std::fs::write(&config, &yaml).unwrap();
        }
        let mut cmd = Command::new(envoy_bin());
        cmd.arg("-c")
            .arg(&config)
            .args(["--disable-hot-restart", "--log-level", "warn"])
            .current_dir(&dir);
        let mut proc = Proc::start(name, cmd, &dir);
        proc.wait_ready(|| get_ok(admin_port, "/ready"), name);
        CwdEnvoy {
            _proc: proc,
            dir,
            listen_port,
            node: node_id(&yaml),
        }
    }
}

/// The bootstrap's `node.id`.
fn node_id(yaml: &str) -> String {
    yaml.lines()
        .find_map(|l| l.trim().strip_prefix("id: \""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("a node id")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_envoys_nack_keeps_the_version_from_that_envoy_only() {
    let mut stack = xds_stack();
    // The stack's own Envoy opens the filter where the tests run: stop it, and have the
    // control plane name each Envoy's own copy instead.
    stack.envoy.kill();
    let cwd_wasm = Path::new("/proc/self/cwd/ferry_filter.wasm");
    stack
        .control_plane
        .as_mut()
        .unwrap()
        .restart_with_wasm(cwd_wasm);
    let x = CwdEnvoy::start(&stack, "envoy-x", None);
    let y = CwdEnvoy::start(&stack, "envoy-y", None);
    assert!(x.node.starts_with("ferry-envoy-"), "{}", x.node);
    assert_ne!(x.node, y.node, "default node ids differ");
    let cp = stack.cp();
    let v1 = cp.version();
    cp.wait_converged(&v1, 2, WAIT);

    // X loses its .wasm; v2 (a new fingerprint, materialized and pushed) reaches both.
    std::fs::remove_file(x.dir.join("ferry_filter.wasm")).unwrap();
    let path = stack.repo.join("ferry.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, yaml.replace(NO_EMBEDDING, ALL_VIEWS)).unwrap();
    let v2 = cp.apply_push(&stack.repo, &stack.redis.url(), true);
    let status = cp.wait_status("X NACKs v2 and Y ACKs it", WAIT, |s| {
        let on = |n: &str| s.nodes.iter().find(|s| s.node == n).cloned();
        on(&x.node)
            .and_then(|n| n.last_nack)
            .is_some_and(|k| k.version == v2)
            && on(&y.node).is_some_and(|n| n.converged)
    });
    for n in &status.nodes {
        if n.node == x.node {
            let nack = n.last_nack.as_ref().unwrap();
            assert!(nack.error.contains("ferry_filter.wasm"), "{nack:?}");
            assert_eq!(n.acked_version.as_deref(), Some(v1.as_str()), "keeps v1");
        } else {
            assert_eq!(n.node, y.node);
            assert!(n.last_nack.is_none(), "the NACK is X's only: {n:?}");
            assert_eq!(n.acked_version.as_deref(), Some(v2.as_str()));
        }
        assert!(!n.shares_node_id);
    }
    assert!(!status.converged);
    assert!(cp.metrics().contains("ferry_xds_nacks_total 1\n"));
    assert!(!enriched_with_embedding(x.listen_port).await, "X on v1");
    assert!(enriched_with_embedding(y.listen_port).await, "Y on v2");

    // Z is started from X's bootstrap (a shared file: the same node id) with its .wasm: a
    // fresh Envoy, so X's refusal does not hold v2 back from it either.
    let z = CwdEnvoy::start(&stack, "envoy-z", Some(&x));
    assert_eq!(z.node, x.node);
    let status = cp.wait_status("Z on v2", WAIT, |s| {
        s.nodes
            .iter()
            .any(|n| n.node == z.node && n.acked_version.as_deref() == Some(v2.as_str()))
    });
    let sharing: Vec<_> = status.nodes.iter().filter(|n| n.shares_node_id).collect();
    assert_eq!(sharing.len(), 2, "X and Z share an id: {status:?}");
    assert!(enriched_with_embedding(z.listen_port).await, "Z on v2");
    assert!(
        !enriched_with_embedding(x.listen_port).await,
        "X still on v1"
    );
}

#[test]
fn a_half_written_ferry_yaml_is_not_applied_and_a_renamed_one_is() {
    let dir = tempfile::tempdir().unwrap();
    let repo = example_repo_with(dir.path(), 20);
    let cp = ControlPlane::start(dir.path(), &repo);
    let first = cp.version();
    let yaml = std::fs::read_to_string(repo.join("ferry.yaml")).unwrap();
    let complete = yaml.replace("ttl: 30d", "ttl: 31d");
    assert_ne!(complete, yaml);
    // The first part ends before the last route: a valid repo of its own, another snapshot.
    let cut = complete.rfind("\n  - name:").expect("routes") + 1;
    let (part, rest) = complete.split_at(cut);
    let version_of = |text: &str, name: &str| {
        let copy = copy_repo(&repo, &dir.path().join(name), |_| text.to_owned());
        let out = run(Command::new(bin("ferry")).arg("apply").arg(&copy));
        let line = out.lines().next().unwrap().to_owned();
        line.rsplit(' ').next().unwrap().to_owned()
    };
    let partial_version = version_of(part, "partial");
    let complete_version = version_of(&complete, "complete");
    assert_ne!(partial_version, complete_version);
    let updates = || {
        let m = cp.metrics();
        m.lines()
            .find_map(|l| l.strip_prefix("ferry_snapshot_updates_total "))
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let before = updates();

    // Written in place in two steps, 250 ms apart: longer than the watch interval (200 ms),
    // shorter than the debounce (500 ms).
    let mut f = std::fs::File::create(repo.join("ferry.yaml")).unwrap();
    f.write_all(part.as_bytes()).unwrap();
    f.flush().unwrap();
    std::thread::sleep(Duration::from_millis(250));
    f.write_all(rest.as_bytes()).unwrap();
    drop(f);
    cp.wait_status("the complete file applied", WAIT, |s| {
        s.snapshot.as_ref().unwrap().version == complete_version
    });
    assert_eq!(
        updates(),
        before + 1,
        "only the complete file became current"
    );
    assert_ne!(complete_version, first);

    // Replaced by a rename (as editors and ConfigMap updates do): followed.
    let tmp = repo.join(".ferry.yaml.swp");
    std::fs::write(&tmp, &yaml).unwrap();
    std::fs::rename(&tmp, repo.join("ferry.yaml")).unwrap();
    cp.wait_status("the renamed file applied", WAIT, |s| {
        s.snapshot.as_ref().unwrap().version == first
    });
    assert_eq!(updates(), before + 2);
}
