//! What the Gateway's Envoy calls, started inside the test's namespaces at the addresses the
//! deploy files name: Redis with the example repo materialized, the reader on its Service port
//! with mTLS, `ferry serve` on its Service port with TLS (certificates for their Service names
//! from a test CA, which also signs the Gateway's Envoy's client certificate), tokens and a
//! signing key, and the demo model in place of KServe's predictor.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferry_integration_tests::control_plane::{READ_TOKEN, TOKEN};
use ferry_integration_tests::process::tcp_open;
use ferry_integration_tests::secure::block_on;
use ferry_integration_tests::{
    bin, free_port, materialized_example, run, start_model, start_reader, tls, wasm, Proc,
    RedisServer,
};
use ferry_test_support::certs::Ca;

/// `ferry serve`'s Service name (its certificate's SAN, the pull's URL and SNI).
pub const CP_NAME: &str = "ferry-control-plane.ferry.svc.cluster.local";
/// The reader's Service name (its certificate's SAN, the reader cluster's SNI).
pub const READER_NAME: &str = "ferry-reader.ferry.svc.cluster.local";
/// The Services' ports the files name (kept: nothing else listens in the namespace).
pub const READER_PORT: u16 = 8090;
pub const CP_PORT: u16 = 8091;

pub struct Stack {
    pub repo: PathBuf,
    pub redis: RedisServer,
    pub model_port: u16,
    /// The CA of `ferry serve`'s certificate.
    pub ca_file: PathBuf,
    /// The ferry-envoy-tls secret's files: the Gateway's Envoy's client certificate (tls.crt,
    /// tls.key) and the CA (ca.crt).
    pub tls_dir: PathBuf,
    /// The `snapshot_keys` entry `ferry keygen` printed for the signing key.
    pub key_entry: String,
    _reader: Proc,
    _model: Proc,
    _control_plane: Proc,
}

impl Stack {
    pub fn start(d: &Path) -> Stack {
        let (repo, redis) = materialized_example(d, 50);
        let ca = Ca::new("ferry-gateway-test");
        let ca_file = ca.write(&d.join("ca.pem"));
        let tls_dir = d.join("ferry-envoy-tls");
        std::fs::create_dir_all(&tls_dir).expect("mkdir");
        ca.write(&tls_dir.join("ca.crt"));
        let envoy = ca.issue(
            &[],
            &["spiffe://cluster.local/ns/envoy-gateway-system/sa/envoy"],
        );
        let files = envoy.write(&tls_dir, "envoy");
        std::fs::rename(&files.cert, tls_dir.join("tls.crt")).expect("rename");
        std::fs::rename(&files.key, tls_dir.join("tls.key")).expect("rename");
        let reader_leaf = ca.issue(&[READER_NAME], &[]).write(d, "reader");
        let mut flags = vec!["--redis".into(), redis.url()];
        for (flag, path) in [
            ("--tls-cert", &reader_leaf.cert),
            ("--tls-key", &reader_leaf.key),
            ("--client-ca", &ca_file),
        ] {
            flags.extend([flag.to_owned(), path.display().to_string()]);
        }
        let mut reader = start_reader(d, READER_PORT, &flags);
        let model_port = free_port();
        let mut model = start_model(d, model_port);

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
        // mTLS: every request needs a client certificate; the listener open is enough here.
        reader.wait_ready(|| tcp_open(READER_PORT), "reader (mTLS) listening");
        model.wait_ready(|| tcp_open(model_port), "demo model");
        Stack {
            repo,
            redis,
            model_port,
            ca_file,
            tls_dir,
            key_entry,
            _reader: reader,
            _model: model,
            _control_plane: control_plane,
        }
    }
}
