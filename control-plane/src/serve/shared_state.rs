//! `--shared-state`: the state replicas of `ferry serve` share through the Redis they already
//! reach for feature writes. Under `ferry:cp:{CLUSTER}:` (one hash tag, so a Redis Cluster keeps
//! every key in one slot and the scripts may touch them together):
//!
//! - `current`: a hash with the current snapshot's envelope (signed by the writing replica at
//!   the record's sequence, [`Seal`]), version, sequence, source, when it was accepted and the
//!   `ferry.yaml` hash then. The replica computes the next sequence (`max(last + 1, now ms)`,
//!   bounded) and one script ([`INSTALL`]) stores the record if the stored sequence is still
//!   the one the replica last read (compare-and-set), so two pushes to two replicas get two
//!   distinct, ordered sequences and the later one wins everywhere; then it publishes the
//!   sequence on `updates`. A replica serves a record only if its envelope verifies under the
//!   deployment's keys at that sequence (#35): whoever else writes Redis is refused.
//! - `held_back`: the repo change held back for its new fingerprint (version and envelope), so
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
pub use super::record::Stored;
use super::seal::Seal;
use super::streams::lock;

/// Every Redis call of the shared state gets this long.
pub const REDIS_TIMEOUT: Duration = Duration::from_secs(2);
/// The prefix of every shared key: `ferry:cp:{CLUSTER}:current` and its siblings.
pub const PREFIX: &str = "ferry:cp:";

/// The compare-and-set install. KEYS: current, held_back. ARGV: the stored sequence as last
/// read ('' = none), the new sequence, version, the snapshot's envelope signed at the new
/// sequence ([`Seal`]), source, ferry.yaml hash ('' =
/// none), the held-back version this snapshot covers ('' = none), the channel, when it was
/// accepted (ms), '1' to store it even when its version is the stored one (that record was
/// refused here). Sequences are compared and stored as strings, never as Lua numbers: those are
/// doubles, and above 2^53 `n + 1 == n` (#35); the replica computes the next one in u64
/// ([`super::signing::next_sequence`], bounded). The record is replaced whole, so no field of
/// an earlier writer's survives. Returns {1, new} when stored, {0, stored} when another
/// replica stored one since, {2, stored} when this version is already the stored one.
const INSTALL: &str = r"
local cur = redis.call('HGET', KEYS[1], 'sequence') or ''
if cur ~= ARGV[1] then return {0, cur} end
if ARGV[10] ~= '1' and redis.call('HGET', KEYS[1], 'version') == ARGV[3] then
  return {2, cur}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'sequence', ARGV[2], 'version', ARGV[3], 'signed', ARGV[4],
  'source', ARGV[5], 'repo_sha256', ARGV[6], 'accepted_ms', ARGV[9])
if ARGV[7] ~= '' and redis.call('HGET', KEYS[2], 'version') == ARGV[7] then
  redis.call('DEL', KEYS[2])
end
redis.call('PUBLISH', ARGV[8], ARGV[2])
return {1, ARGV[2]}
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Committed {
    /// Stored at this sequence.
    At(u64),
    /// Someone stored a record since (this is its sequence): catch up, try again.
    Conflict(Stored),
    /// The version is already the stored one.
    Unchanged(Stored),
}

/// What [`Shared::load`] found.
#[derive(Clone, Debug)]
pub enum Loaded {
    /// No record (or one without its snapshot).
    Absent,
    Record(Box<Record>),
    /// A record this replica will not serve: why, and the `reason` label it is counted under.
    Refused {
        head: Stored,
        reason: &'static str,
        error: String,
    },
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
    /// The deployment's other public keys (`--shared-state-key`): records signed by them are
    /// served too (replicas in the middle of a key rotation).
    pub keys: Vec<serde_json::Value>,
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
    /// The last record refused here and why (on `/status`): not read again while it stays.
    refused: Mutex<Option<(Stored, String)>>,
    /// Signs this replica's records and verifies every record read.
    seal: Seal,
    /// The held-back version last refused (its signature), so it is logged once.
    refused_held: Mutex<Option<String>>,
}

impl Shared {
    pub fn new(target: Target, conn: Connection, opts: SharedOptions, seal: Seal) -> Shared {
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
            refused: Mutex::new(None),
            seal,
            refused_held: Mutex::new(None),
        }
    }

    /// The ids of the keys a shared record may be signed with.
    pub fn seal_ids(&self) -> String {
        self.seal.ids()
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
            refused_record: lock(&self.refused).as_ref().map(|(_, e)| e.clone()),
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

    /// Stores a snapshot at `sequence` if the stored sequence is still `expected` ([`INSTALL`];
    /// `force`: even when its version is the stored one).
    pub async fn commit(
        &self,
        expected: &Stored,
        sequence: u64,
        force: bool,
        i: &Install<'_>,
    ) -> Result<Committed, Unavailable> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(INSTALL)
            .arg(2)
            .arg(&self.keys.current)
            .arg(&self.keys.held_back)
            .arg(expected.raw())
            .arg(sequence)
            .arg(i.version)
            .arg(self.seal.seal(sequence, i.encoded).as_ref())
            .arg(i.source)
            .arg(i.repo_sha256.as_deref().unwrap_or(""))
            .arg(i.releases.as_deref().unwrap_or(""))
            .arg(&self.keys.channel)
            .arg(i.accepted_ms)
            .arg(if force { "1" } else { "" });
        let (what, stored): (u8, String) = self.call(cmd.query_async(&mut conn)).await?;
        let stored = Stored::parse(Some(&stored));
        Ok(match (what, stored) {
            (1, Stored::At(n)) => Committed::At(n),
            (2, stored) => Committed::Unchanged(stored),
            (_, stored) => Committed::Conflict(stored),
        })
    }

    /// The stored sequence and the held-back version ("" : none).
    pub async fn heads(&self) -> Result<(Stored, String), Unavailable> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("HGET")
            .arg(&self.keys.current)
            .arg("sequence")
            .cmd("HGET")
            .arg(&self.keys.held_back)
            .arg("version");
        let (seq, held): (Option<String>, Option<String>) =
            self.call(pipe.query_async(&mut conn)).await?;
        Ok((Stored::parse(seq.as_deref()), held.unwrap_or_default()))
    }

    /// The shared record, read and checked: absent, one to serve, or one refused.
    pub async fn load(&self) -> Result<Loaded, Unavailable> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&self.keys.current).arg(&[
            "sequence",
            "signed",
            "source",
            "accepted_ms",
            "repo_sha256",
        ]);
        type Row = (
            Option<String>,
            Option<Vec<u8>>,
            Option<String>,
            Option<u64>,
            Option<String>,
        );
        let (seq, signed, source, accepted_ms, repo): Row =
            self.call(cmd.query_async(&mut conn)).await?;
        let head = Stored::parse(seq.as_deref());
        let (sequence, snapshot) = match self.check(&head, signed) {
            Ok(Some(checked)) => checked,
            Ok(None) => return Ok(Loaded::Absent),
            Err((reason, error)) => {
                return Ok(Loaded::Refused {
                    head,
                    reason,
                    error,
                })
            }
        };
        // The rest is not signed: labels for /status, and the `ferry.yaml` hash, whose only
        // use is whether the lease holder applies the repo's own file (under the hold-back
        // rule): nothing it names reaches an Envoy without a signature.
        Ok(Loaded::Record(Box::new(Record {
            sequence,
            snapshot,
            source: if source.as_deref() == Some("push") {
                "push"
            } else {
                "file"
            },
            accepted_ms: accepted_ms.unwrap_or(0),
            repo_sha256: repo.filter(|r| !r.is_empty()),
        })))
    }

    /// The record's sequence and snapshot if it is one to serve: a sequence in range and an
    /// envelope signed at it by one of the deployment's keys. None: no record.
    fn check(
        &self,
        head: &Stored,
        signed: Option<Vec<u8>>,
    ) -> Result<Option<(u64, v1::Snapshot)>, (&'static str, String)> {
        let sequence = match head {
            Stored::None => return Ok(None),
            Stored::At(n) => *n,
            Stored::OutOfRange(raw) => {
                return Err((
                    "sequence_out_of_range",
                    format!(
                        "the shared record's sequence '{raw}' is not one Ferry issues (1 to {})",
                        ferry_protos::signed::MAX_SEQUENCE
                    ),
                ))
            }
        };
        let Some(signed) = signed else {
            return Err((
                "unsigned",
                format!("the shared record at sequence {sequence} is not signed"),
            ));
        };
        let bytes = self.seal.open(&signed, sequence)?;
        let snapshot = v1::Snapshot::decode(bytes.as_slice()).map_err(|e| {
            (
                "undecodable",
                format!("the shared snapshot does not decode: {e}"),
            )
        })?;
        Ok(Some((sequence, snapshot)))
    }

    /// Whether `head` is the record last refused here (refused, counted and logged once).
    pub fn refused_already(&self, head: &Stored) -> bool {
        lock(&self.refused).as_ref().is_some_and(|(h, _)| h == head)
    }

    /// Records `head` as refused for `error`; false when it was already.
    pub fn mark_refused(&self, head: &Stored, error: &str) -> bool {
        let mut refused = lock(&self.refused);
        if refused.as_ref().is_some_and(|(h, _)| h == head) {
            return false;
        }
        *refused = Some((head.clone(), error.to_owned()));
        true
    }

    /// Records the held-back snapshot for every replica, signed (at sequence 0: it is not
    /// ordered, only replaced).
    pub async fn hold_back(&self, snap: &v1::Snapshot) -> Result<(), Unavailable> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("EVAL");
        // Replaced whole, so no field of an earlier writer's survives.
        cmd.arg("redis.call('DEL', KEYS[1]) return redis.call('HSET', KEYS[1], 'version', ARGV[1], 'signed', ARGV[2])")
            .arg(1)
            .arg(&self.keys.held_back)
            .arg(&snap.version)
            .arg(self.seal.seal(0, &snap.encode_to_vec()).as_ref());
        self.call(cmd.query_async::<()>(&mut conn)).await
    }

    /// The held-back snapshot, if any and signed by one of the deployment's keys; one that is
    /// not is refused (logged once per version) and taken as none.
    pub async fn held_back(&self) -> Result<Option<v1::Snapshot>, Unavailable> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&self.keys.held_back).arg(&["version", "signed"]);
        let (version, signed): (Option<String>, Option<Vec<u8>>) =
            self.call(cmd.query_async(&mut conn)).await?;
        let (Some(version), Some(signed)) = (version, signed) else {
            return Ok(None);
        };
        let opened = self.seal.open(&signed, 0).and_then(|b| {
            v1::Snapshot::decode(b.as_slice())
                .map_err(|e| ("undecodable", format!("the held-back snapshot: {e}")))
        });
        match opened {
            Ok(snap) => Ok(Some(snap)),
            Err((reason, error)) => {
                let mut last = lock(&self.refused_held);
                if last.as_deref() != Some(version.as_str()) {
                    tracing::error!(reason, %error, version, "a held-back record is refused");
                    *last = Some(version);
                }
                Ok(None)
            }
        }
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
#[path = "shared_state_tests.rs"]
mod tests;
