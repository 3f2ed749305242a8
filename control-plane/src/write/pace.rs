//! The pace of writes' Redis work: at most `--max-write-keys-per-second` keys a second over
//! every write (both layouts), so that a write flood takes a bounded share of the Redis the
//! readers use, however many writes run and however large they are. Without it a flood keeps
//! Redis busy with `GET`s and compare-and-set scripts, and the readers' `MGET`s wait behind
//! them (issue #37, bench/README.md "Enrichment under a write flood").
//!
//! A theoretical-arrival-time pacer: each key takes the next slot, `1 / rate` after the one
//! before; a key whose slot is less than [`SLACK`] away goes at once (the timer's resolution is
//! a millisecond), so keys leave in bursts of at most `rate × SLACK` and the rate holds over
//! any longer span.
//!
//! A write is admitted with its number of keys ([`Pacer::admit`]): when the keys already
//! admitted and its own would take over [`MAX_BACKLOG`] at the rate, it is refused (429,
//! `Retry-After` the wait) unless nothing else is queued, so that an admitted write finishes
//! within Envoy's route timeout instead of queueing without end.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

/// Keys a second by default (`ferry serve --max-write-keys-per-second`): no bound. A pace low
/// enough to keep a flood off the readers' tail also caps pushes below Feast's own throughput
/// on the benchmark's machine (bench/README.md), so the operator chooses it.
pub const DEFAULT_KEYS_PER_SECOND: u32 = 0;

/// A key whose slot is this close goes at once.
const SLACK: Duration = Duration::from_millis(2);

/// The most Redis work, in time at the pace, that admitted writes may have queued: a write
/// asking beyond it is refused.
pub const MAX_BACKLOG: Duration = Duration::from_secs(10);

/// The shared pace of every write's keys.
#[derive(Debug)]
pub struct Pacer {
    interval: Duration,
    /// The next free slot.
    next: Mutex<Instant>,
    /// Keys of admitted writes not yet sent.
    queued: AtomicU64,
    /// Seconds writes waited for their slots (`ferry_write_paced_seconds_total`).
    waited: Counter<f64>,
}

/// An admitted write's keys: each [`Admitted::key`] waits for one slot; the keys it did not use
/// (a write that stopped at an error) leave the queue when it is dropped.
#[derive(Debug)]
pub struct Admitted {
    pacer: Arc<Pacer>,
    left: AtomicU64,
}

impl Admitted {
    /// Waits for the next key's slot.
    pub async fn key(&self) {
        if self
            .left
            .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            self.pacer.queued.fetch_sub(1, Relaxed);
        }
        self.pacer.key().await;
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.pacer.queued.fetch_sub(*self.left.get_mut(), Relaxed);
    }
}

impl Pacer {
    /// `keys_per_second` over every write; 0: no bound.
    pub fn new(keys_per_second: u32, waited: Counter<f64>) -> Option<Pacer> {
        (keys_per_second > 0).then(|| Pacer {
            interval: Duration::from_secs(1) / keys_per_second,
            next: Mutex::new(Instant::now()),
            queued: AtomicU64::new(0),
            waited,
        })
    }

    /// Admits a write of `keys` keys, or says how long the keys already queued take at the
    /// pace when those and its own would take over [`MAX_BACKLOG`] (a write arriving to an
    /// empty queue is always admitted, however large).
    pub fn admit(self: &Arc<Self>, keys: usize) -> Result<Admitted, Duration> {
        let queued = self.queued.load(Relaxed);
        let keys = keys as u64;
        if queued > 0 && self.at_pace(queued.saturating_add(keys)) > MAX_BACKLOG {
            return Err(self.at_pace(queued));
        }
        self.queued.fetch_add(keys, Relaxed);
        Ok(Admitted {
            pacer: self.clone(),
            left: AtomicU64::new(keys),
        })
    }

    /// How long the keys already admitted take at the pace, if that alone is over
    /// [`MAX_BACKLOG`]: any write would be refused, so its body need not be parsed.
    pub fn full(&self) -> Option<Duration> {
        let backlog = self.at_pace(self.queued.load(Relaxed));
        (backlog > MAX_BACKLOG).then_some(backlog)
    }

    /// How long `keys` keys take at the pace.
    fn at_pace(&self, keys: u64) -> Duration {
        self.interval
            .saturating_mul(u32::try_from(keys).unwrap_or(u32::MAX))
    }

    /// Waits for the next key's slot.
    async fn key(&self) {
        let now = Instant::now();
        let slot = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let slot = (*next).max(now);
            *next = slot + self.interval;
            slot
        };
        if slot > now + SLACK {
            tokio::time::sleep_until(slot).await;
            self.waited.inc_by((slot - now).as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn keys_leave_at_the_rate_after_a_burst_of_the_slack() {
        let waited = Counter::<f64>::default();
        let pacer = Arc::new(Pacer::new(1_000, waited.clone()).unwrap());
        let pacer = pacer.admit(1_000).unwrap();
        let start = Instant::now();
        // 1 ms a key: the first three slots (0, 1, 2 ms) are within the slack, no wait.
        for _ in 0..3 {
            pacer.key().await;
        }
        assert_eq!(Instant::now(), start);
        assert_eq!(waited.get(), 0.0);
        for _ in 0..997 {
            pacer.key().await;
        }
        // Key 1,000's slot is 999 ms after the first; it goes within the slack before it.
        let took = Instant::now() - start;
        assert!(
            took >= Duration::from_millis(997) && took <= Duration::from_millis(999),
            "{took:?}"
        );
        assert!(waited.get() > 0.9, "waited {}", waited.get());
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_writers_share_one_rate() {
        let pacer = Arc::new(Pacer::new(2_000, Counter::default()).unwrap());
        let start = Instant::now();
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let p = pacer.admit(500).unwrap();
            set.spawn(async move {
                for _ in 0..500 {
                    p.key().await;
                }
            });
        }
        while set.join_next().await.is_some() {}
        // 2,000 keys at 2,000 a second: the last slot at 999.5 ms.
        let took = Instant::now() - start;
        assert!(
            took >= Duration::from_millis(997) && took <= Duration::from_millis(1_000),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_past_the_backlog_is_refused_until_the_queue_drains() {
        // 100 keys a second: 10 s of backlog is 1,000 keys.
        let pacer = Arc::new(Pacer::new(100, Counter::default()).unwrap());
        assert_eq!(pacer.full(), None);
        let big = pacer.admit(5_000).expect("an empty queue admits any write");
        let refused = pacer.admit(1).expect_err("50 s of keys queued");
        assert_eq!(refused, Duration::from_secs(50));
        assert_eq!(pacer.full(), Some(Duration::from_secs(50)));
        // Dropped with its keys unsent (a write stopped at an error): the queue is empty.
        drop(big);
        let one = pacer.admit(900).expect("an empty queue again");
        let two = pacer
            .admit(100)
            .expect("9 s queued and 1 s of its own: the bound");
        assert!(pacer.admit(1).is_err(), "10 s queued");
        // Keys sent leave the queue: 150 of the first write's go.
        for _ in 0..150 {
            one.key().await;
        }
        assert!(pacer.admit(151).is_err(), "8.5 s queued, 1.51 s of its own");
        let three = pacer.admit(150).expect("8.5 s queued, 1.5 s of its own");
        drop((one, two, three));
        assert_eq!(pacer.queued.load(Relaxed), 0);
    }

    #[test]
    fn no_rate_is_no_pacer() {
        assert!(Pacer::new(0, Counter::default()).is_none());
    }
}
