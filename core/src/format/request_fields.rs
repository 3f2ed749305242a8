//! Request fields on-demand views read, for every format: each instance's value of each of the
//! route's request fields (`RouteDerived::fields`), read where the format finds entity ids
//! and taken only as declared. A value of another JSON type is the client's error
//! (`invalid_request_field`), never converted; a missing field is absent with `NOT_FOUND`, an
//! explicit null with `NULL_VALUE`.

use std::borrow::Cow;

use ferry_protos::v1::ValueType;
use serde_json::Value as Json;

use super::declared;
use super::entity::type_name;
use crate::config::{Route, RouteField};
use crate::error::FerryError;
use ferry_expr::{cost::MAX_LIST_LEN, Absence, Input, List, Val};

/// The request field values of a request: instance i's field k at `i * fields.len() + k`.
pub type Fields = Vec<Input<'static>>;

/// Whether the route reads any request field (else no format looks for one).
pub fn wanted(route: &Route) -> bool {
    !route.derived.fields.is_empty()
}

/// One instance's fields from an object whose members hold them (a KServe v1 instance, a JSON
/// entity, a Feast row): `member(name)` gives the member's value, `Err` when it is given twice.
pub fn of_members<'v>(
    member: impl Fn(&str) -> Result<Option<Cow<'v, Json>>, FerryError>,
    route: &Route,
    place: &dyn Fn() -> String,
    out: &mut Fields,
) -> Result<(), FerryError> {
    for f in &route.derived.fields {
        let v = member(&f.field)?;
        out.push(typed(v.as_deref(), f, place)?);
    }
    Ok(())
}

/// A header's text as a request field: a string field takes the text as it is; any other
/// type reads the text as JSON (`42`, `1.5`, `true`, `[0.1, 0.2]`).
pub fn of_header(
    text: Option<&str>,
    f: &RouteField,
    place: &dyn Fn() -> String,
) -> Result<Input<'static>, FerryError> {
    let Some(text) = text else {
        return Ok(Input::Absent(Absence::NotFound));
    };
    if f.value_type == ValueType::String {
        return Ok(Input::Present(Val::Str(Cow::Owned(text.to_owned()))));
    }
    let json: Json = serde_json::from_str(text.trim()).map_err(|_| {
        invalid(
            place,
            f,
            format!("expected {}, got header text that is not JSON", want(f)),
        )
    })?;
    typed(Some(&json), f, place)
}

/// A JSON value as the field's declared type.
pub fn typed(
    v: Option<&Json>,
    f: &RouteField,
    place: &dyn Fn() -> String,
) -> Result<Input<'static>, FerryError> {
    let v = match v {
        None => return Ok(Input::Absent(Absence::NotFound)),
        Some(Json::Null) => return Ok(Input::Absent(Absence::NullValue)),
        Some(v) => v,
    };
    let wrong = || invalid(place, f, format!("expected {}, got {}", want(f), shown(v)));
    let val = match (f.value_type, v) {
        (ValueType::Int64, Json::Number(n)) => Val::Int(n.as_i64().ok_or_else(wrong)?),
        (ValueType::Float64, Json::Number(n)) => Val::Double(finite(n).ok_or_else(wrong)?),
        (ValueType::Bool, Json::Bool(b)) => Val::Bool(*b),
        (ValueType::String, Json::String(s)) => Val::Str(Cow::Owned(s.clone())),
        (ValueType::Float32List, Json::Array(items)) => {
            if items.len() > MAX_LIST_LEN {
                return Err(invalid(
                    place,
                    f,
                    format!(
                        "a list of {} elements, over the limit of {MAX_LIST_LEN}",
                        items.len()
                    ),
                ));
            }
            let mut out = Vec::with_capacity(items.len());
            for (i, x) in items.iter().enumerate() {
                let n = match x {
                    Json::Number(n) => finite(n),
                    _ => None,
                };
                out.push(n.ok_or_else(|| {
                    invalid(
                        place,
                        f,
                        format!("element {i}: expected a finite number, got {}", shown(x)),
                    )
                })?);
            }
            Val::List(List::F64(Cow::Owned(out)))
        }
        _ => return Err(wrong()),
    };
    Ok(Input::Present(val))
}

/// A tensor holding a request field, one element (a row of `D` for a float32_list) per
/// instance: its elements flattened, its shape and datatype. `n`: the instances the entity
/// tensors hold, if any (the tensor must hold as many). The shape is the client's word: its
/// rows are checked against the route's `max_entities` and a row's width against the list
/// limit, and both against the elements actually sent, before anything is allocated.
pub fn of_tensor(
    elements: &[Json],
    dims: &[u64],
    datatype: &str,
    f: &RouteField,
    (n, route): (Option<usize>, &Route),
) -> Result<Vec<Input<'static>>, FerryError> {
    let place = || format!("input tensor '{}'", f.field);
    let ok_type = match f.value_type {
        ValueType::Int64 => datatype.starts_with("INT") || datatype.starts_with("UINT"),
        ValueType::Float64 | ValueType::Float32List => datatype.starts_with("FP"),
        ValueType::Bool => datatype == "BOOL",
        ValueType::String => datatype == "BYTES",
        _ => false,
    };
    if !ok_type {
        let reason = format!("expected {}, got datatype '{datatype}'", want(f));
        return Err(invalid(&place, f, reason));
    }
    let (rows, width) = match (f.value_type, dims) {
        (ValueType::Float32List, [rows, width]) => (*rows, *width),
        (ValueType::Float32List, _) => {
            let reason = format!("a float32_list tensor has shape [N, D], got {dims:?}");
            return Err(invalid(&place, f, reason));
        }
        (_, [rows] | [rows, 1]) => (*rows, 1),
        _ => {
            let reason = format!("shape must be [N] or [N, 1], got {dims:?}");
            return Err(invalid(&place, f, reason));
        }
    };
    let rows = declared::entities(rows, route)?;
    let width = declared::within(&place, width, MAX_LIST_LEN as u64, "the list limit")?;
    if width == 0 {
        let reason =
            format!("a float32_list tensor's rows hold at least one element, got {dims:?}");
        return Err(invalid(&place, f, reason));
    }
    if n.is_some_and(|n| n != rows) || rows.checked_mul(width) != Some(elements.len()) {
        let reason = format!(
            "{} elements for shape {dims:?} and {} instances",
            elements.len(),
            n.map_or("its".to_string(), |n| n.to_string())
        );
        return Err(invalid(&place, f, reason));
    }
    let mut out = declared::vec_with(&place, rows)?;
    for (i, row) in elements.chunks_exact(width).enumerate() {
        let at = || format!("input tensor '{}' element {i}", f.field);
        out.push(match f.value_type {
            ValueType::Float32List => typed(Some(&Json::Array(row.to_vec())), f, &at)?,
            _ => typed(row.first(), f, &at)?,
        });
    }
    Ok(out)
}

/// Per-field columns (one value per instance each) as the per-instance layout of [`Fields`].
pub fn interleave(columns: Vec<Vec<Input<'static>>>, n: usize) -> Fields {
    let mut out = Vec::with_capacity(n * columns.len());
    for i in 0..n {
        for c in &columns {
            out.push(
                c.get(i)
                    .cloned()
                    .unwrap_or(Input::Absent(Absence::NotFound)),
            );
        }
    }
    out
}

fn finite(n: &serde_json::Number) -> Option<f64> {
    n.as_f64().filter(|x| x.is_finite())
}

/// What a field of this type must hold, for messages.
fn want(f: &RouteField) -> &'static str {
    match f.value_type {
        ValueType::Int64 => "an integer (int64)",
        ValueType::Float64 => "a finite number (float64)",
        ValueType::Bool => "a boolean (bool)",
        ValueType::String => "a string (string)",
        ValueType::Float32List => "an array of numbers (float32_list)",
        _ => "a value of its declared type",
    }
}

/// A value as a message names it: a number by its text (a float for an int64 field), other
/// values by their JSON type.
fn shown(v: &Json) -> String {
    match v {
        Json::Number(n) => format!("the number {n}"),
        other => type_name(other).to_string(),
    }
}

pub fn invalid(place: &dyn Fn() -> String, f: &RouteField, reason: String) -> FerryError {
    FerryError::InvalidRequestField {
        place: place(),
        field: f.field.clone(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(t: ValueType) -> RouteField {
        RouteField {
            field: "amount".into(),
            value_type: t,
        }
    }

    fn read(t: ValueType, text: &str) -> Result<Input<'static>, FerryError> {
        let v: Json = serde_json::from_str(text).unwrap();
        typed(Some(&v), &field(t), &|| "instances[2]".into())
    }

    #[test]
    fn values_are_taken_only_as_declared() {
        use ValueType as T;
        assert_eq!(read(T::Int64, "42").unwrap(), Input::Present(Val::Int(42)));
        assert_eq!(
            read(T::Float64, "42").unwrap(),
            Input::Present(Val::Double(42.0))
        );
        assert_eq!(
            read(T::Float32List, "[0.5, 1]").unwrap(),
            Input::Present(Val::List(List::F64(Cow::Owned(vec![0.5, 1.0]))))
        );
        assert_eq!(
            read(T::Int64, "null").unwrap(),
            Input::Absent(Absence::NullValue)
        );
        assert_eq!(
            typed(None, &field(T::Bool), &String::new).unwrap(),
            Input::Absent(Absence::NotFound)
        );
        let refused = |t, text: &str| {
            let e = read(t, text).unwrap_err();
            assert_eq!((e.status(), e.code()), (400, "invalid_request_field"));
            e.message()
        };
        assert_eq!(
            refused(T::Float64, r#""12.5""#),
            "instances[2]: request field 'amount': expected a finite number (float64), got a string"
        );
        assert_eq!(
            refused(T::Int64, "1.5"),
            "instances[2]: request field 'amount': expected an integer (int64), got the number 1.5"
        );
        assert!(refused(T::Int64, "9223372036854775808").contains("got the number"));
        let e = refused(T::Float64, "1e400");
        assert!(
            e.contains("a finite number (float64), got the number"),
            "{e}"
        );
        assert!(refused(T::Float32List, "0.5").contains("an array of numbers"));
        assert!(refused(T::Float32List, "[0.5, null]").contains("element 1"));
        let long = format!("[{}]", vec!["1"; MAX_LIST_LEN + 1].join(","));
        assert!(refused(T::Float32List, &long).contains("over the limit of 4096"));
        assert!(refused(T::Bool, "1").contains("a boolean"));
    }

    #[test]
    fn headers_are_text_or_json() {
        let place = || "the request".to_string();
        let f = field(ValueType::String);
        assert_eq!(
            of_header(Some("FR"), &f, &place).unwrap(),
            Input::Present(Val::Str(Cow::Owned("FR".into())))
        );
        let f = field(ValueType::Float32List);
        assert_eq!(
            of_header(Some("[1, 2]"), &f, &place).unwrap(),
            Input::Present(Val::List(List::F64(Cow::Owned(vec![1.0, 2.0]))))
        );
        let f = field(ValueType::Float64);
        assert_eq!(
            of_header(None, &f, &place).unwrap(),
            Input::Absent(Absence::NotFound)
        );
        let e = of_header(Some("abc"), &f, &place).unwrap_err();
        assert_eq!(e.code(), "invalid_request_field");
    }
}
