use super::*;
use ferry_protos::v1::{value::Kind, Value, ViewValues};

fn v(i: i64) -> Value {
    Value {
        kind: Some(Kind::Int64Val(i)),
    }
}

/// Where a view's rows go: its slot and its vector features (what the merge reads of the
/// write path's `Target`).
fn target(slot: usize, selected: Vec<usize>) -> (usize, Vec<usize>) {
    (slot, selected)
}

/// A row of the view: its event time and every feature's value.
fn row(t: i64, values: Vec<Value>) -> (i64, Vec<Value>) {
    (t, values)
}

fn update<'a>(
    (slot, selected): &'a (usize, Vec<usize>),
    (t, values): &'a (i64, Vec<Value>),
) -> Update<'a> {
    Update {
        slot: *slot,
        selected,
        unfit: false,
        event_time_us: *t,
        values,
    }
}

#[test]
fn a_new_vector_leaves_other_views_empty_and_newer_or_equal_rows_replace_a_part() {
    let (a, b) = (target(0, vec![1, 0]), target(1, vec![0]));
    let first = row(1_000_001, vec![v(1), v(2)]);
    let m = merge_rows(None, 7, 2, &[update(&a, &first)]);
    assert_eq!(m.outcomes, [Outcome::Written]);
    let bytes = m.bytes.unwrap();
    let got = encode::decode(&bytes).unwrap();
    assert_eq!(got.fingerprint, 7);
    assert_eq!(got.views[0].values, [v(2), v(1)], "selected order");
    assert_eq!(got.views[0].event_time_us, 1_000_001);
    assert!(got.views[1].values.is_empty(), "absent, never zero");

    // The other view: its part is set, the first one kept byte for byte.
    let other = row(5, vec![v(9)]);
    let m = merge_rows(Some(&bytes), 7, 2, &[update(&b, &other)]);
    let got = encode::decode(m.bytes.as_ref().unwrap()).unwrap();
    assert_eq!(got.views[0].values, [v(2), v(1)]);
    assert_eq!(got.views[1].values, [v(9)]);
    let bytes = m.bytes.unwrap();

    // One microsecond older: skipped; equal: overwrites (idempotent re-push); newer: replaces.
    let older = row(1_000_000, vec![v(3), v(4)]);
    let m = merge_rows(Some(&bytes), 7, 2, &[update(&a, &older)]);
    assert_eq!(
        m,
        Merged {
            bytes: None,
            outcomes: vec![Outcome::SkippedOlder]
        }
    );
    let equal = row(1_000_001, vec![v(5), v(6)]);
    let m = merge_rows(Some(&bytes), 7, 2, &[update(&a, &equal)]);
    assert_eq!(m.outcomes, [Outcome::Written]);
    assert_eq!(
        encode::decode(m.bytes.as_ref().unwrap()).unwrap().views[0].values,
        [v(6), v(5)]
    );
    let again = merge_rows(m.bytes.as_deref(), 7, 2, &[update(&a, &equal)]);
    assert_eq!(again.bytes, m.bytes, "a re-push writes the same bytes");
    // Two views in one merge, one skipped.
    let m = merge_rows(
        Some(&bytes),
        7,
        2,
        &[update(&a, &older), update(&b, &row(6, vec![v(8)]))],
    );
    assert_eq!(m.outcomes, [Outcome::SkippedOlder, Outcome::Written]);
    let got = encode::decode(m.bytes.as_ref().unwrap()).unwrap();
    assert_eq!(
        (got.views[0].values.clone(), got.views[1].values.clone()),
        (vec![v(2), v(1)], vec![v(8)])
    );
}

#[test]
fn another_fingerprint_layout_or_garbage_is_refused_never_merged() {
    let a = target(0, vec![0]);
    let r = row(1, vec![v(1)]);
    let u = [update(&a, &r)];
    let stored = merge_rows(None, 7, 2, &u).bytes.unwrap();
    for (bytes, fp, views, why) in [
        (stored.clone(), 8, 2, Refusal::FingerprintMismatch),
        (stored.clone(), 7, 3, Refusal::FingerprintMismatch),
        (vec![0xff, 0xff, 0xff], 7, 2, Refusal::Undecodable),
    ] {
        let m = merge_rows(Some(&bytes), fp, views, &u);
        assert_eq!(
            m,
            Merged {
                bytes: None,
                outcomes: vec![Outcome::Refused(why)]
            }
        );
    }
    let none_selected = target(0, vec![]);
    let unfit = Update {
        unfit: true,
        ..update(&none_selected, &r)
    };
    let m = merge_rows(None, 7, 2, &[unfit]);
    assert_eq!(m.outcomes, [Outcome::Refused(Refusal::SchemaMismatch)]);
    assert_eq!(m.bytes, None);
}

#[test]
fn a_merged_vector_over_the_bound_is_refused_each_part_alone_within_it() {
    use ferry_protos::v1::FloatList;
    // Two views' lists, each under the bound alone, over it together.
    let half = Value {
        kind: Some(Kind::FloatListVal(FloatList {
            values: vec![0.5; MAX_VECTOR_BYTES / 4 / 2 + 64],
        })),
    };
    let (a, b) = (target(0, vec![0]), target(1, vec![0]));
    let r = row(1, vec![half]);
    let one = merge_rows(None, 7, 2, &[update(&a, &r)]);
    let stored = one.bytes.expect("one part alone is within the bound");
    assert!(stored.len() <= MAX_VECTOR_BYTES);
    let both = merge_rows(Some(&stored), 7, 2, &[update(&b, &r)]);
    assert_eq!(
        both,
        Merged {
            bytes: None,
            outcomes: vec![Outcome::Refused(Refusal::VectorTooLarge)]
        }
    );
    // What the stored part skips as older stays skipped, not refused.
    let older = row(0, vec![v(1)]);
    let m = merge_rows(Some(&stored), 7, 2, &[update(&a, &older), update(&b, &r)]);
    assert_eq!(
        m.outcomes,
        [
            Outcome::SkippedOlder,
            Outcome::Refused(Refusal::VectorTooLarge)
        ]
    );
}

// `ferry materialize` beside pushes.

fn part(t: i64, v: i64) -> ViewValues {
    ViewValues {
        event_time_us: t,
        values: vec![Value {
            kind: Some(Kind::Int64Val(v)),
        }],
    }
}

fn vector(views: Vec<ViewValues>) -> Vec<u8> {
    StoredVector {
        fingerprint: 7,
        views,
    }
    .encode_to_vec()
}

#[test]
fn a_newer_pushed_part_survives_and_an_older_one_is_replaced() {
    let empty = ViewValues::default();
    // Stored: view 0 pushed at t=30, view 1 at t=5, view 2 pushed (files have none).
    let stored = vector(vec![part(30, 1), part(5, 2), part(9, 3)]);
    let files = vector(vec![part(20, 10), part(5, 20), empty.clone()]);
    let merged = StoredVector::decode(merge_vector(&stored, &files).unwrap().as_slice()).unwrap();
    // Newer push kept; equal time: the files' row; no file row: the push kept.
    assert_eq!(merged.views, [part(30, 1), part(5, 20), part(9, 3)]);
    // Nothing to change: None.
    assert_eq!(
        merge_vector(&stored, &vector(vec![part(1, 0), empty.clone(), empty])),
        None
    );
    // Another fingerprint: the files' vector.
    let other = StoredVector {
        fingerprint: 8,
        views: vec![part(99, 9)],
    }
    .encode_to_vec();
    assert_eq!(merge_vector(&other, &files), Some(files.clone()));
    assert_eq!(merge_vector(b"\xff\xff", &files), Some(files));
}
