//! Event timestamps: which unit an integer epoch counts in, and which times are believable.
//!
//! A millisecond epoch of 2026 read as seconds lands in the year ~58,900, never stale; seconds
//! read as milliseconds land in January 1970. Both are silent data bugs, so:
//! - a source may declare its unit (`timestamp_unit: s | ms | us | ns` in ferry.yaml);
//! - an undeclared integer epoch is read in the one unit that puts it between 2000-01-01 and
//!   now: the four windows (s ~9.5e8..1.8e9, ms ~9.5e11..1.8e12, us ~9.5e14..1.8e15, ns
//!   ~9.5e17..1.8e18) are ~500x apart, so at most one fits, and a value none fits is refused
//!   rather than guessed;
//! - an integer epoch, declared or detected, must land in that window (a wrong declared unit
//!   is caught the same way), and no timestamp of any kind may be in the future by more than
//!   [`FUTURE_SKEW_US`].
//!
//! Timestamps whose unit is part of their type (RFC 3339 text, Parquet TIMESTAMP/DATE columns)
//! are taken as they are, with only the future check.

use std::time::{SystemTime, UNIX_EPOCH};

/// 2000-01-01T00:00:00Z: an integer epoch before it is taken as a unit mistake.
pub const EARLIEST_EPOCH_US: i64 = 946_684_800_000_000;

/// How far past now an event time may be (clocks of the writer and of `ferry materialize`
/// disagree a little): 5 minutes.
pub const FUTURE_SKEW_US: i64 = 5 * 60 * 1_000_000;

/// The unit of an integer epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeUnit {
    Seconds,
    Millis,
    Micros,
    Nanos,
}

impl TimeUnit {
    pub const ALL: [TimeUnit; 4] = [
        TimeUnit::Seconds,
        TimeUnit::Millis,
        TimeUnit::Micros,
        TimeUnit::Nanos,
    ];

    /// The ferry.yaml spelling: `s`, `ms`, `us`, `ns`.
    pub fn parse(word: &str) -> Option<TimeUnit> {
        TimeUnit::ALL.into_iter().find(|u| u.as_str() == word)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "s",
            TimeUnit::Millis => "ms",
            TimeUnit::Micros => "us",
            TimeUnit::Nanos => "ns",
        }
    }

    fn name(self) -> &'static str {
        match self {
            TimeUnit::Seconds => "seconds",
            TimeUnit::Millis => "milliseconds",
            TimeUnit::Micros => "microseconds",
            TimeUnit::Nanos => "nanoseconds",
        }
    }

    /// `value` in this unit as microseconds, if it fits in an i64.
    fn to_micros(self, value: i64) -> Option<i64> {
        match self {
            TimeUnit::Seconds => value.checked_mul(1_000_000),
            TimeUnit::Millis => value.checked_mul(1_000),
            TimeUnit::Micros => Some(value),
            TimeUnit::Nanos => Some(value.div_euclid(1_000)),
        }
    }
}

/// An event time as read from a cell, before the unit rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventTime {
    /// A bare integer: its unit is declared or detected.
    Epoch(i64),
    /// Microseconds of a value that carried its unit (RFC 3339, a Parquet timestamp type).
    Micros(i64),
}

/// The rules for one source: its declared unit, if any, and the time "now" is.
#[derive(Clone, Copy, Debug)]
pub struct TimestampRules {
    pub declared: Option<TimeUnit>,
    pub now_us: i64,
}

impl TimestampRules {
    /// The rules at the current time.
    pub fn now(declared: Option<TimeUnit>) -> TimestampRules {
        let now_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
        TimestampRules { declared, now_us }
    }

    fn latest_us(&self) -> i64 {
        self.now_us.saturating_add(FUTURE_SKEW_US)
    }

    /// Microseconds since the epoch, or why the time cannot be right.
    pub fn resolve(&self, time: EventTime) -> Result<i64, String> {
        match time {
            EventTime::Micros(us) => self.not_future(us, &format_us(us)),
            EventTime::Epoch(v) => match self.declared {
                Some(unit) => self.declared_epoch(v, unit),
                None => self.detected_epoch(v),
            },
        }
    }

    fn not_future(&self, us: i64, shown: &str) -> Result<i64, String> {
        if us > self.latest_us() {
            return Err(format!(
                "timestamp {shown} is in the future (now is {}; at most 5 minutes ahead is \
                 accepted)",
                format_us(self.now_us)
            ));
        }
        Ok(us)
    }

    fn declared_epoch(&self, v: i64, unit: TimeUnit) -> Result<i64, String> {
        let plausible = |us: i64| (EARLIEST_EPOCH_US..=self.latest_us()).contains(&us);
        match unit.to_micros(v) {
            Some(us) if plausible(us) => Ok(us),
            read => {
                let when = read.map_or_else(|| "out of range".to_owned(), format_us);
                let hint = TimeUnit::ALL
                    .into_iter()
                    .find_map(|u| u.to_micros(v).filter(|&us| plausible(us)).map(|us| (u, us)))
                    .map_or(String::new(), |(u, us)| {
                        format!(" In {} it would be {}.", u.name(), format_us(us))
                    });
                Err(format!(
                    "integer timestamp {v} in {} (timestamp_unit: {}) is {when}, outside \
                     2000-01-01 .. now + 5 min: is the unit right?{hint}",
                    unit.name(),
                    unit.as_str()
                ))
            }
        }
    }

    fn detected_epoch(&self, v: i64) -> Result<i64, String> {
        let window = EARLIEST_EPOCH_US..=self.latest_us();
        TimeUnit::ALL
            .into_iter()
            .find_map(|u| u.to_micros(v).filter(|us| window.contains(us)))
            .ok_or_else(|| {
                format!(
                    "integer timestamp {v} is no epoch between 2000-01-01 and now + 5 min in \
                     seconds, milliseconds, microseconds or nanoseconds; write RFC 3339 or \
                     declare the source's timestamp_unit (s, ms, us, ns)"
                )
            })
    }
}

/// RFC 3339 (UTC, microseconds when there are any) of a time in microseconds, for messages.
/// Years past 9999 are printed as they are, so a unit mistake shows as what it is.
pub fn format_us(us: i64) -> String {
    ferry_core::civil::rfc3339(us, false)
}

#[cfg(test)]
#[path = "timestamp_tests.rs"]
mod tests;
