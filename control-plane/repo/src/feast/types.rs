//! Feast's value types as Ferry names them (`ferry.yaml`'s words), for its feature views and
//! on-demand feature views alike.

use ferry_protos::feast_proto::ValueType as Fvt;

/// Ferry's name of a Feast value type it serves.
pub(super) fn feature_type(t: i32) -> Option<&'static str> {
    Some(match Fvt::try_from(t).ok()? {
        Fvt::Int32 => "int32",
        Fvt::Int64 => "int64",
        Fvt::Float => "float32",
        Fvt::Double => "float64",
        Fvt::Bool => "bool",
        Fvt::String => "string",
        Fvt::Bytes => "bytes",
        Fvt::FloatList => "float32_list",
        _ => return None,
    })
}

pub(super) fn type_name(t: i32) -> String {
    Fvt::try_from(t).map_or_else(|_| format!("#{t}"), |v| v.as_str_name().to_owned())
}
