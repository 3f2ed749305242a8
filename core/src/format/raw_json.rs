//! A JSON body read without building it: objects member by member and arrays element by
//! element, each value kept as the client's text (serde_json's `RawValue`, borrowed from the
//! body), so what Ferry does not own is copied to the new body byte for byte and no value tree
//! is built for it.
//!
//! The body is still checked whole as `serde_json::Value` parsing checks it: serde_json
//! validates the raw parts' syntax and UTF-8, and [`strict`] adds the two rules its raw reading
//! skips (a `\u` escape that is a lone UTF-16 surrogate; nesting deeper than serde_json's
//! recursion limit).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::error::FerryError;

/// How deep arrays and objects may nest: serde_json's recursion limit (it refuses the 128th
/// level when it builds a `Value`).
const MAX_DEPTH: usize = 127;

/// One member of an object: its name (unescaped) and its value's text.
#[derive(Debug)]
pub struct Field<'a> {
    pub name: Cow<'a, str>,
    pub value: &'a RawValue,
}

/// The members of an object in the client's order (duplicates kept).
struct Fields<'a>(Vec<Field<'a>>);

/// A member name: borrowed from the body when it has no escape, unescaped otherwise.
struct Name<'a>(Cow<'a, str>);

/// The body's members when it is a JSON object, `None` when it is other valid JSON; a
/// malformed body is `MalformedJson`.
pub fn document(body: &[u8]) -> Result<Option<Vec<Field<'_>>>, FerryError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let fields = if first == Some(&b'{') {
        let Fields(fields) = serde_json::from_slice(body).map_err(malformed)?;
        Some(fields)
    } else {
        serde_json::from_slice::<IgnoredAny>(body).map_err(malformed)?;
        None
    };
    strict(body)?;
    Ok(fields)
}

/// The members of a value of a checked body, `None` when it is not an object.
pub fn object(value: &RawValue) -> Result<Option<Vec<Field<'_>>>, FerryError> {
    if !value.get().starts_with('{') {
        return Ok(None);
    }
    let Fields(fields) = serde_json::from_str(value.get()).map_err(malformed)?;
    Ok(Some(fields))
}

/// The elements of a value of a checked body, `None` when it is not an array.
pub fn array(value: &RawValue) -> Result<Option<Vec<&RawValue>>, FerryError> {
    if !value.get().starts_with('[') {
        return Ok(None);
    }
    serde_json::from_str(value.get())
        .map(Some)
        .map_err(malformed)
}

/// The members of every element of a value of a checked body, when it is an array of objects
/// only (one pass over its text, where `array` then `object` of each element take two); None
/// otherwise (`array` and `object` say what it is).
pub fn objects(value: &RawValue) -> Option<Vec<Vec<Field<'_>>>> {
    if !value.get().starts_with('[') {
        return None;
    }
    let all: Vec<Fields<'_>> = serde_json::from_str(value.get()).ok()?;
    Some(all.into_iter().map(|Fields(f)| f).collect())
}

/// Where `part` (a string borrowed from `body`) lies in `body`.
pub fn span(body: &[u8], part: &str) -> Result<Range<usize>, FerryError> {
    let start = (part.as_ptr() as usize).wrapping_sub(body.as_ptr() as usize);
    let end = start.wrapping_add(part.len());
    if start <= end && end <= body.len() {
        Ok(start..end)
    } else {
        Err(FerryError::MalformedJson(
            "a member of the body could not be located in it".into(),
        ))
    }
}

fn malformed(e: serde_json::Error) -> FerryError {
    FerryError::MalformedJson(e.to_string())
}

/// The rules of a `Value` parse that serde_json's raw reading does not apply, checked over a
/// syntactically valid body: every `\u` escape of a UTF-16 surrogate is one half of a pair,
/// and arrays and objects nest at most [`MAX_DEPTH`] deep.
fn strict(body: &[u8]) -> Result<(), FerryError> {
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = body.get(i) {
        match b {
            b'"' => {
                // A string: straight to its closing quote, stopping only at escapes.
                i += 1;
                loop {
                    let rest = body.get(i..).unwrap_or_default();
                    match rest.iter().position(|&c| c == b'"' || c == b'\\') {
                        None => return Ok(()),
                        Some(at) if rest.get(at) == Some(&b'"') => {
                            i += at;
                            break;
                        }
                        Some(at) => i += at + escape_len(body, i + at)?,
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(FerryError::MalformedJson(format!(
                        "arrays and objects nest deeper than {MAX_DEPTH} levels (at byte {i})"
                    )));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// The length of the (valid) escape at `body[at]`; a lone surrogate is an error.
fn escape_len(body: &[u8], at: usize) -> Result<usize, FerryError> {
    let Some(unit) = hex_escape(body, at) else {
        return Ok(2);
    };
    let lone = || {
        Err(FerryError::MalformedJson(format!(
            "lone UTF-16 surrogate \\u{unit:04X} in a string (at byte {at})"
        )))
    };
    match unit {
        0xD800..=0xDBFF => match hex_escape(body, at + 6) {
            Some(0xDC00..=0xDFFF) => Ok(12),
            _ => lone(),
        },
        0xDC00..=0xDFFF => lone(),
        _ => Ok(6),
    }
}

/// The code unit of a `\uXXXX` escape at `body[at]`.
fn hex_escape(body: &[u8], at: usize) -> Option<u32> {
    let digits = body.get(at..at + 6)?.strip_prefix(b"\\u")?;
    let text = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(text, 16).ok()
}

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields<'de>, A::Error> {
                let mut fields = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(Name(name)) = map.next_key()? {
                    fields.push(Field {
                        name,
                        value: map.next_value()?,
                    });
                }
                Ok(Fields(fields))
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value as Json;

    fn names<'a>(fields: &'a [Field<'a>]) -> Vec<(&'a str, &'a str)> {
        fields
            .iter()
            .map(|f| (f.name.as_ref(), f.value.get()))
            .collect()
    }

    #[test]
    fn members_keep_order_duplicates_and_text() {
        let body = br#" {"a": 1e400 , "b":{"x" : [1, 2.50,"\u00e9\"\\"]},"a":-0,"c\u0064":"\ud83d\ude00"} "#;
        let fields = document(body).unwrap().unwrap();
        assert_eq!(
            names(&fields),
            [
                ("a", "1e400"),
                ("b", r#"{"x" : [1, 2.50,"\u00e9\"\\"]}"#),
                ("a", "-0"),
                ("cd", r#""\ud83d\ude00""#),
            ]
        );
        assert!(matches!(fields[0].name, Cow::Borrowed(_)));
        assert!(matches!(fields[3].name, Cow::Owned(_)), "escaped name");
        let at = span(body, fields[1].value.get()).unwrap();
        assert_eq!(&body[at], fields[1].value.get().as_bytes());
    }

    #[test]
    fn other_values_are_not_objects_or_arrays() {
        assert!(document(b"[1, 2]").unwrap().is_none());
        assert!(document(b" 3 ").unwrap().is_none());
        let arr = serde_json::from_str::<&RawValue>("[{}, 3, [ ]]").unwrap();
        let items = array(arr).unwrap().unwrap();
        let texts: Vec<&str> = items.iter().map(|v| v.get()).collect();
        assert_eq!(texts, ["{}", "3", "[ ]"]);
        assert!(object(items[1]).unwrap().is_none());
        assert!(object(items[0]).unwrap().unwrap().is_empty());
        assert!(array(items[0]).unwrap().is_none());
        assert!(span(b"abc", "not in it").is_err());
    }

    /// Whatever a `Value` parse refuses, this refuses as malformed JSON, and the reverse.
    #[test]
    fn refuses_exactly_what_a_value_parse_refuses() {
        let deep = |n: usize| format!(r#"{{"a":{}1{}}}"#, "[".repeat(n), "]".repeat(n));
        let bodies: Vec<Vec<u8>> = [
            r#"{"a":1,}"#,
            r#"{"a":01}"#,
            r#"{"a":"x"} trailing"#,
            r#"{"a":"\ud800"}"#,
            r#"{"a":"\ud800\u0041"}"#,
            r#"{"a":"\udc00\ud800"}"#,
            r#"{"a":"\\ud800"}"#,
            r#"{"a":"\ud83d\ude00 \\\"\u20ac"}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":NaN}"#,
            r#"[1,"\udfff"]"#,
            "{\"a\":\"tab\there\"}",
            "",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .chain([deep(125), deep(126), deep(127), deep(200)].map(String::into_bytes))
        .chain([b"{\"a\":\"\xff\"}".to_vec(), b"[\"\xc3\xa9\"]".to_vec()])
        .collect();
        for body in bodies {
            let by_value = serde_json::from_slice::<Json>(&body).is_ok();
            let raw = document(&body);
            assert!(
                by_value == raw.is_ok(),
                "{:?}: Value parse ok={by_value}, raw={raw:?}",
                String::from_utf8_lossy(&body)
            );
            if let Err(e) = raw {
                assert_eq!(e.code(), "malformed_json");
            }
        }
    }
}
