//! `ferry materialize` beside pushes: a vector that already exists is merged with the files'
//! vector under the write path's merge rule instead of being overwritten, so a push made while
//! materialize runs (or before it, with a newer event time) is never replaced by an older row
//! of the files.
//!
//! A batch is written in at most two round trips when nothing races it: `SET key vector NX GET`
//! per entity (creates the missing vectors, returns the existing ones), then, for each existing
//! vector the files change, the write path's compare-and-set. A compare-and-set that finds the
//! key changed reads it again and retries, alone (bounded).

use ferry_protos::v1::StoredVector;
use ferry_redis::Connection;
use prost::Message as _;
use tokio::task::JoinSet;

use crate::write::store::{CAS, MAX_ATTEMPTS};

/// The vector to store: per view, the files' part where it is at least as new as the stored one
/// (or the stored one is empty), else the stored part. A stored vector of another fingerprint
/// or number of views, or undecodable, is replaced by the files' (materialize defines the
/// layout). None when the result is the stored bytes.
pub fn merge(stored: &[u8], files: &[u8]) -> Option<Vec<u8>> {
    let Ok(new) = StoredVector::decode(files) else {
        return Some(files.to_vec());
    };
    let old = match StoredVector::decode(stored) {
        Ok(old) if old.fingerprint == new.fingerprint && old.views.len() == new.views.len() => old,
        _ => return (stored != files).then(|| files.to_vec()),
    };
    let mut out = StoredVector {
        fingerprint: new.fingerprint,
        views: Vec::with_capacity(new.views.len()),
    };
    for (o, n) in old.views.into_iter().zip(new.views) {
        let keep_stored =
            !o.values.is_empty() && (n.values.is_empty() || o.event_time_us > n.event_time_us);
        out.views.push(if keep_stored { o } else { n });
    }
    let bytes = out.encode_to_vec();
    (bytes != stored).then_some(bytes)
}

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
        let Some(merged) = merge(&stored, &files) else {
            continue;
        };
        cas.push(cas_cmd(&key, &stored, &merged));
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

/// The write path's compare-and-set of an existing key (which keeps its expiry; the batch then
/// sets the files' own).
fn cas_cmd(key: &str, stored: &[u8], merged: &[u8]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(CAS)
        .arg(1)
        .arg(key)
        .arg("1")
        .arg(stored)
        .arg(merged);
    cmd
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
            Some(stored) => match merge(&stored, files) {
                None => 1,
                Some(merged) => cas_cmd(key, &stored, &merged).query_async(&mut c).await?,
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

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::v1::{value::Kind, Value, ViewValues};

    fn part(t: i64, v: i64) -> ViewValues {
        ViewValues {
            event_time_us: t,
            values: vec![Value {
                kind: Some(Kind::Int64Val(v)),
            }],
        }
    }

    fn vector(views: Vec<ViewValues>) -> Vec<u8> {
        StoredVector {
            fingerprint: 7,
            views,
        }
        .encode_to_vec()
    }

    #[test]
    fn a_newer_pushed_part_survives_and_an_older_one_is_replaced() {
        let empty = ViewValues::default();
        // Stored: view 0 pushed at t=30, view 1 at t=5, view 2 pushed (files have none).
        let stored = vector(vec![part(30, 1), part(5, 2), part(9, 3)]);
        let files = vector(vec![part(20, 10), part(5, 20), empty.clone()]);
        let merged = StoredVector::decode(merge(&stored, &files).unwrap().as_slice()).unwrap();
        // Newer push kept; equal time: the files' row; no file row: the push kept.
        assert_eq!(merged.views, [part(30, 1), part(5, 20), part(9, 3)]);
        // Nothing to change: None.
        assert_eq!(
            merge(&stored, &vector(vec![part(1, 0), empty.clone(), empty])),
            None
        );
        // Another fingerprint: the files' vector.
        let other = StoredVector {
            fingerprint: 8,
            views: vec![part(99, 9)],
        }
        .encode_to_vec();
        assert_eq!(merge(&other, &files), Some(files.clone()));
        assert_eq!(merge(b"\xff\xff", &files), Some(files));
    }
}
