//! Counters the reader keeps about itself, rendered as OpenMetrics text at `GET /metrics` by
//! `prometheus-client`. Recording stays cheap on the hot path: labels are `&'static str` and
//! small enums, so a `Family` lookup hashes them under a read lock and allocates nothing once a
//! label set has been seen; counters are atomics; the histogram takes one short lock.

use std::time::Duration;

use hyper::StatusCode;
use prometheus_client::encoding::{text, EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The `Content-Type` of what [`Metrics::render`] returns.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A label enum's values, each spelled as the word dashboards already use ("vectors"); the
/// derive of `EncodeLabelValue` would spell the variant names ("Vectors").
macro_rules! label_values {
    ($kind:ident { $($variant:ident => $label:literal),+ $(,)? }) => {
        impl $kind {
            fn label(self) -> &'static str {
                match self {
                    $(Self::$variant => $label),+
                }
            }
        }

        impl EncodeLabelValue for $kind {
            fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
                EncodeLabelValue::encode(&self.label(), encoder)
            }
        }
    };
}

/// What a request was for; a label on the request counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

label_values!(Route {
    Vectors => "vectors",
    Healthz => "healthz",
    Readyz => "readyz",
    Metrics => "metrics",
    Other => "other",
});

/// Why a Redis call failed; a label on the Redis error counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
}

label_values!(RedisErrorKind {
    Timeout => "timeout",
    Unavailable => "unavailable",
    Other => "other",
});

/// Labels of `ferry_reader_requests_total`, in the order they are written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    route: Route,
    status: &'static str,
}

/// Labels of `ferry_reader_redis_errors_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RedisErrorLabels {
    kind: RedisErrorKind,
}

/// The status label: the statuses the reader answers with, anything else "other". A fixed set,
/// so the label is a `&'static str` and the series count stays bounded.
fn status_label(status: StatusCode) -> &'static str {
    match status.as_u16() {
        200 => "200",
        400 => "400",
        404 => "404",
        405 => "405",
        413 => "413",
        500 => "500",
        503 => "503",
        504 => "504",
        _ => "other",
    }
}

/// Upper bounds of the request duration histogram, in seconds: from a cache-hot loopback
/// round trip (~100 µs) to well past any sane `--redis-timeout-ms`.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// All of the reader's metrics. One instance, shared by every connection.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Requests answered, by route and status.
    requests: Family<RequestLabels, Counter>,
    /// Entity keys asked for in accepted `/v1/vectors` requests.
    keys_requested: Counter,
    /// Of those, keys that had a stored vector.
    keys_found: Counter,
    /// Feast precomputed vectors stored under another schema: refused, answered as not found.
    schema_refused: Counter,
    /// Redis calls that failed, by `RedisErrorKind`.
    redis_errors: Family<RedisErrorLabels, Counter>,
    /// Set from the store's health just before each render.
    redis_up: Gauge,
    /// `/v1/vectors` durations.
    duration: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        let requests = Family::<RequestLabels, Counter>::default();
        // Present from the start (at 0), so a rate over the successful lookups has a series
        // before the first one; other label sets appear when first counted.
        drop(requests.get_or_create(&RequestLabels {
            route: Route::Vectors,
            status: "200",
        }));
        let redis_errors = Family::<RedisErrorLabels, Counter>::default();
        for kind in RedisErrorKind::ALL {
            drop(redis_errors.get_or_create(&RedisErrorLabels { kind }));
        }
        let metrics = Metrics {
            registry: Registry::default(),
            requests,
            keys_requested: Counter::default(),
            keys_found: Counter::default(),
            schema_refused: Counter::default(),
            redis_errors,
            redis_up: Gauge::default(),
            duration: Histogram::new(BUCKETS),
        };
        metrics.registered()
    }
}

impl Metrics {
    /// Registers every metric under its exposed name. Counters are named without `_total`:
    /// the encoder appends it.
    fn registered(mut self) -> Self {
        let r = &mut self.registry;
        r.register(
            "ferry_reader_requests",
            "HTTP requests answered, by route and status",
            self.requests.clone(),
        );
        r.register(
            "ferry_reader_keys_requested",
            "Entity keys requested",
            self.keys_requested.clone(),
        );
        r.register(
            "ferry_reader_keys_found",
            "Entity keys that had a stored vector",
            self.keys_found.clone(),
        );
        r.register(
            "ferry_reader_fingerprint_mismatches",
            "Stored vectors refused because their schema is not the service's (Feast \
             precomputed vectors under other feature names), answered as not found",
            self.schema_refused.clone(),
        );
        r.register(
            "ferry_reader_redis_errors",
            "Failed Redis calls, by kind",
            self.redis_errors.clone(),
        );
        r.register(
            "ferry_reader_redis_up",
            "1 if the last Redis call succeeded, else 0",
            self.redis_up.clone(),
        );
        r.register_with_unit(
            "ferry_reader_request_duration",
            "Time to answer POST /v1/vectors",
            Unit::Seconds,
            self.duration.clone(),
        );
        self
    }

    /// Counts one answered request; vectors requests also feed the duration histogram.
    pub fn request(&self, route: Route, status: StatusCode, elapsed: Duration) {
        let labels = RequestLabels {
            route,
            status: status_label(status),
        };
        self.requests.get_or_create(&labels).inc();
        if route == Route::Vectors {
            self.duration.observe(elapsed.as_secs_f64());
        }
    }

    /// Counts the keys of one batch and how many were found.
    pub fn keys(&self, requested: usize, found: usize) {
        self.keys_requested.inc_by(requested as u64);
        self.keys_found.inc_by(found as u64);
    }

    /// Counts Feast precomputed vectors refused for their schema.
    /// Logged on the first and then once per thousand, not per request.
    pub fn schema_refused(&self, vectors: usize) {
        let n = vectors as u64;
        let before = self.schema_refused.inc_by(n);
        if before != 0 && (before + n) / 1000 == before / 1000 {
            return;
        }
        tracing::warn!(
            total = before + n,
            "fingerprint_mismatch: Feast precomputed vectors hold other feature names than \
             their service (served as not found; run `feast materialize` for the new schema)"
        );
    }

    /// Counts one failed Redis call.
    pub fn redis_error(&self, kind: RedisErrorKind) {
        self.redis_errors
            .get_or_create(&RedisErrorLabels { kind })
            .inc();
    }

    /// The OpenMetrics text exposition (ends with `# EOF`), served as [`CONTENT_TYPE`].
    pub fn render(&self, redis_up: bool) -> String {
        self.redis_up.set(i64::from(redis_up));
        let mut out = String::with_capacity(4096);
        // Writing to a String cannot fail; an error here would be the encoder's own bug, and
        // what was written so far is still the best answer.
        if let Err(e) = text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "encoding /metrics failed");
        }
        out
    }
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
            "ferry_reader_request_duration_seconds_bucket{le=\"1.0\"} 2",
            "ferry_reader_request_duration_seconds_bucket{le=\"+Inf\"} 3",
            "ferry_reader_request_duration_seconds_count 3",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        // OpenMetrics: the family is named without `_total`, and the text ends with `# EOF`.
        assert!(
            text.contains("# TYPE ferry_reader_requests counter\n"),
            "{text}"
        );
        assert!(text.contains("# UNIT ferry_reader_request_duration_seconds seconds\n"));
        assert!(text.ends_with("\n# EOF\n"), "{text}");
        assert!(m.render(false).contains("\nferry_reader_redis_up 0\n"));
    }
}
