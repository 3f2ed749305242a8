//! A Ferry stack with every control link over mTLS, as real processes: Redis, the reader
//! (`--tls-cert/--tls-key/--client-ca`), the demo model, `ferry serve` (TLS on the API and xDS,
//! tokens, a push grant, a signing key) and Envoy configured over mTLS xDS and calling the
//! reader over mTLS. Each party's certificate, key and CA bundle live in a Kubernetes-style
//! secret volume ([`SecretVolume`]) so a test can rotate them as the kubelet would. Shared by
//! the mTLS tests, the security matrix and the rotation test.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ferry_test_support::certs::{Ca, Leaf, LeafFiles, SecretVolume};

use crate::control_plane::{READ_TOKEN, TOKEN};
use crate::data::Source;
use crate::http::{get_ok, post};
use crate::RedisServer;
use crate::{bin, free_port, materialized_example, run, start_envoy, start_model, tls, wasm, Proc};

/// The control plane's DNS name (its certificate's SAN, Envoy's SNI toward it).
pub const CP_NAME: &str = "ferry-control-plane.test";
/// The reader's DNS name.
pub const READER_NAME: &str = "ferry-reader.test";
/// Envoy's SPIFFE id: its certificate's URI SAN and its node id.
pub const ENVOY: &str = "spiffe://cluster.local/ns/ml/sa/envoy";
/// The CI job's identity, granted `push`.
pub const CI: &str = "spiffe://cluster.local/ns/ml/sa/ferry-ci";
/// A workload of the mesh with a valid certificate and no role.
pub const WEB: &str = "spiffe://cluster.local/ns/ml/sa/web";

/// `--tls-cert`, `--tls-key`, `--client-ca` of a server.
pub fn tls_flags(leaf: &LeafFiles, ca: &Path) -> Vec<OsString> {
    vec![
        "--tls-cert".into(),
        leaf.cert.clone().into(),
        "--tls-key".into(),
        leaf.key.clone().into(),
        "--client-ca".into(),
        ca.into(),
    ]
}

/// `ferry serve REPO` in plaintext on `http` (xDS on a free loopback port), its state in
/// `dir/state`, no token from the environment: the command, to add flags to.
pub fn plain_serve(dir: &Path, repo: &Path, http: &str) -> Command {
    let mut cmd = Command::new(bin("ferry"));
    cmd.arg("serve")
        .arg(repo)
        .arg("--wasm")
        .arg(wasm())
        .args(["--xds-listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--http-listen", http])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .env_remove("FERRY_PUSH_TOKEN")
        .env_remove("FERRY_READ_TOKEN")
        .env_remove("FERRY_WRITE_TOKEN");
    cmd
}

/// A start that must fail: its stderr.
pub fn refused_start(cmd: &mut Command) -> String {
    let out = cmd.output().expect("the process runs");
    assert!(!out.status.success(), "started: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `f` on a current-thread runtime of its own (the callers may be async tests).
pub fn block_on<T: Send>(f: impl std::future::Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime")
                .block_on(f)
        })
        .join()
        .expect("the thread ends")
    })
}

/// `ferry serve REPO` over mTLS (`leaf` and client CA `ca`), with the test tokens and a push
/// grant for [`CI`], once `/healthz` answers over TLS (trusting `trust`).
pub fn control_plane(
    dir: &Path,
    repo: &Path,
    (leaf, ca, trust): (&LeafFiles, &Path, &Ca),
    (xds, http): (u16, u16),
    extra: &[OsString],
) -> Proc {
    let mut cmd = Command::new(bin("ferry"));
    cmd.arg("serve")
        .arg(repo)
        .arg("--wasm")
        .arg(wasm())
        .args(["--xds-listen", &format!("127.0.0.1:{xds}")])
        .args(["--http-listen", &format!("127.0.0.1:{http}")])
        .args(["--token", TOKEN, "--read-token", READ_TOKEN])
        .args(["--grant", &format!("push={CI}")])
        .args(tls_flags(leaf, ca))
        .args(extra)
        .env_remove("FERRY_PUSH_TOKEN")
        .env_remove("FERRY_READ_TOKEN")
        .env("RUST_LOG", "info,ferry_xds=debug");
    let mut proc = Proc::start("control-plane", cmd, dir);
    let ready = || {
        block_on(tls::request(
            http,
            CP_NAME,
            (trust, None),
            ("GET", "/healthz", &[]),
            vec![],
        ))
        .is_ok_and(|(code, _)| code == 200)
    };
    proc.wait_ready(ready, "control plane /healthz over TLS");
    proc
}

/// Where an Envoy of [`envoy_config`] listens.
pub struct EnvoyPorts {
    pub listen: u16,
    pub admin: u16,
}

/// `ferry envoy-config REPO --xds` for an Envoy speaking mTLS with `leaf` (CA bundle `ca`) to
/// the control plane on `xds` and the reader on `reader`, as node `node`, written to `out`
/// (the SDS files beside it).
pub fn envoy_config(
    repo: &Path,
    (xds, reader, model): (u16, u16, u16),
    (leaf, ca): (&LeafFiles, &Path),
    node: &str,
    out: &Path,
) -> EnvoyPorts {
    let ports = EnvoyPorts {
        listen: free_port(),
        admin: free_port(),
    };
    run(Command::new(bin("ferry"))
        .arg("envoy-config")
        .arg(repo)
        .args(["--xds", "--xds-address", &format!("127.0.0.1:{xds}")])
        .args(["--node-id", node, "--initial-fetch-timeout", "0"])
        .args(["--listen-port", &ports.listen.to_string()])
        .args(["--admin-port", &ports.admin.to_string()])
        .args(["--reader-port", &reader.to_string()])
        .args(["--model-port", &model.to_string()])
        .arg("--tls-cert")
        .arg(&leaf.cert)
        .arg("--tls-key")
        .arg(&leaf.key)
        .arg("--tls-ca")
        .arg(ca)
        .args([
            "--xds-server-san",
            CP_NAME,
            "--reader-server-san",
            READER_NAME,
        ])
        .arg("-o")
        .arg(out));
    ports
}

/// What to change in a [`SecureStack`].
#[derive(Default)]
pub struct SecureOptions {
    /// Entities of the example data (default 200).
    pub entities: Option<usize>,
    /// More reader flags (e.g. `--max-connections`).
    pub reader_args: Vec<OsString>,
    /// More `ferry serve` flags (the signing key is always given).
    pub serve_args: Vec<OsString>,
    /// Rewrites Envoy's rendered bootstrap before it starts.
    pub envoy_edit: Option<fn(String) -> String>,
}

/// The whole stack over mTLS, stopped on drop.
pub struct SecureStack {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub redis: RedisServer,
    /// The CA every party's certificate comes from (until a test rotates them).
    pub ca: Ca,
    /// Each party's secret volume, and the leaf it holds now.
    pub cp_tls: (SecretVolume, Leaf),
    pub reader_tls: (SecretVolume, Leaf),
    pub envoy_tls: (SecretVolume, Leaf),
    /// Client certificates of [`CI`] (push) and [`WEB`] (no role).
    pub ci: LeafFiles,
    pub web: LeafFiles,
    pub reader: Proc,
    pub reader_port: u16,
    pub model: Proc,
    pub model_port: u16,
    pub cp: Proc,
    pub xds_port: u16,
    pub http_port: u16,
    /// `ferry serve --signing-key`'s key (PKCS#8 PEM), for the filter's `snapshot_keys`.
    pub signing_key: PathBuf,
    pub envoy: Proc,
    pub envoy_ports: EnvoyPorts,
    pub envoy_config: PathBuf,
    serve_args: Vec<OsString>,
}

impl SecureStack {
    pub fn start(opts: SecureOptions) -> SecureStack {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let (repo, redis) = materialized_example(d, opts.entities.unwrap_or(200));

        let ca = Ca::new("ferry test CA");
        let volume = |name: &str, leaf: Leaf| {
            (
                SecretVolume::new(&d.join("tls").join(name), &leaf, &ca.pem),
                leaf,
            )
        };
        let cp_tls = volume("cp", ca.issue(&[CP_NAME, "127.0.0.1"], &[]));
        let reader_tls = volume("reader", ca.issue(&[READER_NAME], &[]));
        let envoy_tls = volume("envoy", ca.issue(&["envoy.ml.svc"], &[ENVOY]));
        let ci = ca.issue(&[], &[CI]).write(d, "ci");
        let web = ca.issue(&[], &[WEB]).write(d, "web");

        let reader_port = free_port();
        let mut cmd = Command::new(bin("ferry-reader"));
        cmd.args(["--listen", &format!("127.0.0.1:{reader_port}")])
            .args(["--redis", &redis.url()])
            .args(tls_flags(&reader_tls.0.files(), &reader_tls.0.ca()))
            .args(&opts.reader_args);
        let reader = Proc::start("reader", cmd, d);
        let model_port = free_port();
        let model = start_model(d, model_port);

        let signing_key = d.join("signing.pem");
        run(Command::new(bin("ferry"))
            .args(["keygen", "--out"])
            .arg(&signing_key));
        let mut serve_args: Vec<OsString> =
            vec!["--signing-key".into(), signing_key.clone().into()];
        serve_args.push("--state-dir".into());
        serve_args.push(d.join("state").into());
        serve_args.extend(opts.serve_args);
        let (xds_port, http_port) = (free_port(), free_port());
        let cp = control_plane(
            d,
            &repo,
            (&cp_tls.0.files(), &cp_tls.0.ca(), &ca),
            (xds_port, http_port),
            &serve_args,
        );

        let envoy_config = d.join("envoy").join("envoy.yaml");
        std::fs::create_dir_all(envoy_config.parent().expect("a folder")).expect("envoy folder");
        let envoy_ports = self::envoy_config(
            &repo,
            (xds_port, reader_port, model_port),
            (&envoy_tls.0.files(), &envoy_tls.0.ca()),
            ENVOY,
            &envoy_config,
        );
        if let Some(edit) = opts.envoy_edit {
            let text = std::fs::read_to_string(&envoy_config).expect("bootstrap");
            std::fs::write(&envoy_config, edit(text)).expect("bootstrap");
        }
        let mut envoy = start_envoy(d, &envoy_config, "envoy");
        let admin = envoy_ports.admin;
        envoy.wait_ready(|| get_ok(admin, "/ready"), "envoy /ready");
        let mut stack = SecureStack {
            dir,
            repo,
            redis,
            ca,
            cp_tls,
            reader_tls,
            envoy_tls,
            ci,
            web,
            reader,
            reader_port,
            model,
            model_port,
            cp,
            xds_port,
            http_port,
            signing_key,
            envoy,
            envoy_ports,
            envoy_config,
            serve_args,
        };
        let port = stack.reader_port;
        let trust = &stack.ca;
        let envoy_leaf = stack.envoy_tls.0.files();
        let ready = || {
            block_on(tls::request(
                port,
                READER_NAME,
                (trust, Some(&envoy_leaf)),
                ("GET", "/healthz", &[]),
                vec![],
            ))
            .is_ok_and(|(code, _)| code == 200)
        };
        stack.reader.wait_ready(ready, "reader /healthz over mTLS");
        stack.wait_enriched(Duration::from_secs(20));
        stack
    }

    /// Waits until a request through Envoy is enriched with the store's values.
    pub fn wait_enriched(&self, limit: Duration) {
        let start = Instant::now();
        loop {
            match block_on(self.enriched()) {
                Ok(()) => return,
                Err(e) => assert!(
                    start.elapsed() < limit,
                    "not enriched within {limit:?}: {e}"
                ),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One request through Envoy for `u000001`: 200, enriched, with the source data's values.
    pub async fn enriched(&self) -> Result<(), String> {
        self.enriched_at(self.envoy_ports.listen).await
    }

    /// [`SecureStack::enriched`] through the Envoy listening on `port`.
    pub async fn enriched_at(&self, port: u16) -> Result<(), String> {
        let body = r#"{"instances": [{"user_id": "u000001"}]}"#;
        let resp = post(port, "/v1/models/fraud:predict", body).await;
        if resp.status != 200 {
            return Err(format!(
                "{}: {}",
                resp.status,
                String::from_utf8_lossy(&resp.body)
            ));
        }
        let got = &resp.json()["instances"][0];
        let src = Source::load(&self.repo.join("data"));
        let want = src.value("user_profile", "age", "u000001");
        if want.as_ref() != Some(&got["user_profile__age"]) {
            return Err(format!("not the store's values ({want:?}): {got}"));
        }
        Ok(())
    }

    /// One request to the API over TLS, as `client` (or with no certificate).
    pub async fn api(
        &self,
        client: Option<&LeafFiles>,
        (method, path, headers): (&str, &str, &[(&str, &str)]),
        body: Vec<u8>,
    ) -> Result<(u16, String), String> {
        let req = (method, path, headers);
        tls::request(self.http_port, CP_NAME, (&self.ca, client), req, body).await
    }

    /// Restarts `ferry serve` on the same ports and state, with its certificate as the volume
    /// holds it now (issued by [`SecureStack::ca`], which a rotating test replaces).
    pub fn restart_control_plane(&mut self) {
        self.cp.kill();
        let cp = control_plane(
            self.dir.path(),
            &self.repo,
            (&self.cp_tls.0.files(), &self.cp_tls.0.ca(), &self.ca),
            (self.xds_port, self.http_port),
            &self.serve_args,
        );
        self.cp = cp;
    }

    /// [`SecureStack::wait_enriched`] for async callers.
    pub async fn wait_enriched_async(&self, limit: Duration) -> Result<(), String> {
        let start = Instant::now();
        loop {
            match self.enriched().await {
                Ok(()) => return Ok(()),
                Err(e) if start.elapsed() > limit => {
                    return Err(format!("not enriched within {limit:?}: {e}"))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// Each plaintext listener on a network address (0.0.0.0), without `--insecure`: the reader,
/// `ferry serve`'s API and its xDS must each refuse to start, naming why. `leaf`: a server
/// certificate for the reader's TLS-without-client-CA case. Returns the refusals.
pub fn plaintext_on_a_network_address_is_refused(repo: &Path, leaf: &LeafFiles) -> Vec<String> {
    let any = || format!("0.0.0.0:{}", free_port());
    let loopback = || format!("127.0.0.1:{}", free_port());
    let reader = |extra: &[OsString]| {
        let mut cmd = Command::new(bin("ferry-reader"));
        cmd.args(["--listen", &any(), "--redis", "redis://127.0.0.1:1"])
            .args(extra)
            .env_remove("FERRY_READER_INSECURE");
        refused_start(&mut cmd)
    };
    let e1 = reader(&[]);
    assert!(
        e1.contains("not a loopback address, without TLS") && e1.contains("--insecure"),
        "{e1}"
    );
    let e2 = reader(&[
        "--tls-cert".into(),
        leaf.cert.clone().into(),
        "--tls-key".into(),
        leaf.key.clone().into(),
    ]);
    assert!(e2.contains("without client certificates"), "{e2}");
    let serve = |xds: String, http: String| {
        let mut cmd = Command::new(bin("ferry"));
        cmd.arg("serve")
            .arg(repo)
            .arg("--wasm")
            .arg(wasm())
            .args([
                "--xds-listen",
                &xds,
                "--http-listen",
                &http,
                "--token",
                TOKEN,
            ])
            .env_remove("FERRY_PUSH_TOKEN");
        refused_start(&mut cmd)
    };
    let e3 = serve(loopback(), any());
    assert!(
        e3.contains("the HTTP API listens on") && e3.contains("without TLS"),
        "{e3}"
    );
    let e4 = serve(any(), loopback());
    assert!(
        e4.contains("xDS listens on") && e4.contains("without mTLS"),
        "{e4}"
    );
    [e1, e2, e3, e4]
        .iter()
        .map(|e| {
            let why = e
                .lines()
                .find(|l| l.contains("loopback") || l.contains("without"));
            why.unwrap_or(e).trim().to_owned()
        })
        .collect()
}
