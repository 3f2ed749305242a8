//! A route's compiled `log:` (served-feature logging): one sampling rate per request outcome,
//! checked once with the snapshot, and the sampling decision on a hash of Envoy's request id.
//! The record itself is built in `log/record.rs`.

use ferry_protos::v1 as pb;

/// The request outcome a rate is chosen by, as `x-ferry-status` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServedStatus {
    Ok,
    Partial,
    Degraded,
}

impl ServedStatus {
    pub const ALL: [ServedStatus; 3] = [
        ServedStatus::Ok,
        ServedStatus::Partial,
        ServedStatus::Degraded,
    ];

    pub fn word(self) -> &'static str {
        match self {
            ServedStatus::Ok => "ok",
            ServedStatus::Partial => "partial",
            ServedStatus::Degraded => "degraded",
        }
    }
}

/// A route's compiled `log:`: one rate per status, each in 0..1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogPolicy {
    /// Indexed like [`ServedStatus::ALL`].
    rates: [f64; 3],
}

impl LogPolicy {
    /// Checks and compiles a route's `log` (the one rule `ferry apply` and the filter share):
    /// every rate a number in 0..1, status keys only `ok`, `partial`, `degraded`.
    pub fn from_proto(log: &pb::RouteLog) -> Result<LogPolicy, String> {
        let rate = |what: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(v)
            } else {
                Err(format!("log {what} must be a number in 0..1, not {v}"))
            }
        };
        let sample = rate("sample", log.sample)?;
        let mut rates = [sample; 3];
        let mut keys: Vec<&String> = log.statuses.keys().collect();
        keys.sort();
        for key in keys {
            let Some(i) = ServedStatus::ALL.iter().position(|s| s.word() == key) else {
                return Err(format!(
                    "log statuses: unknown status '{key}' (expected ok, partial or degraded)"
                ));
            };
            rates[i] = rate(&format!("statuses.{key}"), log.statuses[key])?;
        }
        Ok(LogPolicy { rates })
    }

    pub fn rate(&self, status: ServedStatus) -> f64 {
        self.rates[status as usize]
    }

    /// Whether a request with this id and outcome is logged. The same id always gets the same
    /// answer (the hash is fixed), and a rate of 1 logs every request, 0 none.
    pub fn picks(&self, request_id: &str, status: ServedStatus) -> bool {
        picked(request_hash(request_id), self.rate(status))
    }

    /// Whether any request could be logged (some rate above 0).
    pub fn is_on(&self) -> bool {
        self.rates.iter().any(|r| *r > 0.0)
    }
}

/// FNV-1a (64 bits) of the request id: stable across builds, hosts and versions (unlike std's
/// hasher), and a few nanoseconds for a UUID.
pub fn request_hash(request_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in request_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // FNV's low bits mix poorly for similar inputs: one round of a finaliser spreads them.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// Whether a hash falls under `rate`: its top 53 bits as a fraction of 1.
fn picked(hash: u64, rate: f64) -> bool {
    if rate >= 1.0 {
        return true;
    }
    ((hash >> 11) as f64) / ((1u64 << 53) as f64) < rate
}
