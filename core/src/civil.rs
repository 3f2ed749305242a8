//! Calendar dates of day counts, for the RFC 3339 texts Ferry writes (Feast's answers in
//! `feast_rest`, the control plane's messages).

/// RFC 3339 in UTC of `us` (µs since the epoch): no fraction for a whole second, else six
/// digits, or three when `millis` and the fraction is whole milliseconds (protobuf's JSON of a
/// Timestamp). Years past 9999 are printed as they are.
pub fn rfc3339(us: i64, millis: bool) -> String {
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    let (y, m, d) = from_days(days);
    let fraction = match micros {
        0 => String::new(),
        m if millis && m % 1000 == 0 => format!(".{:03}", m / 1000),
        m => format!(".{m:06}"),
    };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}{fraction}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm).
pub fn from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}
