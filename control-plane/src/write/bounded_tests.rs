use serde_json::json;

use super::*;

fn exceeded(body: &str) -> Exceeded {
    match read(body.as_bytes()) {
        Err(Unread::Exceeded(e)) => e,
        other => panic!("expected a bound, got {other:?}"),
    }
}

#[test]
fn a_body_within_the_bounds_reads_as_plain_json() {
    let body = json!({
        "push_source_name": "p",
        "df": {"user_id": ["u1", "u2"], "emb": [[1.0, 2.5], null], "n": [1, -2], "b": [true, false]},
        "to": "online",
        "other": {"nested": [[["deep"]]], "x": "y".repeat(MAX_WRITE_CELL_BYTES + 1)},
    });
    let text = body.to_string();
    assert_eq!(read(text.as_bytes()).unwrap(), body);
    // Not an object, or df not one: read as it is, for the shape check.
    assert_eq!(read(b"[1, 2]").unwrap(), json!([1, 2]));
    assert_eq!(read(br#"{"df": [1]}"#).unwrap(), json!({"df": [1]}));
    assert_eq!(read(br#"{"df": "x"}"#).unwrap(), json!({"df": "x"}));
    assert_eq!(read(br#"{"df": 5}"#).unwrap(), json!({"df": 5}));
    // Numbers exactly as written (serde_json's arbitrary_precision), as serde_json reads them.
    let exact = br#"{"df": {"n": [1e400, 0.1, 18446744073709551616, -0]}}"#;
    assert_eq!(
        read(exact).unwrap(),
        serde_json::from_slice::<Json>(exact).unwrap()
    );
}

#[test]
fn malformed_json_is_a_json_error_not_a_bound() {
    for body in ["{", r#"{"df": {"a": [1,]}}"#, r#"{"df": {}} x"#, ""] {
        assert!(
            matches!(read(body.as_bytes()), Err(Unread::Json(_))),
            "{body}"
        );
    }
}

#[test]
fn rows_are_counted_while_reading() {
    let at_limit = format!(
        r#"{{"df": {{"a": [{}]}}}}"#,
        vec!["1"; MAX_WRITE_ROWS].join(",")
    );
    assert!(read(at_limit.as_bytes()).is_ok());
    let over = format!(
        r#"{{"df": {{"a": [{}], "b": [1]}}}}"#,
        vec!["1"; MAX_WRITE_ROWS + 1].join(",")
    );
    assert_eq!(exceeded(&over), Exceeded::Rows { column: "a".into() });
    // The bound stops the read: a body malformed after the offending column is still too
    // large, not invalid (it was never read that far).
    let cut = format!(
        r#"{{"df": {{"a": [{}], "b": "#,
        vec!["1"; MAX_WRITE_ROWS + 1].join(",")
    );
    assert_eq!(exceeded(&cut).code(), "too_many_rows");
}

#[test]
fn a_long_cell_is_refused_where_it_is() {
    let long = "x".repeat(MAX_WRITE_CELL_BYTES + 1);
    let body = json!({"df": {"id": ["a", "b"], "s": ["ok", long]}}).to_string();
    let e = exceeded(&body);
    assert_eq!(
        e,
        Exceeded::Cell {
            column: "s".into(),
            row: 1
        }
    );
    assert_eq!(e.code(), "cell_too_large");
    assert!(e.to_string().contains("65536"), "{e}");
    // At the bound: read. Escapes count as the text they decode to.
    let at = json!({"df": {"s": ["x".repeat(MAX_WRITE_CELL_BYTES)]}}).to_string();
    assert!(read(at.as_bytes()).is_ok());
    // A long string inside a list cell, or in an object as a cell, is a cell too.
    let nested = json!({"df": {"s": [["x".repeat(MAX_WRITE_CELL_BYTES + 1)]]}}).to_string();
    assert_eq!(exceeded(&nested).code(), "cell_too_large");
    let object = json!({"df": {"s": [{"k": "x".repeat(MAX_WRITE_CELL_BYTES + 1)}]}}).to_string();
    assert_eq!(exceeded(&object).code(), "cell_too_large");
}

#[test]
fn a_long_list_is_refused_where_it_is() {
    let items = vec![0.5; MAX_WRITE_LIST_ITEMS + 1];
    let body = json!({"df": {"id": ["a", "b", "c"], "emb": [[1.0], null, items]}}).to_string();
    assert_eq!(
        exceeded(&body),
        Exceeded::List {
            column: "emb".into(),
            row: 2
        }
    );
    let at = json!({"df": {"emb": [vec![0.5; MAX_WRITE_LIST_ITEMS]]}}).to_string();
    assert!(read(at.as_bytes()).is_ok());
}
