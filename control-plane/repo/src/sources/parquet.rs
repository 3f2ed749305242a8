//! Parquet sources, read column by column with the parquet crate's typed column readers (no
//! Arrow, to keep the build small): per row group, a batch of records of every needed column at
//! a time, values decoded in bulk and read in place; only rows that win (latest so far) are
//! turned into values. Every needed leaf column is checked against the physical/logical type
//! combinations handled (those the record API converts) before any row is read.

use std::fs::File;
use std::path::Path;

use ferry_protos::v1::{value::Kind, FloatList, Value};
use parquet::basic::{ConvertedType, LogicalType, Repetition, TimeUnit, Type as Physical};
use parquet::errors::ParquetError;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use parquet::schema::types::SchemaDescriptor;

use super::cell::{parse_timestamp, push_key_part, NULL};
use super::parquet_columns::{Cell, ColumnBatch, Element, Levels};
use super::timestamp::EventTime;
use super::{column_indexes, LatestRows, SourceError, ViewSpec};
use crate::types::{FeatureType, KeyType};

fn unreadable(file: &Path, e: impl std::fmt::Display) -> SourceError {
    SourceError::Unreadable {
        file: file.display().to_string(),
        reason: e.to_string(),
    }
}

fn open(file: &Path) -> Result<SerializedFileReader<File>, SourceError> {
    let f = File::open(file).map_err(|source| SourceError::Io {
        file: file.display().to_string(),
        source,
    })?;
    SerializedFileReader::new(f).map_err(|e| unreadable(file, e))
}

fn top_level_names(reader: &SerializedFileReader<File>) -> Vec<String> {
    let schema = reader.metadata().file_metadata().schema_descr();
    schema
        .root_schema()
        .get_fields()
        .iter()
        .map(|f| f.name().to_owned())
        .collect()
}

pub(super) fn read_header(file: &Path) -> Result<Vec<String>, SourceError> {
    Ok(top_level_names(&open(file)?))
}

/// Whether a leaf is handled: the combinations `Field::convert_*` converts without panicking,
/// which the cells of [`ColumnBatch`] are built with.
fn convertible(physical: Physical, converted: ConvertedType) -> bool {
    use ConvertedType as C;
    match physical {
        Physical::BOOLEAN | Physical::INT96 | Physical::FLOAT | Physical::DOUBLE => true,
        Physical::INT32 => matches!(
            converted,
            C::NONE
                | C::INT_8
                | C::INT_16
                | C::INT_32
                | C::UINT_8
                | C::UINT_16
                | C::UINT_32
                | C::DATE
        ),
        Physical::INT64 => matches!(
            converted,
            C::NONE | C::INT_64 | C::UINT_64 | C::TIMESTAMP_MILLIS | C::TIMESTAMP_MICROS
        ),
        Physical::BYTE_ARRAY => {
            matches!(converted, C::NONE | C::UTF8 | C::ENUM | C::JSON | C::BSON)
        }
        Physical::FIXED_LEN_BYTE_ARRAY => false,
    }
}

/// Nanosecond timestamps reach the record API as plain Long values: they must be told apart
/// from integer epoch seconds by the column's logical type.
fn is_nanosecond_timestamp(reader: &SerializedFileReader<File>, column: &str) -> bool {
    let schema = reader.metadata().file_metadata().schema_descr();
    schema.columns().iter().any(|c| {
        c.path().parts() == [column]
            && matches!(c.logical_type_ref(), Some(LogicalType::Timestamp(t)) if t.unit == TimeUnit::NANOS)
    })
}

/// Records read per column per batch: large enough to amortize the per-batch work, small enough
/// that a batch of every wanted column stays in cache-friendly memory.
const BATCH_RECORDS: usize = 4096;

/// Which leaf column holds top-level field `name`, and how its levels read. A field is a
/// primitive column or a list of primitives (any of the LIST spellings, or a bare repeated
/// primitive); other groups (structs, maps, nested lists) are refused.
fn plan(schema: &SchemaDescriptor, name: &str) -> Result<(usize, Levels), String> {
    let leaves: Vec<usize> = (0..schema.num_columns())
        .filter(|&i| schema.column(i).path().parts().first().map(String::as_str) == Some(name))
        .collect();
    let unsupported = || format!("column '{name}': nested groups are not supported");
    let [leaf] = leaves[..] else {
        return Err(unsupported());
    };
    let descr = schema.column(leaf);
    if descr.max_rep_level() > 1 {
        return Err(unsupported());
    }
    // Definition level of an empty list: the levels of the repeated node's ancestors.
    let mut def = 0i16;
    let mut empty_list_def = 0i16;
    let mut fields = schema.root_schema().get_fields();
    for part in descr.path().parts() {
        let node = fields
            .iter()
            .find(|f| f.name() == part)
            .ok_or_else(unsupported)?;
        let info = node.get_basic_info();
        if info.has_repetition() {
            match info.repetition() {
                Repetition::REQUIRED => {}
                Repetition::OPTIONAL => def += 1,
                Repetition::REPEATED => {
                    empty_list_def = def;
                    def += 1;
                }
            }
        }
        fields = if node.is_group() {
            node.get_fields()
        } else {
            &[]
        };
    }
    let list = descr.max_rep_level() == 1;
    if !list && descr.path().parts().len() > 1 {
        return Err(unsupported());
    }
    Ok((
        leaf,
        Levels {
            max_def: descr.max_def_level(),
            list,
            empty_list_def,
        },
    ))
}

pub(super) fn load_latest(spec: &ViewSpec<'_>) -> Result<LatestRows, SourceError> {
    let file = spec.file;
    let reader = open(file)?;
    let header = top_level_names(&reader);
    let mut wanted: Vec<&str> = vec![spec.timestamp_field];
    wanted.extend(spec.keys.iter().map(|(n, _)| n.as_str()));
    wanted.extend(spec.features.iter().map(|(n, _)| n.as_str()));
    column_indexes(file, &header, &wanted)?;
    let schema = reader.metadata().file_metadata().schema_descr();
    check_supported(file, schema, &wanted)?;
    let plans = wanted
        .iter()
        .map(|name| plan(schema, name))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable(file, e))?;
    // A column named twice (a key that is also a feature) is read once.
    let mut leaves: Vec<(usize, Levels)> = Vec::new();
    let slots: Vec<usize> = plans
        .iter()
        .map(|&(leaf, levels)| {
            leaves
                .iter()
                .position(|&(l, _)| l == leaf)
                .unwrap_or_else(|| {
                    leaves.push((leaf, levels));
                    leaves.len() - 1
                })
        })
        .collect();
    let rows = RowReader {
        spec,
        wanted: &wanted,
        slots: &slots,
        nanos: is_nanosecond_timestamp(&reader, spec.timestamp_field),
    };
    let mut latest = LatestRows::default();
    // Sized for one row per entity (bounded, as history may make the file much larger).
    let n = reader.metadata().file_metadata().num_rows();
    latest
        .rows
        .reserve(usize::try_from(n).unwrap_or(0).min(1 << 20));
    let mut row_no = 0u64;
    for group in 0..reader.num_row_groups() {
        let group = reader
            .get_row_group(group)
            .map_err(|e| unreadable(file, e))?;
        let mut columns = leaves
            .iter()
            .map(|&(leaf, levels)| {
                let r = group.get_column_reader(leaf)?;
                Ok(ColumnBatch::new(r, schema.column(leaf), levels))
            })
            .collect::<Result<Vec<_>, ParquetError>>()
            .map_err(|e| unreadable(file, e))?;
        while let Some(records) = next_batch(file, &mut columns, row_no)? {
            rows.offer_batch(&columns, records, &mut row_no, &mut latest)?;
        }
    }
    Ok(latest)
}

/// Every leaf of a wanted column has a type this reader converts.
fn check_supported(
    file: &Path,
    schema: &SchemaDescriptor,
    wanted: &[&str],
) -> Result<(), SourceError> {
    for leaf in schema.columns() {
        let top = leaf
            .path()
            .parts()
            .first()
            .map(String::as_str)
            .unwrap_or_default();
        if wanted.contains(&top) && !convertible(leaf.physical_type(), leaf.converted_type()) {
            return Err(unreadable(
                file,
                format!(
                    "column '{}': parquet type {} ({}) is not supported",
                    leaf.path().string(),
                    leaf.physical_type(),
                    leaf.converted_type()
                ),
            ));
        }
    }
    Ok(())
}

/// Reads the next batch of every column; the number of records, or None at the end.
fn next_batch(
    file: &Path,
    columns: &mut [ColumnBatch],
    row_no: u64,
) -> Result<Option<usize>, SourceError> {
    let mut records = None;
    for c in columns.iter_mut() {
        let n = c
            .read(BATCH_RECORDS)
            .map_err(|e| unreadable(file, format!("after row {row_no}: {e}")))?;
        if records.is_some_and(|r| r != n) {
            return Err(unreadable(
                file,
                format!("after row {row_no}: columns have different row counts"),
            ));
        }
        records = Some(n);
    }
    Ok(records.filter(|&n| n > 0))
}

/// Turns the rows of a batch into entity keys, timestamps and values.
struct RowReader<'a> {
    spec: &'a ViewSpec<'a>,
    /// Column names: the timestamp, the keys, the features.
    wanted: &'a [&'a str],
    /// The batch column of each wanted column.
    slots: &'a [usize],
    /// The timestamp column counts nanoseconds.
    nanos: bool,
}

impl RowReader<'_> {
    fn offer_batch(
        &self,
        columns: &[ColumnBatch],
        records: usize,
        row_no: &mut u64,
        latest: &mut LatestRows,
    ) -> Result<(), SourceError> {
        let spec = self.spec;
        let first_feature = 1 + spec.keys.len();
        let mut key = String::new();
        for r in 0..records {
            *row_no += 1;
            latest.rows_read += 1;
            let row = *row_no;
            let cell_err = |column: &str, reason: String| SourceError::Field {
                file: spec.file.display().to_string(),
                row,
                column: column.to_owned(),
                reason,
            };
            let cell = |i: usize| {
                columns[self.slots[i]]
                    .cell(r)
                    .map_err(|reason| cell_err(self.wanted[i], reason))
            };
            key.clear();
            for (k, (name, ty)) in spec.keys.iter().enumerate() {
                if k > 0 {
                    key.push(ferry_protos::ENTITY_KEY_SEPARATOR);
                }
                push_key(*ty, &cell(1 + k)?, &mut key).map_err(|r| cell_err(name, r))?;
            }
            let ts = event_time(&cell(0)?, self.nanos)
                .and_then(|t| spec.timestamps.resolve(t))
                .map_err(|r| cell_err(spec.timestamp_field, r))?;
            latest.offer(&key, ts, |values| {
                for (i, (name, ty)) in spec.features.iter().enumerate() {
                    let c = cell(first_feature + i)?;
                    values.push(&to_value(*ty, &c).map_err(|r| cell_err(name, r))?);
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}

fn int(f: &Field) -> Option<i64> {
    match f {
        Field::Byte(v) => Some(i64::from(*v)),
        Field::Short(v) => Some(i64::from(*v)),
        Field::Int(v) => Some(i64::from(*v)),
        Field::Long(v) => Some(*v),
        Field::UByte(v) => Some(i64::from(*v)),
        Field::UShort(v) => Some(i64::from(*v)),
        Field::UInt(v) => Some(i64::from(*v)),
        Field::ULong(v) => i64::try_from(*v).ok(),
        _ => None,
    }
}

fn num(f: &Field) -> Option<f64> {
    match f {
        Field::Float(v) => Some(f64::from(*v)),
        Field::Double(v) => Some(*v),
        Field::Float16(v) => Some(v.to_f64()),
        other => int(other).map(|i| i as f64),
    }
}

fn finite32(x: f64) -> Option<f32> {
    let f = x as f32;
    f.is_finite().then_some(f)
}

fn shorten(s: String) -> String {
    if s.len() > 60 {
        format!("{}...", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

/// A cell as the record API would print it, for error messages.
fn describe(cell: &Cell<'_>) -> String {
    shorten(match cell {
        Cell::Null => "null".to_owned(),
        Cell::Scalar(f) => f.to_string(),
        Cell::Str(s) => format!("\"{s}\""),
        Cell::Bytes(b) => format!("{b:?}"),
        Cell::List(list) => {
            let items: Vec<String> = list
                .elements()
                .map(|e| match e {
                    Ok(Element::Value(c)) => describe(&c),
                    Ok(Element::Null) => "null".to_owned(),
                    Err(_) => "?".to_owned(),
                })
                .collect();
            format!("[{}]", items.join(", "))
        }
    })
}

/// A scalar as a value of type `ty`, if it is one.
fn scalar_kind(ty: FeatureType, f: &Field) -> Option<Kind> {
    Some(match ty {
        FeatureType::Int32 => Kind::Int32Val(int(f).and_then(|i| i32::try_from(i).ok())?),
        FeatureType::Int64 => Kind::Int64Val(int(f)?),
        FeatureType::Float32 => Kind::FloatVal(num(f).and_then(finite32)?),
        FeatureType::Float64 => Kind::DoubleVal(num(f).filter(|x| x.is_finite())?),
        FeatureType::Bool => match f {
            Field::Bool(b) => Kind::BoolVal(*b),
            _ => return None,
        },
        FeatureType::String | FeatureType::Bytes | FeatureType::Float32List => return None,
    })
}

fn to_value(ty: FeatureType, cell: &Cell<'_>) -> Result<Value, String> {
    let wrong = || format!("value {} is not a valid {}", describe(cell), ty.as_str());
    let kind = match (ty, cell) {
        (_, Cell::Null) => return Ok(NULL),
        (FeatureType::String, Cell::Str(s)) => Kind::StringVal((*s).to_owned()),
        (FeatureType::Bytes, Cell::Str(s)) => Kind::BytesVal(s.as_bytes().to_vec()),
        (FeatureType::Bytes, Cell::Bytes(b)) => Kind::BytesVal(b.to_vec()),
        (FeatureType::Float32List, Cell::List(list)) => Kind::FloatListVal(FloatList {
            values: list
                .elements()
                .map(|e| match e? {
                    Element::Value(Cell::Scalar(f)) => num(&f).and_then(finite32).ok_or_else(wrong),
                    _ => Err(wrong()),
                })
                .collect::<Result<Vec<f32>, String>>()?,
        }),
        (_, Cell::Scalar(f)) => scalar_kind(ty, f).ok_or_else(wrong)?,
        _ => return Err(wrong()),
    };
    Ok(Value { kind: Some(kind) })
}

/// Timestamp types carry their unit (TIMESTAMP millis/micros/nanos, DATE, INT96); integers are
/// epochs whose unit the source's rules decide; strings are parsed like CSV cells.
fn event_time(cell: &Cell<'_>, nanos: bool) -> Result<EventTime, String> {
    let out_of_range = || format!("timestamp {} out of range", describe(cell));
    let not_a_timestamp = || format!("value {} is not a timestamp", describe(cell));
    match cell {
        Cell::Null => Err("empty timestamp".to_owned()),
        Cell::Str(s) => parse_timestamp(s),
        Cell::Scalar(f) => match f {
            Field::TimestampMicros(us) => Ok(EventTime::Micros(*us)),
            Field::TimestampMillis(ms) => ms
                .checked_mul(1000)
                .map(EventTime::Micros)
                .ok_or_else(out_of_range),
            Field::Date(days) => i64::from(*days)
                .checked_mul(86_400_000_000)
                .map(EventTime::Micros)
                .ok_or_else(out_of_range),
            Field::Long(ns) if nanos => Ok(EventTime::Micros(ns.div_euclid(1000))),
            other => int(other).map(EventTime::Epoch).ok_or_else(not_a_timestamp),
        },
        _ => Err(not_a_timestamp()),
    }
}

fn push_key(ty: KeyType, cell: &Cell<'_>, out: &mut String) -> Result<(), String> {
    match (ty, cell) {
        (_, Cell::Null) => Err("empty entity key".to_owned()),
        (_, Cell::Str(s)) => push_key_part(ty, s, out),
        (KeyType::Int64, other) => {
            let v = match other {
                Cell::Scalar(f) => int(f),
                _ => None,
            }
            .ok_or_else(|| format!("value {} is not an int64 entity key", describe(other)))?;
            use std::fmt::Write as _;
            let _ = write!(out, "{v}");
            Ok(())
        }
        (KeyType::String, other) => Err(format!(
            "value {} is not a string entity key",
            describe(other)
        )),
    }
}

#[cfg(test)]
#[path = "parquet_tests.rs"]
mod tests;
