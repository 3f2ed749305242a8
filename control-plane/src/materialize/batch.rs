//! `ferry materialize` beside pushes: a vector that already exists is merged with the files'
//! vector under the write path's merge rule instead of being overwritten, so a push made while
//! materialize runs (or before it, with a newer event time) is never replaced by an older row
//! of the files.
//!
//! A batch is written in at most two round trips when nothing races it: `SET key vector NX GET`
//! per entity (creates the missing vectors, returns the existing ones), then, for each existing
//! vector the files change, the write path's compare-and-set. A compare-and-set that finds the
//! key changed reads it again and retries, alone (bounded).

use ferry_redis::Connection;
use tokio::task::JoinSet;

use ferry_vector_store::cas::{cas_cmd, MAX_ATTEMPTS};
use ferry_vector_store::merge::merge_vector;

/// Writes one batch of (key, vector) under the merge rule; the number of keys whose stored
/// vector was merged (written over) rather than created.
pub async fn write_batch(
    conn: &Connection,
    batch: Vec<(String, Vec<u8>)>,
    ttl: Option<u64>,
) -> redis::RedisResult<u64> {
    let creates: Vec<redis::Cmd> = batch
        .iter()
        .map(|(key, value)| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(value.as_slice()).arg("NX").arg("GET");
            if let Some(ttl) = ttl {
                cmd.arg("EX").arg(ttl);
            }
            cmd
        })
        .collect();
    let existing: Vec<Option<Vec<u8>>> = query_all(conn, creates).await?;
    let mut cas = Vec::new();
    let mut pending = Vec::new();
    for ((key, files), stored) in batch.into_iter().zip(existing) {
        let Some(stored) = stored else { continue };
        let Some(merged) = merge_vector(&stored, &files) else {
            continue;
        };
        // The write path's compare-and-set (the key keeps its expiry; the batch then sets the
        // files' own).
        cas.push(cas_cmd(&key, Some(&stored), &merged));
        pending.push((key, files));
    }
    let merged = pending.len() as u64;
    let set: Vec<i64> = query_all(conn, cas).await?;
    if let Some(ttl) = ttl {
        let expire = pending.iter().map(|(key, _)| {
            let mut cmd = redis::cmd("EXPIRE");
            cmd.arg(key).arg(ttl);
            cmd
        });
        let _: Vec<i64> = query_all(conn, expire.collect()).await?;
    }
    for ((key, files), done) in pending.into_iter().zip(set) {
        if done != 1 {
            retry(conn, &key, &files, ttl).await?;
        }
    }
    Ok(merged)
}

/// One key read and merged again until its compare-and-set holds.
async fn retry(
    conn: &Connection,
    key: &str,
    files: &[u8],
    ttl: Option<u64>,
) -> redis::RedisResult<()> {
    let mut c = conn.clone();
    for _ in 0..MAX_ATTEMPTS {
        let stored: Option<Vec<u8>> = redis::cmd("GET").arg(key).query_async(&mut c).await?;
        let done: i64 = match stored {
            None => {
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(files).arg("NX");
                if let Some(ttl) = ttl {
                    cmd.arg("EX").arg(ttl);
                }
                let set: Option<String> = cmd.query_async(&mut c).await?;
                i64::from(set.is_some())
            }
            Some(stored) => match merge_vector(&stored, files) {
                None => 1,
                Some(merged) => {
                    cas_cmd(key, Some(&stored), &merged)
                        .query_async(&mut c)
                        .await?
                }
            },
        };
        if done == 1 {
            return Ok(());
        }
    }
    Err(redis::RedisError::from(std::io::Error::other(format!(
        "the vector {key} changed under {MAX_ATTEMPTS} attempts in a row"
    ))))
}

/// The replies of `cmds`, in order: one pipeline on one Redis, each command on its own on a
/// Cluster (a pipeline there may not span slots).
async fn query_all<T: redis::FromRedisValue + Send + 'static>(
    conn: &Connection,
    cmds: Vec<redis::Cmd>,
) -> redis::RedisResult<Vec<T>> {
    if cmds.is_empty() {
        return Ok(Vec::new());
    }
    let mut c = conn.clone();
    if let Connection::Single(_) = conn {
        let mut pipe = redis::Pipeline::with_capacity(cmds.len());
        for cmd in cmds {
            pipe.add_command(cmd);
        }
        return pipe.query_async(&mut c).await;
    }
    let mut sent = JoinSet::new();
    for (i, cmd) in cmds.into_iter().enumerate() {
        let mut c = c.clone();
        sent.spawn(async move { (i, cmd.query_async::<T>(&mut c).await) });
    }
    let mut out: Vec<Option<T>> = (0..sent.len()).map(|_| None).collect();
    while let Some(done) = sent.join_next().await {
        let (i, reply) =
            done.map_err(|join| redis::RedisError::from(std::io::Error::other(join.to_string())))?;
        out[i] = Some(reply?);
    }
    Ok(out.into_iter().flatten().collect())
}
