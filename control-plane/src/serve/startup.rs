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
use ferry_repo::REPO_FILE;

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
    tracing::info!("{REPO_FILE} changed since that snapshot was accepted: applying it as a change");
    match watch::apply(state, hash, file) {
        Applied::Current(v) if v != version => {
            tracing::info!(version = %v, "the repo's snapshot replaces the restored one");
        }
        Applied::Current(_) => {}
        Applied::HeldBack => {
            tracing::warn!(%version, "the restored snapshot stays: the repo's change is held back")
        }
        Applied::Refused(_) => tracing::warn!(%version, "the restored snapshot stays"),
    }
    Ok(hash)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy_config::TEMPLATE_READER_CLUSTER;
    use crate::serve::resources::FilterOptions;
    use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};

    const SHORTER_TTL: (&str, &str) = ("ttl: 2h", "ttl: 3h");
    const FEWER_FEATURES: (&str, &str) =
        (r#"[zeta, "alpha:c", "alpha:a"]"#, r#"[zeta, "alpha:c"]"#);

    fn state(store: &StateDir) -> State {
        let filter = FilterOptions {
            filter_name: "ferry".into(),
            wasm_path: "/ferry.wasm".into(),
            runtime: crate::envoy_config::Runtime::Wasm,
        };
        State::new(filter, TEMPLATE_READER_CLUSTER.into(), Some(store.clone()))
    }

    fn edit(repo: &Path, (from, to): (&str, &str)) {
        let path = repo.join(REPO_FILE);
        let yaml = std::fs::read_to_string(&path).unwrap();
        assert!(yaml.contains(from));
        std::fs::write(&path, yaml.replace(from, to)).unwrap();
    }

    /// A run of `ferry serve`: what it serves first, then whether it was restored.
    fn start(store: &StateDir, repo: &Path) -> (State, String, bool) {
        let s = state(store);
        first_snapshot(&s, store, repo).unwrap();
        let c = s.current().unwrap();
        (s, c.snapshot.version.clone(), c.restored_from.is_some())
    }

    fn snapshot_of(repo: &Path) -> ferry_protos::v1::Snapshot {
        watch::load(repo).1.unwrap()
    }

    #[test]
    fn the_first_start_serves_the_repo_and_saves_it() {
        let (repo, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        let store = StateDir::open(&repo.path().join(".ferry")).unwrap();
        let (_s, version, restored) = start(&store, repo.path());
        assert!(!restored);
        let saved = store.load().unwrap().unwrap();
        assert_eq!(
            (saved.snapshot.version, saved.source.as_str()),
            (version.clone(), "file")
        );
        // Restarted with nothing changed: the same snapshot, restored.
        assert_eq!(start(&store, repo.path()).1, version);
        assert!(start(&store, repo.path()).2);
    }

    #[test]
    fn a_pushed_snapshot_wins_until_the_file_changes() {
        let (repo, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        let store = StateDir::open(&repo.path().join(".ferry")).unwrap();
        let (s, from_file, _) = start(&store, repo.path());
        // Pushed from another checkout (a TTL change): the served repo is unchanged.
        let (other, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        edit(other.path(), SHORTER_TTL);
        let pushed = s.offer(snapshot_of(other.path()), "push").unwrap().version;
        assert_ne!(pushed, from_file);
        drop(s);
        let (s, version, restored) = start(&store, repo.path());
        assert_eq!((version.as_str(), restored), (pushed.as_str(), true));
        assert_eq!(s.current().unwrap().source, "push");
        // The file changes while the control plane is away (a change that keeps every
        // fingerprint): applied over the restored snapshot, as the watcher would have.
        drop(s);
        edit(repo.path(), SHORTER_TTL);
        edit(repo.path(), ("ttl: 3h", "ttl: 4h"));
        let (s, version, restored) = start(&store, repo.path());
        assert_eq!(version, snapshot_of(repo.path()).version);
        assert!(!restored && s.current().unwrap().source == "file");
        assert!(s.last_refused().is_none());
    }

    #[test]
    fn pushes_racing_file_changes_save_what_is_served_and_a_restart_restores_it() {
        let (repo, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        let store = StateDir::open(&repo.path().join(".ferry")).unwrap();
        let (s, _, _) = start(&store, repo.path());
        let (other, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        edit(other.path(), SHORTER_TTL);
        let (hash, _) = watch::load(repo.path());
        let snaps = [snapshot_of(repo.path()), snapshot_of(other.path())];
        std::thread::scope(|scope| {
            // The watcher applies the two contents in turn while a pusher pushes them the
            // other way round: every install changes the snapshot and saves it.
            scope.spawn(|| {
                for i in 0..100 {
                    let applied = watch::apply(&s, hash, Ok(snaps[i % 2].clone()));
                    assert!(matches!(applied, Applied::Current(_)), "{applied:?}");
                    store.load().unwrap().unwrap();
                }
            });
            scope.spawn(|| {
                for i in 0..100 {
                    s.offer(snaps[(i + 1) % 2].clone(), "push").unwrap();
                    store.load().unwrap().unwrap();
                }
            });
        });
        let served = s.current().unwrap();
        let saved = store.load().unwrap().unwrap();
        assert_eq!(saved.snapshot, served.snapshot);
        assert_eq!(saved.source, served.source);
        // Only the state file: every temporary file was renamed over it.
        let names: Vec<_> = std::fs::read_dir(repo.path().join(".ferry"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [persist::STATE_FILE]);
        let version = served.snapshot.version.clone();
        drop((s, served));
        // The repo's hash was recorded with every save, so the restart restores, not re-applies.
        let (_s, restarted, restored) = start(&store, repo.path());
        assert_eq!((restarted, restored), (version, true));
    }

    #[test]
    fn a_new_fingerprint_in_the_file_stays_held_back_at_start() {
        let (repo, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        let store = StateDir::open(&repo.path().join(".ferry")).unwrap();
        let (s, served, _) = start(&store, repo.path());
        drop(s);
        edit(repo.path(), FEWER_FEATURES);
        let (s, version, restored) = start(&store, repo.path());
        assert_eq!((version.as_str(), restored), (served.as_str(), true));
        let refused = s.last_refused().unwrap();
        assert!(refused.error.contains("materialized"), "{refused:?}");
        // Still held back at the next start: the file's content is still not what was served.
        drop(s);
        assert_eq!(start(&store, repo.path()).1, served);
    }

    #[test]
    fn a_corrupt_state_file_stops_the_start_with_its_name() {
        let (repo, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        let store = StateDir::open(&repo.path().join(".ferry")).unwrap();
        drop(start(&store, repo.path()));
        let bytes = std::fs::read(store.file()).unwrap();
        std::fs::write(store.file(), &bytes[..bytes.len() / 2]).unwrap();
        let e = first_snapshot(&state(&store), &store, repo.path())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&store.file().display().to_string()) && e.contains("corrupt"),
            "{e}"
        );
    }

    #[test]
    fn a_state_file_with_a_sequence_over_the_bound_stops_the_start() {
        let (repo, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        let store = StateDir::open(&repo.path().join(".ferry")).unwrap();
        drop(start(&store, repo.path()));
        let mut saved = store.load().unwrap().unwrap();
        saved.sequence = 1 << 60;
        store.save(&saved).unwrap();
        let e = first_snapshot(&state(&store), &store, repo.path())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("1152921504606846976") && e.contains("over the highest"),
            "{e}"
        );
    }

    #[test]
    fn a_snapshot_that_cannot_be_saved_is_not_made_current() {
        let (repo, _) = load_repo(ORDER_YAML, &ORDER_FILES);
        let dir = repo.path().join(".ferry");
        let store = StateDir::open(&dir).unwrap();
        let (s, served, _) = start(&store, repo.path());
        // The state directory is gone and a file stands in its way.
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::write(&dir, b"").unwrap();
        edit(repo.path(), SHORTER_TTL);
        let e = s.offer(snapshot_of(repo.path()), "push").unwrap_err();
        assert!(
            matches!(e, crate::serve::state::Refused::NotSaved(_)),
            "{e}"
        );
        assert!(e.to_string().contains("current.snapshot"), "{e}");
        assert_eq!(s.current().unwrap().snapshot.version, served);
        assert!(s.last_refused().is_some());
    }
}
