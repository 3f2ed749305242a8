use super::*;
use crate::write::model::WriteModel;
use ferry_repo::snapshot;
use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};
use serde_json::json;

/// 2026-01-01T00:00:00Z.
const JAN_1_US: i64 = 1_767_225_600_000_000;

fn model() -> WriteModel {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    WriteModel::build(&snapshot::build(&reg.unwrap()), None)
}

fn rules() -> TimestampRules {
    TimestampRules {
        declared: None,
        now_us: JAN_1_US + 86_400_000_000,
    }
}

fn df(v: serde_json::Value) -> serde_json::Map<String, Json> {
    v.as_object().unwrap().clone()
}

#[test]
fn columns_become_typed_rows_latest_per_entity_with_microsecond_times() {
    let m = model();
    // alpha: keys merchant_id (int64), user_id; features b (string), a (float32_list), c (int32).
    let d = df(json!({
        "merchant_id": [7, 7, 9],
        "user_id": ["u1", "u1", "u3"],
        "ts": ["2026-01-01T00:00:00.000002Z", 1767225600.000001, 1767225600],
        "b": ["x", "y", null],
        "a": [[1, 2.5], [], [0.5]],
        "c": [3, 4, -1]
    }));
    let out = rows(&d, &[m.views["alpha"].clone()], &rules()).unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].superseded, 1);
    let r = &out[0].rows;
    assert_eq!(r.len(), 2);
    assert_eq!(r[0].entity_key, "7\u{1f}u1");
    assert_eq!(
        r[0].event_time_us,
        JAN_1_US + 2,
        "the newer row of u1 wins, though listed first"
    );
    assert_eq!(
        r[0].values[1],
        value(ValueType::String, &json!("x")).unwrap()
    );
    assert_eq!(r[1].event_time_us, JAN_1_US);
    assert_eq!(r[1].values[1], Value { kind: None });
}

#[test]
fn every_problem_is_reported_at_once() {
    let m = model();
    let d = df(json!({
        "merchant_id": ["seven", 7],
        "user_id": ["u1", ""],
        "ts": ["yesterday", null],
        "b": [1, "ok"],
        "a": [[1], "no"],
        "c": [3, 2147483648u64]
    }));
    let p = rows(&d, &[m.views["alpha"].clone()], &rules()).unwrap_err();
    let text = p.list.join("\n");
    for needle in [
        "row 0, column 'merchant_id': expected an int64 id",
        "row 1, column 'user_id': id must be 1 to 256 bytes",
        "row 0, column 'ts': invalid timestamp 'yesterday'",
        "row 1, column 'ts': missing event timestamp",
        "row 0, column 'b': expected a string, got 1",
        "row 1, column 'a': expected an array of float32",
        "row 1, column 'c': expected an int32, got 2147483648",
    ] {
        assert!(text.contains(needle), "{needle} not in\n{text}");
    }
    assert_eq!(p.list.len(), 7, "{text}");

    // Missing and unknown columns, unequal lengths, a future time.
    let d = df(json!({"merchant_id": [7], "user_id": ["u1", "u2"], "ts": [1767225600], "zz": [1]}));
    let text = rows(&d, &[m.views["alpha"].clone()], &rules())
        .unwrap_err()
        .list
        .join("\n");
    for needle in [
        "column 'user_id' has 2 values",
        "column 'zz' is not a join key",
        "column 'b' (of view 'alpha') is missing",
        "column 'c' (of view 'alpha') is missing",
    ] {
        assert!(text.contains(needle), "{needle} not in\n{text}");
    }
    let future = json!(1767225600 + 2 * 86_400);
    assert!(event_time(&future, &rules())
        .unwrap_err()
        .contains("now + 5 min"));
    assert!(event_time(&json!(true), &rules()).is_err());
    assert_eq!(event_time(&json!("1767225600"), &rules()), Ok(JAN_1_US));
}

/// A view of five string features: five cells within their bound, a row over the vector's.
const WIDE_YAML: &str = r#"
project: shop
entities:
  - {name: user, join_key: user_id, type: string}
feature_views:
  - name: wide
    entities: [user]
    source: {path: data/wide.csv, timestamp_field: ts}
    features:
      - {name: s1, type: string}
      - {name: s2, type: string}
      - {name: s3, type: string}
      - {name: s4, type: string}
      - {name: s5, type: string}
feature_services:
  - name: all
    features: [wide]
"#;

#[test]
fn a_row_whose_features_encode_over_the_vector_bound_is_too_large() {
    let files = [(
        "data/wide.csv",
        "user_id,ts,s1,s2,s3,s4,s5\nu1,2026-01-01T00:00:00Z,a,b,c,d,e\n",
    )];
    let (_dir, reg) = load_repo(WIDE_YAML, &files);
    let m = WriteModel::build(&snapshot::build(&reg.unwrap()), None);
    let cell = "x".repeat(60_000);
    let wide = |n: usize| {
        let mut d = json!({"user_id": ["u1", "u2"], "ts": [1767225600, 1767225600]});
        for i in 1..=5 {
            let second = if i <= n { cell.clone() } else { "y".into() };
            d[format!("s{i}")] = json!(["short", second]);
        }
        df(d)
    };
    // Four long cells: 240 kB, within the bound.
    assert!(rows(&wide(4), &[m.views["wide"].clone()], &rules()).is_ok());
    // Five: 300 kB, over it; the row is named and the request is too large, not invalid.
    let p = rows(&wide(5), &[m.views["wide"].clone()], &rules()).unwrap_err();
    let Some(Exceeded::Vector { view, row, bytes }) = &p.too_large else {
        panic!("{p:?}");
    };
    assert_eq!((view.as_str(), *row), ("wide", 1));
    assert!(*bytes > MAX_VECTOR_BYTES, "{bytes}");
    assert_eq!(p.list.len(), 1, "{:?}", p.list);
    assert_eq!(
        crate::write::answer::WriteError::rows(p).code(),
        "vector_too_large"
    );
}
