//! One Parquet file of served-feature rows, in Feast's feature-logging layout
//! (`feast/feature_logging.py`): the join keys; per feature its value, `FEATURE__timestamp` and
//! `FEATURE__status` (Feast's `FieldStatus` numbers); `__log_timestamp`, `__log_date`,
//! `__request_id`; then Ferry's own `__route`, `__fingerprint`, `__derived_version`,
//! `__request_status`. Written with parquet's column writers (no Arrow in the build).

use std::io::Write;
use std::sync::Arc;

use ferry_protos::v1::{value::Kind, FeatureStatus, ValueType};
use parquet::basic::{Compression, LogicalType, Repetition, TimeUnit, Type as Physical};
use parquet::data_type::{
    BoolType, ByteArray, ByteArrayType, DoubleType, FloatType, Int32Type, Int64Type,
};
use parquet::errors::Result;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use parquet::schema::types::{Type, TypePtr};

/// What every row of a file shares: one (service, fingerprint, derived version, feature list).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    pub service: String,
    pub fingerprint: u64,
    pub derived_version: String,
    pub join_keys: Vec<(String, ValueType)>,
    pub features: Vec<(String, ValueType)>,
}

/// One instance of one logged request.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub entity_values: Vec<String>,
    pub values: Vec<Option<Kind>>,
    /// Ferry's `FeatureStatus` numbers.
    pub statuses: Vec<i32>,
    /// 0 = none.
    pub event_times_us: Vec<i64>,
    pub log_time_us: i64,
    pub request_id: String,
    pub route: String,
    pub request_status: String,
}

/// Feast's `FieldStatus` number of a Ferry status (INVALID 0, PRESENT 1, NULL_VALUE 2,
/// NOT_FOUND 3, OUTSIDE_MAX_AGE 4).
pub fn feast_status(ferry: i32) -> i32 {
    match FeatureStatus::try_from(ferry) {
        Ok(FeatureStatus::Present) => 1,
        Ok(FeatureStatus::NullValue) => 2,
        Ok(FeatureStatus::NotFound) => 3,
        Ok(FeatureStatus::OutsideMaxAge) => 4,
        _ => 0,
    }
}

const MICROS_PER_DAY: i64 = 86_400_000_000;

/// Days since the Unix epoch of a time in microseconds (`__log_date`).
pub fn day_of(time_us: i64) -> i32 {
    i32::try_from(time_us.div_euclid(MICROS_PER_DAY)).unwrap_or(0)
}

fn leaf(
    name: &str,
    physical: Physical,
    rep: Repetition,
    logical: Option<LogicalType>,
) -> Result<TypePtr> {
    let t = Type::primitive_type_builder(name, physical)
        .with_repetition(rep)
        .with_logical_type(logical)
        .build()?;
    Ok(Arc::new(t))
}

fn timestamp() -> Option<LogicalType> {
    Some(LogicalType::timestamp(true, TimeUnit::MICROS))
}

/// The column of a feature's value.
fn value_type(name: &str, t: ValueType) -> Result<TypePtr> {
    const OPTIONAL: Repetition = Repetition::OPTIONAL;
    Ok(match t {
        ValueType::Int32 => leaf(name, Physical::INT32, OPTIONAL, None)?,
        ValueType::Int64 => leaf(name, Physical::INT64, OPTIONAL, None)?,
        ValueType::Float32 => leaf(name, Physical::FLOAT, OPTIONAL, None)?,
        ValueType::Float64 => leaf(name, Physical::DOUBLE, OPTIONAL, None)?,
        ValueType::Bool => leaf(name, Physical::BOOLEAN, OPTIONAL, None)?,
        ValueType::String => leaf(
            name,
            Physical::BYTE_ARRAY,
            OPTIONAL,
            Some(LogicalType::String),
        )?,
        ValueType::Bytes | ValueType::Unspecified => {
            leaf(name, Physical::BYTE_ARRAY, OPTIONAL, None)?
        }
        ValueType::Float32List => {
            let element = leaf("element", Physical::FLOAT, OPTIONAL, None)?;
            let list = Type::group_type_builder("list")
                .with_repetition(Repetition::REPEATED)
                .with_fields(vec![element])
                .build()?;
            Arc::new(
                Type::group_type_builder(name)
                    .with_repetition(OPTIONAL)
                    .with_logical_type(Some(LogicalType::List))
                    .with_fields(vec![Arc::new(list)])
                    .build()?,
            )
        }
    })
}

/// The file's schema, in Feast's column order.
pub fn schema(layout: &Layout) -> Result<Type> {
    const OPTIONAL: Repetition = Repetition::OPTIONAL;
    const REQUIRED: Repetition = Repetition::REQUIRED;
    let text = Some(LogicalType::String);
    let mut fields = Vec::new();
    for (name, t) in &layout.join_keys {
        fields.push(match t {
            ValueType::Int64 => leaf(name, Physical::INT64, OPTIONAL, None)?,
            _ => leaf(name, Physical::BYTE_ARRAY, OPTIONAL, text.clone())?,
        });
    }
    for (name, t) in &layout.features {
        fields.push(value_type(name, *t)?);
        let ts = format!("{name}__timestamp");
        fields.push(leaf(&ts, Physical::INT64, OPTIONAL, timestamp())?);
        fields.push(leaf(
            &format!("{name}__status"),
            Physical::INT32,
            REQUIRED,
            None,
        )?);
    }
    fields.push(leaf(
        "__log_timestamp",
        Physical::INT64,
        REQUIRED,
        timestamp(),
    )?);
    let date = Some(LogicalType::Date);
    fields.push(leaf("__log_date", Physical::INT32, REQUIRED, date)?);
    for name in [
        "__request_id",
        "__route",
        "__fingerprint",
        "__derived_version",
        "__request_status",
    ] {
        fields.push(leaf(name, Physical::BYTE_ARRAY, REQUIRED, text.clone())?);
    }
    Type::group_type_builder("schema")
        .with_fields(fields)
        .build()
}

/// Writes `rows` as one file (one row group) to `out`.
pub fn write<W: Write + Send>(out: W, layout: &Layout, rows: &[Row]) -> Result<()> {
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    let mut file = SerializedFileWriter::new(out, Arc::new(schema(layout)?), Arc::new(props))?;
    let mut group = file.next_row_group()?;
    let mut columns = Columns {
        layout,
        rows,
        next: 0,
    };
    while let Some(mut col) = group.next_column()? {
        columns.write_next(&mut col)?;
        col.close()?;
    }
    group.close()?;
    file.close()?;
    Ok(())
}

/// The leaf columns in schema order: join keys, then (value, timestamp, status) per feature,
/// then the log columns.
struct Columns<'a> {
    layout: &'a Layout,
    rows: &'a [Row],
    next: usize,
}

impl Columns<'_> {
    fn write_next(&mut self, col: &mut SerializedColumnWriter<'_>) -> Result<()> {
        let i = self.next;
        self.next += 1;
        let (keys, features) = (self.layout.join_keys.len(), self.layout.features.len());
        if i < keys {
            return self.join_key(col, i);
        }
        let j = i - keys;
        if j < 3 * features {
            let (f, which) = (j / 3, j % 3);
            return match which {
                0 => self.value(col, f),
                1 => {
                    let times = self.rows.iter().map(|r| r.event_times_us.get(f).copied());
                    optional_i64(col, times.map(|t| t.filter(|t| *t != 0)))
                }
                _ => {
                    let statuses = self
                        .rows
                        .iter()
                        .map(|r| feast_status(r.statuses.get(f).copied().unwrap_or_default()));
                    let values: Vec<i32> = statuses.collect();
                    col.typed::<Int32Type>()
                        .write_batch(&values, None, None)
                        .map(drop)
                }
            };
        }
        self.log_column(col, j - 3 * features)
    }

    fn join_key(&self, col: &mut SerializedColumnWriter<'_>, k: usize) -> Result<()> {
        let values = self.rows.iter().map(|r| r.entity_values.get(k));
        match self.layout.join_keys[k].1 {
            ValueType::Int64 => optional_i64(col, values.map(|v| v.and_then(|v| v.parse().ok()))),
            _ => optional_bytes(col, values.map(|v| v.map(|v| v.as_bytes().to_vec()))),
        }
    }

    fn log_column(&self, col: &mut SerializedColumnWriter<'_>, c: usize) -> Result<()> {
        let rows = self.rows;
        match c {
            0 => {
                let v: Vec<i64> = rows.iter().map(|r| r.log_time_us).collect();
                col.typed::<Int64Type>()
                    .write_batch(&v, None, None)
                    .map(drop)
            }
            1 => {
                let v: Vec<i32> = rows.iter().map(|r| day_of(r.log_time_us)).collect();
                col.typed::<Int32Type>()
                    .write_batch(&v, None, None)
                    .map(drop)
            }
            _ => {
                let fp = format!("{:016x}", self.layout.fingerprint);
                let text = |r: &Row| -> ByteArray {
                    let s: &str = match c {
                        2 => &r.request_id,
                        3 => &r.route,
                        4 => &fp,
                        5 => &self.layout.derived_version,
                        _ => &r.request_status,
                    };
                    ByteArray::from(s.as_bytes().to_vec())
                };
                let v: Vec<ByteArray> = rows.iter().map(text).collect();
                col.typed::<ByteArrayType>()
                    .write_batch(&v, None, None)
                    .map(drop)
            }
        }
    }

    fn value(&self, col: &mut SerializedColumnWriter<'_>, f: usize) -> Result<()> {
        let kinds = self.rows.iter().map(|r| r.values.get(f).cloned().flatten());
        match self.layout.features[f].1 {
            ValueType::Int32 => optional::<Int32Type>(
                col,
                kinds.map(|k| match k {
                    Some(Kind::Int32Val(v)) => Some(v),
                    _ => None,
                }),
            ),
            ValueType::Int64 => optional_i64(
                col,
                kinds.map(|k| match k {
                    Some(Kind::Int64Val(v)) => Some(v),
                    _ => None,
                }),
            ),
            ValueType::Float32 => optional::<FloatType>(
                col,
                kinds.map(|k| match k {
                    Some(Kind::FloatVal(v)) => Some(v),
                    _ => None,
                }),
            ),
            ValueType::Float64 => optional::<DoubleType>(
                col,
                kinds.map(|k| match k {
                    Some(Kind::DoubleVal(v)) => Some(v),
                    _ => None,
                }),
            ),
            ValueType::Bool => optional::<BoolType>(
                col,
                kinds.map(|k| match k {
                    Some(Kind::BoolVal(v)) => Some(v),
                    _ => None,
                }),
            ),
            ValueType::String => optional_bytes(
                col,
                kinds.map(|k| match k {
                    Some(Kind::StringVal(v)) => Some(v.into_bytes()),
                    _ => None,
                }),
            ),
            ValueType::Bytes | ValueType::Unspecified => optional_bytes(
                col,
                kinds.map(|k| match k {
                    Some(Kind::BytesVal(v)) => Some(v),
                    _ => None,
                }),
            ),
            ValueType::Float32List => float_lists(
                col,
                kinds.map(|k| match k {
                    Some(Kind::FloatListVal(l)) => Some(l.values),
                    _ => None,
                }),
            ),
        }
    }
}

/// An optional column: definition level 1 for a value, 0 for null.
fn optional<T: parquet::data_type::DataType>(
    col: &mut SerializedColumnWriter<'_>,
    items: impl Iterator<Item = Option<T::T>>,
) -> Result<()>
where
    T::T: Clone,
{
    let (mut values, mut defs) = (Vec::new(), Vec::new());
    for item in items {
        defs.push(i16::from(item.is_some()));
        values.extend(item);
    }
    col.typed::<T>()
        .write_batch(&values, Some(&defs), None)
        .map(drop)
}

fn optional_i64(
    col: &mut SerializedColumnWriter<'_>,
    items: impl Iterator<Item = Option<i64>>,
) -> Result<()> {
    optional::<Int64Type>(col, items)
}

fn optional_bytes(
    col: &mut SerializedColumnWriter<'_>,
    items: impl Iterator<Item = Option<Vec<u8>>>,
) -> Result<()> {
    optional::<ByteArrayType>(col, items.map(|b| b.map(ByteArray::from)))
}

/// A 3-level LIST of optional floats: def 0 = null list, 1 = empty, 3 = an element; rep 0
/// starts a row, 1 continues its list.
fn float_lists(
    col: &mut SerializedColumnWriter<'_>,
    items: impl Iterator<Item = Option<Vec<f32>>>,
) -> Result<()> {
    let (mut values, mut defs, mut reps) = (Vec::new(), Vec::new(), Vec::new());
    for item in items {
        match item {
            None => {
                defs.push(0);
                reps.push(0);
            }
            Some(list) if list.is_empty() => {
                defs.push(1);
                reps.push(0);
            }
            Some(list) => {
                for (i, v) in list.into_iter().enumerate() {
                    defs.push(3);
                    reps.push(i16::from(i > 0));
                    values.push(v);
                }
            }
        }
    }
    col.typed::<FloatType>()
        .write_batch(&values, Some(&defs), Some(&reps))
        .map(drop)
}
