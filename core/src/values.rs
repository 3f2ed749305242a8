//! Typed stored values: the type check that keeps a vector honest, and their JSON forms — as
//! `serde_json` values (for the formats that build a document) and written straight into an
//! output buffer (the KServe v1 fast path).

use base64::Engine;
use ferry_protos::v1::{value::Kind, ValueType};
use serde_json::Value as Json;

pub use ferry_protos::FeatureValue;

/// Whether a stored value fits the registry type. Null (no kind) fits every type.
pub fn matches_type(v: &FeatureValue, t: ValueType) -> bool {
    matches!(
        (v, t),
        (None, _)
            | (Some(Kind::Int32Val(_)), ValueType::Int32)
            | (Some(Kind::Int64Val(_)), ValueType::Int64)
            | (Some(Kind::FloatVal(_)), ValueType::Float32)
            | (Some(Kind::DoubleVal(_)), ValueType::Float64)
            | (Some(Kind::BoolVal(_)), ValueType::Bool)
            | (Some(Kind::StringVal(_)), ValueType::String)
            | (Some(Kind::BytesVal(_)), ValueType::Bytes)
            | (Some(Kind::FloatListVal(_)), ValueType::Float32List)
    )
}

/// Whether the value has a JSON form other than null (a non-finite scalar float has none).
pub fn is_json_null(v: &FeatureValue) -> bool {
    match v {
        None => true,
        Some(Kind::FloatVal(f)) => !f.is_finite(),
        Some(Kind::DoubleVal(d)) => !d.is_finite(),
        Some(_) => false,
    }
}

/// JSON form of a stored value. float32 is written with its shortest round-trip decimal (0.1,
/// not 0.10000000149011612); bytes as standard base64; non-finite floats as null.
pub fn to_json(v: &FeatureValue) -> Json {
    match v {
        None => Json::Null,
        Some(Kind::Int32Val(i)) => Json::from(*i),
        Some(Kind::Int64Val(i)) => Json::from(*i),
        Some(Kind::FloatVal(f)) => f32_json(*f),
        Some(Kind::DoubleVal(d)) => {
            serde_json::Number::from_f64(*d).map_or(Json::Null, Json::Number)
        }
        Some(Kind::BoolVal(b)) => Json::Bool(*b),
        Some(Kind::StringVal(s)) => Json::String(s.clone()),
        Some(Kind::BytesVal(b)) => {
            Json::String(base64::engine::general_purpose::STANDARD.encode(b))
        }
        Some(Kind::FloatListVal(l)) => Json::Array(l.values.iter().map(|f| f32_json(*f)).collect()),
    }
}

fn f32_json(f: f32) -> Json {
    if !f.is_finite() {
        return Json::Null;
    }
    // The shortest decimal that reads back as this f32 is also a valid f64 literal.
    ryu::Buffer::new()
        .format_finite(f)
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Json::Null, Json::Number)
}

/// A stored value borrowed from where it lies (a stored vector's bytes, or a `Kind`): what
/// decoding reads before it decides whether to own it (`to_kind`) or write it straight into a
/// body (`write_json_ref`). A float list may come in several parts of a vector, hence owned
/// when merged.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueRef<'a> {
    Int32(i32),
    Int64(i64),
    Float(f32),
    Double(f64),
    Bool(bool),
    Str(&'a str),
    Bytes(&'a [u8]),
    FloatList(std::borrow::Cow<'a, [f32]>),
}

impl ValueRef<'_> {
    /// The owned value.
    pub fn to_kind(&self) -> Kind {
        match self {
            ValueRef::Int32(i) => Kind::Int32Val(*i),
            ValueRef::Int64(i) => Kind::Int64Val(*i),
            ValueRef::Float(f) => Kind::FloatVal(*f),
            ValueRef::Double(d) => Kind::DoubleVal(*d),
            ValueRef::Bool(b) => Kind::BoolVal(*b),
            ValueRef::Str(s) => Kind::StringVal((*s).to_owned()),
            ValueRef::Bytes(b) => Kind::BytesVal(b.to_vec()),
            ValueRef::FloatList(l) => {
                Kind::FloatListVal(ferry_protos::v1::FloatList { values: l.to_vec() })
            }
        }
    }

    /// Whether it fits the registry type.
    pub fn matches_type(&self, t: ValueType) -> bool {
        matches!(
            (self, t),
            (ValueRef::Int32(_), ValueType::Int32)
                | (ValueRef::Int64(_), ValueType::Int64)
                | (ValueRef::Float(_), ValueType::Float32)
                | (ValueRef::Double(_), ValueType::Float64)
                | (ValueRef::Bool(_), ValueType::Bool)
                | (ValueRef::Str(_), ValueType::String)
                | (ValueRef::Bytes(_), ValueType::Bytes)
                | (ValueRef::FloatList(_), ValueType::Float32List)
        )
    }

    /// Whether its JSON form is null (a non-finite scalar float).
    pub fn is_json_null(&self) -> bool {
        match self {
            ValueRef::Float(f) => !f.is_finite(),
            ValueRef::Double(d) => !d.is_finite(),
            _ => false,
        }
    }
}

/// The value of `kind`, borrowed.
#[inline]
pub fn as_ref(kind: &Kind) -> ValueRef<'_> {
    match kind {
        Kind::Int32Val(i) => ValueRef::Int32(*i),
        Kind::Int64Val(i) => ValueRef::Int64(*i),
        Kind::FloatVal(f) => ValueRef::Float(*f),
        Kind::DoubleVal(d) => ValueRef::Double(*d),
        Kind::BoolVal(b) => ValueRef::Bool(*b),
        Kind::StringVal(s) => ValueRef::Str(s),
        Kind::BytesVal(b) => ValueRef::Bytes(b),
        Kind::FloatListVal(l) => ValueRef::FloatList(std::borrow::Cow::Borrowed(&l.values)),
    }
}

/// Appends the JSON form of `v` to `out`: the same text `to_json(v)` serializes to, without
/// building it.
#[inline]
pub fn write_json(out: &mut Vec<u8>, v: &FeatureValue) {
    match v {
        None => out.extend_from_slice(b"null"),
        Some(kind) => write_json_ref(out, &as_ref(kind)),
    }
}

/// Appends the JSON form of a borrowed value (`write_json` of its owned form).
pub fn write_json_ref(out: &mut Vec<u8>, v: &ValueRef<'_>) {
    match v {
        ValueRef::Int32(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
        ValueRef::Int64(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
        ValueRef::Float(f) => write_f32(out, *f),
        ValueRef::Double(d) => {
            if d.is_finite() {
                out.extend_from_slice(ryu::Buffer::new().format_finite(*d).as_bytes());
            } else {
                out.extend_from_slice(b"null");
            }
        }
        ValueRef::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        ValueRef::Str(s) => write_str(out, s),
        ValueRef::Bytes(b) => {
            out.push(b'"');
            let start = out.len();
            let engine = &base64::engine::general_purpose::STANDARD;
            out.resize(start + base64::encoded_len(b.len(), true).unwrap_or(0), 0);
            let n = engine.encode_slice(b, &mut out[start..]).unwrap_or(0);
            out.truncate(start + n);
            out.push(b'"');
        }
        ValueRef::FloatList(l) => {
            out.push(b'[');
            for (i, f) in l.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_f32(out, *f);
            }
            out.push(b']');
        }
    }
}

fn write_f32(out: &mut Vec<u8>, f: f32) {
    if f.is_finite() {
        let mut buf = ryu::Buffer::new();
        let s = buf.format_finite(f);
        out.extend_from_slice(s.as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

/// Appends `s` as a JSON string literal (escaped as serde_json does).
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// A feature value from a JSON literal, for tests: integers become int64, other numbers double.
#[cfg(test)]
pub fn from_json(j: &Json) -> FeatureValue {
    use ferry_protos::v1::FloatList;
    match j {
        Json::Null => None,
        Json::Bool(b) => Some(Kind::BoolVal(*b)),
        Json::Number(n) => Some(match n.as_i64() {
            Some(i) => Kind::Int64Val(i),
            None => Kind::DoubleVal(n.as_f64().unwrap_or(0.0)),
        }),
        Json::String(s) => Some(Kind::StringVal(s.clone())),
        Json::Array(a) => Some(Kind::FloatListVal(FloatList {
            values: a.iter().map(|x| x.as_f64().unwrap_or(0.0) as f32).collect(),
        })),
        Json::Object(_) => None,
    }
}

/// Feature values from JSON literals, for tests.
#[cfg(test)]
pub fn fvs(js: &[Json]) -> Vec<FeatureValue> {
    js.iter().map(from_json).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::v1::FloatList;

    fn v(k: Kind) -> FeatureValue {
        Some(k)
    }

    fn written(v: &FeatureValue) -> String {
        let mut out = Vec::new();
        write_json(&mut out, v);
        String::from_utf8(out).unwrap()
    }

    fn all_kinds() -> Vec<FeatureValue> {
        vec![
            None,
            v(Kind::Int32Val(-7)),
            v(Kind::Int64Val(i64::MAX)),
            v(Kind::Int64Val(i64::MIN)),
            v(Kind::FloatVal(0.1)),
            v(Kind::FloatVal(1.0)),
            v(Kind::FloatVal(-3.5e-12)),
            v(Kind::FloatVal(1e30)),
            v(Kind::FloatVal(f32::NAN)),
            v(Kind::FloatVal(f32::INFINITY)),
            v(Kind::DoubleVal(0.1)),
            v(Kind::DoubleVal(f64::NEG_INFINITY)),
            v(Kind::BoolVal(true)),
            v(Kind::BoolVal(false)),
            v(Kind::StringVal("a\"b\\c\n\u{1}é".into())),
            v(Kind::BytesVal(vec![])),
            v(Kind::BytesVal(vec![1, 2, 3, 255])),
            v(Kind::FloatListVal(FloatList {
                values: vec![0.5, -1.25, f32::NAN, 0.1],
            })),
            v(Kind::FloatListVal(FloatList { values: vec![] })),
        ]
    }

    #[test]
    fn json_forms() {
        assert_eq!(to_json(&v(Kind::FloatVal(0.1))).to_string(), "0.1");
        assert_eq!(to_json(&v(Kind::DoubleVal(0.1))).to_string(), "0.1");
        assert_eq!(
            to_json(&v(Kind::Int64Val(i64::MAX))).to_string(),
            "9223372036854775807"
        );
        assert_eq!(
            to_json(&v(Kind::BytesVal(vec![1, 2, 3]))).to_string(),
            "\"AQID\""
        );
        assert_eq!(to_json(&v(Kind::FloatVal(f32::NAN))), Json::Null);
        assert_eq!(
            to_json(&v(Kind::FloatListVal(FloatList {
                values: vec![0.5, -1.25]
            })))
            .to_string(),
            "[0.5,-1.25]"
        );
        assert_eq!(to_json(&None), Json::Null);
    }

    #[test]
    fn written_form_reads_back_as_the_json_form() {
        for k in all_kinds() {
            let text = written(&k);
            let back: Json = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{k:?} wrote invalid JSON {text:?}: {e}"));
            assert_eq!(back, to_json(&k), "{k:?} wrote {text}");
            assert_eq!(is_json_null(&k), to_json(&k).is_null(), "{k:?}");
        }
        assert_eq!(written(&v(Kind::FloatVal(0.1))), "0.1");
        assert_eq!(written(&v(Kind::BytesVal(vec![1, 2, 3]))), "\"AQID\"");
        assert_eq!(written(&v(Kind::StringVal("\"".into()))), r#""\"""#);
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let all = [
            "",
            "gold",
            "é\u{0}x",
            "a\"b",
            "back\\slash",
            "\u{1f}",
            "\u{7f}",
            "t\tab",
        ];
        for s in all {
            let mut out = Vec::new();
            write_str(&mut out, s);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(s).unwrap()
            );
        }
    }

    #[test]
    fn type_checks() {
        assert!(matches_type(&v(Kind::Int64Val(1)), ValueType::Int64));
        assert!(!matches_type(&v(Kind::Int32Val(1)), ValueType::Int64));
        assert!(!matches_type(
            &v(Kind::StringVal("1".into())),
            ValueType::Float32
        ));
        assert!(matches_type(&None, ValueType::Float32List));
    }
}
