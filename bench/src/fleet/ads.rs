//! One simulated Envoy on ADS, as Envoy speaks it for ECDS: the first request names the node
//! (id, cluster), the filter's resource and the version it holds (empty when fresh, its last
//! accepted version after a reconnect); every response is judged as `on_configure` would
//! ([`super::verdict`]) and answered with an ACK (the new version and the response's nonce)
//! or a NACK (the version it keeps, the nonce, and an `error_detail`). A lost stream is
//! reopened after a jittered back-off of 0.25 s doubling to 2 s (the bootstrap's retry policy).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;

use super::record::Recorder;
use super::transport::{connect, TlsClient, H2};
use super::verdict::{Verdicts, ECDS_TYPE_URL};

/// What every simulated Envoy of a run shares.
pub struct Fleet {
    /// The control planes (replicas behind one Service): simulated Envoy `i` connects to
    /// `servers[i % len]` first, and to the next one after each lost stream.
    pub servers: Vec<SocketAddr>,
    pub filter_name: String,
    /// Initial HTTP/2 stream window of each connection.
    pub stream_window: u32,
    pub verdicts: Verdicts,
    pub recorder: Recorder,
    /// Flips to true: every simulated Envoy stops.
    pub stop: watch::Receiver<bool>,
}

/// One simulated Envoy.
pub struct Sim {
    pub index: usize,
    pub node_id: String,
    pub source: IpAddr,
    /// Its client certificate (mTLS); None: plaintext.
    pub tls: Option<TlsClient>,
    /// True: it stops reading its stream (the responses wait in the connection's buffers and
    /// windows); false again: it reads on.
    pub paused: watch::Receiver<bool>,
}

/// Runs one simulated Envoy until the fleet stops.
pub async fn run(mut sim: Sim, fleet: Arc<Fleet>) {
    let mut stop = fleet.stop.clone();
    let mut backoff = Backoff::new(sim.index as u64);
    let mut held: Option<String> = None;
    let mut attempt = sim.index;
    loop {
        let server = fleet.servers[attempt % fleet.servers.len().max(1)];
        attempt += 1;
        let ended = tokio::select! {
            ended = session(&mut sim, &fleet, server, &mut held, &mut backoff) => ended,
            _ = stop.changed() => return,
        };
        let why = match ended {
            Ok(()) => "the stream ended".to_owned(),
            Err(e) => format!("{e:#}"),
        };
        fleet.recorder.with(sim.index, |r, _| {
            r.failures += 1;
            r.last_error = Some(why);
        });
        tokio::select! {
            _ = tokio::time::sleep(backoff.next()) => {}
            _ = stop.changed() => return,
        }
    }
}

/// One connection and its stream, until it ends.
async fn session(
    sim: &mut Sim,
    fleet: &Fleet,
    server: SocketAddr,
    held: &mut Option<String>,
    backoff: &mut Backoff,
) -> Result<()> {
    let io = connect(sim.source, server, sim.tls.as_ref()).await?;
    let h2 = H2::handshake(io, fleet.stream_window).await?;
    let origin = format!("http://{server}").parse()?;
    let mut client = AggregatedDiscoveryServiceClient::with_origin(h2, origin)
        .max_decoding_message_size(64 << 20);
    let (tx, rx) = mpsc::channel(4);
    let names = vec![fleet.filter_name.clone()];
    tx.send(DiscoveryRequest {
        version_info: held.clone().unwrap_or_default(),
        node: Some(Node {
            id: sim.node_id.clone(),
            cluster: "fleet".into(),
            ..Default::default()
        }),
        resource_names: names.clone(),
        type_url: ECDS_TYPE_URL.into(),
        ..Default::default()
    })
    .await?;
    let mut inbound = client
        .stream_aggregated_resources(ReceiverStream::new(rx))
        .await?
        .into_inner();
    fleet.recorder.with(sim.index, |r, now| {
        r.connects += 1;
        r.first_connected.get_or_insert(now);
    });
    backoff.reset();
    loop {
        if *sim.paused.borrow() {
            let _ = sim.paused.wait_for(|p| !*p).await;
        }
        let Some(resp) = inbound.message().await? else {
            return Ok(());
        };
        let answer = answer(&resp, fleet, sim.index, held, &names);
        tx.send(answer)
            .await
            .map_err(|_| anyhow!("request stream closed"))?;
    }
}

/// The ACK or NACK of `resp` (recorded), as Envoy sends it.
fn answer(
    resp: &DiscoveryResponse,
    fleet: &Fleet,
    index: usize,
    held: &mut Option<String>,
    names: &[String],
) -> DiscoveryRequest {
    let version = resp.version_info.clone();
    fleet
        .recorder
        .with(index, |r, now| r.received.push((version.clone(), now)));
    let verdict = fleet.verdicts.judge(resp, &fleet.filter_name);
    let mut req = DiscoveryRequest {
        response_nonce: resp.nonce.clone(),
        resource_names: names.to_vec(),
        type_url: ECDS_TYPE_URL.into(),
        ..Default::default()
    };
    match verdict {
        Ok(()) => {
            *held = Some(version.clone());
            req.version_info = version.clone();
            fleet
                .recorder
                .with(index, |r, now| r.acks.push((version, now)));
        }
        Err(error) => {
            req.version_info = held.clone().unwrap_or_default();
            req.error_detail = Some(RpcStatus {
                code: 13,
                message: error,
                details: vec![],
            });
            fleet
                .recorder
                .with(index, |r, now| r.nacks.push((version, now)));
        }
    }
    req
}

/// Envoy's jittered exponential back-off, 0.25 s doubling to 2 s.
struct Backoff {
    next_ms: u64,
    seed: u64,
}

impl Backoff {
    const BASE_MS: u64 = 250;
    const MAX_MS: u64 = 2000;

    fn new(seed: u64) -> Backoff {
        Backoff {
            next_ms: Self::BASE_MS,
            seed: seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1,
        }
    }

    fn reset(&mut self) {
        self.next_ms = Self::BASE_MS;
    }

    /// A random wait in [0, next), as Envoy's full jitter; then the ceiling doubles.
    fn next(&mut self) -> Duration {
        self.seed ^= self.seed << 13;
        self.seed ^= self.seed >> 7;
        self.seed ^= self.seed << 17;
        let wait = self.seed % self.next_ms;
        self.next_ms = (self.next_ms * 2).min(Self::MAX_MS);
        Duration::from_millis(wait.max(10))
    }
}
