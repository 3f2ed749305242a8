//! Parquet sources, read row by row with the parquet crate's record API (no Arrow, to keep the
//! build small). Only the needed columns are read. The record API panics on a physical/logical
//! type combination it cannot convert, and release builds abort on panic, so every needed leaf
//! column is checked against the combinations it handles before any row is read.

use std::fs::File;
use std::path::Path;

use ferry_protos::v1::{value::Kind, FloatList, Value};
use parquet::basic::{ConvertedType, LogicalType, TimeUnit, Type as Physical};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use parquet::schema::types::Type as SchemaType;

use super::cell::{parse_timestamp_us, push_key_part, NULL};
use super::{column_indexes, LatestRows, SourceError, ViewRow, ViewSpec};
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

/// Whether the record API converts this leaf without panicking (mirrors `Field::convert_*`).
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

pub(super) fn load_latest(spec: &ViewSpec<'_>) -> Result<LatestRows, SourceError> {
    let file = spec.file;
    let reader = open(file)?;
    let header = top_level_names(&reader);
    let mut wanted: Vec<&str> = vec![spec.timestamp_field];
    wanted.extend(spec.keys.iter().map(|(n, _)| n.as_str()));
    wanted.extend(spec.features.iter().map(|(n, _)| n.as_str()));
    column_indexes(file, &header, &wanted)?;

    let schema = reader.metadata().file_metadata().schema_descr();
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
    let nanos = is_nanosecond_timestamp(&reader, spec.timestamp_field);
    let projection = SchemaType::group_type_builder("schema")
        .with_fields(
            schema
                .root_schema()
                .get_fields()
                .iter()
                .filter(|f| wanted.contains(&f.name()))
                .cloned()
                .collect(),
        )
        .build()
        .map_err(|e| unreadable(file, e))?;

    let cell_err = |row: u64, column: &str, reason: String| SourceError::Field {
        file: file.display().to_string(),
        row,
        column: column.to_owned(),
        reason,
    };
    let mut latest = LatestRows::default();
    let mut positions: Vec<usize> = Vec::new();
    let mut key = String::new();
    let rows = reader
        .get_row_iter(Some(projection))
        .map_err(|e| unreadable(file, e))?;
    for (n, row) in rows.enumerate() {
        let row_no = n as u64 + 1;
        let columns = row
            .map_err(|e| unreadable(file, format!("row {row_no}: {e}")))?
            .into_columns();
        if positions.is_empty() {
            positions = wanted
                .iter()
                .map(|w| {
                    columns
                        .iter()
                        .position(|(name, _)| name == w)
                        .unwrap_or(usize::MAX)
                })
                .collect();
        }
        let field = |i: usize| columns.get(positions[i]).map_or(&Field::Null, |(_, f)| f);
        latest.rows_read += 1;

        key.clear();
        for (k, (name, ty)) in spec.keys.iter().enumerate() {
            if k > 0 {
                key.push(ferry_protos::ENTITY_KEY_SEPARATOR);
            }
            push_key(*ty, field(1 + k), &mut key).map_err(|r| cell_err(row_no, name, r))?;
        }
        let ts =
            timestamp_us(field(0), nanos).map_err(|r| cell_err(row_no, spec.timestamp_field, r))?;
        if !latest.wants(&key, ts) {
            continue;
        }
        let first_feature = 1 + spec.keys.len();
        let mut values = Vec::with_capacity(spec.features.len());
        for (i, (name, ty)) in spec.features.iter().enumerate() {
            values.push(
                to_value(*ty, field(first_feature + i)).map_err(|r| cell_err(row_no, name, r))?,
            );
        }
        latest.put(
            &key,
            ViewRow {
                event_time_us: ts,
                values,
            },
        );
    }
    Ok(latest)
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

fn describe(f: &Field) -> String {
    let s = f.to_string();
    if s.len() > 60 {
        format!("{}...", s.chars().take(60).collect::<String>())
    } else {
        s
    }
}

fn to_value(ty: FeatureType, f: &Field) -> Result<Value, String> {
    if matches!(f, Field::Null) {
        return Ok(NULL);
    }
    let wrong = || format!("value {} is not a valid {}", describe(f), ty.as_str());
    let kind = match ty {
        FeatureType::Int32 => Kind::Int32Val(
            int(f)
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(wrong)?,
        ),
        FeatureType::Int64 => Kind::Int64Val(int(f).ok_or_else(wrong)?),
        FeatureType::Float32 => Kind::FloatVal(num(f).and_then(finite32).ok_or_else(wrong)?),
        FeatureType::Float64 => {
            Kind::DoubleVal(num(f).filter(|x| x.is_finite()).ok_or_else(wrong)?)
        }
        FeatureType::Bool => match f {
            Field::Bool(b) => Kind::BoolVal(*b),
            _ => return Err(wrong()),
        },
        FeatureType::String => match f {
            Field::Str(s) => Kind::StringVal(s.clone()),
            _ => return Err(wrong()),
        },
        FeatureType::Bytes => match f {
            Field::Bytes(b) => Kind::BytesVal(b.data().to_vec()),
            Field::Str(s) => Kind::BytesVal(s.as_bytes().to_vec()),
            _ => return Err(wrong()),
        },
        FeatureType::Float32List => match f {
            Field::ListInternal(list) => Kind::FloatListVal(FloatList {
                values: list
                    .elements()
                    .iter()
                    .map(|e| num(e).and_then(finite32))
                    .collect::<Option<Vec<f32>>>()
                    .ok_or_else(wrong)?,
            }),
            _ => return Err(wrong()),
        },
    };
    Ok(Value { kind: Some(kind) })
}

/// Timestamp types as they are; integers are epoch seconds (as in CSV) unless the column is
/// declared as a nanosecond timestamp; strings are parsed like CSV cells.
fn timestamp_us(f: &Field, nanos: bool) -> Result<i64, String> {
    let out_of_range = || format!("timestamp {} out of range", describe(f));
    match f {
        Field::TimestampMicros(us) => Ok(*us),
        Field::TimestampMillis(ms) => ms.checked_mul(1000).ok_or_else(out_of_range),
        Field::Date(days) => i64::from(*days)
            .checked_mul(86_400_000_000)
            .ok_or_else(out_of_range),
        Field::Long(ns) if nanos => Ok(ns.div_euclid(1000)),
        Field::Str(s) => parse_timestamp_us(s),
        Field::Null => Err("empty timestamp".to_owned()),
        other => int(other)
            .ok_or_else(|| format!("value {} is not a timestamp", describe(other)))?
            .checked_mul(1_000_000)
            .ok_or_else(out_of_range),
    }
}

fn push_key(ty: KeyType, f: &Field, out: &mut String) -> Result<(), String> {
    match (ty, f) {
        (_, Field::Null) => Err("empty entity key".to_owned()),
        (_, Field::Str(s)) => push_key_part(ty, s, out),
        (KeyType::Int64, other) => {
            let v = int(other)
                .ok_or_else(|| format!("value {} is not an int64 entity key", describe(other)))?;
            out.push_str(&v.to_string());
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
