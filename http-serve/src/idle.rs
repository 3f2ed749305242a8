//! When a connection is idle: no request in flight and none finished for a while. Requests are
//! counted by the service (a guard per request, so a cancelled one is counted out too), and the
//! connection's task asks [`Activity::idle_for`] when its timer fires.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// One connection's requests in flight and when the last one ended.
#[derive(Debug)]
pub(crate) struct Activity {
    /// Origin of `last_ms`.
    epoch: Instant,
    /// Requests whose handler runs (HTTP/2: streams).
    in_flight: AtomicUsize,
    /// When a request last ended (or the connection was accepted), in ms since `epoch`.
    last_ms: AtomicU64,
}

/// Counts a request out when dropped (answered or cancelled).
pub(crate) struct InFlight(Arc<Activity>);

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(0),
        })
    }

    /// Counts a request in, until the returned guard is dropped.
    pub(crate) fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        InFlight(self.clone())
    }

    /// How long the connection has carried no request; zero while one is in flight.
    pub(crate) fn idle_for(&self) -> Duration {
        if self.in_flight.load(Relaxed) > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_millis(self.last_ms.load(Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        // The time first: a timer that sees zero requests then also sees this end.
        self.0.last_ms.store(self.0.now_ms(), Relaxed);
        self.0.in_flight.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn idle_only_with_nothing_in_flight_and_counted_from_the_last_end() {
        let pause = Duration::from_millis(100);
        let activity = Activity::new();
        tokio::time::sleep(pause).await;
        assert!(activity.idle_for() >= pause);
        let request = activity.start();
        tokio::time::sleep(pause).await;
        assert_eq!(activity.idle_for(), Duration::ZERO);
        drop(request);
        let ended = activity.idle_for();
        assert!(
            ended < pause,
            "counted from the request's end, not the start: {ended:?}"
        );
        tokio::time::sleep(pause).await;
        assert!(activity.idle_for() >= pause);
    }
}
