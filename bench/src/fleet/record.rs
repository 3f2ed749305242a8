//! What every simulated Envoy saw, with times relative to the run's start: connections, each
//! version received, ACKed or NACKed. The run reads it to wait for convergence and to compute
//! its figures.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One simulated Envoy's history.
#[derive(Clone, Debug, Default)]
pub struct SimRecord {
    /// Successful stream opens (1 + reconnects).
    pub connects: u32,
    /// When its first stream opened.
    pub first_connected: Option<Duration>,
    /// Every response received: (version, when).
    pub received: Vec<(String, Duration)>,
    /// Every ACK sent: (version, when).
    pub acks: Vec<(String, Duration)>,
    /// Every NACK sent: (version refused, when).
    pub nacks: Vec<(String, Duration)>,
    /// Connection or stream failures (each followed by a reconnect after a back-off).
    pub failures: u32,
    pub last_error: Option<String>,
}

impl SimRecord {
    /// The version it ACKed last.
    pub fn acked(&self) -> Option<&str> {
        self.acks.last().map(|(v, _)| v.as_str())
    }

    /// When it ACKed `version` first.
    pub fn acked_at(&self, version: &str) -> Option<Duration> {
        self.acks
            .iter()
            .find(|(v, _)| v == version)
            .map(|(_, t)| *t)
    }
}

/// Every simulated Envoy's record, shared by their tasks.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    sims: Arc<Mutex<Vec<SimRecord>>>,
}

impl Recorder {
    pub fn new(n: usize) -> Recorder {
        Recorder {
            start: Instant::now(),
            sims: Arc::new(Mutex::new(vec![SimRecord::default(); n])),
        }
    }

    /// Time since the run started.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    pub fn lock(&self) -> MutexGuard<'_, Vec<SimRecord>> {
        self.sims.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes sim `i`'s record.
    pub fn with(&self, i: usize, f: impl FnOnce(&mut SimRecord, Duration)) {
        let now = self.now();
        if let Some(r) = self.lock().get_mut(i) {
            f(r, now);
        }
    }

    /// Waits until `done` holds for the records, checking every 2 ms; false on timeout.
    pub async fn wait(&self, timeout: Duration, done: impl Fn(&[SimRecord]) -> bool) -> bool {
        let until = Instant::now() + timeout;
        loop {
            if done(&self.lock()) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// The `q` quantile (0..=1) of `values`, sorted in place; None when empty.
pub fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}
