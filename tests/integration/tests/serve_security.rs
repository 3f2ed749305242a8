//! Issue #22, `ferry serve`'s HTTP API as a real process: its tokens and start rules (an empty
//! token, a network address without one, `--insecure`) and 2,000 idle keep-alive pollers. No
//! Envoy: the API alone.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use prost::Message as _;

use ferry::serve::api::Status;
use ferry_integration_tests::http::{get_ok, raw};
use ferry_integration_tests::{bin, example_repo, free_port, wasm, Options, Proc};

/// A small example repo in `dir`.
fn repo(dir: &Path) -> PathBuf {
    let opts = Options {
        entities: Some(10),
        ..Options::default()
    };
    example_repo(dir, &opts, |y| y)
}

/// `ferry serve REPO` on `http` (xDS on a free loopback port), no token from the environment.
fn serve(dir: &Path, repo: &Path, http: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin("ferry"));
    cmd.arg("serve")
        .arg(repo)
        .arg("--wasm")
        .arg(wasm())
        .args(["--xds-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--http-listen", http])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(args)
        .env_remove("FERRY_PUSH_TOKEN")
        .env_remove("FERRY_READ_TOKEN");
    cmd
}

/// A start that must fail: its stderr.
fn refused(cmd: &mut Command) -> String {
    let out = cmd.output().expect("ferry runs");
    assert!(!out.status.success(), "started: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
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

    let e = refused(serve(dir.path(), &repo, &loopback, &[]).env("FERRY_PUSH_TOKEN", ""));
    assert!(e.contains("FERRY_PUSH_TOKEN is set but empty"), "{e}");
    let e = refused(&mut serve(dir.path(), &repo, &loopback, &["--token", ""]));
    assert!(e.contains("--token") && e.contains("empty"), "{e}");
    let file = dir.path().join("empty-token");
    std::fs::write(&file, "\n").unwrap();
    let e = refused(
        serve(dir.path(), &repo, &loopback, &[])
            .arg("--push-token-file")
            .arg(&file),
    );
    assert!(e.contains("empty-token") && e.contains("empty"), "{e}");

    // Every address, not only loopback, without a token: refused, naming --insecure.
    let port = free_port();
    let network = format!("0.0.0.0:{port}");
    let e = refused(&mut serve(dir.path(), &repo, &network, &[]));
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

/// A keep-alive connection to the API, one request at a time (blocking).
struct Poller(std::net::TcpStream);

/// An answer read off a keep-alive connection.
struct Answer {
    code: u16,
    etag: Option<String>,
    body: Vec<u8>,
}

impl Poller {
    fn open(port: u16) -> Poller {
        let s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Poller(s)
    }

    fn send(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n",
            body.len()
        );
        for (n, v) in headers {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("\r\n");
        self.0.write_all(req.as_bytes()).unwrap();
        self.0.write_all(body).unwrap();
        self.read_answer()
    }

    /// One response: its head up to the blank line, then content-length bytes.
    fn read_answer(&mut self) -> Answer {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = self.0.read(&mut byte).expect("an answer");
            assert_eq!(
                n,
                1,
                "closed mid-answer: {}",
                String::from_utf8_lossy(&head)
            );
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let header = |name: &str| {
            head.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim().to_owned())
        };
        let len: usize = header("content-length").map_or(0, |v| v.parse().unwrap());
        let mut body = vec![0u8; len];
        self.0.read_exact(&mut body).unwrap();
        Answer {
            code: head[9..12].parse().unwrap(),
            etag: header("etag"),
            body,
        }
    }
}

const TOKEN: &str = "push-secret";

/// `ferry serve` on a free loopback port with `args`, healthy: the process and its HTTP port.
fn started(dir: &Path, args: &[&str]) -> (Proc, u16) {
    let repo = repo(dir);
    let port = free_port();
    let http = format!("127.0.0.1:{port}");
    let mut cp = Proc::start("control-plane", serve(dir, &repo, &http, args), dir);
    cp.wait_ready(|| get_ok(port, "/healthz"), "control plane /healthz");
    (cp, port)
}
const IDLE_POLLERS: usize = 2_000;

#[test]
fn two_thousand_idle_keep_alive_pollers_do_not_keep_a_push_out() {
    let dir = tempfile::tempdir().unwrap();
    let (_cp, port) = started(dir.path(), &["--token", TOKEN]);
    let auth = format!("Bearer {TOKEN}");
    let auth = [("authorization", auth.as_str())];

    // Every poller fetches the snapshot as it connects and then stays connected, idle. (The
    // API closes a connection that sends no request for 10 s, its header read timeout, idle
    // keep-alive ones included: on a slow machine the first pollers may be gone by the push.)
    let mut pollers = Vec::with_capacity(IDLE_POLLERS);
    let mut first = None;
    for _ in 0..IDLE_POLLERS {
        let mut p = Poller::open(port);
        let a = p.send("GET", "/v1/snapshot", &auth, b"");
        assert_eq!(a.code, 200);
        first.get_or_insert(a);
        pollers.push(p);
    }
    let first = first.unwrap();
    let etag = first.etag.clone().expect("an ETag");
    // Unchanged: 304, no body, on the same keep-alive connection.
    let a = pollers[IDLE_POLLERS - 1].send(
        "GET",
        "/v1/snapshot",
        &[auth[0], ("if-none-match", &etag)],
        b"",
    );
    assert_eq!((a.code, a.body.len()), (304, 0));

    // A push (one more protected path) over connection 2,001: taken at once.
    let mut snap = ferry_protos::v1::Snapshot::decode(first.body.as_slice()).unwrap();
    snap.protected_paths.push("/v9/extra".into());
    let started = Instant::now();
    let pushed = Poller::open(port).send("POST", "/v1/snapshot", &auth, &snap.encode_to_vec());
    let push_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(
        pushed.code,
        200,
        "{}",
        String::from_utf8_lossy(&pushed.body)
    );
    eprintln!("push under {IDLE_POLLERS} idle keep-alive pollers: {push_ms:.1} ms");

    // An idle poller polls again with the old ETag: the new version, not a 304.
    let a = pollers[IDLE_POLLERS - 2].send(
        "GET",
        "/v1/snapshot",
        &[auth[0], ("if-none-match", &etag)],
        b"",
    );
    assert_eq!(a.code, 200);
    assert_ne!(a.etag.as_deref(), Some(etag.as_str()));
    let new = ferry_protos::v1::Snapshot::decode(a.body.as_slice()).unwrap();
    assert_eq!(new.protected_paths, snap.protected_paths);
    assert_eq!(a.etag, Some(format!("\"{}\"", new.version)));
}

#[test]
fn reads_need_the_read_or_push_token_and_pushes_the_push_token() {
    let dir = tempfile::tempdir().unwrap();
    let (_cp, port) = started(
        dir.path(),
        &["--token", TOKEN, "--read-token", "read-secret"],
    );
    let (push, read) = ("Bearer push-secret", "Bearer read-secret");
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
