//! Reads the example's source CSVs independently of `ferry materialize` (latest row per user and
//! view), so tests compare what the model received with the data itself.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value as Json};

/// Column types of the example repo's views (examples/banking/ferry.yaml).
pub const VIEWS: &[(&str, &[(&str, Kind)])] = &[
    (
        "user_profile",
        &[
            ("account_tier", Kind::Str),
            ("age", Kind::Int),
            ("credit_score", Kind::F32),
            ("is_verified", Kind::Bool),
            ("signup_days", Kind::Int),
        ],
    ),
    (
        "transactions",
        &[
            ("has_chargeback", Kind::Bool),
            ("last_txn_amount", Kind::F32),
            ("txn_amount_avg_7d", Kind::F64),
            ("txn_count_7d", Kind::Int),
        ],
    ),
    ("user_embedding", &[("embedding", Kind::F32List)]),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Int,
    F32,
    F64,
    Bool,
    Str,
    F32List,
}

type Row = HashMap<String, String>;

/// The latest row (by `event_timestamp`, with its time in Unix seconds) per key of the source
/// CSV of `view` under `dir`, each row's key as `key` reads it.
fn latest_rows<K: std::hash::Hash + Eq>(
    dir: &Path,
    view: &str,
    key: impl Fn(&Row) -> K,
) -> HashMap<K, (f64, Row)> {
    let mut latest: HashMap<K, (f64, Row)> = HashMap::new();
    let mut r = csv::Reader::from_path(dir.join(format!("{view}.csv"))).expect("source csv");
    let headers = r.headers().expect("header").clone();
    for rec in r.records() {
        let rec = rec.expect("csv row");
        let row: Row = headers
            .iter()
            .zip(rec.iter())
            .map(|(h, v)| (h.to_string(), v.to_string()))
            .collect();
        let t = parse_time(&row["event_timestamp"]);
        let k = key(&row);
        if latest.get(&k).is_none_or(|(old, _)| t > *old) {
            latest.insert(k, (t, row));
        }
    }
    latest
}

pub struct Source {
    /// view → user → (event time in seconds, row)
    views: HashMap<String, HashMap<String, (f64, Row)>>,
}

impl Source {
    pub fn load(dir: &Path) -> Source {
        let mut views = HashMap::new();
        for (view, _) in VIEWS {
            let latest = latest_rows(dir, view, |row| row["user_id"].clone());
            views.insert(view.to_string(), latest);
        }
        Source { views }
    }

    /// Event time (Unix seconds) of the user's latest row in `view`, if any.
    pub fn event_time(&self, view: &str, user: &str) -> Option<f64> {
        self.views[view].get(user).map(|(t, _)| *t)
    }

    /// The user's latest source value of `view:feature` as JSON, None if the user has no row.
    pub fn value(&self, view: &str, feature: &str, user: &str) -> Option<Json> {
        let kind = VIEWS
            .iter()
            .find(|(v, _)| *v == view)
            .and_then(|(_, fs)| fs.iter().find(|(f, _)| *f == feature))
            .map(|(_, k)| *k)
            .expect("known feature");
        let (_, row) = self.views[view].get(user)?;
        Some(cell_value(row[feature].as_str(), kind))
    }
}

/// A CSV cell as the JSON value of its feature's kind (an empty cell is null).
fn cell_value(cell: &str, kind: Kind) -> Json {
    if cell.is_empty() {
        return Json::Null;
    }
    match kind {
        Kind::Int => json!(cell.parse::<i64>().expect("int")),
        Kind::F32 => json!(cell.parse::<f32>().expect("f32")),
        Kind::F64 => json!(cell.parse::<f64>().expect("f64")),
        Kind::Bool => json!(cell == "true" || cell == "1"),
        Kind::Str => json!(cell),
        Kind::F32List => {
            let v: Vec<f32> = serde_json::from_str(cell).expect("list");
            json!(v)
        }
    }
}

/// A view's name, join key columns and feature columns.
pub type KeyedViewSpec = (
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, Kind)],
);

/// The example's other views: merchant-keyed ones, and `user_sessions` (not in [`VIEWS`], which
/// lists `realtime_scoring`'s views).
pub const KEYED_VIEWS: &[KeyedViewSpec] = &[
    (
        "user_sessions",
        &["user_id"],
        &[("last_login_at", Kind::Int), ("login_country", Kind::Str)],
    ),
    (
        "user_merchant",
        &["merchant_id", "user_id"],
        &[
            ("amount_sum_30d", Kind::F64),
            ("last_seen_days", Kind::Int),
            ("txn_count_30d", Kind::Int),
        ],
    ),
    (
        "merchant_profile",
        &["merchant_id"],
        &[
            ("category", Kind::Str),
            ("is_online", Kind::Bool),
            ("risk_score", Kind::F32),
        ],
    ),
];

/// One view of [`KEYED_VIEWS`] as written by the generator: the latest row per key, the key
/// being the view's join key cells in [`KEYED_VIEWS`] order (e.g. `["1038", "u000001"]`).
pub struct KeyedView {
    pub features: &'static [(&'static str, Kind)],
    rows: HashMap<Vec<String>, (f64, Row)>,
}

impl KeyedView {
    pub fn load(dir: &Path, view: &str) -> KeyedView {
        let (_, key_columns, features) = KEYED_VIEWS
            .iter()
            .find(|(v, _, _)| *v == view)
            .expect("a view of KEYED_VIEWS");
        let rows = latest_rows(dir, view, |row| {
            key_columns.iter().map(|c| row[*c].clone()).collect()
        });
        KeyedView { features, rows }
    }

    /// Every key with a row, sorted.
    pub fn keys(&self) -> Vec<Vec<String>> {
        let mut keys: Vec<Vec<String>> = self.rows.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Event time (Unix seconds) of the key's latest row, if any.
    pub fn event_time(&self, key: &[&str]) -> Option<f64> {
        self.rows.get(&owned(key)).map(|(t, _)| *t)
    }

    /// The key's latest source value of `feature` as JSON, None if the key has no row.
    pub fn value(&self, feature: &str, key: &[&str]) -> Option<Json> {
        let kind = self
            .features
            .iter()
            .find(|(f, _)| *f == feature)
            .map(|(_, k)| *k)
            .expect("known feature");
        let (_, row) = self.rows.get(&owned(key))?;
        Some(cell_value(row[feature].as_str(), kind))
    }
}

fn owned(key: &[&str]) -> Vec<String> {
    key.iter().map(|s| (*s).to_string()).collect()
}

/// Compares a value the model received with the source value: floats as f32/f64 (the JSON
/// text of an f32 is its shortest form, so compare after narrowing).
/// The zero a KServe v2 tensor carries for a null of this kind (an embedding's elements: 0.0).
pub fn tensor_zero(kind: Kind) -> Json {
    match kind {
        Kind::Bool => Json::Bool(false),
        Kind::Str => Json::from(""),
        Kind::F32 | Kind::F64 | Kind::F32List => Json::from(0.0),
        Kind::Int => Json::from(0),
    }
}

pub fn same(received: &Json, source: &Json, kind: Kind) -> bool {
    match (kind, received, source) {
        (Kind::F32, Json::Number(a), Json::Number(b)) => {
            a.as_f64().map(|x| x as f32) == b.as_f64().map(|x| x as f32)
        }
        (Kind::F32List, Json::Array(a), Json::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y, Kind::F32))
        }
        _ => received == source,
    }
}

/// RFC 3339 (`Z` or `±hh:mm`, optional fraction) or integer epoch seconds → Unix seconds.
pub fn parse_time(s: &str) -> f64 {
    if let Ok(secs) = s.parse::<i64>() {
        return secs as f64;
    }
    let num = |a: usize, b: usize| s[a..b].parse::<i64>().expect("timestamp digits");
    let (y, mo, d, h, mi, sec) = (
        num(0, 4),
        num(5, 7),
        num(8, 10),
        num(11, 13),
        num(14, 16),
        num(17, 19),
    );
    let rest = &s[19..];
    let (frac, zone) = match rest.strip_prefix('.') {
        Some(r) => {
            let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            (
                format!("0.{}", &r[..end]).parse::<f64>().expect("fraction"),
                &r[end..],
            )
        }
        None => (0.0, rest),
    };
    let offset = match zone {
        "Z" | "z" => 0,
        z => {
            let sign = if z.starts_with('-') { -1 } else { 1 };
            sign * (z[1..3].parse::<i64>().expect("hh") * 3600
                + z[4..6].parse::<i64>().expect("mm") * 60)
        }
    };
    // Days from civil (Howard Hinnant's algorithm).
    let (y2, m2) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + h * 3600 + mi * 60 + sec - offset) as f64 + frac
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), 0.0);
        assert_eq!(parse_time("2026-11-21T10:00:00Z"), 1_795_255_200.0);
        assert_eq!(parse_time("2026-11-21T12:00:00.500+02:00"), 1_795_255_200.5);
        assert_eq!(parse_time("1795255200"), 1_795_255_200.0);
    }
}
