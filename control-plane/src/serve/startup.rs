//! What `ferry serve` serves first. The snapshot the last run saved in the state directory
//! wins over the repo, so a restart never rolls back a push; but when `ferry.yaml` changed
//! since that snapshot was accepted, the file is applied on top as the watcher would have
//! applied it had the control plane been running: under the same hold-back rule, so a new
//! fingerprint stays out until its vectors are materialized and pushed. Without a saved
//! snapshot (the first start), the repo is served as it is.

use std::path::Path;

use anyhow::{anyhow, Result};

use super::persist::{self, StateDir};
use super::state::State;
use super::watch::{self, Applied};
use crate::repo::REPO_FILE;

/// Makes the first snapshot current; returns the hash of the `ferry.yaml` content read (the
/// watcher's starting point).
pub fn first_snapshot(state: &State, store: &StateDir, repo: &Path) -> Result<Option<[u8; 32]>> {
    let (hash, file) = watch::load(repo);
    let Some(saved) = store.load()? else {
        let snap = file.map_err(|e| anyhow!("{e}"))?;
        state.saw_repo(hash);
        let offered = state.offer(snap, "file").map_err(|e| anyhow!("{e}"))?;
        tracing::info!(
            version = %offered.version,
            from = %repo.join(REPO_FILE).display(),
            state = %store.file().display(),
            "no saved snapshot: serving the repo (saved from now on)"
        );
        return Ok(hash);
    };
    let from = store.file().display().to_string();
    let (source, accepted_ms) = (saved.source.clone(), saved.accepted_ms);
    let recorded = saved.repo_sha256.clone();
    let version = state.restore(saved, from.clone()).map_err(|e| {
        anyhow!(
            "the snapshot saved in {from} is not valid any more: {e}; remove the file to start \
             from the repo's {REPO_FILE}"
        )
    })?;
    tracing::info!(%version, source, accepted_ms, %from, "restored the saved snapshot");
    if hash.is_some() && hash.map(|h| persist::hex(&h)) == recorded {
        state.saw_repo(hash);
        return Ok(hash);
    }
    tracing::info!(
        "{REPO_FILE} changed since that snapshot was accepted: applying it as a change"
    );
    match watch::apply(state, hash, file) {
        Applied::Current(v) if v != version => {
            tracing::info!(version = %v, "the repo's snapshot replaces the restored one");
        }
        Applied::Current(_) => {}
        Applied::HeldBack => tracing::warn!(%version, "the restored snapshot stays: the repo's change is held back"),
        Applied::Refused(_) => tracing::warn!(%version, "the restored snapshot stays"),
    }
    Ok(hash)
}
