//! The fleet simulator (`ferry-fleet`, issue #26): N simulated Envoys against a real
//! `ferry serve`, over ADS (ECDS) or pulling `GET /v1/snapshot`, each judging what it receives
//! with ferry-core as the filter does, with the times of every version received and ACKed.
//! The binary runs the measured scenarios; the integration tests drive the same fleet.
//!
//! - [`transport`]: connections from many loopback addresses, plain or mTLS; HTTP/2 for tonic.
//! - [`ads`]: one simulated Envoy on ADS (ACK, NACK, reconnect with back-off, pause).
//! - [`poll`]: one simulated Envoy worker pulling the snapshot (the filter's `Puller`).
//! - [`verdict`]: the ECDS resource decoded and validated as `on_configure` does.
//! - [`record`]: what every simulated Envoy saw, and when.
//! - [`server`]: the `ferry serve` under test (a child process), its /proc figures, pushes.
//! - [`snapshots`]: snapshots of a chosen size.
//! - [`envoys`]: real Envoys joining a run.
//! - [`scenario`]: the measured runs and their report rows.
//! - [`replicas`]: the two-replica run (`ferry serve --shared-state` on one Redis).

pub mod ads;
pub mod envoys;
pub mod poll;
pub mod record;
pub mod replicas;
pub mod scenario;
pub mod server;
pub mod snapshots;
pub mod transport;
pub mod verdict;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Result;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use record::Recorder;
use server::Pki;
use transport::{source, TlsClient};
use verdict::Verdicts;

/// Simulated Envoys one client identity holds at most (under `ferry serve`'s default
/// `--max-streams-per-node` of 128, as a service account's pods would).
pub const ENVOYS_PER_IDENTITY: usize = 100;

/// The identities an mTLS fleet of `n` needs.
pub fn identities(n: usize) -> usize {
    n.div_ceil(ENVOYS_PER_IDENTITY).max(1)
}

/// A running fleet of simulated Envoys on ADS.
pub struct AdsFleet {
    pub shared: Arc<ads::Fleet>,
    pauses: Vec<watch::Sender<bool>>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// How to launch one.
pub struct AdsOptions<'a> {
    pub n: usize,
    pub server: SocketAddr,
    pub filter_name: &'a str,
    pub stream_window: u32,
    /// mTLS: the run's certificates (node ids then carry the identity: `ID~sim-I`).
    pub pki: Option<&'a Pki>,
    pub verdicts: Verdicts,
}

impl AdsFleet {
    /// Starts `n` simulated Envoys at once (their connections race, as a fleet's do after a
    /// control plane restart).
    pub fn launch(o: AdsOptions<'_>) -> Result<AdsFleet> {
        let server = o.server;
        AdsFleet::launch_across(o, &[server])
    }

    /// The same, spread over replicas (`o.server` unused): Envoy `i` on `servers[i % len]`,
    /// moving to the next replica when its stream is lost.
    pub fn launch_across(o: AdsOptions<'_>, servers: &[SocketAddr]) -> Result<AdsFleet> {
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(ads::Fleet {
            servers: servers.to_vec(),
            filter_name: o.filter_name.to_owned(),
            stream_window: o.stream_window,
            verdicts: o.verdicts,
            recorder: Recorder::new(o.n),
            stop: stop_rx,
        });
        let clients = tls_clients(o.pki, b"h2")?;
        let mut fleet = AdsFleet {
            shared,
            pauses: Vec::with_capacity(o.n),
            stop,
            tasks: Vec::with_capacity(o.n),
        };
        for i in 0..o.n {
            let (pause, paused) = watch::channel(false);
            let (node_id, tls) = match (o.pki, clients.as_slice()) {
                (Some(pki), [_, ..]) => {
                    let k = (i / ENVOYS_PER_IDENTITY).min(clients.len() - 1);
                    (
                        format!("{}~sim-{i}", pki.clients[k].0),
                        Some(clients[k].clone()),
                    )
                }
                _ => (format!("sim-{i}"), None),
            };
            let sim = ads::Sim {
                index: i,
                node_id,
                source: source(i),
                tls,
                paused,
            };
            fleet.pauses.push(pause);
            fleet
                .tasks
                .push(tokio::spawn(ads::run(sim, fleet.shared.clone())));
        }
        Ok(fleet)
    }

    pub fn recorder(&self) -> &Recorder {
        &self.shared.recorder
    }

    /// Stops (true) or resumes (false) reading on simulated Envoy `i`'s stream.
    pub fn pause(&self, i: usize, paused: bool) {
        if let Some(p) = self.pauses.get(i) {
            let _ = p.send(paused);
        }
    }

    /// Stops every simulated Envoy and waits for their tasks.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// One TLS client per identity of `pki` (none without).
pub fn tls_clients(pki: Option<&Pki>, alpn: &[u8]) -> Result<Vec<TlsClient>> {
    let Some(pki) = pki else {
        return Ok(Vec::new());
    };
    pki.clients
        .iter()
        .map(|(_, cert, key)| TlsClient::load(&pki.ca, cert, key, alpn))
        .collect()
}
