//! Applying merged vectors to Redis, atomically per key: read the key, merge in Rust
//! ([`ferry_vector_store::merge`]), then the compare-and-set ([`ferry_vector_store::cas`])
//! writes the new bytes only if the key still holds what was read; otherwise read again
//! (bounded). Keys go in chunks of [`CHUNK`]: one `MGET` reads a chunk, one pipeline
//! compare-and-sets it, so a write costs the readers' Redis two wake-ups per chunk instead of
//! two per key (issue #37, bench/README.md "Enrichment under a write flood"); on a Redis
//! Cluster, whose pipelines stay within a slot, a chunk is one key.

use std::sync::Arc;

use ferry_redis::Connection;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use ferry_vector_store::cas::cas_cmd;
use ferry_vector_store::merge::{merge_rows, Outcome, Update};

use super::model::Target;
use super::pace::Admitted;
use super::rows::Row;

use ferry_vector_store::cas::MAX_ATTEMPTS;
/// Keys per Redis round trip. Redis runs a pipeline's commands one after the other before it
/// serves another client, so a chunk also bounds how long a reader's `MGET` can wait behind a
/// write: 16 compare-and-set scripts, ~70 µs on the benchmark's machine.
pub const CHUNK: usize = 16;
/// Chunks one write works on at once.
const WORKERS: usize = 2;
/// Chunks in flight over every write (a permit each, `Writer`'s): a write flood keeps at most
/// `IN_FLIGHT × CHUNK` keys in flight on the Redis the readers use.
pub const IN_FLIGHT: usize = 2;

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

/// Applies every key's updates, chunk by chunk, `WORKERS` chunks at once, each chunk's keys
/// waiting for their slots of `pace` and the chunk holding one of `in_flight`'s permits while
/// it talks to Redis; stops at the first error.
pub async fn apply(
    conn: &Connection,
    in_flight: &Arc<Semaphore>,
    pace: Option<&Arc<Admitted>>,
    work: Vec<KeyWork>,
) -> (Applied, Option<StoreError>) {
    let work = Arc::new(work);
    // A Redis Cluster refuses a pipeline across slots, and a chunk's keys are on any slot:
    // there, one key per round trip.
    let size = if matches!(conn, Connection::Cluster(_)) {
        1
    } else {
        CHUNK
    };
    let chunks = work.len().div_ceil(size);
    let workers = WORKERS.min(chunks).max(1);
    let mut set = JoinSet::new();
    for w in 0..workers {
        let (conn, work, in_flight) = (conn.clone(), work.clone(), in_flight.clone());
        let pace = pace.cloned();
        set.spawn(async move {
            let mut done = Applied::default();
            for chunk in work.chunks(size).skip(w).step_by(workers) {
                if let Some(pace) = &pace {
                    for _ in chunk {
                        pace.key().await;
                    }
                }
                let Ok(_permit) = in_flight.acquire().await else {
                    return (done, Some(StoreError::Task("the writer closed".into())));
                };
                if let Err(e) = apply_chunk(&conn, chunk, &mut done).await {
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

/// One chunk: its keys read in one `MGET`, merged, and compare-and-set in one pipeline; the
/// keys that changed meanwhile read and merged again, at most [`MAX_ATTEMPTS`] rounds.
async fn apply_chunk(
    conn: &Connection,
    chunk: &[KeyWork],
    done: &mut Applied,
) -> Result<(), StoreError> {
    let mut c = conn.clone();
    let mut pending: Vec<&KeyWork> = chunk.iter().collect();
    for _ in 0..MAX_ATTEMPTS {
        let mut read = redis::cmd("MGET");
        for item in &pending {
            read.arg(&item.key);
        }
        let stored: Vec<Option<Vec<u8>>> = read.query_async(&mut c).await?;
        if stored.len() != pending.len() {
            return Err(StoreError::Task(format!(
                "MGET of {} keys answered {} values",
                pending.len(),
                stored.len()
            )));
        }
        let (pipe, setting) = merged(&pending, &stored, done);
        if setting.is_empty() {
            return Ok(());
        }
        let answers: Vec<i64> = pipe.query_async(&mut c).await?;
        if answers.len() != setting.len() {
            return Err(StoreError::Task(format!(
                "{} compare-and-sets answered {} times",
                setting.len(),
                answers.len()
            )));
        }
        let mut again = Vec::new();
        for ((item, outcomes), set) in setting.into_iter().zip(answers) {
            if set == 1 {
                let ids = item.updates.iter().map(|(_, _, id)| *id);
                done.outcomes.extend(ids.zip(outcomes));
                done.keys_written += 1;
            } else {
                done.conflicts += 1;
                again.push(item);
            }
        }
        if again.is_empty() {
            return Ok(());
        }
        pending = again;
    }
    Err(StoreError::Contended {
        key: pending
            .first()
            .map_or_else(String::new, |item| item.key.clone()),
    })
}

/// Each pending key merged with what it holds: the compare-and-sets of the keys that change (in
/// a pipeline) with their outcomes; the keys with nothing to write are done.
fn merged<'a>(
    pending: &[&'a KeyWork],
    stored: &[Option<Vec<u8>>],
    done: &mut Applied,
) -> (redis::Pipeline, Vec<(&'a KeyWork, Vec<Outcome>)>) {
    let mut pipe = redis::pipe();
    let mut setting = Vec::new();
    for (item, stored) in pending.iter().zip(stored) {
        let updates: Vec<Update<'_>> = item
            .updates
            .iter()
            .map(|(target, row, _)| update(target, row))
            .collect();
        let merged = merge_rows(stored.as_deref(), item.fingerprint, item.views, &updates);
        let ids = item.updates.iter().map(|(_, _, id)| *id);
        match merged.bytes {
            // Nothing to write (every row older, or refused): this key is done.
            None => done.outcomes.extend(ids.zip(merged.outcomes)),
            Some(bytes) => {
                pipe.add_command(cas_cmd(&item.key, stored.as_deref(), &bytes));
                setting.push((*item, merged.outcomes));
            }
        }
    }
    (pipe, setting)
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
