//! Issue #22, `ferry serve`'s HTTP API as a real process: its tokens and start rules (an empty
//! token, a network address without one, `--insecure`) and 2,000 idle keep-alive pollers. No
//! Envoy: the API alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry::serve::api::Status;
use ferry_integration_tests::http::{get_ok, raw};
use ferry_integration_tests::pollers::{idle_pollers_then_push, IDLE_POLLERS};
use ferry_integration_tests::secure::{plain_serve, refused_start};
use ferry_integration_tests::{example_repo_with, free_port, Proc};

/// A small example repo in `dir`.
fn repo(dir: &Path) -> PathBuf {
    example_repo_with(dir, 10)
}

/// [`plain_serve`] with `args`.
fn serve(dir: &Path, repo: &Path, http: &str, args: &[&str]) -> Command {
    let mut cmd = plain_serve(dir, repo, http);
    cmd.args(args);
    cmd
}

/// One request over a fresh connection: (status code, body).
fn request(port: u16, method: &str, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n");
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let text = raw(port, req.as_bytes()).expect("the API answers");
    let code = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body.to_owned())
}

#[test]
fn an_empty_token_or_an_open_network_address_is_refused_at_start_unless_insecure() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let loopback = format!("127.0.0.1:{}", free_port());

    let e = refused_start(serve(dir.path(), &repo, &loopback, &[]).env("FERRY_PUSH_TOKEN", ""));
    assert!(e.contains("FERRY_PUSH_TOKEN is set but empty"), "{e}");
    let e = refused_start(&mut serve(dir.path(), &repo, &loopback, &["--token", ""]));
    assert!(e.contains("--token") && e.contains("empty"), "{e}");
    let file = dir.path().join("empty-token");
    std::fs::write(&file, "\n").unwrap();
    let e = refused_start(
        serve(dir.path(), &repo, &loopback, &[])
            .arg("--push-token-file")
            .arg(&file),
    );
    assert!(e.contains("empty-token") && e.contains("empty"), "{e}");

    // Replicas sign their shared records (#35): no key, no start.
    let e = refused_start(&mut serve(
        dir.path(),
        &repo,
        &loopback,
        &["--shared-state", "--redis", "redis://127.0.0.1:1"],
    ));
    assert!(
        e.contains("--shared-state needs --signing-key") && e.contains("ferry keygen"),
        "{e}"
    );

    // Every address, not only loopback, without a token: refused, naming --insecure.
    let port = free_port();
    let network = format!("0.0.0.0:{port}");
    let e = refused_start(&mut serve(dir.path(), &repo, &network, &[]));
    assert!(
        e.contains("not a loopback address") && e.contains("--insecure"),
        "{e}"
    );

    // With --insecure it runs, says so loudly, and /status shows it.
    let mut cp = Proc::start(
        "control-plane",
        serve(dir.path(), &repo, &network, &["--insecure"]),
        dir.path(),
    );
    cp.wait_ready(|| get_ok(port, "/healthz"), "control plane /healthz");
    let (code, body) = request(port, "GET", "/status", &[]);
    assert_eq!(code, 200, "{body}");
    let status: Status = serde_json::from_str(&body).unwrap();
    assert!(status.insecure, "{body}");
    assert!(cp.log_text().contains("INSECURE"), "{}", cp.log_text());
}

const TOKEN: &str = "push-secret-0123456789abcdef";

/// `ferry serve` on a free loopback port with `args`, healthy: the process and its HTTP port.
fn started(dir: &Path, args: &[&str]) -> (Proc, u16) {
    let repo = repo(dir);
    let port = free_port();
    let http = format!("127.0.0.1:{port}");
    let mut cp = Proc::start("control-plane", serve(dir, &repo, &http, args), dir);
    cp.wait_ready(|| get_ok(port, "/healthz"), "control plane /healthz");
    (cp, port)
}
#[test]
fn two_thousand_idle_keep_alive_pollers_do_not_keep_a_push_out() {
    let dir = tempfile::tempdir().unwrap();
    let (_cp, port) = started(dir.path(), &["--token", TOKEN]);
    let push_ms = idle_pollers_then_push(port, &format!("Bearer {TOKEN}"));
    eprintln!("push under {IDLE_POLLERS} idle keep-alive pollers: {push_ms:.1} ms");
}

#[test]
fn reads_need_the_read_or_push_token_and_pushes_the_push_token() {
    let dir = tempfile::tempdir().unwrap();
    let (_cp, port) = started(
        dir.path(),
        &[
            "--token",
            TOKEN,
            "--read-token",
            "read-secret-0123456789abcdef",
        ],
    );
    let (push, read) = (
        "Bearer push-secret-0123456789abcdef",
        "Bearer read-secret-0123456789abcdef",
    );
    for path in ["/status", "/v1/snapshot"] {
        for (auth, code) in [
            (None, 401),
            (Some("Bearer nope"), 401),
            (Some(read), 200),
            (Some(push), 200),
        ] {
            let headers: Vec<(&str, &str)> =
                auth.map(|a| ("authorization", a)).into_iter().collect();
            assert_eq!(
                request(port, "GET", path, &headers).0,
                code,
                "{path} {auth:?}"
            );
        }
    }
    // Probes and scrapers hold no token.
    assert_eq!(request(port, "GET", "/healthz", &[]).0, 200);
    assert_eq!(request(port, "GET", "/metrics", &[]).0, 200);
    // The read token does not push: a known credential without the role is 403.
    let (code, body) = request(port, "POST", "/v1/snapshot", &[("authorization", read)]);
    assert_eq!(code, 403, "{body}");
}
