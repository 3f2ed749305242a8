use super::*;

/// 2026-11-21T10:00:00Z.
const NOW_S: i64 = 1_795_255_200;
const NOW_US: i64 = NOW_S * 1_000_000;

fn rules(declared: Option<TimeUnit>) -> TimestampRules {
    TimestampRules {
        declared,
        now_us: NOW_US,
    }
}

fn epoch(declared: Option<TimeUnit>, v: i64) -> Result<i64, String> {
    rules(declared).resolve(EventTime::Epoch(v))
}

#[test]
fn each_declared_unit_is_honoured() {
    let an_hour_ago_s = NOW_S - 3600;
    let want = an_hour_ago_s * 1_000_000;
    assert_eq!(epoch(Some(TimeUnit::Seconds), an_hour_ago_s), Ok(want));
    assert_eq!(
        epoch(Some(TimeUnit::Millis), an_hour_ago_s * 1000),
        Ok(want)
    );
    assert_eq!(epoch(Some(TimeUnit::Micros), want), Ok(want));
    assert_eq!(epoch(Some(TimeUnit::Nanos), want * 1000 + 999), Ok(want));
    assert_eq!(
        epoch(Some(TimeUnit::Millis), an_hour_ago_s * 1000 + 250),
        Ok(want + 250_000)
    );
    for u in TimeUnit::ALL {
        assert_eq!(TimeUnit::parse(u.as_str()), Some(u));
    }
    assert_eq!(TimeUnit::parse("sec"), None);
    assert_eq!(TimeUnit::parse("MS"), None);
}

#[test]
fn undeclared_epochs_are_detected_by_magnitude() {
    let t = NOW_S - 86_400;
    let want = t * 1_000_000;
    assert_eq!(epoch(None, t), Ok(want));
    assert_eq!(epoch(None, t * 1000), Ok(want));
    assert_eq!(epoch(None, t * 1_000_000), Ok(want));
    assert_eq!(epoch(None, t * 1_000_000_000), Ok(want));
    // The window's edges: 2000-01-01 in each unit, and now + 5 minutes.
    assert_eq!(epoch(None, 946_684_800), Ok(EARLIEST_EPOCH_US));
    assert_eq!(epoch(None, 946_684_800_000), Ok(EARLIEST_EPOCH_US));
    assert_eq!(epoch(None, NOW_S + 300), Ok(NOW_US + FUTURE_SKEW_US));
    assert!(epoch(None, NOW_S + 301).is_err());
}

#[test]
fn implausible_undeclared_epochs_are_refused_not_guessed() {
    let err = epoch(None, 100).unwrap_err();
    assert_eq!(
        err,
        "integer timestamp 100 is no epoch between 2000-01-01 and now + 5 min in seconds, \
         milliseconds, microseconds or nanoseconds; write RFC 3339 or declare the source's \
         timestamp_unit (s, ms, us, ns)"
    );
    // Between the windows (1999 in ms, year ~5000 in s), negative, and far in the future.
    for v in [
        915_148_800_000,
        100_000_000_000,
        -1,
        NOW_S * 1000 + 3_600_000,
        i64::MAX,
    ] {
        assert!(epoch(None, v).is_err(), "{v}");
    }
}

#[test]
fn a_wrong_declared_unit_is_refused_with_the_likely_one() {
    // Milliseconds declared as seconds: the year ~58,800 bug.
    let ms = (NOW_S - 3600) * 1000;
    assert_eq!(
        epoch(Some(TimeUnit::Seconds), ms).unwrap_err(),
        format!(
            "integer timestamp {ms} in seconds (timestamp_unit: s) is 58859-04-05T00:00:00Z, \
             outside 2000-01-01 .. now + 5 min: is the unit right? In milliseconds it would be \
             2026-11-21T09:00:00Z."
        )
    );
    let s = NOW_S - 3600;
    assert_eq!(
        epoch(Some(TimeUnit::Millis), s).unwrap_err(),
        format!(
            "integer timestamp {s} in milliseconds (timestamp_unit: ms) is \
             1970-01-21T18:40:51.600000Z, outside 2000-01-01 .. now + 5 min: is the unit right? \
             In seconds it would be 2026-11-21T09:00:00Z."
        )
    );
    // Plausible in no unit: no hint.
    assert!(epoch(Some(TimeUnit::Seconds), 5)
        .unwrap_err()
        .ends_with("is the unit right?"));
    // Out of the i64 range of microseconds altogether.
    assert!(epoch(Some(TimeUnit::Seconds), i64::MAX)
        .unwrap_err()
        .contains(" is out of range, outside"));
    // Seconds declared, year 2286: in range of i64 but in the future.
    assert!(epoch(Some(TimeUnit::Seconds), 10_000_000_000)
        .unwrap_err()
        .contains("is 2286-11-20T17:46:40Z, outside"));
}

#[test]
fn typed_timestamps_keep_their_unit_but_not_a_future() {
    let r = rules(None);
    // Before 2000 is fine when the unit is part of the value (an RFC 3339 string, a Parquet type).
    assert_eq!(r.resolve(EventTime::Micros(0)), Ok(0));
    assert_eq!(r.resolve(EventTime::Micros(NOW_US)), Ok(NOW_US));
    assert_eq!(
        r.resolve(EventTime::Micros(NOW_US + 3_600_000_000))
            .unwrap_err(),
        "timestamp 2026-11-21T11:00:00Z is in the future (now is 2026-11-21T10:00:00Z; at most 5 \
         minutes ahead is accepted)"
    );
}

#[test]
fn times_are_shown_in_rfc3339() {
    assert_eq!(format_us(0), "1970-01-01T00:00:00Z");
    assert_eq!(format_us(NOW_US + 1), "2026-11-21T10:00:00.000001Z");
    assert_eq!(format_us(-1_000_000), "1969-12-31T23:59:59Z");
    assert_eq!(format_us(1_709_164_800_000_000), "2024-02-29T00:00:00Z");
    assert_eq!(format_us(253_402_300_800_000_000), "10000-01-01T00:00:00Z");
}
