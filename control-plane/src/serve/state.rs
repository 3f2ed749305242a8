//! The control plane's shared state: the one current snapshot (immutable, versioned, swapped
//! whole) and the refusal of the last bad one, the xDS server's [`SnapshotSource`]; beside it
//! the stream table (the xDS server's callbacks) and the counters behind `/metrics`.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ferry_protos::v1;
use prost::Message as _;
use tokio::sync::watch;

use super::metrics::{self, inc, Gauges, Metrics, SnapshotLabels};
use super::persist::{self, Saved, StateDir};
use super::resources::{self, FilterOptions};
use super::shared_state::{Committed, Install, Loaded, Record, Shared, Stored, Unavailable};
use super::signing::{self, Signer};
use super::streams::{lock, now_ms, Streams};
use ferry_repo::snapshot;
use ferry_xds::{Node, SnapshotSource, Subscription, XdsSnapshot};

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
    /// The snapshot's protobuf bytes, encoded once: every `GET /v1/snapshot` shares them.
    pub encoded: Bytes,
    /// Its sequence number ([`signing::next_sequence`]), saved with it.
    pub sequence: u64,
    /// With a signing key: the signed envelope of `encoded` at `sequence`, built once and
    /// shared as `encoded` is ([`signing::served`]).
    pub signed: Option<Bytes>,
}

impl Current {
    fn new(
        snapshot: v1::Snapshot,
        filter: &FilterOptions,
        source: &'static str,
        since_ms: u64,
        restored_from: Option<String>,
    ) -> Current {
        Current {
            xds: Arc::new(resources::build(&snapshot, filter)),
            encoded: Bytes::from(snapshot.encode_to_vec()),
            snapshot,
            source,
            since_ms,
            restored_from,
            sequence: 0,
            signed: None,
        }
    }

    /// The same snapshot at `sequence`, signed by `signer` when there is one.
    fn sealed(mut self, sequence: u64, signer: Option<&Signer>) -> Current {
        self.sequence = sequence;
        self.signed = signer.map(|s| s.envelope(sequence, &self.encoded));
        self
    }
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
    /// `--shared-state` and Redis is away: not made current, since the other replicas could
    /// not learn of it.
    #[error("{0}")]
    SharedUnavailable(#[from] Unavailable),
}

/// The sequence after `last` ([`signing::next_sequence`]), or the refusal when none is left
/// under the bound.
fn next_sequence(last: u64, now_ms: u64) -> Result<u64, Refused> {
    signing::next_sequence(last, now_ms).ok_or_else(|| {
        Refused::NotSaved(format!(
            "no sequence left above {last} (the highest is {}; the clock says {now_ms})",
            ferry_protos::signed::MAX_SEQUENCE
        ))
    })
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
    /// The sequence it is current at.
    pub sequence: u64,
}

pub struct State {
    pub filter: FilterOptions,
    /// The reader cluster the bootstrap defines; a snapshot naming another is refused.
    pub reader_cluster: String,
    current: watch::Sender<Option<Arc<Current>>>,
    /// The xDS server's callbacks: connected streams and their counters.
    pub streams: Arc<Streams>,
    last_refused: Mutex<Option<Refusal>>,
    /// Held for a whole install (compare, save, swap), so installs happen one at a time and
    /// the saved snapshot is always the served one: two concurrent installs (a push and the
    /// watcher) could otherwise save in one order and swap in the other.
    installing: Mutex<()>,
    /// Where every accepted snapshot is saved before it is served; None = not saved (tests).
    store: Option<StateDir>,
    /// SHA-256 of the `ferry.yaml` content last read (by the watcher or at start), saved with
    /// each snapshot so a restart can tell whether the file changed since.
    repo_seen: Mutex<Option<[u8; 32]>>,
    /// `--signing-key`: the served snapshot is signed.
    signer: Option<Arc<Signer>>,
    /// The highest sequence handed out (saved or not): the next one is above it.
    issued: Mutex<u64>,
    /// A repo change held back for its new fingerprint (`watch::apply`): not served yet, but
    /// feature writes also land in its vectors, so a push before its release is not lost.
    held_back: Mutex<Option<Arc<v1::Snapshot>>>,
    /// `--shared-state`: the snapshot, its sequence and the held-back one live in Redis
    /// ([`super::shared`]); None: in this process and its state directory.
    shared: Option<Arc<Shared>>,
    pub metrics: Metrics,
}

impl State {
    pub fn new(filter: FilterOptions, reader_cluster: String, store: Option<StateDir>) -> State {
        let metrics = Metrics::default();
        State {
            filter,
            reader_cluster,
            current: watch::Sender::new(None),
            streams: Arc::new(Streams::new(metrics.xds.clone())),
            last_refused: Mutex::new(None),
            installing: Mutex::new(()),
            store,
            repo_seen: Mutex::new(None),
            signer: None,
            issued: Mutex::new(0),
            held_back: Mutex::new(None),
            shared: None,
            metrics,
        }
    }

    /// Shares the current snapshot with the other replicas through `shared`.
    pub fn with_shared(mut self, shared: Option<Arc<Shared>>) -> State {
        self.shared = shared;
        self
    }

    pub fn shared(&self) -> Option<&Arc<Shared>> {
        self.shared.as_ref()
    }

    /// Signs every snapshot made current from now on with `signer`.
    pub fn with_signer(mut self, signer: Option<Arc<Signer>>) -> State {
        self.signer = signer;
        self
    }

    /// Records the `ferry.yaml` content just read; saved with the next accepted snapshot.
    pub fn saw_repo(&self, hash: Option<[u8; 32]>) {
        *lock(&self.repo_seen) = hash;
    }

    /// Makes a snapshot saved by an earlier run current again, validated as any other (a
    /// `ferry` upgrade may have changed what the filter accepts).
    pub fn restore(&self, saved: Saved, from: String) -> Result<String, Refused> {
        let mut snap = saved.snapshot;
        if ferry_protos::signed::bounded_sequence(saved.sequence).is_none() {
            return Err(Refused::Invalid(format!(
                "its sequence {} is over the highest Ferry issues ({})",
                saved.sequence,
                ferry_protos::signed::MAX_SEQUENCE
            )));
        }
        self.validate(&snap)?;
        snap.version = snapshot::content_version(&snap);
        let version = snap.version.clone();
        let source = if saved.source == "push" {
            "push"
        } else {
            "file"
        };
        let current = Current::new(snap, &self.filter, source, saved.accepted_ms, Some(from));
        let _installing = lock(&self.installing);
        // A restored snapshot keeps its sequence; the next one is above it.
        let mut issued = lock(&self.issued);
        *issued = (*issued).max(saved.sequence);
        let current = current.sealed(saved.sequence, self.signer.as_deref());
        self.current.send_replace(Some(Arc::new(current)));
        Ok(version)
    }

    pub fn current(&self) -> Option<Arc<Current>> {
        self.current.borrow().clone()
    }

    /// The snapshot held back for a new fingerprint, if any.
    pub fn held_back(&self) -> Option<Arc<v1::Snapshot>> {
        lock(&self.held_back).clone()
    }

    /// Records the snapshot a repo change would serve once its vectors are materialized.
    pub fn hold_back(&self, snap: v1::Snapshot) {
        if let Some(shared) = &self.shared {
            if let Err(e) = shared.blocking(shared.hold_back(&snap)) {
                tracing::warn!(error = %e, "the held-back snapshot is not shared");
            }
        }
        *lock(&self.held_back) = Some(Arc::new(snap));
    }

    /// The held-back snapshot as the shared state has it (`--shared-state`).
    pub fn set_held_back(&self, snap: Option<v1::Snapshot>) {
        *lock(&self.held_back) = snap.map(Arc::new);
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
        let since_ms = now_ms();
        let current = Current::new(snap, &self.filter, source, since_ms, None);
        let _installing = lock(&self.installing);
        let unchanged = |s: &State| {
            s.current()
                .filter(|c| c.snapshot.version == version)
                .map(|c| Offered {
                    version: version.clone(),
                    changed: false,
                    sequence: c.sequence,
                })
        };
        // With replicas the shared snapshot decides: this one may not have followed it yet.
        if self.shared.is_none() {
            if let Some(o) = unchanged(self) {
                return Ok(o);
            }
        }
        let sequence = match self.sequence_for(&current, source, since_ms) {
            Ok(Some(sequence)) => sequence,
            // Another replica made it current meanwhile; this one follows it now.
            Ok(None) => return unchanged(self).ok_or_else(|| Refused::NotSaved(version.clone())),
            Err(e) => {
                self.refuse(source, e.to_string());
                return Err(e);
            }
        };
        let current = current.sealed(sequence, self.signer.as_deref());
        self.release_held_back(&current.snapshot);
        self.current.send_replace(Some(Arc::new(current)));
        inc(&self.metrics.snapshot_updates_total);
        tracing::info!(%version, sequence, source, "snapshot is now current");
        Ok(Offered {
            version,
            changed: true,
            sequence,
        })
    }

    /// The sequence of a snapshot about to become current, saved with it: in the state
    /// directory, or in the shared state (None: it is the shared one already). Called under
    /// the install lock.
    fn sequence_for(
        &self,
        current: &Current,
        source: &'static str,
        since_ms: u64,
    ) -> Result<Option<u64>, Refused> {
        let Some(shared) = &self.shared else {
            // A number is never handed out twice, even when its save fails.
            let sequence = {
                let mut issued = lock(&self.issued);
                *issued = next_sequence(*issued, since_ms)?;
                *issued
            };
            self.save(&current.snapshot, sequence, source, since_ms)?;
            return Ok(Some(sequence));
        };
        let install = Install {
            encoded: &current.encoded,
            version: &current.snapshot.version,
            source,
            accepted_ms: since_ms,
            // The file's content as the watcher last read it; a push carries the shared one
            // forward (only the lease holder reads the file).
            repo_sha256: if source == "file" {
                lock(&self.repo_seen).map(|h| persist::hex(&h))
            } else {
                shared.repo_hex()
            },
            releases: self.covered_held_back(&current.snapshot),
        };
        // A conflict means another replica installed one since: follow it, then try again
        // above it (bounded: each round some replica's install succeeded). The compare is on
        // the stored sequence's text, so a record refused here (out of range, forged) is
        // replaced by the next install rather than blocking it.
        let mut expected = Stored::known(shared.known());
        let mut force = false;
        for _ in 0..8 {
            let sequence = next_sequence(shared.known(), since_ms)?;
            let committed = shared.blocking(shared.commit(&expected, sequence, force, &install))?;
            let (head, unchanged) = match committed {
                Committed::At(sequence) => {
                    shared.set_known(sequence, install.repo_sha256.clone());
                    return Ok(Some(sequence));
                }
                Committed::Unchanged(head) => (head, true),
                Committed::Conflict(head) => (head, false),
            };
            self.follow_stored(shared)?;
            if self
                .current()
                .is_some_and(|c| c.snapshot.version == current.snapshot.version)
            {
                return Ok(None);
            }
            // The stored record has this version yet is not served here: replace it.
            force = unchanged;
            expected = head;
        }
        Err(Unavailable("the shared snapshot kept changing under this install".into()).into())
    }

    /// After a lost compare-and-set on `head`: serves the stored record if it is one to serve,
    /// refuses it (logged, on /status) if not; the retry goes above it either way.
    fn follow_stored(&self, shared: &Shared) -> Result<(), Refused> {
        match shared.blocking(shared.load())? {
            Loaded::Record(record) => drop(self.follow_locked(shared, *record)),
            // A deleted record does not lower what this replica has served: were it to start
            // over from 0, an older signed record written next would be served again.
            Loaded::Absent => {}
            Loaded::Refused {
                head,
                reason,
                error,
            } => self.refuse_shared(&head, reason, error),
        }
        Ok(())
    }

    /// Counts, logs and shows on `/status` a shared record this replica will not serve; once
    /// per record (the replicas poll it).
    pub fn refuse_shared(&self, head: &Stored, reason: &'static str, error: String) {
        let Some(shared) = &self.shared else {
            return;
        };
        if !shared.mark_refused(head, &error) {
            return;
        }
        self.metrics.shared_refused(reason);
        tracing::error!(reason, %error, "a shared record is refused: the served snapshot stays");
        self.refuse("shared", error);
    }

    /// Serves the shared snapshot `record` when it is newer than the one served: validated
    /// as a push is, sealed at its sequence (the same signature every replica makes), never
    /// saved again. True when it became current.
    pub fn follow(&self, record: Record) -> Result<bool, Refused> {
        let Some(shared) = &self.shared else {
            return Ok(false);
        };
        let _installing = lock(&self.installing);
        self.follow_locked(shared, record)
    }

    fn follow_locked(&self, shared: &Shared, record: Record) -> Result<bool, Refused> {
        if record.sequence <= shared.known() {
            return Ok(false);
        }
        shared.set_known(record.sequence, record.repo_sha256.clone());
        let mut snap = record.snapshot;
        if let Err(e) = self.validate(&snap) {
            tracing::error!(error = %e, sequence = record.sequence, "the shared snapshot is refused here");
            self.refuse(record.source, e.to_string());
            return Err(e);
        }
        snap.version = snapshot::content_version(&snap);
        let current = Current::new(snap, &self.filter, record.source, record.accepted_ms, None)
            .sealed(record.sequence, self.signer.as_deref());
        self.release_held_back(&current.snapshot);
        let version = current.snapshot.version.clone();
        self.current.send_replace(Some(Arc::new(current)));
        inc(&self.metrics.snapshot_updates_total);
        tracing::info!(%version, sequence = record.sequence, "the shared snapshot is now current");
        Ok(true)
    }

    /// The version of the held-back snapshot `served` serves every fingerprint of.
    fn covered_held_back(&self, served: &v1::Snapshot) -> Option<String> {
        let held = lock(&self.held_back);
        held.as_ref()
            .filter(|h| covers(served, h))
            .map(|h| h.version.clone())
    }

    /// Forgets the held-back snapshot once `served` serves every fingerprint it holds.
    fn release_held_back(&self, served: &v1::Snapshot) {
        let mut held = lock(&self.held_back);
        if held.as_ref().is_some_and(|h| covers(served, h)) {
            *held = None;
        }
    }

    /// Saves a snapshot about to become current (before any Envoy can see it).
    fn save(
        &self,
        snap: &v1::Snapshot,
        sequence: u64,
        source: &str,
        accepted_ms: u64,
    ) -> Result<(), Refused> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let saved = Saved {
            snapshot: snap.clone(),
            sequence,
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

    /// The OpenMetrics text of `/metrics`: the counters, and gauges read now.
    pub fn metrics_text(&self) -> String {
        let current = self.current();
        let version = current.as_ref().map(|c| c.snapshot.version.as_str());
        let streams = self.streams.list();
        let gauges = Gauges {
            connected_streams: streams.len(),
            streams_acked_current: streams
                .iter()
                .filter(|(_, i)| i.converged_on(version))
                .count(),
            snapshot: current.as_ref().map(|c| SnapshotLabels {
                version: c.snapshot.version.clone(),
                project: c.snapshot.project.clone(),
                source: c.source,
            }),
            shared: self
                .shared
                .as_ref()
                .map(|s| (s.unavailable().is_none(), s.is_leader())),
        };
        metrics::metrics_text(&self.metrics, gauges)
    }
}

/// Whether `served` serves every (service, fingerprint) of `held`.
fn covers(served: &v1::Snapshot, held: &v1::Snapshot) -> bool {
    held.services.iter().all(|s| {
        served
            .services
            .iter()
            .any(|c| c.name == s.name && c.fingerprint == s.fingerprint)
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy_config::TEMPLATE_READER_CLUSTER;
    use crate::serve::metrics::{inc, PushOutcome};
    use crate::serve::resources::FilterOptions;
    use ferry_repo::snapshot;
    use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};

    fn state() -> State {
        let filter = FilterOptions {
            filter_name: "ferry".into(),
            wasm_path: "/ferry.wasm".into(),
            runtime: crate::envoy_config::Runtime::Wasm,
        };
        State::new(filter, TEMPLATE_READER_CLUSTER.into(), None)
    }

    fn has_line(text: &str, line: &str) {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }

    #[test]
    fn counters_and_scrape_time_gauges_in_openmetrics_text() {
        let state = state();
        let text = state.metrics_text();
        for line in [
            "# TYPE ferry_xds_nacks counter",
            "ferry_xds_nacks_total 0",
            "ferry_push_requests_total{outcome=\"accepted\"} 0",
            "ferry_push_requests_total{outcome=\"unauthorized\"} 0",
            "ferry_push_requests_total{outcome=\"rejected\"} 0",
            "# TYPE ferry_xds_connected_streams gauge",
            "ferry_xds_connected_streams 0",
            "ferry_xds_streams_acked_current 0",
        ] {
            has_line(&text, line);
        }
        // No snapshot, no info series (an empty family is not written at all).
        assert!(!text.contains("ferry_snapshot_info"), "{text}");
        assert!(text.ends_with("\n# EOF\n"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1, "{text}");

        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let offered = state.offer(snapshot::build(&reg.unwrap()), "push").unwrap();
        inc(&state.metrics.xds.nacks_total);
        state.metrics.push(PushOutcome::Rejected);
        state.metrics.push(PushOutcome::Rejected);
        let text = state.metrics_text();
        let project = state.current().unwrap().snapshot.project.clone();
        for line in [
            "ferry_xds_nacks_total 1".to_string(),
            "ferry_snapshot_updates_total 1".to_string(),
            "ferry_push_requests_total{outcome=\"rejected\"} 2".to_string(),
            "# TYPE ferry_snapshot_info gauge".to_string(),
            format!(
                "ferry_snapshot_info{{version=\"{}\",project=\"{project}\",source=\"push\"}} 1",
                offered.version
            ),
        ] {
            has_line(&text, &line);
        }
    }
}
