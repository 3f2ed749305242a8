//! A write body read with its bounds checked as it is read: rows counted per column, and each
//! cell's text and list length checked the moment the cell is parsed, so a request over a bound
//! is refused before the rest of its body is turned into values (and before any row is built).
//! The bounds are `ferry_protos::limits`' (one definition, shared with the docs' table).

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value as Json};

pub use ferry_protos::limits::{
    MAX_VECTOR_BYTES, MAX_WRITE_CELL_BYTES, MAX_WRITE_LIST_ITEMS, MAX_WRITE_ROWS,
};

/// The bound a request went over, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exceeded {
    /// A column holds more than [`MAX_WRITE_ROWS`] values.
    Rows { column: String },
    /// A string cell (text, or bytes as base64) longer than [`MAX_WRITE_CELL_BYTES`].
    Cell { column: String, row: usize },
    /// A list cell with more than [`MAX_WRITE_LIST_ITEMS`] items.
    List { column: String, row: usize },
    /// A row's features of one view encode to more than [`MAX_VECTOR_BYTES`] (checked as each
    /// row is built, before any is written; a stored vector that would grow over it by the
    /// merge is refused per vector).
    Vector {
        view: String,
        row: usize,
        bytes: usize,
    },
}

impl Exceeded {
    /// Ferry's code (`x-ferry-error`).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Rows { .. } => "too_many_rows",
            Self::Cell { .. } => "cell_too_large",
            Self::List { .. } => "list_too_long",
            Self::Vector { .. } => "vector_too_large",
        }
    }
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Rows { column } => write!(
                f,
                "column '{column}' holds more than {MAX_WRITE_ROWS} values: a request writes \
                 at most {MAX_WRITE_ROWS} rows (split it)"
            ),
            Self::Cell { column, row } => write!(
                f,
                "row {row}, column '{column}': a string or bytes cell is at most \
                 {MAX_WRITE_CELL_BYTES} bytes of JSON text"
            ),
            Self::List { column, row } => write!(
                f,
                "row {row}, column '{column}': a list cell holds at most \
                 {MAX_WRITE_LIST_ITEMS} items"
            ),
            Self::Vector { view, row, bytes } => write!(
                f,
                "row {row}: its features of view '{view}' encode to {bytes} bytes; a stored \
                 vector is at most {MAX_VECTOR_BYTES} bytes"
            ),
        }
    }
}

/// Why a body was not read: over a bound, or not JSON (serde_json's error, for FastAPI's
/// description).
#[derive(Debug)]
pub enum Unread {
    Exceeded(Exceeded),
    Json(serde_json::Error),
}

/// The body as a JSON object whose `df` member was read under the bounds; any other member is
/// read as plain JSON (bounded by the body's size alone: it holds no rows). A body that is no
/// object is returned as it is, for the caller's shape check.
pub fn read(body: &[u8]) -> Result<Json, Unread> {
    let tripped = Cell::new(None);
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = Top { tripped: &tripped }
        .deserialize(&mut de)
        .and_then(|v| {
            de.end()?;
            Ok(v)
        });
    match (value, tripped.take()) {
        (_, Some(e)) => Err(Unread::Exceeded(e)),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err(Unread::Json(e)),
    }
}

/// With serde_json's `arbitrary_precision` (which `ferry-core` turns on, so every crate of the
/// build has it), a number reaches a visitor as a one-member map under this key holding its
/// text, exactly as written: serde_json's own `Value` reads it the same way.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

fn number<E: serde::de::Error>(text: String) -> Result<Json, E> {
    text.parse::<Number>().map(Json::Number).map_err(E::custom)
}

/// Where a value sits, which decides its bounds.
#[derive(Clone, Copy)]
enum Level<'a> {
    /// The body: `df` is read as columns.
    Top,
    /// Another top-level member, or anything under it: plain JSON.
    Plain,
    /// `df`: an object's members are columns (anything else is read plainly, for the shape
    /// check to refuse).
    Df,
    /// A column of `df`: its values are rows.
    Column(&'a str),
    /// A cell (row `.1` of column `.0`) or an item of a list cell.
    Cell(&'a str, usize),
}

struct Top<'t> {
    tripped: &'t Cell<Option<Exceeded>>,
}

impl<'de> DeserializeSeed<'de> for Top<'_> {
    type Value = Json;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        d.deserialize_any(Bounded {
            level: Level::Top,
            tripped: self.tripped,
        })
    }
}

/// One value read under the bounds of its level.
#[derive(Clone, Copy)]
struct Bounded<'a, 't> {
    level: Level<'a>,
    tripped: &'t Cell<Option<Exceeded>>,
}

impl<'de> DeserializeSeed<'de> for Bounded<'_, '_> {
    type Value = Json;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Json, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'a> Bounded<'a, '_> {
    fn at(self, level: Level<'a>) -> Self {
        Bounded { level, ..self }
    }

    /// The bound a list at this level goes over when it holds `held` values and gets another.
    fn over(self, held: usize) -> Option<Exceeded> {
        match self.level {
            Level::Column(c) if held >= MAX_WRITE_ROWS => Some(Exceeded::Rows {
                column: c.to_owned(),
            }),
            Level::Cell(c, row) if held >= MAX_WRITE_LIST_ITEMS => Some(Exceeded::List {
                column: c.to_owned(),
                row,
            }),
            _ => None,
        }
    }

    /// Records `e` and stops the parse (its message is not what the caller reports).
    fn trip<E: serde::de::Error>(self, e: Exceeded) -> E {
        let message = e.to_string();
        self.tripped.set(Some(e));
        E::custom(message)
    }
}

impl<'de> Visitor<'de> for Bounded<'_, '_> {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Json, E> {
        Ok(Number::from_f64(v).map_or(Json::Null, Json::Number))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Json, E> {
        if let Level::Cell(column, row) = self.level {
            if v.len() > MAX_WRITE_CELL_BYTES {
                return Err(self.trip(Exceeded::Cell {
                    column: column.to_owned(),
                    row,
                }));
            }
        }
        Ok(Json::String(v.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut out = Vec::new();
        loop {
            let item = match self.level {
                Level::Column(c) => self.at(Level::Cell(c, out.len())),
                Level::Cell(_, _) => self,
                Level::Top | Level::Plain | Level::Df => self.at(Level::Plain),
            };
            let Some(v) = seq.next_element_seed(item)? else {
                return Ok(Json::Array(out));
            };
            if let Some(e) = self.over(out.len()) {
                return Err(self.trip(e));
            }
            out.push(v);
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == NUMBER_TOKEN && out.is_empty() {
                return number(map.next_value::<String>()?);
            }
            let value = match self.level {
                Level::Top if key == "df" => map.next_value_seed(self.at(Level::Df))?,
                Level::Df => map.next_value_seed(Bounded {
                    level: Level::Column(&key),
                    tripped: self.tripped,
                })?,
                Level::Top | Level::Plain => map.next_value_seed(self.at(Level::Plain))?,
                // An object as a cell, or under one: no type takes it (the row check says so),
                // and it is read under the cell's bounds.
                Level::Column(_) | Level::Cell(_, _) => map.next_value_seed(self)?,
            };
            out.insert(key, value);
        }
        Ok(Json::Object(out))
    }
}

#[cfg(test)]
#[path = "bounded_tests.rs"]
mod tests;
