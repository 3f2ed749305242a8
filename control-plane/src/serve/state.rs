//! The control plane's shared state: the one current snapshot (immutable, versioned, swapped
//! whole), the refusal of the last bad one, every connected stream as the xDS server reports it,
//! and the counters behind `/metrics`. It is the xDS server's [`SnapshotSource`] and
//! [`Callbacks`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use ferry_protos::v1;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::watch;

pub use super::metrics::Metrics;
use super::persist::{self, Saved, StateDir};
use super::resources::{self, FilterOptions, RESOURCE_TYPE};
use crate::snapshot;
use crate::xds::{
    Callbacks, Event, Node, ResourceType, SnapshotSource, Subscription, TypeState, XdsSnapshot,
};

/// The snapshot every Envoy should have.
#[derive(Debug)]
pub struct Current {
    pub snapshot: v1::Snapshot,
    pub xds: Arc<XdsSnapshot>,
    /// Where it came from: `file` (the served repo) or `push` (the HTTP API).
    pub source: &'static str,
    /// When it was accepted (by this process, or by the one that saved it).
    pub since_ms: u64,
    /// The state file it was restored from at start; None when accepted by this process.
    pub restored_from: Option<String>,
}

/// Why a snapshot was refused; the last good one stays.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Refused {
    #[error("not a ferry.v1.Snapshot: {0}")]
    Undecodable(String),
    #[error("{0}")]
    Invalid(String),
    /// Valid, but it could not be saved in the state directory: not made current, since a
    /// restart would roll it back.
    #[error("{0}")]
    NotSaved(String),
}

/// The last refusal, for `/status`.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub source: &'static str,
    pub error: String,
    pub at_ms: u64,
}

/// What offering a snapshot did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offered {
    pub version: String,
    /// False when it was already the current snapshot.
    pub changed: bool,
}

/// One connected stream, as the xDS server's callbacks describe it.
#[derive(Clone, Debug, Default)]
pub struct StreamInfo {
    pub node: Node,
    pub connected_ms: u64,
    /// Per type: the protocol state, plus when the last NACK came.
    pub types: BTreeMap<ResourceType, TypeState>,
    pub last_nack_ms: Option<u64>,
}

impl StreamInfo {
    /// The filter config version this Envoy ACKed last.
    pub fn acked(&self) -> Option<&str> {
        self.types
            .get(&RESOURCE_TYPE)
            .and_then(|t| t.acked_version.as_deref())
    }

    /// Whether it ACKed `version` (false when there is none).
    pub fn converged_on(&self, version: Option<&str>) -> bool {
        version.is_some() && self.acked() == version
    }
}

pub fn inc(c: &Counter) {
    c.inc();
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub struct State {
    pub filter: FilterOptions,
    /// The reader cluster the bootstrap defines; a snapshot naming another is refused.
    pub reader_cluster: String,
    current: watch::Sender<Option<Arc<Current>>>,
    /// stream id → what the xDS server last said about it.
    streams: Mutex<HashMap<u64, StreamInfo>>,
    last_refused: Mutex<Option<Refusal>>,
    /// Where every accepted snapshot is saved before it is served; None = not saved (tests).
    store: Option<StateDir>,
    /// SHA-256 of the `ferry.yaml` content last read (by the watcher or at start), saved with
    /// each snapshot so a restart can tell whether the file changed since.
    repo_seen: Mutex<Option<[u8; 32]>>,
    pub metrics: Metrics,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind: keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    pub fn new(filter: FilterOptions, reader_cluster: String, store: Option<StateDir>) -> State {
        State {
            filter,
            reader_cluster,
            current: watch::Sender::new(None),
            streams: Mutex::new(HashMap::new()),
            last_refused: Mutex::new(None),
            store,
            repo_seen: Mutex::new(None),
            metrics: Metrics::default(),
        }
    }

    /// Records the `ferry.yaml` content just read; saved with the next accepted snapshot.
    pub fn saw_repo(&self, hash: Option<[u8; 32]>) {
        *lock(&self.repo_seen) = hash;
    }

    /// Makes a snapshot saved by an earlier run current again, validated as any other (a
    /// `ferry` upgrade may have changed what the filter accepts).
    pub fn restore(&self, saved: Saved, from: String) -> Result<String, Refused> {
        let mut snap = saved.snapshot;
        self.validate(&snap)?;
        snap.version = snapshot::content_version(&snap);
        let version = snap.version.clone();
        let source = if saved.source == "push" {
            "push"
        } else {
            "file"
        };
        let xds = Arc::new(resources::build(&snap, &self.filter));
        self.current.send_replace(Some(Arc::new(Current {
            snapshot: snap,
            xds,
            source,
            since_ms: saved.accepted_ms,
            restored_from: Some(from),
        })));
        Ok(version)
    }

    pub fn current(&self) -> Option<Arc<Current>> {
        self.current.borrow().clone()
    }

    /// Validates exactly as the filter will (plus what the bootstrap fixes) and makes the
    /// snapshot current.
    pub fn offer(&self, snap: v1::Snapshot, source: &'static str) -> Result<Offered, Refused> {
        let checked = self.validate(&snap);
        self.install(snap, source, checked)
    }

    /// Makes a snapshot current without the filter's validation, so a test can make Envoy
    /// refuse one (`--allow-invalid`). Tests only.
    #[cfg(feature = "test-switches")]
    pub fn offer_unvalidated(
        &self,
        snap: v1::Snapshot,
        source: &'static str,
    ) -> Result<Offered, Refused> {
        self.install(snap, source, Ok(()))
    }

    fn install(
        &self,
        mut snap: v1::Snapshot,
        source: &'static str,
        checked: Result<(), Refused>,
    ) -> Result<Offered, Refused> {
        if let Err(e) = checked {
            self.refuse(source, e.to_string());
            return Err(e);
        }
        // The version is the content hash, whoever sent it.
        snap.version = snapshot::content_version(&snap);
        let version = snap.version.clone();
        if self
            .current()
            .is_some_and(|c| c.snapshot.version == version)
        {
            return Ok(Offered {
                version,
                changed: false,
            });
        }
        let xds = Arc::new(resources::build(&snap, &self.filter));
        let since_ms = now_ms();
        if let Err(e) = self.save(&snap, source, since_ms) {
            self.refuse(source, e.to_string());
            return Err(e);
        }
        self.current.send_replace(Some(Arc::new(Current {
            snapshot: snap,
            xds,
            source,
            since_ms,
            restored_from: None,
        })));
        inc(&self.metrics.snapshot_updates_total);
        tracing::info!(%version, source, "snapshot is now current");
        Ok(Offered {
            version,
            changed: true,
        })
    }

    /// Saves a snapshot about to become current (before any Envoy can see it).
    fn save(&self, snap: &v1::Snapshot, source: &str, accepted_ms: u64) -> Result<(), Refused> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let saved = Saved {
            snapshot: snap.clone(),
            source: source.to_owned(),
            accepted_ms,
            repo_sha256: lock(&self.repo_seen).map(|h| persist::hex(&h)),
        };
        store.save(&saved).map_err(|e| {
            tracing::error!(error = %e, "snapshot not saved, so not made current");
            Refused::NotSaved(e.to_string())
        })
    }

    fn validate(&self, snap: &v1::Snapshot) -> Result<(), Refused> {
        ferry_core::config::Config::from_snapshot(snap.clone())
            .map_err(|e| Refused::Invalid(e.to_string()))?;
        if snap.reader_cluster != self.reader_cluster {
            return Err(Refused::Invalid(format!(
                "reader_cluster is '{}' but the Envoy bootstrap defines '{}'",
                snap.reader_cluster, self.reader_cluster
            )));
        }
        Ok(())
    }

    pub fn refuse(&self, source: &'static str, error: String) {
        inc(&self.metrics.snapshots_refused_total);
        *lock(&self.last_refused) = Some(Refusal {
            source,
            error,
            at_ms: now_ms(),
        });
    }

    pub fn last_refused(&self) -> Option<Refusal> {
        lock(&self.last_refused).clone()
    }

    /// Connected streams, oldest first.
    pub fn streams(&self) -> Vec<(u64, StreamInfo)> {
        let mut v: Vec<(u64, StreamInfo)> = lock(&self.streams)
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }
}

/// Every node gets the same snapshot: the current one.
impl SnapshotSource for State {
    fn snapshot(&self, _node: &Node) -> Option<Arc<XdsSnapshot>> {
        self.current().map(|c| c.xds.clone())
    }

    fn subscribe(&self) -> Box<dyn Subscription> {
        Box::new(self.current.subscribe())
    }
}

/// Keeps the stream table `/status` shows and the xDS counters of `/metrics`.
impl Callbacks for State {
    fn on_stream_open(&self, stream: u64) {
        inc(&self.metrics.streams_total);
        lock(&self.streams).insert(
            stream,
            StreamInfo {
                connected_ms: now_ms(),
                ..Default::default()
            },
        );
    }

    fn on_event(&self, stream: u64, _node: &Node, event: &Event) {
        match event {
            Event::Ack { .. } => inc(&self.metrics.acks_total),
            Event::Nack { .. } => {
                inc(&self.metrics.nacks_total);
                if let Some(info) = lock(&self.streams).get_mut(&stream) {
                    info.last_nack_ms = Some(now_ms());
                }
            }
            Event::StaleNonce { .. } => inc(&self.metrics.stale_nonces_total),
            Event::Withheld { .. } => inc(&self.metrics.withheld_total),
            Event::Subscribed { .. } | Event::NoTypeUrl | Event::UnknownType { .. } => {}
        }
    }

    fn on_stream_state(&self, stream: u64, node: &Node, types: &BTreeMap<ResourceType, TypeState>) {
        let mut streams = lock(&self.streams);
        let named_now = streams
            .get(&stream)
            .is_some_and(|i| i.node.id.is_empty() && !node.id.is_empty());
        if named_now && streams.values().any(|i| i.node.id == node.id) {
            tracing::warn!(
                node = %node.id,
                "two connected Envoys share this node id: give each its own (ferry envoy-config \
                 --node-id, or Envoy's --service-node), or one's NACK can hold a version back \
                 from the other"
            );
        }
        if let Some(info) = streams.get_mut(&stream) {
            info.node.clone_from(node);
            info.types.clone_from(types);
        }
    }

    fn on_response(&self, _stream: u64, _node: &Node, _response: &DiscoveryResponse) {
        inc(&self.metrics.responses_total);
    }

    fn on_stream_closed(&self, stream: u64) {
        lock(&self.streams).remove(&stream);
    }
}
