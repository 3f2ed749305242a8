//! What the Gateway's Envoy calls, started inside the test's namespaces at the addresses the
//! deploy files name: Redis with the example repo materialized, the reader on its Service port,
//! `ferry serve` on its Service port with TLS (a certificate for its Service name from a test
//! CA), tokens and a signing key, and the demo model in place of KServe's predictor.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_integration_tests::control_plane::{READ_TOKEN, TOKEN};
use ferry_integration_tests::http::get_ok;
use ferry_integration_tests::process::tcp_open;
use ferry_integration_tests::secure::block_on;
use ferry_integration_tests::{
    bin, free_port, materialized_example, run, start_reader, tls, wasm, Proc, RedisServer,
};
use ferry_test_support::certs::Ca;

/// `ferry serve`'s Service name (its certificate's SAN, the pull's URL and SNI).
pub const CP_NAME: &str = "ferry-control-plane.ferry.svc.cluster.local";
/// The Services' ports the files name (kept: nothing else listens in the namespace).
pub const READER_PORT: u16 = 8090;
pub const CP_PORT: u16 = 8091;

pub struct Stack {
    pub repo: PathBuf,
    pub redis: RedisServer,
    pub model_port: u16,
    /// The CA of `ferry serve`'s certificate.
    pub ca_file: PathBuf,
    /// The `snapshot_keys` entry `ferry keygen` printed for the signing key.
    pub key_entry: String,
    _reader: Proc,
    _model: Proc,
    _control_plane: Proc,
}

impl Stack {
    pub fn start(d: &Path) -> Stack {
        let (repo, redis) = materialized_example(d, 50);
        let mut reader = start_reader(d, READER_PORT, &["--redis".into(), redis.url()]);
        let model_port = free_port();
        let mut cmd = Command::new(bin("ferry-demo-model"));
        cmd.args(["--listen", &format!("127.0.0.1:{model_port}")]);
        let mut model = Proc::start("model", cmd, d);

        let ca = Ca::new("ferry-gateway-test");
        let ca_file = ca.write(&d.join("ca.pem"));
        let leaf = ca.issue(&[CP_NAME], &[]).write(d, "control-plane");
        let signing = d.join("signing.pem");
        let printed = run(Command::new(bin("ferry"))
            .arg("keygen")
            .arg("--out")
            .arg(&signing));
        let key_entry = printed
            .lines()
            .find(|l| l.contains("\"ed25519\""))
            .unwrap_or_else(|| panic!("no key entry in: {printed}"))
            .trim()
            .to_owned();
        let mut cmd = Command::new(bin("ferry"));
        cmd.arg("serve")
            .arg(&repo)
            .arg("--wasm")
            .arg(wasm())
            .args(["--xds-listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--http-listen", &format!("127.0.0.1:{CP_PORT}")])
            .args(["--token", TOKEN, "--read-token", READ_TOKEN])
            .arg("--signing-key")
            .arg(&signing)
            .arg("--tls-cert")
            .arg(&leaf.cert)
            .arg("--tls-key")
            .arg(&leaf.key)
            .env_remove("FERRY_PUSH_TOKEN")
            .env_remove("FERRY_READ_TOKEN");
        let mut control_plane = Proc::start("control-plane", cmd, d);
        control_plane.wait_ready(
            || {
                let healthz = ("GET", "/healthz", &[][..]);
                block_on(tls::request(CP_PORT, CP_NAME, (&ca, None), healthz, vec![]))
                    .is_ok_and(|(code, _)| code == 200)
            },
            "ferry serve /healthz over TLS",
        );
        reader.wait_ready(|| get_ok(READER_PORT, "/healthz"), "reader /healthz");
        model.wait_ready(|| tcp_open(model_port), "demo model");
        Stack {
            repo,
            redis,
            model_port,
            ca_file,
            key_entry,
            _reader: reader,
            _model: model,
            _control_plane: control_plane,
        }
    }
}
