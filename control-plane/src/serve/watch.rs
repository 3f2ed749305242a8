//! Watches the served repo: polls `ferry.yaml` (and, for a Feast-backed repo, the Feast repo's
//! `feature_store.yaml` and registry: its file, or a digest of its SQL registry's rows, or a
//! hash of its registry server's answer) and, when that changes and then stays the same for
//! the debounce time, validates the repo and offers the new snapshot. Polling (not inotify,
//! and not LISTEN/NOTIFY: Feast's SQL writes notify nobody) keeps it portable and bounded: one
//! small read (or one query, or one call) per interval. It reads the file by
//! path each time, so a file replaced by a rename (editors) or a symlink swap (a Kubernetes
//! ConfigMap's `..data`) is followed, never a stale inode; a half-written file is not applied
//! unless its writer pauses longer than the debounce time, and a file that does not parse or
//! validate never is (the last good snapshot stays; `/status` shows the error).
//!
//! The hold-back rule lives here ([`apply`]), for the watcher and for the start alike: a change
//! of fingerprint is held back (it needs vectors materialized first, which `ferry apply
//! --materialize --push` does); everything else goes out at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::state::State;
use ferry_repo::snapshot;
use ferry_repo::{self as repo, REPO_FILE};

/// The content hash of ferry.yaml and of what it reads that can change under it: the Feast
/// repo's files, or a stamp of its database or server registry (one query or call). None when
/// ferry.yaml cannot be read.
pub fn stamp(root: &Path) -> Option<[u8; 32]> {
    let text = std::fs::read_to_string(root.join(REPO_FILE)).ok()?;
    Some(hash_of(root, &text))
}

fn hash_of(root: &Path, text: &str) -> [u8; 32] {
    // A Feast-backed repo also changes when `feast apply` rewrites the Feast repo's registry.
    let mut hasher = Sha256::new();
    hasher.update(text.as_bytes());
    let (files, stamp) = repo::feast::watched(root, text);
    for file in files {
        hasher.update(file.as_os_str().as_encoded_bytes());
        match std::fs::read(&file) {
            Ok(bytes) => hasher.update(Sha256::digest(&bytes)),
            Err(_) => hasher.update(b"absent"),
        }
    }
    if let Some(stamp) = stamp {
        hasher.update(b"registry");
        hasher.update(stamp);
    }
    hasher.finalize().into()
}

/// The content hash of ferry.yaml ([`stamp`]) and the snapshot it yields (or why it yields
/// none).
pub fn load(root: &Path) -> (Option<[u8; 32]>, Result<ferry_protos::v1::Snapshot, String>) {
    let path = root.join(REPO_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return (None, Err(format!("reading {}: {e}", path.display()))),
    };
    let hash = hash_of(root, &text);
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
    // A Feast-backed service's features are already where Feast wrote them: nothing to wait for.
    snap.services.iter().all(|s| {
        s.feast.is_some()
            || current
                .snapshot
                .services
                .iter()
                .any(|c| c.name == s.name && c.fingerprint == s.fingerprint)
    })
}

/// What one content of `ferry.yaml` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Current now (or already was).
    Current(String),
    /// A new fingerprint: not served until pushed after materializing.
    HeldBack,
    /// Unreadable, invalid, or not saved: the last good snapshot stays.
    Refused(String),
}

const HELD_BACK: &str = "ferry.yaml changed a FeatureService's fingerprint (or added a service): \
    its vectors must be materialized before Envoy switches, so this change is not applied from \
    the file; run `ferry apply REPO --materialize --push URL`";

/// Applies one read of `ferry.yaml` (from [`load`]) to the state, under the hold-back rule.
pub fn apply(
    state: &State,
    hash: Option<[u8; 32]>,
    result: Result<ferry_protos::v1::Snapshot, String>,
) -> Applied {
    state.saw_repo(hash);
    match result {
        Ok(snap) if !same_fingerprints(state, &snap) => {
            tracing::error!(error = HELD_BACK, "repo change held back");
            state.refuse("file", HELD_BACK.to_owned());
            state.hold_back(snap);
            Applied::HeldBack
        }
        Ok(snap) => match state.offer(snap, "file") {
            Ok(o) => Applied::Current(o.version),
            Err(e) => {
                tracing::error!(error = %e, "repo change refused; the last good snapshot stays");
                Applied::Refused(e.to_string())
            }
        },
        Err(e) => {
            tracing::error!(error = %e, "repo change refused; the last good snapshot stays");
            state.refuse("file", e.clone());
            Applied::Refused(e)
        }
    }
}

/// How the watcher polls.
#[derive(Clone, Copy, Debug)]
pub struct Watch {
    pub interval: Duration,
    /// How long the file must stay unchanged before it is read as a change.
    pub debounce: Duration,
}

type Read = (Option<[u8; 32]>, Result<ferry_protos::v1::Snapshot, String>);

async fn read(root: &Path) -> Option<Read> {
    let r = root.to_owned();
    tokio::task::spawn_blocking(move || load(&r)).await.ok()
}

/// [`stamp`] off the runtime's threads (it may query a database); None if that task failed.
async fn read_stamp(root: &Path) -> Option<Option<[u8; 32]>> {
    let r = root.to_owned();
    tokio::task::spawn_blocking(move || stamp(&r)).await.ok()
}

/// Polls until shutdown. `seen` is the hash of the content already loaded at start.
pub async fn run(
    state: Arc<State>,
    root: PathBuf,
    every: Watch,
    mut seen: Option<[u8; 32]>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(every.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leading = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        // Replicas: only the lease holder acts on the files, once it serves the shared
        // snapshot (before, it cannot tell a push from the file's content). Taking the lease,
        // it compares them with what the shared snapshot was accepted with, as a start
        // compares them with the saved one.
        if let Some(shared) = state.shared() {
            let now = shared.is_leader() && state.current().is_some();
            if now && !leading {
                seen = shared.repo_hash();
            }
            leading = now;
            if !now {
                continue;
            }
        }
        // Only the stamp each tick: the repo is loaded (and a registry read whole) once it
        // changed and settled.
        let Some(hash) = read_stamp(&root).await else {
            continue;
        };
        // Unreadable (e.g. between an unlink and a create) or unchanged: nothing to do.
        if hash.is_none() || hash == seen {
            continue;
        }
        let Some((hash, result)) = settle(&root, hash, every.debounce, &mut shutdown).await else {
            return;
        };
        if hash == seen {
            continue;
        }
        seen = hash;
        // Installing saves (with fsync) under the install lock: off the runtime's threads.
        let state = state.clone();
        let _ = tokio::task::spawn_blocking(move || apply(&state, hash, result)).await;
    }
}

/// Waits until `ferry.yaml` (and what it reads) stamps the same twice `debounce` apart, and
/// returns the load that follows; None on shutdown.
async fn settle(
    root: &Path,
    mut last: Option<[u8; 32]>,
    debounce: Duration,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Read> {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(debounce) => {}
            _ = shutdown.changed() => return None,
        }
        let Some(hash) = read_stamp(root).await else {
            continue;
        };
        if hash.is_some() && hash == last {
            if let Some(loaded) = read(root).await {
                return Some(loaded);
            }
            continue;
        }
        tracing::debug!("ferry.yaml still changing; waiting for it to settle");
        last = hash;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy_config::TEMPLATE_READER_CLUSTER;
    use crate::serve::resources::FilterOptions;
    use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};
    use std::os::unix::fs::symlink;

    fn state() -> Arc<State> {
        let filter = FilterOptions {
            filter_name: "ferry".into(),
            wasm_path: "/ferry.wasm".into(),
            runtime: crate::envoy_config::Runtime::Wasm,
        };
        Arc::new(State::new(filter, TEMPLATE_READER_CLUSTER.into(), None))
    }

    /// A Kubernetes ConfigMap volume: `ferry.yaml` → `..data/ferry.yaml`, `..data` → a
    /// timestamped folder; an update writes a new folder and renames a new `..data` link over
    /// the old one.
    fn configmap_version(repo: &Path, name: &str, yaml: &str) {
        let dir = repo.join(name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join(REPO_FILE), yaml).unwrap();
        let tmp = repo.join("..data_tmp");
        symlink(name, &tmp).unwrap();
        std::fs::rename(&tmp, repo.join("..data")).unwrap();
    }

    /// Waits up to 5 s for `done`.
    async fn until(done: impl Fn() -> bool) {
        for _ in 0..200 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    #[tokio::test]
    async fn a_configmap_symlink_swap_is_followed_and_a_broken_file_never_applied() {
        let (repo, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        let root = repo.path();
        std::fs::remove_file(root.join(REPO_FILE)).unwrap();
        configmap_version(root, "..v1", ORDER_YAML);
        symlink("..data/ferry.yaml", root.join(REPO_FILE)).unwrap();
        let state = state();
        let (hash, first) = load(root);
        assert_eq!(
            apply(&state, hash, first.clone()),
            Applied::Current(first.unwrap().version)
        );
        let (stop, stopped) = watch::channel(false);
        let every = Watch {
            interval: Duration::from_millis(20),
            debounce: Duration::from_millis(50),
        };
        let task = tokio::spawn(run(state.clone(), root.to_owned(), every, hash, stopped));
        let version = || state.current().unwrap().snapshot.version.clone();
        let v1 = version();
        // A version that does not validate: refused, reported, the last good one stays.
        configmap_version(
            root,
            "..v2",
            &ORDER_YAML.replace("service: pair", "service: nope"),
        );
        until(|| state.last_refused().is_some()).await;
        assert!(state.last_refused().unwrap().error.contains("nope"));
        assert_eq!(version(), v1);
        // A good one (a TTL change): applied through the swapped link.
        configmap_version(root, "..v3", &ORDER_YAML.replace("ttl: 2h", "ttl: 3h"));
        until(|| version() != v1).await;
        assert_eq!(version(), load(root).1.unwrap().version);
        assert_ne!(version(), v1);
        stop.send(true).unwrap();
        task.await.unwrap();
    }
}
