//! Parquet reading, on files written here with the parquet crate's low-level writer.
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{
    BoolType, ByteArray, ByteArrayType, DoubleType, FloatType, Int32Type, Int64Type,
};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use super::super::{load_latest, read_header, SourceFormat};
use super::*;

/// One leaf column's data: values, definition levels, repetition levels.
enum Leaf {
    Bytes(Vec<&'static str>, Option<Vec<i16>>),
    I64(Vec<i64>, Option<Vec<i16>>),
    I32(Vec<i32>, Option<Vec<i16>>),
    F64(Vec<f64>, Option<Vec<i16>>),
    Bool(Vec<bool>, Option<Vec<i16>>),
    F32List(Vec<f32>, Vec<i16>, Vec<i16>),
}

fn write(path: &Path, message: &str, leaves: Vec<Leaf>) {
    let schema = Arc::new(parse_message_type(message).unwrap());
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build(),
    );
    let mut w = SerializedFileWriter::new(File::create(path).unwrap(), schema, props).unwrap();
    let mut rg = w.next_row_group().unwrap();
    for leaf in leaves {
        let mut col = rg.next_column().unwrap().unwrap();
        match leaf {
            Leaf::Bytes(v, d) => {
                let v: Vec<ByteArray> = v.into_iter().map(ByteArray::from).collect();
                col.typed::<ByteArrayType>()
                    .write_batch(&v, d.as_deref(), None)
                    .unwrap();
            }
            Leaf::I64(v, d) => {
                col.typed::<Int64Type>()
                    .write_batch(&v, d.as_deref(), None)
                    .unwrap();
            }
            Leaf::I32(v, d) => {
                col.typed::<Int32Type>()
                    .write_batch(&v, d.as_deref(), None)
                    .unwrap();
            }
            Leaf::F64(v, d) => {
                col.typed::<DoubleType>()
                    .write_batch(&v, d.as_deref(), None)
                    .unwrap();
            }
            Leaf::Bool(v, d) => {
                col.typed::<BoolType>()
                    .write_batch(&v, d.as_deref(), None)
                    .unwrap();
            }
            Leaf::F32List(v, d, r) => {
                col.typed::<FloatType>()
                    .write_batch(&v, Some(&d), Some(&r))
                    .unwrap();
            }
        }
        col.close().unwrap();
    }
    rg.close().unwrap();
    w.close().unwrap();
}

const MESSAGE: &str = "message schema {
    required binary user_id (UTF8);
    required int64 event_timestamp (TIMESTAMP(MICROS,true));
    optional int32 age;
    optional double score;
    optional boolean ok;
    optional binary blob;
    optional group embedding (LIST) { repeated group list { optional float element; } }
    optional int64 ignored;
}";

fn v(kind: Kind) -> Value {
    Value { kind: Some(kind) }
}

#[test]
fn reads_typed_columns_and_keeps_the_latest_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.parquet");
    write(
        &path,
        MESSAGE,
        vec![
            Leaf::Bytes(vec!["u1", "u1", "u2"], None),
            Leaf::I64(vec![1_000_000, 3_000_000, 2_000_000], None),
            Leaf::I32(vec![30, 31], Some(vec![1, 1, 0])),
            Leaf::F64(vec![0.5, 1.5], Some(vec![1, 0, 1])),
            Leaf::Bool(vec![true, false], Some(vec![1, 1, 0])),
            Leaf::Bytes(vec!["hi", "x"], Some(vec![1, 0, 1])),
            // [1, 2], [], null
            Leaf::F32List(vec![1.0, 2.0], vec![3, 3, 1, 0], vec![0, 1, 0, 0]),
            Leaf::I64(vec![], Some(vec![0, 0, 0])),
        ],
    );
    let header = read_header(&path, SourceFormat::Parquet).unwrap();
    assert_eq!(
        header,
        [
            "user_id",
            "event_timestamp",
            "age",
            "score",
            "ok",
            "blob",
            "embedding",
            "ignored"
        ]
    );
    let keys = [("user_id".to_owned(), KeyType::String)];
    let features = [
        ("embedding".to_owned(), FeatureType::Float32List),
        ("age".to_owned(), FeatureType::Int32),
        ("score".to_owned(), FeatureType::Float32),
        ("ok".to_owned(), FeatureType::Bool),
        ("blob".to_owned(), FeatureType::Bytes),
    ];
    let got = load_latest(&ViewSpec {
        file: &path,
        format: SourceFormat::Parquet,
        timestamp_field: "event_timestamp",
        keys: &keys,
        features: &features,
    })
    .unwrap();
    assert_eq!(got.rows_read, 3);
    let u1 = &got.rows["u1"];
    assert_eq!(u1.event_time_us, 3_000_000);
    assert_eq!(
        u1.values,
        [
            v(Kind::FloatListVal(FloatList { values: vec![] })),
            v(Kind::Int32Val(31)),
            NULL,
            v(Kind::BoolVal(false)),
            NULL,
        ]
    );
    let u2 = &got.rows["u2"];
    assert_eq!(u2.event_time_us, 2_000_000);
    assert_eq!(
        u2.values,
        [
            NULL,
            NULL,
            v(Kind::FloatVal(1.5)),
            NULL,
            v(Kind::BytesVal(b"x".to_vec()))
        ]
    );
}

#[test]
fn integer_keys_nanosecond_and_epoch_second_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let keys = [("id".to_owned(), KeyType::Int64)];
    let features = [("n".to_owned(), FeatureType::Int64)];
    for (ts_type, raw, want_us) in [
        ("int64 ts (TIMESTAMP(NANOS,true))", 5_000_001_999, 5_000_001),
        ("int64 ts", 7, 7_000_000),
        ("int64 ts (TIMESTAMP(MILLIS,true))", 9, 9_000),
    ] {
        let path = dir.path().join("k.parquet");
        let message = format!(
            "message schema {{ required int64 id; required {ts_type}; required int64 n; }}"
        );
        write(
            &path,
            &message,
            vec![
                Leaf::I64(vec![42], None),
                Leaf::I64(vec![raw], None),
                Leaf::I64(vec![1], None),
            ],
        );
        let got = load_latest(&ViewSpec {
            file: &path,
            format: SourceFormat::Parquet,
            timestamp_field: "ts",
            keys: &keys,
            features: &features,
        })
        .unwrap();
        assert_eq!(got.rows["42"].event_time_us, want_us, "{ts_type}");
    }
}

#[test]
fn wrong_types_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.parquet");
    let message = "message schema { required binary id (UTF8); required int64 ts; required int32 t (TIME_MILLIS); required binary s (UTF8); }";
    write(
        &path,
        message,
        vec![
            Leaf::Bytes(vec!["a"], None),
            Leaf::I64(vec![1], None),
            Leaf::I32(vec![5], None),
            Leaf::Bytes(vec!["x"], None),
        ],
    );
    let keys = [("id".to_owned(), KeyType::String)];
    let err_for = |name: &str, ty: FeatureType| {
        let features = [(name.to_owned(), ty)];
        load_latest(&ViewSpec {
            file: &path,
            format: SourceFormat::Parquet,
            timestamp_field: "ts",
            keys: &keys,
            features: &features,
        })
        .unwrap_err()
        .to_string()
    };
    let err = err_for("t", FeatureType::Int32);
    assert!(
        err.ends_with("column 't': parquet type INT32 (TIME_MILLIS) is not supported"),
        "{err}"
    );
    let err = err_for("s", FeatureType::Int64);
    assert_eq!(
        err,
        format!(
            "{}: row 1, column 's': value \"x\" is not a valid int64",
            path.display()
        )
    );
    let err = err_for("nope", FeatureType::Int64);
    assert!(err.ends_with("missing column(s) nope"), "{err}");
}
