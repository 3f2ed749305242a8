//! `--shared-state`: the state replicas of `ferry serve` share through the Redis they already
//! reach for feature writes. Under `ferry:cp:{CLUSTER}:` (one hash tag, so a Redis Cluster keeps
//! every key in one slot and the scripts may touch them together):
//!
//! - `current`: a hash with the current snapshot's bytes, version, sequence, source, when it
//!   was accepted and the `ferry.yaml` hash then. One script ([`INSTALL`]) compares the
//!   sequence with the one the replica last saw (compare-and-set), computes
//!   `max(last + 1, now ms)` and stores the snapshot with it, so two pushes to two replicas get
//!   two distinct, ordered sequences and the later one wins everywhere; then it publishes the
//!   sequence on `updates`.
//! - `held_back`: the repo change held back for its new fingerprint (version and bytes), so
//!   every replica's feature writes land in its vectors too.
//! - `lease`: which replica watches the repo files (`SET NX PX`, renewed by its holder).
//!
//! Every call is bounded by [`REDIS_TIMEOUT`]; a failure marks the shared state unavailable
//! (for `/status` and the push's 503) until a call succeeds again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use ferry_protos::v1;
use ferry_redis::{Connection, Target};
use prost::Message as _;
use redis::aio::PubSub;

use super::api::SharedStatus;
use super::streams::lock;

/// Every Redis call of the shared state gets this long.
pub const REDIS_TIMEOUT: Duration = Duration::from_secs(2);
/// The prefix of every shared key: `ferry:cp:{CLUSTER}:current` and its siblings.
pub const PREFIX: &str = "ferry:cp:";

/// The compare-and-set install. KEYS: current, held_back. ARGV: the sequence last seen, now
/// (ms), version, snapshot bytes, source, ferry.yaml hash ('' = none), the held-back version
/// this snapshot covers ('' = none), the channel. Returns {1, new} when stored, {0, current}
/// when another replica stored one since, {2, current} when this version is already current.
const INSTALL: &str = r"
local cur = tonumber(redis.call('HGET', KEYS[1], 'sequence') or '0')
if cur ~= tonumber(ARGV[1]) then return {0, string.format('%.0f', cur)} end
if redis.call('HGET', KEYS[1], 'version') == ARGV[3] then
  return {2, string.format('%.0f', cur)}
end
local seq = string.format('%.0f', math.max(cur + 1, tonumber(ARGV[2])))
redis.call('HSET', KEYS[1], 'sequence', seq, 'version', ARGV[3], 'snapshot', ARGV[4],
  'source', ARGV[5], 'repo_sha256', ARGV[6], 'accepted_ms', ARGV[2])
if ARGV[7] ~= '' and redis.call('HGET', KEYS[2], 'version') == ARGV[7] then
  redis.call('DEL', KEYS[2])
end
redis.call('PUBLISH', ARGV[8], seq)
return {1, seq}
";

/// Renews the lease if this replica holds it. KEYS: lease. ARGV: replica id, ms.
const RENEW: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// The shared keys of one deployment (`--cluster-name`).
#[derive(Clone, Debug)]
pub struct Keys {
    pub current: String,
    pub held_back: String,
    pub lease: String,
    pub channel: String,
}

impl Keys {
    pub fn new(cluster: &str) -> Keys {
        let p = format!("{PREFIX}{{{cluster}}}:");
        Keys {
            current: format!("{p}current"),
            held_back: format!("{p}held_back"),
            lease: format!("{p}lease"),
            channel: format!("{p}updates"),
        }
    }
}

/// The current snapshot as stored in Redis.
#[derive(Clone, Debug)]
pub struct Record {
    pub sequence: u64,
    pub snapshot: v1::Snapshot,
    pub source: &'static str,
    pub accepted_ms: u64,
    pub repo_sha256: Option<String>,
}

/// What an install did in Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Committed {
    /// Stored at this sequence.
    At(u64),
    /// Another replica stored a snapshot since (this is its sequence): catch up, try again.
    Conflict(u64),
    /// The version is already the shared one.
    Unchanged(u64),
}

/// The shared state could not be read or written.
#[derive(Clone, Debug, thiserror::Error)]
#[error("the shared state in Redis is unavailable ({0}): pushes are refused until it is back; every replica keeps serving the snapshot it has")]
pub struct Unavailable(pub String);

/// What one installs: the snapshot and what is saved beside it.
pub struct Install<'a> {
    pub encoded: &'a [u8],
    pub version: &'a str,
    pub source: &'a str,
    pub accepted_ms: u64,
    pub repo_sha256: Option<String>,
    /// The held-back version this snapshot serves every fingerprint of.
    pub releases: Option<String>,
}

/// Flags of `--shared-state`.
#[derive(Clone, Debug)]
pub struct SharedOptions {
    /// Names the deployment's keys: two deployments on one Redis do not mix.
    pub cluster: String,
    /// How often the current sequence is read besides the notifications.
    pub poll: Duration,
    /// How long the watcher's lease lasts without renewal.
    pub lease: Duration,
}

/// One replica's handle on the shared state.
pub struct Shared {
    conn: Connection,
    /// For the subscription (its own connection).
    target: Target,
    pub keys: Keys,
    /// This replica's id (the lease's value, on `/status`).
    pub replica: String,
    pub opts: SharedOptions,
    /// For the calls made from blocking code (installs run off the runtime's threads).
    rt: tokio::runtime::Handle,
    leader: AtomicBool,
    /// The last failure, None while Redis answers.
    down: Mutex<Option<String>>,
    /// The sequence of the shared snapshot this replica serves (0: none yet).
    known: Mutex<u64>,
    /// The `ferry.yaml` hash saved with it: a replica taking the lease applies the file only
    /// when its content differs (the restore rule of one replica's start).
    repo: Mutex<Option<String>>,
}

impl Shared {
    pub fn new(target: Target, conn: Connection, opts: SharedOptions) -> Shared {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "replica".to_owned());
        // Random, so that two replicas never hold one id (same host name, same pid 1).
        let mut salt = [0u8; 4];
        let _ = getrandom::fill(&mut salt);
        Shared {
            conn,
            target,
            keys: Keys::new(&opts.cluster),
            replica: format!(
                "{host}-{}-{}",
                std::process::id(),
                super::persist::hex(&salt)
            ),
            opts,
            rt: tokio::runtime::Handle::current(),
            leader: AtomicBool::new(false),
            down: Mutex::new(None),
            known: Mutex::new(0),
            repo: Mutex::new(None),
        }
    }

    /// Whether this replica holds the lease (watches the repo files).
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    pub fn known(&self) -> u64 {
        *lock(&self.known)
    }

    /// Records the shared snapshot now served: its sequence and `ferry.yaml` hash.
    pub fn set_known(&self, sequence: u64, repo: Option<String>) {
        let mut known = lock(&self.known);
        if sequence > *known {
            *known = sequence;
            *lock(&self.repo) = repo;
        }
    }

    /// Starts over from `sequence` (the shared keys were lost: a Redis without them).
    pub fn reset_known(&self, sequence: u64) {
        *lock(&self.known) = sequence;
    }

    /// The `ferry.yaml` hash saved with the shared snapshot served, in hex.
    pub fn repo_hex(&self) -> Option<String> {
        lock(&self.repo).clone()
    }

    /// The same, as bytes.
    pub fn repo_hash(&self) -> Option<[u8; 32]> {
        let hex = lock(&self.repo).clone()?;
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(out)
    }

    pub fn unavailable(&self) -> Option<String> {
        lock(&self.down).clone()
    }

    pub fn status(&self) -> SharedStatus {
        SharedStatus {
            replica: self.replica.clone(),
            cluster: self.opts.cluster.clone(),
            available: self.unavailable().is_none(),
            error: self.unavailable(),
            sequence: self.known(),
            watches_repo: self.is_leader(),
        }
    }

    /// Runs `fut` with [`REDIS_TIMEOUT`] and records whether Redis answered (logged on the flip).
    async fn call<T>(
        &self,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Unavailable> {
        let result = match tokio::time::timeout(REDIS_TIMEOUT, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Unavailable(e.to_string())),
            Err(_) => Err(Unavailable(format!("no answer within {REDIS_TIMEOUT:?}"))),
        };
        let mut down = lock(&self.down);
        match (&result, down.is_some()) {
            (Ok(_), true) => tracing::info!("the shared state in Redis is available again"),
            (Err(e), false) => {
                tracing::error!(error = %e.0, "the shared state in Redis is unavailable")
            }
            _ => {}
        }
        *down = result.as_ref().err().map(|e| e.0.clone());
        if result.is_err() {
            self.leader.store(false, Ordering::Relaxed);
        }
        result
    }

    /// Runs `fut` from blocking code (an install off the runtime's threads).
    pub fn blocking<T>(&self, fut: impl std::future::Future<Output = T>) -> T {
        self.rt.block_on(fut)
    }

    /// Stores a snapshot if the shared sequence is still `expected` ([`INSTALL`]).
    pub async fn commit(&self, expected: u64, i: &Install<'_>) -> Result<Committed, Unavailable> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(INSTALL)
            .arg(2)
            .arg(&self.keys.current)
            .arg(&self.keys.held_back)
            .arg(expected)
            .arg(i.accepted_ms)
            .arg(i.version)
            .arg(i.encoded)
            .arg(i.source)
            .arg(i.repo_sha256.as_deref().unwrap_or(""))
            .arg(i.releases.as_deref().unwrap_or(""))
            .arg(&self.keys.channel);
        let (what, sequence): (u8, u64) = self.call(cmd.query_async(&mut conn)).await?;
        Ok(match what {
            1 => Committed::At(sequence),
            2 => Committed::Unchanged(sequence),
            _ => Committed::Conflict(sequence),
        })
    }

    /// The current shared sequence (0: none) and the held-back version ("" : none).
    pub async fn heads(&self) -> Result<(u64, String), Unavailable> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("HGET")
            .arg(&self.keys.current)
            .arg("sequence")
            .cmd("HGET")
            .arg(&self.keys.held_back)
            .arg("version");
        let (seq, held): (Option<u64>, Option<String>) =
            self.call(pipe.query_async(&mut conn)).await?;
        Ok((seq.unwrap_or(0), held.unwrap_or_default()))
    }

    /// The shared snapshot; None when there is none (or it does not decode: logged).
    pub async fn load(&self) -> Result<Option<Record>, Unavailable> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&self.keys.current).arg(&[
            "sequence",
            "snapshot",
            "source",
            "accepted_ms",
            "repo_sha256",
        ]);
        type Row = (
            Option<u64>,
            Option<Vec<u8>>,
            Option<String>,
            Option<u64>,
            Option<String>,
        );
        let (seq, bytes, source, accepted_ms, repo): Row =
            self.call(cmd.query_async(&mut conn)).await?;
        let (Some(sequence), Some(bytes)) = (seq, bytes) else {
            return Ok(None);
        };
        let snapshot = match v1::Snapshot::decode(bytes.as_slice()) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, key = %self.keys.current, "the shared snapshot does not decode");
                return Ok(None);
            }
        };
        Ok(Some(Record {
            sequence,
            snapshot,
            source: if source.as_deref() == Some("push") {
                "push"
            } else {
                "file"
            },
            accepted_ms: accepted_ms.unwrap_or(0),
            repo_sha256: repo.filter(|r| !r.is_empty()),
        }))
    }

    /// Records the held-back snapshot for every replica.
    pub async fn hold_back(&self, snap: &v1::Snapshot) -> Result<(), Unavailable> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("HSET");
        cmd.arg(&self.keys.held_back)
            .arg("version")
            .arg(&snap.version)
            .arg("snapshot")
            .arg(snap.encode_to_vec());
        self.call(cmd.query_async::<()>(&mut conn)).await
    }

    /// The held-back snapshot, if any.
    pub async fn held_back(&self) -> Result<Option<v1::Snapshot>, Unavailable> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&self.keys.held_back).arg("snapshot");
        let bytes: Option<Vec<u8>> = self.call(cmd.query_async(&mut conn)).await?;
        Ok(bytes.and_then(|b| v1::Snapshot::decode(b.as_slice()).ok()))
    }

    /// Takes or renews the lease on watching the repo files; whether this replica holds it.
    pub async fn lease(&self) -> bool {
        let mut conn = self.conn.clone();
        let ms = u64::try_from(self.opts.lease.as_millis()).unwrap_or(u64::MAX);
        let held = if self.is_leader() {
            let mut cmd = redis::cmd("EVAL");
            cmd.arg(RENEW)
                .arg(1)
                .arg(&self.keys.lease)
                .arg(&self.replica)
                .arg(ms);
            self.call(cmd.query_async::<i64>(&mut conn))
                .await
                .is_ok_and(|n| n == 1)
        } else {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&self.keys.lease)
                .arg(&self.replica)
                .arg("NX")
                .arg("PX")
                .arg(ms);
            self.call(cmd.query_async::<Option<String>>(&mut conn))
                .await
                .is_ok_and(|ok| ok.is_some())
        };
        let was = self.leader.swap(held, Ordering::Relaxed);
        if held != was {
            tracing::info!(
                replica = %self.replica,
                watches = held,
                "the lease on watching the repo files changed hands"
            );
        }
        held
    }

    /// Gives the lease up (at shutdown), so another replica takes over at once.
    pub async fn release(&self) {
        if !self.is_leader() {
            return;
        }
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0")
            .arg(1)
            .arg(&self.keys.lease)
            .arg(&self.replica);
        let _ = self.call(cmd.query_async::<i64>(&mut conn)).await;
        self.leader.store(false, Ordering::Relaxed);
    }

    /// A subscription to the update channel (its own connection).
    pub async fn subscribe(&self) -> Result<PubSub, Unavailable> {
        let subscribed = async {
            let mut pubsub = self.target.pubsub().await?;
            pubsub.subscribe(&self.keys.channel).await?;
            Ok(pubsub)
        };
        self.call(subscribed).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_test_support::redis::RedisServer;

    fn replica(redis: &RedisServer, cluster: &str) -> Shared {
        let target = ferry_redis::RedisArgs::with_url(redis.url())
            .target()
            .unwrap();
        let timeouts = ferry_redis::Timeouts {
            connect: Duration::from_secs(2),
            response: Some(REDIS_TIMEOUT),
        };
        let conn = target.connect_lazy(timeouts).unwrap();
        let opts = SharedOptions {
            cluster: cluster.into(),
            poll: Duration::from_secs(1),
            lease: Duration::from_millis(600),
        };
        Shared::new(target, conn, opts)
    }

    fn install<'a>(encoded: &'a [u8], version: &'a str, now: u64) -> Install<'a> {
        Install {
            encoded,
            version,
            source: "push",
            accepted_ms: now,
            repo_sha256: None,
            releases: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_installs_get_distinct_ordered_sequences_and_one_lease_holder() {
        let redis = RedisServer::start();
        let (a, b) = (replica(&redis, "t"), replica(&redis, "t"));
        let other = replica(&redis, "another-deployment");
        assert_eq!(a.heads().await.unwrap(), (0, String::new()));
        // The clock is the floor; a stale expectation is a conflict naming the current one.
        let first = a.commit(0, &install(b"x", "v1", 5_000)).await.unwrap();
        assert_eq!(first, Committed::At(5_000));
        assert_eq!(
            b.commit(0, &install(b"y", "v2", 6_000)).await.unwrap(),
            Committed::Conflict(5_000)
        );
        assert_eq!(
            b.commit(5_000, &install(b"x", "v1", 6_000)).await.unwrap(),
            Committed::Unchanged(5_000)
        );
        // The clock went back: still above.
        assert_eq!(
            b.commit(5_000, &install(b"y", "v2", 10)).await.unwrap(),
            Committed::At(5_001)
        );
        assert_eq!(
            other.heads().await.unwrap().0,
            0,
            "another deployment's keys"
        );

        // Two replicas installing as fast as they can, each catching up on a conflict.
        let run = |s: Shared, tag: &'static str| {
            tokio::spawn(async move {
                let mut expected = 5_001;
                let mut got = Vec::new();
                for i in 0..50 {
                    let version = format!("{tag}{i}");
                    loop {
                        match s
                            .commit(expected, &install(b"", &version, 1))
                            .await
                            .unwrap()
                        {
                            Committed::At(n) => {
                                got.push(n);
                                expected = n;
                                break;
                            }
                            Committed::Conflict(n) | Committed::Unchanged(n) => expected = n,
                        }
                    }
                }
                got
            })
        };
        let (x, y) = (run(a, "a"), run(b, "b"));
        let (x, y) = (x.await.unwrap(), y.await.unwrap());
        let mut all: Vec<u64> = x.iter().chain(&y).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 100, "every install its own sequence");
        assert!(x.windows(2).all(|w| w[0] < w[1]) && y.windows(2).all(|w| w[0] < w[1]));
        let (a, b) = (replica(&redis, "t"), replica(&redis, "t"));
        let record = a.load().await.unwrap().unwrap();
        assert_eq!(record.sequence, *all.last().unwrap());

        // One lease holder; the other takes over once it lapses.
        assert!(a.lease().await);
        assert!(!b.lease().await);
        assert!(a.lease().await, "renewed");
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(b.lease().await, "taken over after it lapsed");
        assert!(!a.lease().await, "lost");
        b.release().await;
        assert!(a.lease().await, "released at shutdown");
    }
}
