//! `ferry backfill`: one view's rows from a file (Parquet, CSV or JSON lines) written through
//! the write path of `/push` ([`super::Writer::store`]): the merge rule in Ferry's layout,
//! Feast's skip rule in Feast's. The whole file is read and checked before anything is
//! written, so a bad row writes nothing.
//!
//! Parquet and CSV are read by the sources' readers (`ferry_repo::sources`), as `ferry
//! materialize` reads them: the latest row per entity, the first problem stops the read. JSON
//! lines (one object per line, `{"column": value, ...}`, as a `/push` `df` holds them) are
//! checked by the push validation ([`super::rows`]), every problem reported at once.

use std::io::BufRead as _;
use std::path::Path;
use std::sync::Arc;

use ferry_protos::v1::ValueType;
use ferry_redis::Connection;
use serde_json::{Map, Value as Json};

use super::answer::Counts;
use super::model::{ViewModel, WriteModel};
use super::rows::{self, Problems, Row, ViewRows, MAX_PROBLEMS};
use super::Writer;
use ferry_repo::sources::{self, SourceFormat, TimestampRules, ViewSpec};
use ferry_repo::types::{FeatureType, KeyType};
use ferry_repo::Registry;

/// Rows written per batch (one call of the write path, as one `/push` request).
pub const BATCH_ROWS: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum BackfillError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Source(#[from] sources::SourceError),
    #[error("{file}: {} problem(s), nothing was written:\n  {}", .problems.list.len() + .problems.more, lines(.problems))]
    Rows { file: String, problems: Problems },
    #[error("{message}")]
    Write { message: String, counts: Counts },
}

fn lines(p: &Problems) -> String {
    let mut s = p.list.join("\n  ");
    if p.more > 0 {
        s.push_str(&format!("\n  and {} more", p.more));
    }
    s
}

/// What a backfill read: the view's rows, latest per entity.
pub struct Checked {
    pub model: Arc<WriteModel>,
    pub rows: ViewRows,
    /// Data rows in the file.
    pub rows_read: u64,
}

/// Reads and checks `file` for `view` of `reg`; nothing is written.
pub fn check(reg: &Registry, view: &str, file: &Path) -> Result<Checked, BackfillError> {
    let model = Arc::new(WriteModel::build(&ferry_repo::snapshot::build(reg), None));
    let vm = model.views.get(view).cloned().ok_or_else(|| {
        let mut known: Vec<&str> = model.views.keys().map(String::as_str).collect();
        known.sort_unstable();
        BackfillError::Setup(format!(
            "view '{view}' is not a feature view of the repo (views: {})",
            known.join(", ")
        ))
    })?;
    let unit = reg
        .views
        .iter()
        .find(|v| v.name == view)
        .and_then(|v| v.source.as_ref())
        .and_then(|s| s.timestamp_unit);
    let rules = TimestampRules::now(unit);
    let name = file.display().to_string();
    let ext = file
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let (rows, rows_read) = match ext.as_deref() {
        Some("jsonl" | "ndjson") => json_lines(file, &vm, &rules)?,
        _ => {
            let format = SourceFormat::from_path(&name).map_err(|e| {
                BackfillError::Setup(format!("{name}: {e}, or .jsonl / .ndjson for JSON lines"))
            })?;
            source_rows(file, format, &vm, rules)?
        }
    };
    Ok(Checked {
        model,
        rows,
        rows_read,
    })
}

/// A Parquet or CSV file read by the sources' reader, with the view's write schema.
fn source_rows(
    file: &Path,
    format: SourceFormat,
    vm: &Arc<ViewModel>,
    timestamps: TimestampRules,
) -> Result<(ViewRows, u64), BackfillError> {
    let s = &vm.schema;
    let keys: Vec<(String, KeyType)> = s
        .entity_keys
        .iter()
        .map(|k| {
            let ty = if k.r#type() == ValueType::Int64 {
                KeyType::Int64
            } else {
                KeyType::String
            };
            (k.join_key.clone(), ty)
        })
        .collect();
    let mut features = Vec::with_capacity(s.features.len());
    for f in &s.features {
        let ty = FeatureType::ALL
            .into_iter()
            .find(|t| t.to_proto() == f.r#type())
            .ok_or_else(|| {
                BackfillError::Setup(format!("feature '{}' has an unknown type", f.name))
            })?;
        features.push((f.name.clone(), ty));
    }
    let latest = sources::load_latest(&ViewSpec {
        file,
        format,
        timestamp_field: &s.timestamp_field,
        timestamps,
        keys: &keys,
        features: &features,
    })?;
    let mut rows: Vec<Row> = latest
        .rows
        .into_iter()
        .map(|(entity_key, r)| Row {
            entity_key,
            event_time_us: r.event_time_us,
            values: r.values(),
        })
        .collect();
    rows.sort_by(|a, b| a.entity_key.cmp(&b.entity_key));
    let superseded = latest.rows_read - rows.len() as u64;
    Ok((
        ViewRows {
            view: vm.clone(),
            rows,
            superseded,
        },
        latest.rows_read,
    ))
}

/// A JSON lines file checked as `/push` checks a `df`, [`rows::MAX_ROWS`] rows at a time;
/// every problem of every slice is reported.
fn json_lines(
    file: &Path,
    vm: &Arc<ViewModel>,
    rules: &TimestampRules,
) -> Result<(ViewRows, u64), BackfillError> {
    let name = file.display().to_string();
    let f = std::fs::File::open(file).map_err(|e| BackfillError::Setup(format!("{name}: {e}")))?;
    let mut problems = Problems::default();
    let mut out = ViewRows {
        view: vm.clone(),
        rows: Vec::new(),
        superseded: 0,
    };
    let mut df: Map<String, Json> = Map::new();
    let (mut first, mut n) = (0usize, 0usize);
    let views = [vm.clone()];
    let mut flush = |df: &mut Map<String, Json>, first: usize, problems: &mut Problems| {
        if df.is_empty() {
            return;
        }
        match rows::rows_from(df, &views, rules, first) {
            Ok(mut v) => {
                let part = v.remove(0);
                out.superseded += part.superseded;
                out.rows.extend(part.rows);
            }
            Err(p) => absorb(problems, p),
        }
        df.clear();
    };
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| BackfillError::Setup(format!("{name}: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Json>(&line) {
            Ok(Json::Object(obj)) => {
                add_row(&mut df, n, obj);
                n += 1;
            }
            Ok(_) => absorb_one(&mut problems, format!("line {}: not a JSON object", i + 1)),
            Err(e) => absorb_one(&mut problems, format!("line {}: {e}", i + 1)),
        }
        if n == rows::MAX_ROWS {
            flush(&mut df, first, &mut problems);
            first += n;
            n = 0;
        }
    }
    flush(&mut df, first, &mut problems);
    let rows_read = (first + n) as u64;
    if rows_read == 0 && problems.list.is_empty() {
        absorb_one(&mut problems, "the file holds no row".to_owned());
    }
    if !problems.list.is_empty() {
        return Err(BackfillError::Rows {
            file: name,
            problems,
        });
    }
    keep_latest(&mut out);
    Ok((out, rows_read))
}

/// Appends row `n` (the rows before it in `df`) to the columns; a column a row lacks is null.
fn add_row(df: &mut Map<String, Json>, n: usize, obj: Map<String, Json>) {
    for (k, v) in obj {
        let col = df
            .entry(k)
            .or_insert_with(|| Json::Array(vec![Json::Null; n]));
        if let Json::Array(a) = col {
            a.resize(n, Json::Null);
            a.push(v);
        }
    }
    for col in df.values_mut() {
        if let Json::Array(a) = col {
            a.resize(n + 1, Json::Null);
        }
    }
}

/// Rows of one entity from two slices: keeps the latest (the later one on a tie), as one
/// slice would.
fn keep_latest(out: &mut ViewRows) {
    let before = out.rows.len();
    let mut latest: std::collections::HashMap<String, Row> = std::collections::HashMap::new();
    for r in out.rows.drain(..) {
        match latest.get(&r.entity_key) {
            Some(kept) if kept.event_time_us > r.event_time_us => {}
            _ => {
                latest.insert(r.entity_key.clone(), r);
            }
        }
    }
    out.rows = latest.into_values().collect();
    out.rows.sort_by(|a, b| a.entity_key.cmp(&b.entity_key));
    out.superseded += (before - out.rows.len()) as u64;
}

fn absorb_one(problems: &mut Problems, p: String) {
    absorb(
        problems,
        Problems {
            list: vec![p],
            ..Problems::default()
        },
    );
}

fn absorb(problems: &mut Problems, p: Problems) {
    for item in p.list {
        if problems.list.len() < MAX_PROBLEMS {
            problems.list.push(item);
        } else {
            problems.more += 1;
        }
    }
    problems.more += p.more;
}

/// Writes checked rows, [`BATCH_ROWS`] at a time, through the write path of `/push`. Rows
/// superseded by a later row of the same entity in the file count as skipped as older.
pub async fn write(conn: Connection, checked: &Checked) -> Result<Counts, BackfillError> {
    // Not paced: an operator's batch job, like `ferry materialize`, runs as fast as Redis takes.
    let writer = Writer::new(conn, super::metrics::WriteMetrics::default(), 1, 0);
    let mut total = Counts {
        skipped_older: checked.rows.superseded,
        ..Counts::default()
    };
    for chunk in checked.rows.rows.chunks(BATCH_ROWS) {
        let batch = [ViewRows {
            view: checked.rows.view.clone(),
            rows: chunk.to_vec(),
            superseded: 0,
        }];
        match writer.store(&checked.model, &batch).await {
            Ok(c) => {
                total.written += c.written;
                total.skipped_older += c.skipped_older;
                total.refused += c.refused;
            }
            Err(e) => {
                return Err(BackfillError::Write {
                    message: format!(
                        "{} (rows written by earlier batches: {}; backfilling again is \
                         idempotent)",
                        e.message(),
                        total.written
                    ),
                    counts: total,
                })
            }
        }
    }
    Ok(total)
}
