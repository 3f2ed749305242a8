//! Typed stored values to JSON, and the type check that keeps a vector honest.

use base64::Engine;
use ferry_protos::v1::{value::Kind, Value, ValueType};
use serde_json::Value as Json;

/// Whether a stored value fits the registry type. Null (no kind) fits every type.
pub fn matches_type(v: &Value, t: ValueType) -> bool {
    matches!(
        (&v.kind, t),
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

/// JSON form of a stored value. float32 is written with its shortest round-trip decimal (0.1,
/// not 0.10000000149011612); bytes as standard base64; non-finite floats as null.
pub fn to_json(v: &Value) -> Json {
    match &v.kind {
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
    f.to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Json::Null, Json::Number)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_protos::v1::FloatList;

    fn v(k: Kind) -> Value {
        Value { kind: Some(k) }
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
        assert_eq!(to_json(&Value { kind: None }), Json::Null);
    }

    #[test]
    fn type_checks() {
        assert!(matches_type(&v(Kind::Int64Val(1)), ValueType::Int64));
        assert!(!matches_type(&v(Kind::Int32Val(1)), ValueType::Int64));
        assert!(!matches_type(
            &v(Kind::StringVal("1".into())),
            ValueType::Float32
        ));
        assert!(matches_type(&Value { kind: None }, ValueType::Float32List));
    }
}
