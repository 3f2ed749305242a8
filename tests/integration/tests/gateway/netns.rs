//! The test inside namespaces of its own: Envoy Gateway's xDS (18000), Wasm cache (18002) and the
//! Gateway's listeners bind all interfaces, so the whole test re-runs itself under `unshare`
//! with a network namespace (only a loopback, nothing reachable from outside, no port shared
//! with anything else on the machine), a mount namespace (its own /etc/hosts, where the
//! Kubernetes names the files use resolve to loopback) and a PID namespace (when the test ends,
//! however it ends, the kernel ends every process it started).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Set in the re-run's environment: the test is inside its namespaces.
const INSIDE: &str = "FERRY_GATEWAY_NETNS";
/// The whole re-run's bound: past it, it is killed (with everything it started).
const LIMIT: Duration = Duration::from_secs(600);

/// Outside the namespaces: re-runs the test `name` of this binary inside them, fails if it
/// fails, and answers true (the caller returns). Inside: answers false (the caller runs).
pub fn rerun_inside(name: &str) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return false;
    }
    assert!(
        is_root(),
        "the gateway test makes network, mount and PID namespaces: run it as root (make test-gateway)"
    );
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new("unshare")
        .args([
            "--net",
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
        ])
        .arg(exe)
        .args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(INSIDE, "1")
        .spawn()
        .expect("unshare (util-linux)");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the gateway test did not end within {LIMIT:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        status.success(),
        "the gateway test failed inside its namespaces ({status})"
    );
    true
}

/// Inside: brings the loopback up and puts `hosts` (lines of /etc/hosts) in place of this
/// namespace's /etc/hosts.
pub fn set_up(dir: &Path, hosts: &str) {
    ferry_integration_tests::run(Command::new("ip").args(["link", "set", "lo", "up"]));
    let file = dir.join("hosts");
    std::fs::write(&file, format!("127.0.0.1 localhost\n{hosts}")).expect("write hosts");
    // unshare made this mount namespace's mounts private: the host's /etc/hosts is untouched.
    ferry_integration_tests::run(
        Command::new("mount")
            .arg("--bind")
            .arg(&file)
            .arg("/etc/hosts"),
    );
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("id");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}
