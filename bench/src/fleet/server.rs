//! The `ferry serve` under test, as a child process of the simulator (so it inherits the raised
//! open-file limit): started on free loopback ports over a banking repo, optionally with TLS on
//! both listeners and client certificates required on xDS; its memory and CPU read from
//! /proc; snapshots pushed to it over its HTTP API.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use tonic::codegen::http;

use super::transport::{connect, TlsClient};

/// Certificates of an mTLS run: the CA, the server's, and one client certificate per identity.
pub struct Pki {
    pub dir: PathBuf,
    pub ca: PathBuf,
    pub server: (PathBuf, PathBuf),
    /// Per identity: its URI SAN and its (cert, key) files.
    pub clients: Vec<(String, PathBuf, PathBuf)>,
}

impl Pki {
    /// A CA, a server certificate for 127.0.0.1 and `identities` client certificates, each
    /// named by a SPIFFE id of its own (one service account per group of Envoys).
    pub fn make(dir: &Path, identities: usize) -> Result<Pki> {
        use ferry_test_support::certs::Ca;
        std::fs::create_dir_all(dir)?;
        let ca = Ca::new("ferry-fleet-ca");
        let ca_file = ca.write(&dir.join("ca.crt"));
        let server = ca
            .issue(&["localhost", "127.0.0.1"], &[])
            .write(dir, "server");
        let clients = (0..identities)
            .map(|k| {
                let id = format!("spiffe://fleet.local/ns/ns-{k}/sa/envoy");
                let files = ca.issue(&[], &[&id]).write(dir, &format!("client-{k}"));
                (id, files.cert, files.key)
            })
            .collect();
        Ok(Pki {
            dir: dir.to_owned(),
            ca: ca_file,
            server: (server.cert, server.key),
            clients,
        })
    }
}

/// A running `ferry serve`.
pub struct ControlPlane {
    child: Child,
    pub xds: SocketAddr,
    pub http: SocketAddr,
    /// TLS client of the HTTP API (mTLS runs): the first identity's certificate.
    pub api_tls: Option<TlsClient>,
}

/// How to start it.
pub struct Start<'a> {
    pub ferry: &'a Path,
    pub wasm: &'a Path,
    pub dir: &'a Path,
    pub pki: Option<&'a Pki>,
    /// `--max-streams` and `--max-http-connections`; None: ferry's defaults.
    pub max_streams: Option<usize>,
    pub max_http_connections: Option<usize>,
    /// `RUST_LOG` of the process.
    pub log: &'a str,
    /// More flags (e.g. `--allow-invalid` in a workspace build).
    pub extra: &'a [String],
}

/// A free loopback port (bound, then released).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(l.local_addr()?.port())
}

impl ControlPlane {
    /// Starts `ferry serve` over a fresh banking repo in `dir`, and waits for `/healthz`.
    pub async fn start(s: Start<'_>) -> Result<ControlPlane> {
        let repo = s.dir.join("repo");
        if !repo.join("ferry.yaml").exists() {
            ferry_test_support::example::banking_repo(&repo, 10, "2026-01-01T00:00:00Z", |y| y);
        }
        let xds = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let http = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
        let mut cmd = Command::new(s.ferry);
        cmd.arg("serve")
            .arg(&repo)
            .arg("--wasm")
            .arg(s.wasm)
            .args([
                "--xds-listen",
                &xds.to_string(),
                "--http-listen",
                &http.to_string(),
            ])
            .arg("--state-dir")
            .arg(s.dir.join("state"))
            .args(["--watch-interval-ms", "0"])
            .args(s.extra)
            .env("RUST_LOG", s.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(s.dir.join("ferry-serve.log"))?);
        if let Some(n) = s.max_streams {
            cmd.args(["--max-streams", &n.to_string()]);
        }
        if let Some(n) = s.max_http_connections {
            cmd.args(["--max-http-connections", &n.to_string()]);
        }
        let mut api_tls = None;
        if let Some(pki) = s.pki {
            cmd.arg("--tls-cert").arg(&pki.server.0);
            cmd.arg("--tls-key").arg(&pki.server.1);
            cmd.arg("--client-ca").arg(&pki.ca);
            let (_, cert, key) = pki.clients.first().context("no client identity")?;
            api_tls = Some(TlsClient::load(&pki.ca, cert, key, b"http/1.1")?);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("starting {}", s.ferry.display()))?;
        let mut cp = ControlPlane {
            child,
            xds,
            http,
            api_tls,
        };
        for _ in 0..300 {
            if cp
                .request("GET", "/healthz", Bytes::new())
                .await
                .is_ok_and(|(c, _)| c == 200)
            {
                return Ok(cp);
            }
            if let Some(status) = cp.child.try_wait()? {
                bail!(
                    "ferry serve exited ({status}); see {}/ferry-serve.log",
                    s.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!(
            "ferry serve did not answer /healthz; see {}/ferry-serve.log",
            s.dir.display()
        )
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// One request over a fresh connection: (status, body).
    pub async fn request(&self, method: &str, path: &str, body: Bytes) -> Result<(u16, Bytes)> {
        self.request_with(method, path, body, &[]).await
    }

    /// The same, with more headers.
    pub async fn request_with(
        &self,
        method: &str,
        path: &str,
        body: Bytes,
        headers: &[(&str, &str)],
    ) -> Result<(u16, Bytes)> {
        let io = connect(Ipv4Addr::LOCALHOST.into(), self.http, self.api_tls.as_ref()).await?;
        let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io)).await?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.http.to_string());
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let resp = send.send_request(req.body(Full::new(body))?).await?;
        let code = resp.status().as_u16();
        Ok((code, resp.into_body().collect().await?.to_bytes()))
    }

    /// Pushes a snapshot (`POST /v1/snapshot`): the version it became, or the refusal.
    pub async fn push(&self, snapshot: Bytes) -> Result<Result<String, String>> {
        self.push_with(snapshot, &[]).await
    }

    pub async fn push_with(
        &self,
        snapshot: Bytes,
        headers: &[(&str, &str)],
    ) -> Result<Result<String, String>> {
        let (code, body) = self
            .request_with("POST", "/v1/snapshot", snapshot, headers)
            .await?;
        let text = String::from_utf8_lossy(&body).into_owned();
        if code != 200 {
            return Ok(Err(format!("{code}: {text}")));
        }
        let v: serde_json::Value = serde_json::from_str(&text)?;
        Ok(Ok(v["version"].as_str().unwrap_or_default().to_owned()))
    }

    /// Resident and peak resident memory, in bytes, and CPU time (user + system) in seconds.
    pub fn usage(&self) -> Result<Usage> {
        usage(self.pid())
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process's memory and CPU, from /proc.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Usage {
    pub rss_bytes: u64,
    pub peak_rss_bytes: u64,
    pub cpu_seconds: f64,
}

/// The clock ticks of /proc/PID/stat's times (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

pub fn usage(pid: u32) -> Result<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kb = |field: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
            * 1024
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(Usage {
        rss_bytes: kb("VmRSS:"),
        peak_rss_bytes: kb("VmHWM:"),
        cpu_seconds: (ticks(11) + ticks(12)) / TICKS_PER_SECOND,
    })
}
