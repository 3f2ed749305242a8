//! Parsing of one text cell (CSV) into a typed value, a timestamp or an entity key part. The
//! reasons returned here are completed with file, line and column by the caller.

use base64::Engine as _;
use ferry_protos::v1::{value::Kind, FloatList, Value};

use super::timestamp::EventTime;
use crate::types::{FeatureType, KeyType};

/// The null value: a `Value` with no kind set.
pub const NULL: Value = Value { kind: None };

/// Parses a feature cell. An empty cell is null.
pub fn parse_value(ty: FeatureType, raw: &str) -> Result<Value, String> {
    if raw.is_empty() {
        return Ok(NULL);
    }
    Ok(Value {
        kind: Some(parse_kind(ty, raw)?),
    })
}

/// Parses the text of a value of type `ty` (a cell, or a repo default spelled as text); the
/// one typed-value parser of the crate.
pub fn parse_kind(ty: FeatureType, raw: &str) -> Result<Kind, String> {
    Ok(match ty {
        FeatureType::Int32 => Kind::Int32Val(
            raw.trim()
                .parse()
                .map_err(|_| format!("invalid int32 '{raw}'"))?,
        ),
        FeatureType::Int64 => Kind::Int64Val(
            raw.trim()
                .parse()
                .map_err(|_| format!("invalid int64 '{raw}'"))?,
        ),
        FeatureType::Float32 => Kind::FloatVal(parse_f32(raw.trim())?),
        FeatureType::Float64 => Kind::DoubleVal(parse_f64(raw.trim())?),
        FeatureType::Bool => Kind::BoolVal(parse_bool(raw.trim())?),
        FeatureType::String => Kind::StringVal(raw.to_owned()),
        FeatureType::Bytes => Kind::BytesVal(
            base64::engine::general_purpose::STANDARD
                .decode(raw.trim())
                .map_err(|e| format!("invalid base64 '{}': {e}", shorten(raw)))?,
        ),
        FeatureType::Float32List => Kind::FloatListVal(FloatList {
            values: parse_f32_list(raw)?,
        }),
    })
}

fn parse_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        // NaN and infinities have no JSON spelling: the filter could not inject them.
        Ok(v) if v.is_finite() => Ok(v),
        Ok(_) => Err(format!("'{s}' is not a finite number")),
        Err(_) => Err(format!("invalid number '{}'", shorten(s))),
    }
}

fn parse_f32(s: &str) -> Result<f32, String> {
    let v = parse_f64(s)?;
    let f = v as f32;
    if f.is_finite() {
        Ok(f)
    } else {
        Err(format!("'{s}' is out of float32 range"))
    }
}

fn parse_bool(s: &str) -> Result<bool, String> {
    if s == "1" || s.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if s == "0" || s.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(format!("invalid bool '{s}' (expected true, false, 1 or 0)"))
    }
}

/// A JSON array of numbers, e.g. `[0.1, -2e-3]`.
fn parse_f32_list(raw: &str) -> Result<Vec<f32>, String> {
    let inner = raw
        .trim()
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or_else(|| {
            format!(
                "invalid float32_list '{}' (expected [n, ...])",
                shorten(raw)
            )
        })?;
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    inner
        .split(',')
        .map(|item| {
            parse_f32(item.trim())
                .map_err(|e| format!("invalid float32_list '{}': {e}", shorten(raw)))
        })
        .collect()
}

/// Parses an event timestamp cell: RFC 3339 (offsets and fractional seconds allowed), or an
/// integer epoch whose unit the source's [`TimestampRules`](super::TimestampRules) decide.
pub fn parse_timestamp(raw: &str) -> Result<EventTime, String> {
    let s = raw.trim();
    if s.is_empty() {
        return Err("empty timestamp".to_owned());
    }
    let digits = s.strip_prefix('-').unwrap_or(s);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse::<i64>()
            .map(EventTime::Epoch)
            .map_err(|_| format!("integer timestamp '{s}' out of range"));
    }
    parse_rfc3339_us(s).map(EventTime::Micros).ok_or_else(|| {
        format!(
            "invalid timestamp '{}' (expected RFC 3339 like 2026-11-21T10:00:00Z, or an integer epoch)",
            shorten(s)
        )
    })
}

fn parse_rfc3339_us(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(
            part.iter()
                .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0')),
        )
    };
    let sep = |at: usize, chars: &[u8]| b.get(at).is_some_and(|c| chars.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    // Second 60 (a leap second) is accepted as RFC 3339 allows it, and counts as :59.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = 19;
    let mut micros = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 6 {
                micros = micros * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n..6 {
            micros *= 10;
        }
    }
    let offset_secs = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let off = oh * 3600 + om * 60;
            if *sign == b'-' {
                -off
            } else {
                off
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second.min(59) - offset_secs;
    Some(secs * 1_000_000 + micros)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Appends the canonical spelling of one entity key part to `out`: strings as they are (no
/// control characters, which would make composite keys ambiguous), int64 in decimal.
pub fn push_key_part(ty: KeyType, raw: &str, out: &mut String) -> Result<(), String> {
    match ty {
        KeyType::String => {
            if raw.is_empty() {
                return Err("empty entity key".to_owned());
            }
            if raw.chars().any(char::is_control) {
                return Err(format!("entity key {raw:?} contains a control character"));
            }
            out.push_str(raw);
        }
        KeyType::Int64 => {
            let v: i64 = raw
                .trim()
                .parse()
                .map_err(|_| format!("invalid int64 entity key '{}'", shorten(raw)))?;
            use std::fmt::Write as _;
            let _ = write!(out, "{v}");
        }
    }
    Ok(())
}

/// Keeps error messages readable when a cell holds something huge.
fn shorten(s: &str) -> String {
    const MAX: usize = 60;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(ty: FeatureType, raw: &str) -> Option<Kind> {
        parse_value(ty, raw).unwrap().kind
    }

    #[test]
    fn every_type_parses_its_cells() {
        assert_eq!(kind(FeatureType::Int32, "-42"), Some(Kind::Int32Val(-42)));
        assert_eq!(
            kind(FeatureType::Int64, "9000000000"),
            Some(Kind::Int64Val(9_000_000_000))
        );
        assert_eq!(kind(FeatureType::Float32, "0.5"), Some(Kind::FloatVal(0.5)));
        assert_eq!(
            kind(FeatureType::Float64, "1e-3"),
            Some(Kind::DoubleVal(0.001))
        );
        assert_eq!(kind(FeatureType::Bool, "true"), Some(Kind::BoolVal(true)));
        assert_eq!(kind(FeatureType::Bool, "0"), Some(Kind::BoolVal(false)));
        assert_eq!(kind(FeatureType::Bool, "FALSE"), Some(Kind::BoolVal(false)));
        assert_eq!(
            kind(FeatureType::String, " gold "),
            Some(Kind::StringVal(" gold ".into()))
        );
        assert_eq!(
            kind(FeatureType::Bytes, "aGk="),
            Some(Kind::BytesVal(b"hi".to_vec()))
        );
        assert_eq!(
            kind(FeatureType::Float32List, "[0.25, -1, 2e1]"),
            Some(Kind::FloatListVal(FloatList {
                values: vec![0.25, -1.0, 20.0]
            }))
        );
        assert_eq!(
            kind(FeatureType::Float32List, "[]"),
            Some(Kind::FloatListVal(FloatList { values: vec![] }))
        );
    }

    #[test]
    fn empty_cells_are_null_for_every_type() {
        for t in FeatureType::ALL {
            assert_eq!(parse_value(t, "").unwrap(), NULL, "{t:?}");
        }
    }

    #[test]
    fn bad_cells_say_why() {
        let err = |t, raw| parse_value(t, raw).unwrap_err();
        assert_eq!(
            err(FeatureType::Int32, "3000000000"),
            "invalid int32 '3000000000'"
        );
        assert_eq!(err(FeatureType::Int64, "1.5"), "invalid int64 '1.5'");
        assert_eq!(err(FeatureType::Float32, "abc"), "invalid number 'abc'");
        assert_eq!(
            err(FeatureType::Float64, "NaN"),
            "'NaN' is not a finite number"
        );
        assert_eq!(
            err(FeatureType::Float32, "1e39"),
            "'1e39' is out of float32 range"
        );
        assert_eq!(
            err(FeatureType::Bool, "yes"),
            "invalid bool 'yes' (expected true, false, 1 or 0)"
        );
        assert!(err(FeatureType::Bytes, "not base64!").starts_with("invalid base64 'not base64!'"));
        assert_eq!(
            err(FeatureType::Float32List, "0.1, 0.2"),
            "invalid float32_list '0.1, 0.2' (expected [n, ...])"
        );
        assert_eq!(
            err(FeatureType::Float32List, "[0.1,,0.2]"),
            "invalid float32_list '[0.1,,0.2]': invalid number ''"
        );
    }

    #[test]
    fn timestamps_in_rfc3339_and_integer_epochs() {
        let t = 1_795_255_200_000_000; // 2026-11-21T10:00:00Z
        let us = |raw| match parse_timestamp(raw) {
            Ok(EventTime::Micros(us)) => us,
            other => panic!("{raw}: {other:?}"),
        };
        assert_eq!(us("2026-11-21T10:00:00Z"), t);
        assert_eq!(us("2026-11-21T12:30:00+02:30"), t);
        assert_eq!(us("2026-11-21T05:00:00-05:00"), t);
        assert_eq!(us("2026-11-21 10:00:00.25Z"), t + 250_000);
        assert_eq!(us("2026-11-21T10:00:00.123456789Z"), t + 123_456);
        assert_eq!(us("1970-01-01T00:00:00Z"), 0);
        assert_eq!(us("2024-02-29T00:00:00Z"), 1_709_164_800_000_000);
        // Integers keep their value: the unit is the source's to declare or detect.
        assert_eq!(
            parse_timestamp("1795255200"),
            Ok(EventTime::Epoch(1_795_255_200))
        );
        assert_eq!(
            parse_timestamp(" 1795255200000 "),
            Ok(EventTime::Epoch(1_795_255_200_000))
        );
        assert_eq!(parse_timestamp("-1"), Ok(EventTime::Epoch(-1)));
        assert_eq!(
            parse_timestamp("99999999999999999999"),
            Err("integer timestamp '99999999999999999999' out of range".to_owned())
        );
    }

    #[test]
    fn bad_timestamps_are_refused() {
        for bad in [
            "2026-11-21",
            "2026-11-21T10:00:00",
            "2026-02-30T10:00:00Z",
            "2026-11-21T24:00:00Z",
            "2026-11-21T10:00:00.Z",
            "2026-11-21T10:00:00+0200",
            "21/11/2026",
            "1.5",
            "",
        ] {
            assert!(parse_timestamp(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn key_parts_are_canonical() {
        let mut out = String::new();
        push_key_part(KeyType::Int64, "007", &mut out).unwrap();
        push_key_part(KeyType::String, "u1", &mut out).unwrap();
        assert_eq!(out, "7u1");
        assert!(push_key_part(KeyType::String, "", &mut out).is_err());
        assert!(push_key_part(KeyType::String, "a\u{1f}b", &mut out).is_err());
        assert!(push_key_part(KeyType::Int64, "x", &mut out).is_err());
    }
}
