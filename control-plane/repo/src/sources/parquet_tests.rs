//! Parquet reading, on files written here with the parquet crate's low-level writer.
use std::collections::HashMap;
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{
    BoolType, ByteArray, ByteArrayType, DataType, DoubleType, FloatType, Int32Type, Int64Type,
    Int96, Int96Type,
};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::{SerializedColumnWriter, SerializedFileWriter};
use parquet::schema::parser::parse_message_type;

use super::super::{load_latest, read_header, SourceFormat};
use super::*;
use crate::sources::{TimeUnit, ViewRow};

/// One leaf column's data: values, definition levels, repetition levels.
enum Leaf {
    Bytes(Vec<&'static str>, Option<Vec<i16>>),
    Owned(Vec<Vec<u8>>, Option<Vec<i16>>),
    I64(Vec<i64>, Option<Vec<i16>>),
    I32(Vec<i32>, Option<Vec<i16>>),
    I96(Vec<Int96>, Option<Vec<i16>>),
    F32(Vec<f32>, Option<Vec<i16>>),
    F64(Vec<f64>, Option<Vec<i16>>),
    Bool(Vec<bool>, Option<Vec<i16>>),
    F32List(Vec<f32>, Vec<i16>, Vec<i16>),
    I32List(Vec<i32>, Vec<i16>, Vec<i16>),
}

fn write(path: &Path, message: &str, leaves: Vec<Leaf>) {
    let props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .build();
    write_groups(path, message, props, vec![leaves]);
}

/// Writes one row group per entry of `groups`.
fn write_groups(path: &Path, message: &str, props: WriterProperties, groups: Vec<Vec<Leaf>>) {
    let schema = Arc::new(parse_message_type(message).unwrap());
    let mut w =
        SerializedFileWriter::new(File::create(path).unwrap(), schema, Arc::new(props)).unwrap();
    for leaves in groups {
        let mut rg = w.next_row_group().unwrap();
        for leaf in leaves {
            let mut col = rg.next_column().unwrap().unwrap();
            let c = &mut col;
            match leaf {
                Leaf::Bytes(v, d) => {
                    let v: Vec<ByteArray> = v.into_iter().map(ByteArray::from).collect();
                    put::<ByteArrayType>(c, &v, d.as_deref(), None);
                }
                Leaf::Owned(v, d) => {
                    let v: Vec<ByteArray> = v.into_iter().map(ByteArray::from).collect();
                    put::<ByteArrayType>(c, &v, d.as_deref(), None);
                }
                Leaf::I64(v, d) => put::<Int64Type>(c, &v, d.as_deref(), None),
                Leaf::I32(v, d) => put::<Int32Type>(c, &v, d.as_deref(), None),
                Leaf::I96(v, d) => put::<Int96Type>(c, &v, d.as_deref(), None),
                Leaf::F32(v, d) => put::<FloatType>(c, &v, d.as_deref(), None),
                Leaf::F64(v, d) => put::<DoubleType>(c, &v, d.as_deref(), None),
                Leaf::Bool(v, d) => put::<BoolType>(c, &v, d.as_deref(), None),
                Leaf::F32List(v, d, r) => put::<FloatType>(c, &v, Some(&d), Some(&r)),
                Leaf::I32List(v, d, r) => put::<Int32Type>(c, &v, Some(&d), Some(&r)),
            }
            col.close().unwrap();
        }
        rg.close().unwrap();
    }
    w.close().unwrap();
}

/// Writes one leaf column's values with their definition and repetition levels.
fn put<T: DataType>(
    col: &mut SerializedColumnWriter<'_>,
    values: &[T::T],
    def: Option<&[i16]>,
    rep: Option<&[i16]>,
) {
    col.typed::<T>().write_batch(values, def, rep).unwrap();
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
    let got = load_with(&path, "event_timestamp", None, &keys, &features).unwrap();
    assert_eq!(got.rows_read, 3);
    let u1 = &got.rows["u1"];
    assert_eq!(u1.event_time_us, 3_000_000);
    assert_eq!(
        u1.values(),
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
        u2.values(),
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
        // An integer epoch (no timestamp type): its unit detected, seconds here.
        ("int64 ts", 1_795_255_200, 1_795_255_200_000_000),
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
        let got = load(&path, &keys, &features);
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
            Leaf::I64(vec![1_700_000_000], None),
            Leaf::I32(vec![5], None),
            Leaf::Bytes(vec!["x"], None),
        ],
    );
    let keys = [("id".to_owned(), KeyType::String)];
    let err_for = |name: &str, ty: FeatureType| {
        let features = [(name.to_owned(), ty)];
        try_load(&path, &keys, &features).unwrap_err().to_string()
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

fn load(path: &Path, keys: &[(String, KeyType)], features: &[(String, FeatureType)]) -> LatestRows {
    try_load(path, keys, features).unwrap()
}

fn try_load(
    path: &Path,
    keys: &[(String, KeyType)],
    features: &[(String, FeatureType)],
) -> Result<LatestRows, SourceError> {
    load_with(path, "ts", None, keys, features)
}

/// The latest rows of the Parquet file at `path`, its times in `timestamp_field` (integers in
/// the `declared` unit, if any).
fn load_with(
    path: &Path,
    timestamp_field: &str,
    declared: Option<TimeUnit>,
    keys: &[(String, KeyType)],
    features: &[(String, FeatureType)],
) -> Result<LatestRows, SourceError> {
    load_latest(&ViewSpec {
        file: path,
        format: SourceFormat::Parquet,
        timestamp_field,
        timestamps: crate::sources::TimestampRules::now(declared),
        keys,
        features,
    })
}

fn string_key() -> [(String, KeyType); 1] {
    [("id".to_owned(), KeyType::String)]
}

const EVERY_TYPE: &str = "message schema {
    required binary id (UTF8);
    required int64 ts (TIMESTAMP(MICROS,true));
    optional int32 i32;
    optional int64 i64;
    optional float f32;
    optional double f64;
    optional boolean b;
    optional binary s (UTF8);
    optional binary raw;
    optional group emb (LIST) { repeated group list { optional float element; } }
}";

/// Row `i` of the generated file: every column nulls on its own period, lists cycle through
/// null, empty, two and one elements, keys repeat across row groups, times tie sometimes.
struct Gen;

impl Gen {
    fn null(i: usize, column: usize) -> bool {
        (i + column).is_multiple_of(3 + column)
    }
    fn key(i: usize) -> String {
        format!("e{}", i % 3001)
    }
    fn ts(i: usize) -> i64 {
        ((i * 7919) % 10007 / 3) as i64 * 1000
    }
    fn emb(i: usize) -> Option<Vec<f32>> {
        match i % 4 {
            0 => None,
            1 => Some(vec![]),
            2 => Some(vec![i as f32, -(i as f32) * 0.5]),
            _ => Some(vec![i as f32 * 0.25]),
        }
    }
    fn values(i: usize) -> Vec<Value> {
        let mut out = vec![
            v(Kind::Int32Val(i as i32 - 5000)),
            v(Kind::Int64Val(i as i64 * 1_000_003)),
            v(Kind::FloatVal(i as f32 * 0.5)),
            v(Kind::DoubleVal(i as f64 / 3.0)),
            v(Kind::BoolVal(i.is_multiple_of(2))),
            v(Kind::StringVal(format!("s{i}"))),
            v(Kind::BytesVal((i as u32).to_le_bytes().to_vec())),
        ];
        for (c, value) in out.iter_mut().enumerate() {
            if Self::null(i, c) {
                *value = NULL;
            }
        }
        out.push(Self::emb(i).map_or(NULL, |values| v(Kind::FloatListVal(FloatList { values }))));
        out
    }

    /// The leaves of rows `range`, in schema order.
    fn leaves(range: std::ops::Range<usize>) -> Vec<Leaf> {
        fn opt<T>(
            range: std::ops::Range<usize>,
            c: usize,
            f: impl Fn(usize) -> T,
        ) -> (Vec<T>, Option<Vec<i16>>) {
            let defs: Vec<i16> = range.clone().map(|i| i16::from(!Gen::null(i, c))).collect();
            let vals = range.filter(|&i| !Gen::null(i, c)).map(f).collect();
            (vals, Some(defs))
        }
        let (i32s, d0) = opt(range.clone(), 0, |i| i as i32 - 5000);
        let (i64s, d1) = opt(range.clone(), 1, |i| i as i64 * 1_000_003);
        let (f32s, d2) = opt(range.clone(), 2, |i| i as f32 * 0.5);
        let (f64s, d3) = opt(range.clone(), 3, |i| i as f64 / 3.0);
        let (bools, d4) = opt(range.clone(), 4, |i| i.is_multiple_of(2));
        let (strs, d5) = opt(range.clone(), 5, |i| format!("s{i}").into_bytes());
        let (raws, d6) = opt(range.clone(), 6, |i| (i as u32).to_le_bytes().to_vec());
        let (mut emb, mut def, mut rep) = (Vec::new(), Vec::new(), Vec::new());
        for i in range.clone() {
            match Gen::emb(i) {
                None => {
                    def.push(0);
                    rep.push(0);
                }
                Some(e) if e.is_empty() => {
                    def.push(1);
                    rep.push(0);
                }
                Some(e) => {
                    for (n, x) in e.into_iter().enumerate() {
                        emb.push(x);
                        def.push(3);
                        rep.push(i16::from(n > 0));
                    }
                }
            }
        }
        vec![
            Leaf::Owned(
                range.clone().map(|i| Gen::key(i).into_bytes()).collect(),
                None,
            ),
            Leaf::I64(range.map(Gen::ts).collect(), None),
            Leaf::I32(i32s, d0),
            Leaf::I64(i64s, d1),
            Leaf::F32(f32s, d2),
            Leaf::F64(f64s, d3),
            Leaf::Bool(bools, d4),
            Leaf::Owned(strs, d5),
            Leaf::Owned(raws, d6),
            Leaf::F32List(emb, def, rep),
        ]
    }
}

fn every_type_features() -> Vec<(String, FeatureType)> {
    [
        ("i32", FeatureType::Int32),
        ("i64", FeatureType::Int64),
        ("f32", FeatureType::Float32),
        ("f64", FeatureType::Float64),
        ("b", FeatureType::Bool),
        ("s", FeatureType::String),
        ("raw", FeatureType::Bytes),
        ("emb", FeatureType::Float32List),
    ]
    .map(|(n, t)| (n.to_owned(), t))
    .to_vec()
}

#[test]
fn every_type_with_nulls_over_row_groups_pages_and_batches() {
    // Row groups of 5000, 1 and 4100 rows: batches of the reader straddle both boundaries, keys
    // recur in every group, and small pages (plain or dictionary) split each column chunk.
    let bounds = [0, 5000, 5001, 9101];
    let mut want: HashMap<String, ViewRow> = HashMap::new();
    for i in 0..bounds[3] {
        let ts = Gen::ts(i);
        if want
            .get(&Gen::key(i))
            .is_none_or(|kept| kept.event_time_us <= ts)
        {
            let row = ViewRow::new(ts, &Gen::values(i));
            want.insert(Gen::key(i), row);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for dictionary in [true, false] {
        let path = dir.path().join(format!("g{dictionary}.parquet"));
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_dictionary_enabled(dictionary)
            .set_data_page_row_count_limit(700)
            .set_write_batch_size(100)
            .build();
        let groups = bounds.windows(2).map(|w| Gen::leaves(w[0]..w[1])).collect();
        write_groups(&path, EVERY_TYPE, props, groups);
        let got = load(&path, &string_key(), &every_type_features());
        assert_eq!(got.rows_read, 9101);
        assert_eq!(got.rows.len(), want.len());
        for (key, row) in &want {
            assert_eq!(
                got.rows.get(key),
                Some(row),
                "{key}, dictionary {dictionary}"
            );
        }
    }
}

#[test]
fn other_integer_timestamp_and_list_spellings() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.parquet");
    // INT96 and DATE times, string times; UINT_8 and INT_16 integers; a bare repeated
    // primitive read as a list (of ints, converted like any number).
    let message = "message schema {
        required int64 id (INT_64);
        required binary ts (UTF8);
        optional int96 t96;
        optional int32 day (DATE);
        required int32 small (UINT_8);
        optional int32 short (INT_16);
        repeated int32 r;
    }";
    let mut t96 = Int96::new();
    t96.set_data(0, 0, 2_440_589); // Julian day 1970-01-02
    write(
        &path,
        message,
        vec![
            Leaf::I64(vec![7, 8], None),
            Leaf::Bytes(vec!["2026-11-21T10:00:00Z", "1700000000"], None),
            Leaf::I96(vec![t96], Some(vec![1, 0])),
            Leaf::I32(vec![2], Some(vec![0, 1])),
            Leaf::I32(vec![255, 3], None),
            Leaf::I32(vec![-2], Some(vec![1, 0])),
            Leaf::I32List(vec![1, 2], vec![1, 1, 0], vec![0, 1, 0]),
        ],
    );
    let keys = [("id".to_owned(), KeyType::Int64)];
    let features = [
        ("small".to_owned(), FeatureType::Int32),
        ("short".to_owned(), FeatureType::Int64),
        ("r".to_owned(), FeatureType::Float32List),
    ];
    let got = load(&path, &keys, &features);
    assert_eq!(got.rows["7"].event_time_us, 1_795_255_200_000_000);
    assert_eq!(got.rows["8"].event_time_us, 1_700_000_000_000_000);
    assert_eq!(
        got.rows["7"].values(),
        [
            v(Kind::Int32Val(255)),
            v(Kind::Int64Val(-2)),
            v(Kind::FloatListVal(FloatList {
                values: vec![1.0, 2.0]
            }))
        ]
    );
    assert_eq!(
        got.rows["8"].values(),
        [
            v(Kind::Int32Val(3)),
            NULL,
            v(Kind::FloatListVal(FloatList { values: vec![] }))
        ]
    );
    for (column, want_us) in [("t96", 86_400_000_000), ("day", 2 * 86_400_000_000)] {
        let got = load_with(&path, column, None, &keys, &[]);
        // Each of these columns is null in one row: that row is refused, naming it.
        let err = got.unwrap_err().to_string();
        assert!(
            err.ends_with(&format!("column '{column}': empty timestamp")),
            "{err}"
        );
        let path2 = dir.path().join(format!("{column}.parquet"));
        let message = format!(
            "message schema {{ required int64 id; required {}; }}",
            if column == "t96" {
                "int96 ts"
            } else {
                "int32 ts (DATE)"
            }
        );
        let leaf = if column == "t96" {
            Leaf::I96(vec![t96], None)
        } else {
            Leaf::I32(vec![2], None)
        };
        write(&path2, &message, vec![Leaf::I64(vec![1], None), leaf]);
        assert_eq!(load(&path2, &keys, &[]).rows["1"].event_time_us, want_us);
    }
}

#[test]
fn bad_cells_and_shapes_are_errors_that_name_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.parquet");
    let message = "message schema {
        required binary id (UTF8);
        required int64 ts;
        optional group emb (LIST) { repeated group list { optional float element; } }
        required binary s (UTF8);
        optional group st { optional int32 a; }
    }";
    write(
        &path,
        message,
        vec![
            Leaf::Bytes(vec!["a", "b"], None),
            Leaf::I64(vec![1_700_000_001, 1_700_000_002], None),
            // [1.0], then [null, 2.0]
            Leaf::F32List(vec![1.0, 2.0], vec![3, 2, 3], vec![0, 0, 1]),
            Leaf::Owned(vec![b"ok".to_vec(), vec![0xff, 0xfe]], None),
            Leaf::I32(vec![4], Some(vec![2, 1])),
        ],
    );
    let err = |name: &str, ty: FeatureType| {
        try_load(&path, &string_key(), &[(name.to_owned(), ty)])
            .unwrap_err()
            .to_string()
    };
    let file = path.display();
    assert_eq!(
        err("emb", FeatureType::Float32List),
        format!("{file}: row 2, column 'emb': value [null, 2.0] is not a valid float32_list")
    );
    assert_eq!(
        err("emb", FeatureType::Float32),
        format!("{file}: row 1, column 'emb': value [1.0] is not a valid float32")
    );
    assert_eq!(
        err("s", FeatureType::String),
        format!("{file}: row 2, column 's': invalid UTF-8")
    );
    assert_eq!(
        err("st", FeatureType::Int32),
        format!("{file}: column 'st': nested groups are not supported")
    );
    let keys = [("ts".to_owned(), KeyType::String)];
    let err = try_load(&path, &keys, &[]).unwrap_err().to_string();
    assert_eq!(
        err,
        format!("{file}: row 1, column 'ts': value 1700000001 is not a string entity key")
    );
}

/// A timestamp column type, a raw value, a declared unit, and the microseconds read (or the
/// start of the error after the file name).
type TimestampCase = (
    &'static str,
    i64,
    Option<TimeUnit>,
    Result<i64, &'static str>,
);

#[test]
fn typed_timestamps_keep_their_unit_and_integers_follow_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let keys = [("id".to_owned(), KeyType::Int64)];
    let jan_1_us = 1_767_225_600_000_000; // 2026-01-01T00:00:00Z
    let cases: [TimestampCase; 5] = [
        // A TIMESTAMP(MILLIS) column is milliseconds whatever the source declares.
        (
            "int64 ts (TIMESTAMP(MILLIS,true))",
            jan_1_us / 1000,
            Some(TimeUnit::Seconds),
            Ok(jan_1_us),
        ),
        // Typed times before 2000 are what they say.
        ("int64 ts (TIMESTAMP(MICROS,true))", 0, None, Ok(0)),
        (
            "int64 ts (TIMESTAMP(MICROS,true))",
            32_503_680_000_000_000, // 3000-01-01
            None,
            Err("row 1, column 'ts': timestamp 3000-01-01T00:00:00Z is in the future"),
        ),
        ("int64 ts", jan_1_us * 1000, None, Ok(jan_1_us)),
        (
            "int64 ts",
            jan_1_us / 1000,
            Some(TimeUnit::Seconds),
            Err("row 1, column 'ts': integer timestamp 1767225600000 in seconds"),
        ),
    ];
    for (ts_type, raw, declared, want) in cases {
        let path = dir.path().join("t.parquet");
        let message = format!("message schema {{ required int64 id; required {ts_type}; }}");
        write(
            &path,
            &message,
            vec![Leaf::I64(vec![1], None), Leaf::I64(vec![raw], None)],
        );
        let got = load_with(&path, "ts", declared, &keys, &[]);
        match (got, want) {
            (Ok(rows), Ok(us)) => assert_eq!(rows.rows["1"].event_time_us, us, "{ts_type}"),
            (Err(e), Err(prefix)) => {
                let e = e.to_string();
                let want = format!("{}: {prefix}", path.display());
                assert!(e.starts_with(&want), "{e}\nshould start with\n{want}");
            }
            (got, want) => panic!("{ts_type} {raw}: got {got:?}, want {want:?}"),
        }
    }
}
