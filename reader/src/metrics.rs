//! Counters the reader keeps about itself, rendered as Prometheus text at `GET /metrics`.
//! Plain atomics: recording is a few relaxed increments on the hot path, no lock, no allocation.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use hyper::StatusCode;

/// What a request was for; a label on the request counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /v1/vectors`.
    Vectors,
    /// `GET /healthz`.
    Healthz,
    /// `GET /readyz`.
    Readyz,
    /// `GET /metrics`.
    Metrics,
    /// Anything else (404s, mostly).
    Other,
}

impl Route {
    const ALL: [Route; 5] = [
        Route::Vectors,
        Route::Healthz,
        Route::Readyz,
        Route::Metrics,
        Route::Other,
    ];

    fn label(self) -> &'static str {
        match self {
            Route::Vectors => "vectors",
            Route::Healthz => "healthz",
            Route::Readyz => "readyz",
            Route::Metrics => "metrics",
            Route::Other => "other",
        }
    }
}

/// Why a Redis call failed; a label on the Redis error counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisErrorKind {
    /// Over `--redis-timeout-ms`.
    Timeout,
    /// Transient: connection refused, dropped, loading, failover, ...
    Unavailable,
    /// Not transient: authentication, permissions, protocol surprises.
    Other,
}

impl RedisErrorKind {
    const ALL: [RedisErrorKind; 3] = [Self::Timeout, Self::Unavailable, Self::Other];

    fn label(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Unavailable => "unavailable",
            Self::Other => "other",
        }
    }
}

/// Statuses the reader answers with; anything else is counted as "other".
const STATUSES: [u16; 8] = [200, 400, 404, 405, 413, 500, 503, 504];

/// Upper bounds of the request duration histogram, in seconds: from a cache-hot loopback
/// round trip (~100 µs) to well past any sane `--redis-timeout-ms`.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// All of the reader's counters. One instance, shared by every connection.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests answered, by route and status slot (`STATUSES`, then "other").
    requests: [[AtomicU64; STATUSES.len() + 1]; Route::ALL.len()],
    /// Entity keys asked for in accepted `/v1/vectors` requests.
    keys_requested: AtomicU64,
    /// Of those, keys that had a stored vector.
    keys_found: AtomicU64,
    /// Redis calls that failed, by `RedisErrorKind`.
    redis_errors: [AtomicU64; RedisErrorKind::ALL.len()],
    /// `/v1/vectors` durations: count per bucket (not cumulative; the last one is +Inf).
    duration_buckets: [AtomicU64; BUCKETS.len() + 1],
    /// Sum of `/v1/vectors` durations, in nanoseconds.
    duration_sum_ns: AtomicU64,
}

impl Metrics {
    /// Counts one answered request; vectors requests also feed the duration histogram.
    pub fn request(&self, route: Route, status: StatusCode, elapsed: Duration) {
        let slot = STATUSES
            .iter()
            .position(|&s| s == status.as_u16())
            .unwrap_or(STATUSES.len());
        self.requests[route as usize][slot].fetch_add(1, Relaxed);
        if route == Route::Vectors {
            let secs = elapsed.as_secs_f64();
            let bucket = BUCKETS
                .iter()
                .position(|&b| secs <= b)
                .unwrap_or(BUCKETS.len());
            self.duration_buckets[bucket].fetch_add(1, Relaxed);
            let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
            self.duration_sum_ns.fetch_add(nanos, Relaxed);
        }
    }

    /// Counts the keys of one batch and how many were found.
    pub fn keys(&self, requested: usize, found: usize) {
        self.keys_requested.fetch_add(requested as u64, Relaxed);
        self.keys_found.fetch_add(found as u64, Relaxed);
    }

    /// Counts one failed Redis call.
    pub fn redis_error(&self, kind: RedisErrorKind) {
        self.redis_errors[kind as usize].fetch_add(1, Relaxed);
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self, redis_up: bool) -> String {
        let mut out = String::with_capacity(4096);
        // Writing to a String cannot fail; the results are ignored on purpose.
        out.push_str(
            "# HELP ferry_reader_requests_total HTTP requests answered, by route and status.\n",
        );
        out.push_str("# TYPE ferry_reader_requests_total counter\n");
        for route in Route::ALL {
            for (slot, counter) in self.requests[route as usize].iter().enumerate() {
                let n = counter.load(Relaxed);
                if n == 0 && !(route == Route::Vectors && slot == 0) {
                    continue;
                }
                let status = STATUSES
                    .get(slot)
                    .map_or_else(|| "other".to_string(), |s| s.to_string());
                let _ = writeln!(
                    out,
                    "ferry_reader_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                    route.label()
                );
            }
        }
        counter(
            &mut out,
            "ferry_reader_keys_requested_total",
            "Entity keys requested.",
            self.keys_requested.load(Relaxed),
        );
        counter(
            &mut out,
            "ferry_reader_keys_found_total",
            "Entity keys that had a stored vector.",
            self.keys_found.load(Relaxed),
        );

        out.push_str("# HELP ferry_reader_redis_errors_total Failed Redis calls, by kind.\n");
        out.push_str("# TYPE ferry_reader_redis_errors_total counter\n");
        for kind in RedisErrorKind::ALL {
            let _ = writeln!(
                out,
                "ferry_reader_redis_errors_total{{kind=\"{}\"}} {}",
                kind.label(),
                self.redis_errors[kind as usize].load(Relaxed)
            );
        }

        out.push_str("# HELP ferry_reader_redis_up 1 if the last Redis call succeeded, else 0.\n");
        out.push_str("# TYPE ferry_reader_redis_up gauge\n");
        let _ = writeln!(out, "ferry_reader_redis_up {}", u8::from(redis_up));

        out.push_str(
            "# HELP ferry_reader_request_duration_seconds Time to answer POST /v1/vectors.\n",
        );
        out.push_str("# TYPE ferry_reader_request_duration_seconds histogram\n");
        let mut cumulative = 0;
        for (i, bucket) in self.duration_buckets.iter().enumerate() {
            cumulative += bucket.load(Relaxed);
            let le = BUCKETS
                .get(i)
                .map_or_else(|| "+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(
                out,
                "ferry_reader_request_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let sum = self.duration_sum_ns.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "ferry_reader_request_duration_seconds_sum {sum}");
        let _ = writeln!(
            out,
            "ferry_reader_request_duration_seconds_count {cumulative}"
        );
        out
    }
}

fn counter(out: &mut String, name: &str, help: &str, value: u64) {
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauge_and_cumulative_histogram() {
        let m = Metrics::default();
        m.request(Route::Vectors, StatusCode::OK, Duration::from_micros(80));
        m.request(Route::Vectors, StatusCode::OK, Duration::from_millis(3));
        m.request(
            Route::Vectors,
            StatusCode::SERVICE_UNAVAILABLE,
            Duration::from_secs(2),
        );
        m.request(Route::Other, StatusCode::IM_A_TEAPOT, Duration::ZERO);
        m.keys(10, 7);
        m.redis_error(RedisErrorKind::Timeout);
        let text = m.render(true);
        for line in [
            "ferry_reader_requests_total{route=\"vectors\",status=\"200\"} 2",
            "ferry_reader_requests_total{route=\"vectors\",status=\"503\"} 1",
            "ferry_reader_requests_total{route=\"other\",status=\"other\"} 1",
            "ferry_reader_keys_requested_total 10",
            "ferry_reader_keys_found_total 7",
            "ferry_reader_redis_errors_total{kind=\"timeout\"} 1",
            "ferry_reader_redis_errors_total{kind=\"unavailable\"} 0",
            "ferry_reader_redis_up 1",
            "ferry_reader_request_duration_seconds_bucket{le=\"0.0001\"} 1",
            "ferry_reader_request_duration_seconds_bucket{le=\"0.005\"} 2",
            "ferry_reader_request_duration_seconds_bucket{le=\"1\"} 2",
            "ferry_reader_request_duration_seconds_bucket{le=\"+Inf\"} 3",
            "ferry_reader_request_duration_seconds_count 3",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(m.render(false).contains("ferry_reader_redis_up 0\n"));
    }
}
