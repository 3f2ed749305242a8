//! The control plane's shared state: the one current snapshot (immutable, versioned, swapped
//! whole), the refusal of the last bad one, every connected stream's protocol state, and the
//! counters behind `/metrics`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use ferry_protos::v1;
use tokio::sync::watch;

use crate::snapshot;
use crate::xds::protocol::{Nack, StreamState, XdsSnapshot};
use crate::xds::resources::{self, FilterOptions};

/// The snapshot every Envoy should have.
#[derive(Debug)]
pub struct Current {
    pub snapshot: v1::Snapshot,
    pub xds: Arc<XdsSnapshot>,
    /// Where it came from: `file` (the served repo) or `push` (the HTTP API).
    pub source: &'static str,
    pub since_ms: u64,
}

/// Why a snapshot was refused; the last good one stays.
#[derive(Clone, Debug, thiserror::Error)]
pub enum Refused {
    #[error("not a ferry.v1.Snapshot: {0}")]
    Undecodable(String),
    #[error("{0}")]
    Invalid(String),
}

/// A refusal as `/status` shows it.
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

/// One connected stream as `/status` shows it.
#[derive(Clone, Debug, Default)]
pub struct StreamInfo {
    pub node_id: String,
    pub cluster: String,
    pub connected_ms: u64,
    /// Per type URL: the protocol state, plus when the last NACK came.
    pub types: BTreeMap<String, crate::xds::protocol::TypeState>,
    pub last_nack_ms: Option<u64>,
}

/// Counters for `/metrics`; each is monotonic unless named as a gauge.
#[derive(Debug, Default)]
pub struct Metrics {
    pub streams_total: AtomicU64,
    pub responses_total: AtomicU64,
    pub acks_total: AtomicU64,
    pub nacks_total: AtomicU64,
    pub stale_nonces_total: AtomicU64,
    pub withheld_total: AtomicU64,
    pub snapshot_updates_total: AtomicU64,
    pub snapshots_refused_total: AtomicU64,
    pub push_ok_total: AtomicU64,
    pub push_unauthorized_total: AtomicU64,
    pub push_rejected_total: AtomicU64,
}

pub fn inc(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
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
    /// Accept snapshots the filter would refuse (tests force a NACK this way). Never in prod.
    pub allow_invalid: bool,
    current: watch::Sender<Option<Arc<Current>>>,
    streams: Mutex<HashMap<u64, StreamInfo>>,
    /// node id → (type URL, version) it refused: not resent when it reconnects.
    rejected: Mutex<HashMap<String, Vec<(String, String)>>>,
    last_refused: Mutex<Option<Refusal>>,
    next_stream: AtomicU64,
    pub metrics: Metrics,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind: keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    pub fn new(filter: FilterOptions, reader_cluster: String, allow_invalid: bool) -> State {
        State {
            filter,
            reader_cluster,
            allow_invalid,
            current: watch::Sender::new(None),
            streams: Mutex::new(HashMap::new()),
            rejected: Mutex::new(HashMap::new()),
            last_refused: Mutex::new(None),
            next_stream: AtomicU64::new(1),
            metrics: Metrics::default(),
        }
    }

    pub fn current(&self) -> Option<Arc<Current>> {
        self.current.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Option<Arc<Current>>> {
        self.current.subscribe()
    }

    /// Validates exactly as the filter will (plus what the bootstrap fixes) and makes the
    /// snapshot current. `unchecked` skips the filter's validation when `allow_invalid` is set.
    pub fn offer(
        &self,
        mut snap: v1::Snapshot,
        source: &'static str,
        unchecked: bool,
    ) -> Result<Offered, Refused> {
        let checked = if unchecked && self.allow_invalid {
            Ok(())
        } else {
            self.validate(&snap)
        };
        if let Err(e) = checked {
            inc(&self.metrics.snapshots_refused_total);
            *lock(&self.last_refused) = Some(Refusal {
                source,
                error: e.to_string(),
                at_ms: now_ms(),
            });
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
        self.current.send_replace(Some(Arc::new(Current {
            snapshot: snap,
            xds,
            source,
            since_ms: now_ms(),
        })));
        inc(&self.metrics.snapshot_updates_total);
        tracing::info!(%version, source, "snapshot is now current");
        Ok(Offered {
            version,
            changed: true,
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

    /// A new stream: its id (also its nonce prefix).
    pub fn open_stream(&self) -> u64 {
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        inc(&self.metrics.streams_total);
        lock(&self.streams).insert(
            id,
            StreamInfo {
                connected_ms: now_ms(),
                ..Default::default()
            },
        );
        id
    }

    pub fn close_stream(&self, id: u64) {
        lock(&self.streams).remove(&id);
    }

    /// Versions this node refused before, to seed a new stream.
    pub fn rejected_by(&self, node_id: &str) -> Vec<(String, String)> {
        lock(&self.rejected)
            .get(node_id)
            .cloned()
            .unwrap_or_default()
    }

    pub fn record_nack(&self, node_id: &str, type_url: &str, nack: &Nack) {
        inc(&self.metrics.nacks_total);
        let mut r = lock(&self.rejected);
        let list = r.entry(node_id.to_owned()).or_default();
        if !list
            .iter()
            .any(|(t, v)| t == type_url && *v == nack.version)
        {
            // Bounded: a node keeps its last 16 refusals.
            if list.len() >= 16 {
                list.remove(0);
            }
            list.push((type_url.to_owned(), nack.version.clone()));
        }
        drop(r);
        tracing::warn!(node = node_id, type_url, version = %nack.version, error = %nack.error, "NACK");
    }

    /// Copies a stream's protocol state for `/status`.
    pub fn update_stream(
        &self,
        id: u64,
        node: Option<(&str, &str)>,
        proto: &StreamState,
        nacked_now: bool,
    ) {
        let mut streams = lock(&self.streams);
        if let Some(info) = streams.get_mut(&id) {
            if let Some((node_id, cluster)) = node {
                node_id.clone_into(&mut info.node_id);
                cluster.clone_into(&mut info.cluster);
            }
            info.types = proto.types.clone();
            if nacked_now {
                info.last_nack_ms = Some(now_ms());
            }
        }
    }

    pub fn streams(&self) -> Vec<(u64, StreamInfo)> {
        let mut v: Vec<(u64, StreamInfo)> = lock(&self.streams)
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        v.sort_by_key(|(k, _)| *k);
        v
    }
}
