//! Scalars of `ferry.yaml` that need more than serde: TTLs with units and typed defaults.

use ferry_protos::v1::Value;
use serde_norway::Value as Yaml;

use crate::sources::cell::parse_kind;
use crate::types::FeatureType;

/// A view's `ttl:` value → seconds.
pub fn parse_ttl(v: &Yaml) -> Result<i64, String> {
    match v {
        Yaml::String(s) => parse_duration(s),
        Yaml::Number(n) => parse_duration(&n.to_string()),
        _ => Err("ttl must be a number with a unit, e.g. 30d".to_owned()),
    }
}

/// `45s`, `90m`, `12h`, `30d` → seconds (positive).
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let bad = || format!("ttl '{text}': expected a number with unit s, m, h or d (e.g. 30d)");
    let t = text.trim();
    let unit = t.chars().last().ok_or_else(bad)?;
    let mult: i64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(bad()),
    };
    let n: i64 = t[..t.len() - 1].parse().map_err(|_| bad())?;
    if n <= 0 {
        return Err(format!(
            "ttl '{text}' must be positive (leave ttl out for never stale)"
        ));
    }
    n.checked_mul(mult)
        .ok_or_else(|| format!("ttl '{text}' is too large"))
}

/// Spells seconds back in the largest unit that divides them.
pub fn format_ttl(seconds: i64) -> String {
    match seconds {
        0 => "never".to_owned(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn describe(v: &Yaml) -> String {
    match v {
        Yaml::String(s) => format!("'{s}'"),
        other => serde_norway::to_string(other)
            .map(|s| s.trim_end().to_owned())
            .unwrap_or_else(|_| "?".to_owned()),
    }
}

/// Converts a YAML default into a typed value, or says why it does not fit the type. The YAML
/// node must be of the type's kind (a number for numbers, a bool for bool...); its text is then
/// parsed as a source cell is.
pub fn default_value(ty: FeatureType, v: &Yaml) -> Result<Value, String> {
    let wrong = || format!("default {} is not a valid {}", describe(v), ty.as_str());
    let text = match (ty, v) {
        (
            FeatureType::Int32 | FeatureType::Int64 | FeatureType::Float32 | FeatureType::Float64,
            Yaml::Number(n),
        ) => n.to_string(),
        (FeatureType::Bool, Yaml::Bool(b)) => b.to_string(),
        (FeatureType::String | FeatureType::Bytes, Yaml::String(s)) => s.clone(),
        (FeatureType::Float32List, Yaml::Sequence(items)) => {
            let numbers = items
                .iter()
                .map(|i| match i {
                    Yaml::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .collect::<Option<Vec<String>>>()
                .ok_or_else(wrong)?;
            format!("[{}]", numbers.join(", "))
        }
        _ => return Err(wrong()),
    };
    let kind = parse_kind(ty, &text).map_err(|_| match ty {
        FeatureType::Bytes => format!("default {} is not valid base64", describe(v)),
        _ => wrong(),
    })?;
    Ok(Value { kind: Some(kind) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::v1::{value::Kind, FloatList};

    fn yaml(s: &str) -> Yaml {
        serde_norway::from_str(s).unwrap()
    }

    #[test]
    fn ttls_with_units() {
        assert_eq!(parse_ttl(&yaml("30d")), Ok(30 * 86_400));
        assert_eq!(parse_ttl(&yaml("12h")), Ok(12 * 3600));
        assert_eq!(parse_ttl(&yaml("90m")), Ok(5400));
        assert_eq!(parse_ttl(&yaml("45s")), Ok(45));
        assert_eq!(
            parse_ttl(&yaml("30")).unwrap_err(),
            "ttl '30': expected a number with unit s, m, h or d (e.g. 30d)"
        );
        assert!(parse_ttl(&yaml("2w")).is_err());
        assert!(parse_ttl(&yaml("0d"))
            .unwrap_err()
            .contains("must be positive"));
        assert_eq!(format_ttl(365 * 86_400), "365d");
        assert_eq!(format_ttl(5400), "90m");
        assert_eq!(format_ttl(0), "never");
    }

    #[test]
    fn defaults_must_match_their_type() {
        let ok = |t, s: &str| default_value(t, &yaml(s)).unwrap().kind.unwrap();
        assert_eq!(ok(FeatureType::Float32, "600.0"), Kind::FloatVal(600.0));
        assert_eq!(ok(FeatureType::Float64, "1"), Kind::DoubleVal(1.0));
        assert_eq!(ok(FeatureType::Int32, "7"), Kind::Int32Val(7));
        assert_eq!(ok(FeatureType::Bool, "false"), Kind::BoolVal(false));
        assert_eq!(
            ok(FeatureType::String, "standard"),
            Kind::StringVal("standard".into())
        );
        assert_eq!(
            ok(FeatureType::Bytes, "aGk="),
            Kind::BytesVal(b"hi".to_vec())
        );
        assert_eq!(
            ok(FeatureType::Float32List, "[0, 0.5]"),
            Kind::FloatListVal(FloatList {
                values: vec![0.0, 0.5]
            })
        );
        let err = |t, s: &str| default_value(t, &yaml(s)).unwrap_err();
        assert_eq!(
            err(FeatureType::Int64, "1.5"),
            "default 1.5 is not a valid int64"
        );
        assert_eq!(
            err(FeatureType::Int32, "3000000000"),
            "default 3000000000 is not a valid int32"
        );
        assert_eq!(
            err(FeatureType::Bool, "yes"),
            "default 'yes' is not a valid bool"
        );
        assert_eq!(
            err(FeatureType::Float32, "'x'"),
            "default 'x' is not a valid float32"
        );
        assert_eq!(
            err(FeatureType::Bytes, "'%%'"),
            "default '%%' is not valid base64"
        );
    }
}
