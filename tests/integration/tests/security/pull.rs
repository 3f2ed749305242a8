//! The pull path of the matrix: an Envoy as Istio / Envoy Gateway run the filter (a JSON plugin
//! configuration with `snapshot_keys`, the reader over mTLS) pulling `ferry serve`'s signed
//! snapshots through a man in the middle, which the cases make answer a replayed, tampered,
//! foreign-key or oversize envelope.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ferry_integration_tests::control_plane::{READ_TOKEN, TOKEN};
use ferry_integration_tests::mitm::{with_cp_cluster, Answer, Mitm, CP_CLUSTER};
use ferry_integration_tests::secure::{block_on, SecureStack, READER_NAME};
use ferry_integration_tests::{bin, free_port, http, run, start_envoy, tls, Proc, Runtime};
use ferry_protos::signed::CONTENT_TYPE;
use ferry_protos::v1::{SignedSnapshot, Snapshot};
use prost::Message;

use super::support::{as_istio, ISTIO_CLUSTER};

/// The plugin configuration's `snapshot_max_bytes` here: small, so an oversize answer is cheap.
pub const MAX_BYTES: usize = 256 * 1024;

/// The pulling Envoy and the man in the middle it pulls through.
pub struct PullEnvoy {
    pub proc: Proc,
    pub port: u16,
    pub mitm: Mitm,
    /// The envelope the filter took first, and the newer one it holds.
    pub older: Answer,
    pub held: Answer,
}

/// `GET /v1/snapshot` from the stack's `ferry serve` over TLS: the signed envelope.
pub fn fetch(stack: &SecureStack) -> Answer {
    let auth = format!("Bearer {READ_TOKEN}");
    let (code, headers, body) = block_on(stack_exchange(stack, "GET", &auth, Vec::new()));
    assert_eq!(code, 200);
    let header = |n: &str| headers.get(n).unwrap().to_str().unwrap().to_owned();
    Answer {
        content_type: header("content-type"),
        etag: header("etag"),
        body,
    }
}

async fn stack_exchange(
    stack: &SecureStack,
    method: &str,
    auth: &str,
    body: Vec<u8>,
) -> (u16, hyper::HeaderMap, Vec<u8>) {
    let req = (method, "/v1/snapshot", &[("authorization", auth)][..]);
    let name = ferry_integration_tests::secure::CP_NAME;
    tls::exchange(stack.http_port, name, (&stack.ca, None), req, body)
        .await
        .unwrap()
}

/// The snapshot inside the current envelope, with one more protected path, pushed with the
/// push token: its new envelope.
pub async fn push_one_more(stack: &SecureStack, path: &str) -> Result<(), String> {
    let auth = format!("Bearer {READ_TOKEN}");
    let (_, _, body) = stack_exchange(stack, "GET", &auth, Vec::new()).await;
    let envelope = SignedSnapshot::decode(&*body).map_err(|e| e.to_string())?;
    let mut snap = Snapshot::decode(&*envelope.snapshot).map_err(|e| e.to_string())?;
    snap.protected_paths.push(path.to_owned());
    let auth = format!("Bearer {TOKEN}");
    let (code, _, body) = stack_exchange(stack, "POST", &auth, snap.encode_to_vec()).await;
    match code {
        200 => Ok(()),
        _ => Err(format!("{code}: {}", String::from_utf8_lossy(&body))),
    }
}

/// `ferry keygen`'s key as the filter takes it, and the rest of the Istio-shaped bootstrap.
pub fn start(stack: &SecureStack) -> PullEnvoy {
    let older = fetch(stack);
    block_on(push_one_more(stack, "/v9/newer")).unwrap();
    let held = fetch(stack);
    let mitm = Mitm::start();
    mitm.set(held.clone());

    let d = stack.dir.path().join("pull");
    std::fs::create_dir_all(&d).unwrap();
    let url = format!("http://127.0.0.1:{}/v1/snapshot", mitm.port);
    let key = stack.signing_key.display().to_string();
    let text = run(Command::new(bin("ferry"))
        .arg("plugin-config")
        .arg(&stack.repo)
        .args(["--reader-cluster", ISTIO_CLUSTER])
        .args(["--snapshot-url", &url, "--snapshot-cluster", CP_CLUSTER])
        .args(["--snapshot-poll-ms", "200", "--snapshot-key", &key])
        .arg("--insecure"));
    let mut config: serde_json::Value = serde_json::from_str(&text).unwrap();
    config["snapshot_max_bytes"] = MAX_BYTES.into();
    let (port, admin) = (free_port(), free_port());
    let out = d.join("envoy.yaml");
    let files = stack.envoy_tls.0.files();
    run(Command::new(bin("ferry"))
        .arg("envoy-config")
        .arg(&stack.repo)
        .args(Runtime::Wasm.flags())
        .args(["--listen-port", &port.to_string()])
        .args(["--admin-port", &admin.to_string()])
        .args(["--reader-port", &stack.reader_port.to_string()])
        .args(["--model-port", &stack.model_port.to_string()])
        .arg("--tls-cert")
        .arg(&files.cert)
        .arg("--tls-key")
        .arg(&files.key)
        .arg("--tls-ca")
        .arg(stack.envoy_tls.0.ca())
        .args(["--reader-server-san", READER_NAME])
        .arg("-o")
        .arg(&out));
    let yaml = std::fs::read_to_string(&out).unwrap();
    let yaml = with_cp_cluster(as_istio(yaml, &config.to_string()), mitm.port);
    std::fs::write(&out, yaml).unwrap();
    let mut proc = start_envoy(&d, &out, "envoy-pull");
    proc.wait_ready(|| http::get_ok(admin, "/ready"), "the pulling Envoy /ready");
    let envoy = PullEnvoy {
        proc,
        port,
        mitm,
        older,
        held,
    };
    let start = Instant::now();
    while let Err(e) = block_on(stack.enriched_at(envoy.port)) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the pulling Envoy never enriched: {e}\n{}",
            envoy.proc.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    envoy
}

impl PullEnvoy {
    /// The man in the middle answers `body` (signed content type, a new ETag each time) until
    /// the filter logs `refusal`; then the filter must still enrich with the held snapshot.
    pub async fn refused(
        &self,
        stack: &SecureStack,
        body: Vec<u8>,
        refusal: &str,
    ) -> Result<String, String> {
        static ANSWERS: AtomicU32 = AtomicU32::new(0);
        let etag = format!("\"mitm-{}\"", ANSWERS.fetch_add(1, Ordering::Relaxed));
        self.mitm.set(Answer {
            content_type: CONTENT_TYPE.into(),
            etag,
            body,
        });
        let start = Instant::now();
        let found = loop {
            let log = self.proc.log_text();
            if let Some(line) = log.lines().find(|l| l.contains(refusal)) {
                break line.to_owned();
            }
            if start.elapsed() > Duration::from_secs(15) {
                self.mitm.set(self.held.clone());
                return Err(format!("no refusal '{refusal}' logged within 15 s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let after = stack.enriched_at(self.port).await;
        self.mitm.set(self.held.clone());
        after.map_err(|e| format!("the held snapshot stopped enriching: {e}"))?;
        let why = found
            .split("the last good one stays: ")
            .nth(1)
            .unwrap_or(&found);
        Ok(format!("refused ({why}); the held snapshot enriches"))
    }

    /// The envelope the filter holds, as a value to tamper with.
    pub fn held_envelope(&self) -> SignedSnapshot {
        SignedSnapshot::decode(&*self.held.body).unwrap()
    }
}
