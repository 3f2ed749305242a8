//! Feature view sources: offline files holding one row per (entity, event time). Reading keeps
//! only the latest row per entity key, which is all a precomputed vector needs.

pub mod cell;
mod csv;
mod parquet;
mod parquet_columns;
pub mod timestamp;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;

use ferry_protos::v1::Value;

use crate::types::{FeatureType, KeyType};

pub use timestamp::{TimeUnit, TimestampRules};

/// File formats a source may have, chosen by extension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceFormat {
    Csv,
    Parquet,
}

impl SourceFormat {
    /// The format of `path` by its extension, or why it cannot be read.
    pub fn from_path(path: &str) -> Result<Self, String> {
        let ext = Path::new(path)
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("csv") => Ok(SourceFormat::Csv),
            Some("parquet") => Ok(SourceFormat::Parquet),
            _ => Err("unsupported source extension (expected .csv or .parquet)".to_owned()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: line {line}: {reason}")]
    Malformed {
        file: String,
        line: u64,
        reason: String,
    },
    #[error("{file}: line {line}, column '{column}': {reason}")]
    Cell {
        file: String,
        line: u64,
        column: String,
        reason: String,
    },
    #[error("{file}: row {row}, column '{column}': {reason}")]
    Field {
        file: String,
        row: u64,
        column: String,
        reason: String,
    },
    #[error("{file}: {reason}")]
    Unreadable { file: String, reason: String },
    #[error("{file}: missing column(s) {}", .columns.join(", "))]
    MissingColumns { file: String, columns: Vec<String> },
}

/// What to read from one view's source.
pub struct ViewSpec<'a> {
    pub file: &'a Path,
    pub format: SourceFormat,
    pub timestamp_field: &'a str,
    /// How the timestamp column's integers are read, and which times are believable.
    pub timestamps: TimestampRules,
    /// Join keys in the canonical (service) order: the entity key is built in this order.
    pub keys: &'a [(String, KeyType)],
    /// Every feature of the view, in declared order; `ViewRow::values` follows this order.
    pub features: &'a [(String, FeatureType)],
}

/// The latest row of one entity in one view.
#[derive(Clone, Debug, PartialEq)]
pub struct ViewRow {
    pub event_time_us: i64,
    /// One value per feature of the view, in declared order, each encoded as a vector stores
    /// it (field 2 of `ViewValues`: key, length, `Value`). Encoded once when read, a vector is
    /// then built by copying slices, and a row is a single allocation.
    encoded: Vec<u8>,
    /// How many values `encoded` holds.
    count: u32,
}

/// The key of `ViewValues.values` (field 2, length-delimited): one byte.
const VALUES_KEY: u8 = 0x12;

impl ViewRow {
    pub fn new(event_time_us: i64, values: &[Value]) -> Self {
        let mut row = ViewRow {
            event_time_us,
            encoded: Vec::new(),
            count: 0,
        };
        for v in values {
            row.push(v);
        }
        row
    }

    fn push(&mut self, v: &Value) {
        prost::encoding::message::encode(2, v, &mut self.encoded);
        self.count += 1;
    }

    fn clear(&mut self) {
        self.encoded.clear();
        self.count = 0;
    }

    /// All values, encoded, in declared order.
    pub fn encoded(&self) -> &[u8] {
        &self.encoded
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Each value's encoded field, in declared order.
    pub fn fields(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut rest: &[u8] = &self.encoded;
        std::iter::from_fn(move || {
            let whole = rest;
            let mut body = rest.strip_prefix(&[VALUES_KEY])?;
            let len = usize::try_from(prost::encoding::decode_varint(&mut body).ok()?).ok()?;
            let end = whole.len() - body.len() + len;
            let field = whole.get(..end)?;
            rest = whole.get(end..)?;
            Some(field)
        })
    }

    /// The values decoded (for tests and tools; vectors are built from [`Self::fields`]).
    pub fn values(&self) -> Vec<Value> {
        use prost::Message as _;
        self.fields()
            .filter_map(|f| {
                let mut body = f.get(1..)?;
                prost::encoding::decode_varint(&mut body).ok()?;
                Value::decode(body).ok()
            })
            .collect()
    }
}

/// Where a reader writes the values of a winning row.
pub struct RowValues<'a>(&'a mut ViewRow);

impl RowValues<'_> {
    pub fn push(&mut self, v: &Value) {
        self.0.push(v);
    }
}

/// A fast non-cryptographic hash for entity keys (FxHash's multiply-rotate over 8-byte words).
/// SipHash was a tenth of `materialize`'s time; the keys come from the operator's own files, so
/// hash flooding is not a threat worth paying for.
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl KeyHasher {
    const K: u64 = 0xf135_7aea_2e62_a9c5;

    fn add(&mut self, word: u64) {
        self.0 = (self.0 ^ word).wrapping_mul(Self::K);
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn finish(&self) -> u64 {
        // The multiply leaves its best bits at the top; hashbrown picks buckets with the low ones.
        self.0.rotate_left(26)
    }
}

/// A map keyed by canonical entity key.
pub type KeyMap<V> = HashMap<String, V, BuildHasherDefault<KeyHasher>>;

/// The latest row per canonical entity key.
#[derive(Debug, Default)]
pub struct LatestRows {
    pub rows: KeyMap<ViewRow>,
    /// Data rows seen in the file (history included).
    pub rows_read: u64,
}

impl LatestRows {
    /// Whether a row at `event_time_us` for `key` would replace what is kept. On equal times the
    /// later row in the file wins, so the result never depends on hash order.
    fn wants(&self, key: &str, event_time_us: i64) -> bool {
        self.rows
            .get(key)
            .is_none_or(|kept| kept.event_time_us <= event_time_us)
    }

    /// Keeps a row at `event_time_us` for `key` if it wins (as [`Self::wants`] decides), its
    /// values written by `fill`. One hash lookup for a known key, two for a new one; the values
    /// are built only for a winning row.
    fn offer<E>(
        &mut self,
        key: &str,
        event_time_us: i64,
        fill: impl FnOnce(&mut RowValues<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if let Some(kept) = self.rows.get_mut(key) {
            if kept.event_time_us <= event_time_us {
                kept.event_time_us = event_time_us;
                kept.clear();
                fill(&mut RowValues(kept))?;
            }
            return Ok(());
        }
        let mut row = ViewRow::new(event_time_us, &[]);
        fill(&mut RowValues(&mut row))?;
        self.rows.insert(key.to_owned(), row);
        Ok(())
    }

    fn put(&mut self, key: &str, row: ViewRow) {
        match self.rows.get_mut(key) {
            Some(kept) => *kept = row,
            None => {
                self.rows.insert(key.to_owned(), row);
            }
        }
    }
}

/// The column names of a source, read cheaply (CSV: the header line only).
pub fn read_header(file: &Path, format: SourceFormat) -> Result<Vec<String>, SourceError> {
    match format {
        SourceFormat::Csv => csv::read_header(file),
        SourceFormat::Parquet => parquet::read_header(file),
    }
}

/// Reads a whole source and keeps the latest row per entity key.
pub fn load_latest(spec: &ViewSpec<'_>) -> Result<LatestRows, SourceError> {
    match spec.format {
        SourceFormat::Csv => csv::load_latest(spec),
        SourceFormat::Parquet => parquet::load_latest(spec),
    }
}

/// Index of every named column, or an error naming all the missing ones.
fn column_indexes(
    file: &Path,
    header: &[String],
    wanted: &[&str],
) -> Result<Vec<usize>, SourceError> {
    let mut out = Vec::with_capacity(wanted.len());
    let mut missing = Vec::new();
    for name in wanted {
        match header.iter().position(|h| h == name) {
            Some(i) => out.push(i),
            None => missing.push((*name).to_owned()),
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(SourceError::MissingColumns {
            file: file.display().to_string(),
            columns: missing,
        })
    }
}
