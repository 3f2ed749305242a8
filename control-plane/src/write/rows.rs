//! A request's `df` (Feast's columns: `{"column": [value, ...], ...}`) checked against the
//! schemas of the views it writes, into one row per entity per view. Every problem is found
//! (up to [`MAX_PROBLEMS`]), so a client fixes a request once; any problem refuses it whole.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use ferry_protos::v1::{self, value::Kind, FloatList, Value, ValueType};
use serde_json::Value as Json;

use super::bounded::{Exceeded, MAX_VECTOR_BYTES};
use super::model::ViewModel;
use ferry_repo::sources::cell::parse_timestamp;
use ferry_repo::sources::timestamp::{EventTime, TimeUnit, TimestampRules};

/// Problems reported at most; more are counted.
pub const MAX_PROBLEMS: usize = 100;
/// Rows a request may hold.
pub const MAX_ROWS: usize = ferry_protos::limits::MAX_WRITE_ROWS;

/// One entity's row of one view: its canonical entity key, event time and every feature of
/// the view in declared order.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub entity_key: String,
    pub event_time_us: i64,
    pub values: Vec<Value>,
}

/// The rows a request writes to one view (the latest per entity).
#[derive(Debug)]
pub struct ViewRows {
    pub view: Arc<ViewModel>,
    pub rows: Vec<Row>,
    /// Rows of the request that lost to a later row of the same entity in the same request.
    pub superseded: u64,
}

/// The problems of a refused request.
#[derive(Debug, Default, PartialEq)]
pub struct Problems {
    pub list: Vec<String>,
    /// Problems beyond [`MAX_PROBLEMS`], not listed.
    pub more: usize,
    /// The first bound a row went over (also listed): the request is refused as too large.
    pub too_large: Option<Exceeded>,
}

impl Problems {
    fn add(&mut self, p: String) {
        if self.list.len() < MAX_PROBLEMS {
            self.list.push(p);
        } else {
            self.more += 1;
        }
    }

    /// All of them on one line, for a message.
    pub fn summary(&self) -> String {
        let mut s = self.list.join("; ");
        if self.more > 0 {
            s.push_str(&format!("; and {} more", self.more));
        }
        s
    }
}

/// Checks `df` for `views` and returns their rows, or every problem.
pub fn rows(
    df: &serde_json::Map<String, Json>,
    views: &[Arc<ViewModel>],
    rules: &TimestampRules,
) -> Result<Vec<ViewRows>, Problems> {
    rows_from(df, views, rules, 0)
}

/// [`rows`] for a slice of a longer input whose first row is number `first_row` (in
/// problems).
pub fn rows_from(
    df: &serde_json::Map<String, Json>,
    views: &[Arc<ViewModel>],
    rules: &TimestampRules,
    first_row: usize,
) -> Result<Vec<ViewRows>, Problems> {
    let mut problems = Problems::default();
    let len = column_lengths(df, &mut problems);
    let known = |c: &str| views.iter().any(|v| columns(&v.schema).any(|n| n == c));
    for name in df.keys().filter(|c| !known(c)) {
        problems.add(format!(
            "column '{name}' is not a join key, timestamp or feature of {}",
            view_names(views)
        ));
    }
    for v in views {
        for c in columns(&v.schema).filter(|c| !df.contains_key(*c)) {
            problems.add(format!(
                "column '{c}' (of view '{}') is missing",
                v.schema.name
            ));
        }
    }
    if !problems.list.is_empty() {
        return Err(problems);
    }
    let out: Vec<ViewRows> = views
        .iter()
        .map(|v| view_rows(df, v, (first_row, len), rules, &mut problems))
        .collect();
    if problems.list.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

fn view_names(views: &[Arc<ViewModel>]) -> String {
    let names: Vec<String> = views
        .iter()
        .map(|v| format!("'{}'", v.schema.name))
        .collect();
    format!("the view(s) {}", names.join(", "))
}

/// Every column a view's rows need: join keys, the timestamp, every feature.
fn columns(schema: &v1::WriteView) -> impl Iterator<Item = &str> {
    schema
        .entity_keys
        .iter()
        .map(|k| k.join_key.as_str())
        .chain(std::iter::once(schema.timestamp_field.as_str()))
        .chain(schema.features.iter().map(|f| f.name.as_str()))
}

/// The common length of the columns (each must be an array, all equally long).
fn column_lengths(df: &serde_json::Map<String, Json>, problems: &mut Problems) -> usize {
    let mut len = None;
    for (name, col) in df {
        match col {
            Json::Array(a) => match len {
                None => len = Some(a.len()),
                Some(n) if n != a.len() => problems.add(format!(
                    "column '{name}' has {} values, other columns {n}: all must be equally long",
                    a.len()
                )),
                Some(_) => {}
            },
            _ => problems.add(format!("column '{name}' is not an array of values")),
        }
    }
    let len = len.unwrap_or(0);
    if df.is_empty() || len == 0 {
        problems.add("df holds no row".to_owned());
    } else if len > MAX_ROWS {
        problems.add(format!(
            "df holds {len} rows; a request holds at most {MAX_ROWS}"
        ));
    }
    len
}

fn cell<'a>(df: &'a serde_json::Map<String, Json>, column: &str, row: usize) -> &'a Json {
    df.get(column)
        .and_then(|c| c.as_array())
        .and_then(|a| a.get(row))
        .unwrap_or(&Json::Null)
}

fn view_rows(
    df: &serde_json::Map<String, Json>,
    v: &Arc<ViewModel>,
    (first_row, len): (usize, usize),
    rules: &TimestampRules,
    problems: &mut Problems,
) -> ViewRows {
    let s = &v.schema;
    let mut latest: HashMap<String, usize> = HashMap::new();
    let mut rows: Vec<Row> = Vec::new();
    let mut superseded = 0;
    for i in 0..len {
        let at = |c: &str| format!("row {}, column '{c}'", first_row + i);
        let mut parts = Vec::with_capacity(s.entity_keys.len());
        for k in &s.entity_keys {
            match key_part(k, cell(df, &k.join_key, i)) {
                Ok(p) => parts.push(p),
                Err(e) => problems.add(format!("{}: {e}", at(&k.join_key))),
            }
        }
        let time = event_time(cell(df, &s.timestamp_field, i), rules)
            .map_err(|e| problems.add(format!("{}: {e}", at(&s.timestamp_field))));
        let mut values = Vec::with_capacity(s.features.len());
        for f in &s.features {
            match value(f.r#type(), cell(df, &f.name, i)) {
                Ok(val) => values.push(val),
                Err(e) => problems.add(format!("{}: {e}", at(&f.name))),
            }
        }
        let (Ok(event_time_us), true) = (time, parts.len() == s.entity_keys.len()) else {
            continue;
        };
        if values.len() != s.features.len() {
            continue;
        }
        if let Some(e) = over_vector_bound(&values, &s.name, first_row + i) {
            problems.add(e.to_string());
            problems.too_large.get_or_insert(e);
            continue;
        }
        let row = Row {
            entity_key: ferry_protos::entity_key(&parts),
            event_time_us,
            values,
        };
        // The latest row per entity (the later one on a tie), as Redis would end up holding.
        match latest.get(&row.entity_key) {
            Some(&j) => {
                superseded += 1;
                if rows[j].event_time_us <= row.event_time_us {
                    rows[j] = row;
                }
            }
            None => {
                latest.insert(row.entity_key.clone(), rows.len());
                rows.push(row);
            }
        }
    }
    ViewRows {
        view: v.clone(),
        rows,
        superseded,
    }
}

/// A row's features of one view encoding to more than a stored vector may hold.
fn over_vector_bound(values: &[Value], view: &str, row: usize) -> Option<Exceeded> {
    let bytes: usize = values.iter().map(prost::Message::encoded_len).sum();
    (bytes > MAX_VECTOR_BYTES).then(|| Exceeded::Vector {
        view: view.to_owned(),
        row,
        bytes,
    })
}

fn key_part(k: &v1::EntityKey, cell: &Json) -> Result<String, String> {
    let part = match (k.r#type(), cell) {
        (ValueType::Int64, Json::Number(n)) if n.is_i64() || n.is_u64() => n
            .as_i64()
            .map(|v| v.to_string())
            .ok_or_else(|| format!("{n} is out of int64 range"))?,
        (ValueType::Int64, other) => return Err(format!("expected an int64 id, got {other}")),
        (_, Json::String(s)) => s.clone(),
        (_, other) => return Err(format!("expected a string id, got {other}")),
    };
    match ferry_protos::key_part_problem(&part) {
        Some(p) => Err(p),
        None => Ok(part),
    }
}

/// An event time: RFC 3339 text, or epoch seconds (an integer, or a number with a fraction
/// down to the microsecond).
pub fn event_time(cell: &Json, rules: &TimestampRules) -> Result<i64, String> {
    let seconds = TimestampRules {
        declared: Some(TimeUnit::Seconds),
        now_us: rules.now_us,
    };
    match cell {
        Json::Null => Err("missing event timestamp".to_owned()),
        Json::String(s) => seconds.resolve(parse_timestamp(s)?),
        Json::Number(n) => match n.as_i64() {
            Some(v) => seconds.resolve(EventTime::Epoch(v)),
            None => {
                let f = n.as_f64().unwrap_or(f64::NAN);
                let us = (f * 1e6).round();
                if !us.is_finite() || us.abs() > 9.0e18 {
                    return Err(format!("timestamp {n} is out of range"));
                }
                let us = us as i64;
                if us < ferry_repo::sources::timestamp::EARLIEST_EPOCH_US {
                    return Err(format!("epoch seconds {n} are before 2000-01-01"));
                }
                seconds.resolve(EventTime::Micros(us))
            }
        },
        other => Err(format!(
            "expected RFC 3339 text or epoch seconds, got {other}"
        )),
    }
}

/// A feature value of type `ty` from JSON; null is a null value.
pub fn value(ty: ValueType, cell: &Json) -> Result<Value, String> {
    if cell.is_null() {
        return Ok(Value { kind: None });
    }
    let wrong = || format!("expected {}, got {cell}", type_word(ty));
    let kind = match ty {
        ValueType::Int32 => Kind::Int32Val(
            cell.as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(wrong)?,
        ),
        ValueType::Int64 => Kind::Int64Val(cell.as_i64().ok_or_else(wrong)?),
        ValueType::Float32 => {
            let f = cell.as_f64().ok_or_else(wrong)? as f32;
            if !f.is_finite() {
                return Err(format!("{cell} is out of float32 range"));
            }
            Kind::FloatVal(f)
        }
        ValueType::Float64 => Kind::DoubleVal(cell.as_f64().ok_or_else(wrong)?),
        ValueType::Bool => Kind::BoolVal(cell.as_bool().ok_or_else(wrong)?),
        ValueType::String => Kind::StringVal(cell.as_str().ok_or_else(wrong)?.to_owned()),
        ValueType::Bytes => Kind::BytesVal(
            base64::engine::general_purpose::STANDARD
                .decode(cell.as_str().ok_or_else(wrong)?)
                .map_err(|e| format!("invalid base64: {e}"))?,
        ),
        ValueType::Float32List => {
            let items = cell.as_array().ok_or_else(wrong)?;
            let mut values = Vec::with_capacity(items.len());
            for item in items {
                let f = item.as_f64().ok_or_else(wrong)? as f32;
                if !f.is_finite() {
                    return Err(format!("{item} is out of float32 range"));
                }
                values.push(f);
            }
            Kind::FloatListVal(FloatList { values })
        }
        ValueType::Unspecified => return Err("the view's schema has an unknown type".to_owned()),
    };
    Ok(Value { kind: Some(kind) })
}

fn type_word(ty: ValueType) -> &'static str {
    match ty {
        ValueType::Int32 => "an int32",
        ValueType::Int64 => "an int64",
        ValueType::Float32 => "a float32",
        ValueType::Float64 => "a float64",
        ValueType::Bool => "a bool",
        ValueType::String => "a string",
        ValueType::Bytes => "base64 bytes",
        ValueType::Float32List => "an array of float32",
        ValueType::Unspecified => "a value",
    }
}

#[cfg(test)]
#[path = "rows_tests.rs"]
mod tests;
