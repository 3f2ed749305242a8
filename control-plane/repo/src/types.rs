//! The value types a feature or an entity key may have, spelled as in `ferry.yaml`. The lowercase
//! spelling is also what the fingerprint hashes, so it must never change for an existing type.

use ferry_protos::v1::ValueType;

/// Type of a feature value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FeatureType {
    Int32,
    Int64,
    Float32,
    Float64,
    Bool,
    String,
    Bytes,
    Float32List,
}

impl FeatureType {
    pub const ALL: [FeatureType; 8] = [
        FeatureType::Int32,
        FeatureType::Int64,
        FeatureType::Float32,
        FeatureType::Float64,
        FeatureType::Bool,
        FeatureType::String,
        FeatureType::Bytes,
        FeatureType::Float32List,
    ];

    /// The repo spelling, also used in the fingerprint's canonical text.
    pub fn as_str(self) -> &'static str {
        match self {
            FeatureType::Int32 => "int32",
            FeatureType::Int64 => "int64",
            FeatureType::Float32 => "float32",
            FeatureType::Float64 => "float64",
            FeatureType::Bool => "bool",
            FeatureType::String => "string",
            FeatureType::Bytes => "bytes",
            FeatureType::Float32List => "float32_list",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// "int32, int64, ..." for error messages.
    pub fn expected_list() -> String {
        Self::ALL.map(|t| t.as_str()).join(", ")
    }

    pub fn to_proto(self) -> ValueType {
        match self {
            FeatureType::Int32 => ValueType::Int32,
            FeatureType::Int64 => ValueType::Int64,
            FeatureType::Float32 => ValueType::Float32,
            FeatureType::Float64 => ValueType::Float64,
            FeatureType::Bool => ValueType::Bool,
            FeatureType::String => ValueType::String,
            FeatureType::Bytes => ValueType::Bytes,
            FeatureType::Float32List => ValueType::Float32List,
        }
    }
}

/// Type of an entity's join key. Int64 keys are spelled in decimal inside entity keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyType {
    String,
    Int64,
}

impl KeyType {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::String => "string",
            KeyType::Int64 => "int64",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "string" => Some(KeyType::String),
            "int64" => Some(KeyType::Int64),
            _ => None,
        }
    }

    pub fn to_proto(self) -> ValueType {
        match self {
            KeyType::String => ValueType::String,
            KeyType::Int64 => ValueType::Int64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_feature_type_round_trips_through_its_spelling() {
        for t in FeatureType::ALL {
            assert_eq!(FeatureType::parse(t.as_str()), Some(t));
        }
        assert_eq!(FeatureType::parse("Float32"), None);
        assert_eq!(
            FeatureType::expected_list(),
            "int32, int64, float32, float64, bool, string, bytes, float32_list"
        );
    }
}
