//! One Parquet leaf column of a row group, read a batch of records at a time with the crate's
//! typed column readers (values plus definition and repetition levels), and its cells by row.
//! Values stay in the decoder's buffers; a cell borrows from them, so reading a row allocates
//! nothing until a value is kept.

use std::ops::Range;

use parquet::column::reader::ColumnReader;
use parquet::data_type::{ByteArray, Int96};
use parquet::errors::ParquetError;
use parquet::record::Field;
use parquet::schema::types::ColumnDescPtr;

/// How a leaf's definition levels read, worked out from its schema path.
#[derive(Clone, Copy, Debug)]
pub(super) struct Levels {
    pub max_def: i16,
    /// Whether the leaf is the element of a list (one repeated level).
    pub list: bool,
    /// For a list: the definition level of an empty list. Lower means the list is null, higher
    /// (below `max_def`) a null element.
    pub empty_list_def: i16,
}

/// The decoded values of one batch, by physical type.
enum Values {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    I96(Vec<Int96>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bytes(Vec<ByteArray>),
}

/// One cell of a row, borrowed from the batch.
pub(super) enum Cell<'a> {
    Null,
    /// Any non-byte-array scalar, converted as the record API converts it.
    Scalar(Field),
    Str(&'a str),
    Bytes(&'a [u8]),
    /// A non-null list: its level range in the batch, and the value index of its first element.
    List(ListCell<'a>),
}

pub(super) struct ListCell<'a> {
    column: &'a ColumnBatch,
    levels: Range<usize>,
    first_value: usize,
}

/// One element of a list cell.
pub(super) enum Element<'a> {
    Null,
    Value(Cell<'a>),
}

impl<'a> ListCell<'a> {
    /// The elements in order (an empty list has none).
    pub fn elements(&self) -> impl Iterator<Item = Result<Element<'a>, String>> + 'a {
        let column: &'a ColumnBatch = self.column;
        let mut value = self.first_value;
        self.levels.clone().filter_map(move |l| {
            let def = column.def[l];
            if def == column.levels.empty_list_def {
                None
            } else if def == column.levels.max_def {
                value += 1;
                Some(column.scalar(value - 1).map(Element::Value))
            } else {
                Some(Ok(Element::Null))
            }
        })
    }
}

pub(super) struct ColumnBatch {
    reader: ColumnReader,
    descr: ColumnDescPtr,
    levels: Levels,
    /// Whether BYTE_ARRAY values are text (UTF8, ENUM, JSON), as the record API decides.
    text: bool,
    values: Values,
    def: Vec<i16>,
    rep: Vec<i16>,
    /// Per row of the batch (plus one end marker): its first level and its first value index.
    /// Empty for a required, non-repeated column, where row, level and value coincide.
    row_level: Vec<u32>,
    row_value: Vec<u32>,
}

/// Reads one batch of records into the value buffer of the column's physical type: one match
/// arm per (reader, buffer) pair, alike but for their types.
macro_rules! read_batch {
    ($column:expr, $max:expr, $def:expr, $rep:expr; $($reader:ident => $values:ident),+) => {
        match (&mut $column.reader, &mut $column.values) {
            $((ColumnReader::$reader(r), Values::$values(v)) => {
                v.clear();
                r.read_records($max, $def, $rep, v)?
            })+
            _ => {
                return Err(ParquetError::General(format!(
                    "column {}: physical type {} is not supported",
                    $column.descr.path(),
                    $column.descr.physical_type()
                )))
            }
        }
    };
}

impl ColumnBatch {
    pub fn new(reader: ColumnReader, descr: ColumnDescPtr, levels: Levels) -> Self {
        use parquet::basic::{ConvertedType as C, Type as P};
        let values = match descr.physical_type() {
            P::BOOLEAN => Values::Bool(Vec::new()),
            P::INT32 => Values::I32(Vec::new()),
            P::INT64 => Values::I64(Vec::new()),
            P::INT96 => Values::I96(Vec::new()),
            P::FLOAT => Values::F32(Vec::new()),
            P::DOUBLE => Values::F64(Vec::new()),
            P::BYTE_ARRAY | P::FIXED_LEN_BYTE_ARRAY => Values::Bytes(Vec::new()),
        };
        let text = matches!(descr.converted_type(), C::UTF8 | C::ENUM | C::JSON);
        ColumnBatch {
            reader,
            descr,
            levels,
            text,
            values,
            def: Vec::new(),
            rep: Vec::new(),
            row_level: Vec::new(),
            row_value: Vec::new(),
        }
    }

    /// Replaces the batch with the next `max_records` records (fewer at the end of the row
    /// group); returns how many were read.
    pub fn read(&mut self, max_records: usize) -> Result<usize, ParquetError> {
        self.def.clear();
        self.rep.clear();
        let def = (self.levels.max_def > 0).then_some(&mut self.def);
        let rep = self.levels.list.then_some(&mut self.rep);
        let (records, _, levels) = read_batch!(self, max_records, def, rep;
            BoolColumnReader => Bool, Int32ColumnReader => I32, Int64ColumnReader => I64,
            Int96ColumnReader => I96, FloatColumnReader => F32, DoubleColumnReader => F64,
            ByteArrayColumnReader => Bytes);
        self.index_rows(records, levels)?;
        Ok(records)
    }

    fn index_rows(&mut self, records: usize, levels: usize) -> Result<(), ParquetError> {
        self.row_level.clear();
        self.row_value.clear();
        if self.levels.max_def == 0 && !self.levels.list {
            return Ok(());
        }
        let max_def = self.levels.max_def;
        let mut value = 0u32;
        for l in 0..levels {
            if !self.levels.list || self.rep.get(l) == Some(&0) {
                self.row_level.push(l as u32);
                self.row_value.push(value);
            }
            if max_def == 0 || self.def.get(l) == Some(&max_def) {
                value += 1;
            }
        }
        self.row_level.push(levels as u32);
        self.row_value.push(value);
        if self.row_level.len() != records + 1 {
            return Err(ParquetError::General(format!(
                "column {}: {records} records but {} rows in their levels",
                self.descr.path(),
                self.row_level.len() - 1
            )));
        }
        Ok(())
    }

    /// The cell of row `row` of the batch.
    pub fn cell(&self, row: usize) -> Result<Cell<'_>, String> {
        if self.row_level.is_empty() {
            return self.scalar(row);
        }
        let first = self.row_level[row] as usize;
        let def = self.def.get(first).copied().unwrap_or(self.levels.max_def);
        let first_value = self.row_value[row] as usize;
        if self.levels.list {
            if def < self.levels.empty_list_def {
                return Ok(Cell::Null);
            }
            return Ok(Cell::List(ListCell {
                column: self,
                levels: first..self.row_level[row + 1] as usize,
                first_value,
            }));
        }
        if def < self.levels.max_def {
            return Ok(Cell::Null);
        }
        self.scalar(first_value)
    }

    /// Value number `i` of the batch as a cell.
    fn scalar(&self, i: usize) -> Result<Cell<'_>, String> {
        let missing = || format!("value {i} missing from the column's batch");
        let d = &self.descr;
        Ok(match &self.values {
            Values::Bool(v) => Cell::Scalar(Field::convert_bool(d, *v.get(i).ok_or_else(missing)?)),
            Values::I32(v) => Cell::Scalar(Field::convert_int32(d, *v.get(i).ok_or_else(missing)?)),
            Values::I64(v) => Cell::Scalar(Field::convert_int64(d, *v.get(i).ok_or_else(missing)?)),
            Values::I96(v) => Cell::Scalar(Field::convert_int96(d, *v.get(i).ok_or_else(missing)?)),
            Values::F32(v) => Cell::Scalar(Field::convert_float(d, *v.get(i).ok_or_else(missing)?)),
            Values::F64(v) => {
                Cell::Scalar(Field::convert_double(d, *v.get(i).ok_or_else(missing)?))
            }
            Values::Bytes(v) => {
                let data = v.get(i).ok_or_else(missing)?.data();
                if self.text {
                    Cell::Str(std::str::from_utf8(data).map_err(|_| "invalid UTF-8".to_owned())?)
                } else {
                    Cell::Bytes(data)
                }
            }
        })
    }
}
