//! One replica's part in `--shared-state` ([`super::shared`]): what it serves first, and the
//! task that keeps it on the shared snapshot. A notification on the update channel (Redis
//! pub/sub) makes it read the shared sequence at once; a poll every `--shared-poll-ms` reads
//! it anyway, since pub/sub loses what is published while a subscriber reconnects. On a higher
//! sequence the replica loads the snapshot, validates it as a push and serves it. The same
//! task holds (or tries to take) the lease on watching the repo files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ferry_protos::v1;
use redis::aio::PubSubStream;
use tokio::sync::watch;
use tokio_stream::StreamExt as _;

use super::shared_state::{Loaded, Shared, Stored};
use super::state::State;
use super::watch as repo_watch;

/// What a replica serves first: the shared snapshot; with none stored yet, the repo's (made
/// the shared one, so the first replica's wins); with Redis away, nothing until it is back
/// (serving the repo could roll back a pushed snapshot). Returns the `ferry.yaml` hash read.
pub async fn first_snapshot(
    state: &Arc<State>,
    shared: &Arc<Shared>,
    repo: &Path,
) -> Option<[u8; 32]> {
    shared.lease().await;
    let hash = repo_watch::stamp(repo);
    state.saw_repo(hash);
    catch_up(state, shared, repo).await;
    match state.current() {
        Some(c) => tracing::info!(
            version = %c.snapshot.version,
            sequence = c.sequence,
            "serving the shared snapshot"
        ),
        None => tracing::warn!(
            "no shared snapshot yet (Redis away?): serving none until it is back; Envoys keep \
             the configuration they have"
        ),
    }
    hash
}

/// Keeps this replica on the shared snapshot until shutdown; then gives the lease up.
pub async fn run(
    state: Arc<State>,
    shared: Arc<Shared>,
    repo: PathBuf,
    mut stop: watch::Receiver<bool>,
) {
    let mut poll = tokio::time::interval(shared.opts.poll);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut lease = tokio::time::interval(shared.opts.lease / 3);
    lease.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut updates: Option<PubSubStream> = None;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            _ = lease.tick() => {
                shared.lease().await;
                continue;
            }
            _ = poll.tick() => {
                if updates.is_none() {
                    updates = shared.subscribe().await.ok().map(|p| p.into_on_message());
                }
            }
            message = next(&mut updates) => {
                if message.is_none() {
                    tracing::warn!("the update subscription ended; polling until it is back");
                    updates = None;
                }
            }
        }
        catch_up(&state, &shared, &repo).await;
    }
    shared.release().await;
}

async fn next(updates: &mut Option<PubSubStream>) -> Option<redis::Msg> {
    match updates {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

/// Reads the shared heads; follows a newer snapshot and the held-back one. With no shared
/// snapshot stored (a fresh Redis, or one that lost its keys) and none served, offers the
/// repo's.
async fn catch_up(state: &Arc<State>, shared: &Arc<Shared>, repo: &Path) {
    let Ok((head, held)) = shared.heads().await else {
        return;
    };
    let local_held = state
        .held_back()
        .map(|h| h.version.clone())
        .unwrap_or_default();
    if held != local_held {
        let snap = if held.is_empty() {
            Ok(None)
        } else {
            shared.held_back().await
        };
        if let Ok(snap) = snap {
            state.set_held_back(snap);
        }
    }
    match &head {
        // A deleted record (or a Redis that lost its keys) does not lower the sequence this
        // replica has served (#35: an older signed record written next is not served again);
        // the next install goes above it.
        Stored::None => {
            if state.current().is_none() {
                offer_repo(state, repo).await;
            }
            return;
        }
        Stored::At(sequence) if *sequence <= shared.known() => return,
        _ if shared.refused_already(&head) => return,
        _ => {}
    }
    match shared.load().await {
        Ok(Loaded::Record(record)) => {
            let state = state.clone();
            // Installing takes the install lock: off the runtime's threads.
            let _ = tokio::task::spawn_blocking(move || state.follow(*record)).await;
        }
        Ok(Loaded::Refused {
            head,
            reason,
            error,
        }) => state.refuse_shared(&head, reason, error),
        Ok(Loaded::Absent) | Err(_) => {}
    }
}

/// Offers the repo's snapshot as the shared one (no shared snapshot exists yet).
async fn offer_repo(state: &Arc<State>, repo: &Path) {
    let root = repo.to_owned();
    let Ok((hash, file)) = tokio::task::spawn_blocking(move || repo_watch::load(&root)).await
    else {
        return;
    };
    let snap: v1::Snapshot = match file {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "the repo yields no snapshot");
            state.refuse("file", e);
            return;
        }
    };
    state.saw_repo(hash);
    let state = state.clone();
    let offered = tokio::task::spawn_blocking(move || state.offer(snap, "file")).await;
    match offered {
        Ok(Ok(o)) => tracing::info!(version = %o.version, "the repo's snapshot is the shared one"),
        Ok(Err(e)) => tracing::error!(error = %e, "the repo's snapshot was not made current"),
        Err(e) => tracing::error!(error = %e, "install task failed"),
    }
}
