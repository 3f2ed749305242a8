//! Real Envoys joining a simulated run (issue #26: the simulation shown faithful): each with a
//! bootstrap from `ferry envoy-config --xds` on the same `ferry serve` (mTLS too), started
//! before the pushes; after each push the time until each reloaded the filter config (its
//! `extension_config_discovery.*.config_reload` counter, polled on the admin port every 2 ms)
//! and whether it holds the same version (its `version_text` stat).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::task::JoinHandle;

use super::server::{free_port, ControlPlane, Pki};

/// The real Envoys of a run (none by default).
#[derive(Default)]
pub struct RealEnvoys {
    /// Each process and its admin port.
    procs: Vec<(Child, u16)>,
}

impl Drop for RealEnvoys {
    fn drop(&mut self) {
        for (child, _) in &mut self.procs {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// GET `path` on the admin port: the body.
async fn admin(port: u16, path: &str) -> Result<String> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    let ok = text.starts_with("HTTP/1.1 200");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    if !ok {
        bail!("admin {path}: {}", text.lines().next().unwrap_or_default());
    }
    Ok(body)
}

/// The sum of the ECDS reload counters.
async fn reloads(port: u16) -> Result<u64> {
    let text = admin(port, "/stats?filter=extension_config_discovery").await?;
    Ok(text
        .lines()
        .filter(|l| l.contains(".config_reload:"))
        .filter_map(|l| {
            l.rsplit_once(':')
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        })
        .sum())
}

impl RealEnvoys {
    /// `k` Envoys on `cp`, each holding a filter config from it.
    pub async fn start(
        envoy: &Path,
        ferry: &Path,
        dir: &Path,
        cp: &ControlPlane,
        pki: Option<&Pki>,
        k: usize,
    ) -> Result<RealEnvoys> {
        let mut envoys = RealEnvoys::default();
        for j in 0..k {
            let admin_port = free_port()?;
            let config = dir.join(format!("envoy-{j}.yaml"));
            let node = match pki {
                Some(p) => format!("{}~real-envoy-{j}", p.clients[0].0),
                None => format!("real-envoy-{j}"),
            };
            let mut render = Command::new(ferry);
            render
                .arg("envoy-config")
                .arg(dir.join("repo"))
                .arg("--xds")
                .args(["--xds-address", &cp.xds.to_string(), "--node-id", &node])
                .args(["--listen-port", &free_port()?.to_string()])
                .args(["--admin-port", &admin_port.to_string()])
                .args(["--reader-port", &free_port()?.to_string()])
                .args(["--model-port", &free_port()?.to_string()])
                .arg("-o")
                .arg(&config);
            if let Some(p) = pki {
                let (_, cert, key) = &p.clients[0];
                render.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
                render
                    .arg("--tls-ca")
                    .arg(&p.ca)
                    .args(["--xds-server-san", "localhost"]);
            }
            let out = render.output().context("ferry envoy-config")?;
            if !out.status.success() {
                bail!(
                    "ferry envoy-config: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            let child = Command::new(envoy)
                .arg("-c")
                .arg(&config)
                .args([
                    "--disable-hot-restart",
                    "--log-level",
                    "warn",
                    "--concurrency",
                    "1",
                ])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join(format!("envoy-{j}.log")))?)
                .spawn()
                .with_context(|| format!("starting {}", envoy.display()))?;
            envoys.procs.push((child, admin_port));
        }
        for (_, port) in &envoys.procs {
            let until = Instant::now() + Duration::from_secs(60);
            // Holding a filter config, not /ready: the reader cluster has no reader here.
            while !reloads(*port).await.is_ok_and(|n| n > 0) {
                if Instant::now() > until {
                    bail!(
                        "a real Envoy (admin port {port}) was not ready in 60 s; see its log in {}",
                        dir.display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(envoys)
    }

    /// Reads each Envoy's reload counter now, then watches for it to move: the task yields,
    /// per Envoy, the time from now until it did (None: not within `timeout`).
    pub async fn watch_reloads(&self, timeout: Duration) -> JoinHandle<Vec<Option<Duration>>> {
        let mut start = Vec::new();
        for (_, port) in &self.procs {
            start.push((*port, reloads(*port).await.unwrap_or(0)));
        }
        let t0 = Instant::now();
        tokio::spawn(async move {
            let mut out: Vec<Option<Duration>> = vec![None; start.len()];
            while t0.elapsed() < timeout && out.iter().any(Option::is_none) {
                for (i, (port, before)) in start.iter().enumerate() {
                    if out[i].is_none() && reloads(*port).await.is_ok_and(|n| n > *before) {
                        out[i] = Some(t0.elapsed());
                    }
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            out
        })
    }

    /// Whether each Envoy's ECDS config is at `version` (Envoy's own `version_text`).
    pub async fn holds(&self, version: &str) -> Vec<bool> {
        let mut out = Vec::new();
        for (_, port) in &self.procs {
            let stats = admin(*port, "/stats?filter=extension_config_discovery").await;
            out.push(stats.is_ok_and(|d| d.contains(&format!(".version_text: \"{version}\""))));
        }
        out
    }
}
