//! Watches the served repo: polls `ferry.yaml` and, when its content changes, validates the repo
//! and offers the new snapshot. Polling (not inotify) keeps it portable and bounded: one small
//! read per interval. A change of fingerprint is held back (it needs vectors materialized
//! first, which `ferry apply --materialize --push` does); everything else goes out at once.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::state::State;
use crate::repo::{self, REPO_FILE};
use crate::snapshot;

/// The content hash of ferry.yaml and the snapshot it yields (or why it yields none).
pub fn load(
    root: &std::path::Path,
) -> (Option<[u8; 32]>, Result<ferry_protos::v1::Snapshot, String>) {
    let path = root.join(REPO_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return (None, Err(format!("reading {}: {e}", path.display()))),
    };
    let hash: [u8; 32] = Sha256::digest(text.as_bytes()).into();
    let result = repo::load_str(root, &path.display().to_string(), &text)
        .map(|reg| snapshot::build(&reg))
        .map_err(|e| e.to_string());
    (Some(hash), result)
}

/// Whether every (service, fingerprint) of `snap` is already served: only then may a file
/// change go out without materializing first.
fn same_fingerprints(state: &State, snap: &ferry_protos::v1::Snapshot) -> bool {
    let Some(current) = state.current() else {
        return true;
    };
    snap.services.iter().all(|s| {
        current
            .snapshot
            .services
            .iter()
            .any(|c| c.name == s.name && c.fingerprint == s.fingerprint)
    })
}

/// Polls until shutdown. `seen` is the hash of the content already loaded at start.
pub async fn run(
    state: Arc<State>,
    root: PathBuf,
    interval: Duration,
    mut seen: Option<[u8; 32]>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let r = root.clone();
        let Ok((hash, result)) = tokio::task::spawn_blocking(move || load(&r)).await else {
            continue;
        };
        if hash.is_none() || hash == seen {
            continue;
        }
        seen = hash;
        match result {
            Ok(snap) if !same_fingerprints(&state, &snap) => {
                let e = String::from(
                    "ferry.yaml changed a FeatureService's fingerprint (or added a service): its \
                     vectors must be materialized before Envoy switches, so this change is not \
                     applied from the file; run `ferry apply REPO --materialize --push URL`",
                );
                tracing::error!(error = %e, "repo change held back");
                state.refuse("file", e);
            }
            Ok(snap) => {
                if let Err(e) = state.offer(snap, "file") {
                    tracing::error!(error = %e, "repo change refused; the last good snapshot stays");
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "repo change refused; the last good snapshot stays");
                state.refuse("file", e);
            }
        }
    }
}
