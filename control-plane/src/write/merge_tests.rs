use super::*;
use ferry_protos::v1::{value::Kind, Value};

fn v(i: i64) -> Value {
    Value {
        kind: Some(Kind::Int64Val(i)),
    }
}

fn target(slot: usize, selected: Vec<usize>) -> Target {
    Target {
        service: "s".into(),
        fingerprint: 7,
        views: 2,
        slot,
        selected,
        unfit: None,
    }
}

fn row(t: i64, values: Vec<Value>) -> Row {
    Row {
        entity_key: "u1".into(),
        event_time_us: t,
        values,
    }
}

#[test]
fn a_new_vector_leaves_other_views_empty_and_newer_or_equal_rows_replace_a_part() {
    let (a, b) = (target(0, vec![1, 0]), target(1, vec![0]));
    let first = row(1_000_001, vec![v(1), v(2)]);
    let m = merge(
        None,
        7,
        2,
        &[Update {
            target: &a,
            row: &first,
        }],
    );
    assert_eq!(m.outcomes, [Outcome::Written]);
    let bytes = m.bytes.unwrap();
    let got = vector::decode(&bytes).unwrap();
    assert_eq!(got.fingerprint, 7);
    assert_eq!(got.views[0].values, [v(2), v(1)], "selected order");
    assert_eq!(got.views[0].event_time_us, 1_000_001);
    assert!(got.views[1].values.is_empty(), "absent, never zero");

    // The other view: its part is set, the first one kept byte for byte.
    let other = row(5, vec![v(9)]);
    let m = merge(
        Some(&bytes),
        7,
        2,
        &[Update {
            target: &b,
            row: &other,
        }],
    );
    let got = vector::decode(m.bytes.as_ref().unwrap()).unwrap();
    assert_eq!(got.views[0].values, [v(2), v(1)]);
    assert_eq!(got.views[1].values, [v(9)]);
    let bytes = m.bytes.unwrap();

    // One microsecond older: skipped; equal: overwrites (idempotent re-push); newer: replaces.
    let older = row(1_000_000, vec![v(3), v(4)]);
    let m = merge(
        Some(&bytes),
        7,
        2,
        &[Update {
            target: &a,
            row: &older,
        }],
    );
    assert_eq!(
        m,
        Merged {
            bytes: None,
            outcomes: vec![Outcome::SkippedOlder]
        }
    );
    let equal = row(1_000_001, vec![v(5), v(6)]);
    let m = merge(
        Some(&bytes),
        7,
        2,
        &[Update {
            target: &a,
            row: &equal,
        }],
    );
    assert_eq!(m.outcomes, [Outcome::Written]);
    assert_eq!(
        vector::decode(m.bytes.as_ref().unwrap()).unwrap().views[0].values,
        [v(6), v(5)]
    );
    let again = merge(
        m.bytes.as_deref(),
        7,
        2,
        &[Update {
            target: &a,
            row: &equal,
        }],
    );
    assert_eq!(again.bytes, m.bytes, "a re-push writes the same bytes");
    // Two views in one merge, one skipped.
    let m = merge(
        Some(&bytes),
        7,
        2,
        &[
            Update {
                target: &a,
                row: &older,
            },
            Update {
                target: &b,
                row: &row(6, vec![v(8)]),
            },
        ],
    );
    assert_eq!(m.outcomes, [Outcome::SkippedOlder, Outcome::Written]);
    let got = vector::decode(m.bytes.as_ref().unwrap()).unwrap();
    assert_eq!(
        (got.views[0].values.clone(), got.views[1].values.clone()),
        (vec![v(2), v(1)], vec![v(8)])
    );
}

#[test]
fn another_fingerprint_layout_or_garbage_is_refused_never_merged() {
    let a = target(0, vec![0]);
    let r = row(1, vec![v(1)]);
    let u = [Update {
        target: &a,
        row: &r,
    }];
    let stored = merge(None, 7, 2, &u).bytes.unwrap();
    for (bytes, fp, views, why) in [
        (stored.clone(), 8, 2, Refusal::FingerprintMismatch),
        (stored.clone(), 7, 3, Refusal::FingerprintMismatch),
        (vec![0xff, 0xff, 0xff], 7, 2, Refusal::Undecodable),
    ] {
        let m = merge(Some(&bytes), fp, views, &u);
        assert_eq!(
            m,
            Merged {
                bytes: None,
                outcomes: vec![Outcome::Refused(why)]
            }
        );
    }
    let unfit = Target {
        unfit: Some("x".into()),
        ..target(0, vec![])
    };
    let m = merge(
        None,
        7,
        2,
        &[Update {
            target: &unfit,
            row: &r,
        }],
    );
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
    let one = merge(
        None,
        7,
        2,
        &[Update {
            target: &a,
            row: &r,
        }],
    );
    let stored = one.bytes.expect("one part alone is within the bound");
    assert!(stored.len() <= MAX_VECTOR_BYTES);
    let both = merge(
        Some(&stored),
        7,
        2,
        &[Update {
            target: &b,
            row: &r,
        }],
    );
    assert_eq!(
        both,
        Merged {
            bytes: None,
            outcomes: vec![Outcome::Refused(Refusal::VectorTooLarge)]
        }
    );
    // What the stored part skips as older stays skipped, not refused.
    let older = row(0, vec![v(1)]);
    let m = merge(
        Some(&stored),
        7,
        2,
        &[
            Update {
                target: &a,
                row: &older,
            },
            Update {
                target: &b,
                row: &r,
            },
        ],
    );
    assert_eq!(
        m.outcomes,
        [
            Outcome::SkippedOlder,
            Outcome::Refused(Refusal::VectorTooLarge)
        ]
    );
}
