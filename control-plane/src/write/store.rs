//! Applying merged vectors to Redis, one key at a time and atomically: read the key, merge in
//! Rust ([`ferry_vector_store::merge`]), then the compare-and-set ([`ferry_vector_store::cas`])
//! writes the new bytes only if the key still holds what was read; otherwise read again
//! (bounded). Keys are written concurrently over one multiplexed connection.

use std::sync::Arc;

use ferry_redis::Connection;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use ferry_vector_store::cas::cas_cmd;
use ferry_vector_store::merge::{merge_rows, Outcome, Update};

use super::model::Target;
use super::rows::Row;

use ferry_vector_store::cas::MAX_ATTEMPTS;
/// Keys one write works on at once.
const WORKERS: usize = 8;
/// Keys worked on at once over every write (a permit each, `Writer`'s): a write flood keeps
/// at most this many compare-and-sets in flight on the Redis the readers use.
pub const IN_FLIGHT: usize = 8;

/// Everything one key receives: one service's vector at one fingerprint, for one entity.
#[derive(Debug)]
pub struct KeyWork {
    pub key: String,
    pub fingerprint: u64,
    pub views: usize,
    /// Each update with the id of the request row it comes from.
    pub updates: Vec<(Target, Row, usize)>,
}

/// What writing did, per request row id.
#[derive(Debug, Default)]
pub struct Applied {
    /// (row id, outcome), one per update.
    pub outcomes: Vec<(usize, Outcome)>,
    /// Compare-and-set attempts that found the key changed and read it again.
    pub conflicts: u64,
    /// Keys written.
    pub keys_written: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(
        "the vector {key} changed under {MAX_ATTEMPTS} attempts in a row (contention); rows \
         of other entities may have been written"
    )]
    Contended { key: String },
    #[error("a write task failed: {0}")]
    Task(String),
}

/// Applies every key's updates, `WORKERS` keys at once, each holding one of `in_flight`'s
/// permits while it talks to Redis; stops at the first error.
pub async fn apply(
    conn: &Connection,
    in_flight: &Arc<Semaphore>,
    work: Vec<KeyWork>,
) -> (Applied, Option<StoreError>) {
    let work = Arc::new(work);
    let workers = WORKERS.min(work.len()).max(1);
    let mut set = JoinSet::new();
    for w in 0..workers {
        let (conn, work, in_flight) = (conn.clone(), work.clone(), in_flight.clone());
        set.spawn(async move {
            let mut done = Applied::default();
            for item in work.iter().skip(w).step_by(workers) {
                let Ok(_permit) = in_flight.acquire().await else {
                    return (done, Some(StoreError::Task("the writer closed".into())));
                };
                if let Err(e) = apply_key(&conn, item, &mut done).await {
                    return (done, Some(e));
                }
            }
            (done, None)
        });
    }
    let mut all = Applied::default();
    let mut error = None;
    while let Some(joined) = set.join_next().await {
        let (done, e) =
            joined.unwrap_or_else(|e| (Applied::default(), Some(StoreError::Task(e.to_string()))));
        all.outcomes.extend(done.outcomes);
        all.conflicts += done.conflicts;
        all.keys_written += done.keys_written;
        error = error.or(e);
    }
    (all, error)
}

async fn apply_key(
    conn: &Connection,
    item: &KeyWork,
    done: &mut Applied,
) -> Result<(), StoreError> {
    let updates: Vec<Update<'_>> = item
        .updates
        .iter()
        .map(|(target, row, _)| update(target, row))
        .collect();
    let mut c = conn.clone();
    for _ in 0..MAX_ATTEMPTS {
        let stored: Option<Vec<u8>> = redis::cmd("GET").arg(&item.key).query_async(&mut c).await?;
        let merged = merge_rows(stored.as_deref(), item.fingerprint, item.views, &updates);
        let ids = item.updates.iter().map(|(_, _, id)| *id);
        let Some(bytes) = merged.bytes else {
            done.outcomes.extend(ids.zip(merged.outcomes));
            return Ok(());
        };
        let set: i64 = cas_cmd(&item.key, stored.as_deref(), &bytes)
            .query_async(&mut c)
            .await?;
        if set == 1 {
            done.outcomes.extend(ids.zip(merged.outcomes));
            done.keys_written += 1;
            return Ok(());
        }
        done.conflicts += 1;
    }
    Err(StoreError::Contended {
        key: item.key.clone(),
    })
}

/// What the merge reads of one row for one target.
fn update<'a>(target: &'a Target, row: &'a Row) -> Update<'a> {
    Update {
        slot: target.slot,
        selected: &target.selected,
        unfit: target.unfit.is_some(),
        event_time_us: row.event_time_us,
        values: &row.values,
    }
}
