//! The reader's decode path for Feast's layouts, without Redis: `Batch::respond` over the
//! answers Redis would give for one lookup of 1 and 100 entities of the bench's service (three
//! views of ten features each: floats, ints, strings). `precomputed`: each entity's one
//! `PrecomputedFeatureVector` field (names in the service's order, as Feast writes them);
//! `per_field`: 30 feature fields and 3 `_ts:` fields per entity; `own_layout`: Ferry's own
//! `StoredVector`s, passed through as they are. `cargo bench -p ferry-reader --bench feast_read`.

// A benchmark, not product code: a setup that fails should stop it loudly.
#![allow(clippy::unwrap_used)]

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use ferry_protos::feast::{feature_field, precomputed_field, timestamp_field};
use ferry_protos::feast_proto::{self, value::Val, FeatureViewTimestamp, PrecomputedFeatureVector};
use ferry_protos::v1::{self, FeastJoinKey, FeastLayout, FeastView, Lookup, VectorRequest};
use ferry_reader::batch::Batch;
use prost::Message;
use redis::Value;
use std::hint::black_box;

const VIEWS: [(&str, &str); 3] = [
    ("user_stats", "float"),
    ("user_activity", "int"),
    ("user_attrs", "string"),
];

fn features(view: &str) -> Vec<String> {
    (0..10).map(|i| format!("{view}_feature_{i}")).collect()
}

fn feast_value(kind: &str, i: usize) -> Vec<u8> {
    let val = match kind {
        "float" => Val::FloatVal(i as f32 * 1.5),
        "int" => Val::Int64Val(i as i64 * 1000),
        _ => Val::StringVal(format!("value-{i}")),
    };
    feast_proto::Value { val: Some(val) }.encode_to_vec()
}

fn ts() -> feast_proto::Timestamp {
    feast_proto::Timestamp {
        seconds: 1_700_000_000,
        nanos: 0,
    }
}

fn layout(precomputed: bool) -> FeastLayout {
    FeastLayout {
        project: "bench".into(),
        join_keys: vec![FeastJoinKey {
            name: "user_id".into(),
            int64: false,
        }],
        views: VIEWS
            .iter()
            .map(|(view, _)| FeastView {
                timestamp_field: timestamp_field(view),
                feature_fields: features(view)
                    .iter()
                    .map(|f| feature_field(view, f))
                    .collect(),
                precomputed_view: if precomputed {
                    (*view).into()
                } else {
                    String::new()
                },
                precomputed_names: if precomputed {
                    features(view)
                        .iter()
                        .map(|f| format!("{view}__{f}"))
                        .collect()
                } else {
                    Vec::new()
                },
            })
            .collect(),
        precomputed_field: if precomputed {
            precomputed_field("scoring_precomputed")
        } else {
            Vec::new()
        },
    }
}

fn precomputed_answer() -> Value {
    let mut v = PrecomputedFeatureVector {
        precomputed_at: Some(ts()),
        ..Default::default()
    };
    for (view, kind) in VIEWS {
        for (i, f) in features(view).iter().enumerate() {
            v.feature_names.push(format!("{view}__{f}"));
            v.values.push(feast_value(kind, i));
        }
        v.fv_timestamps.push(FeatureViewTimestamp {
            feature_view_name: view.into(),
            event_timestamp: Some(ts()),
        });
    }
    let field = feast_proto::Value {
        val: Some(Val::BytesVal(v.encode_to_vec())),
    };
    Value::Array(vec![Value::BulkString(field.encode_to_vec())])
}

fn per_field_answer() -> Value {
    let mut fields = Vec::new();
    for (_, kind) in VIEWS {
        fields.extend((0..10).map(|i| Value::BulkString(feast_value(kind, i))));
        fields.push(Value::BulkString(ts().encode_to_vec()));
    }
    Value::Array(fields)
}

fn own_answer() -> Value {
    let views = VIEWS
        .iter()
        .map(|(_, kind)| v1::ViewValues {
            event_time_us: 1_700_000_000_000_000,
            values: (0..10)
                .map(|i| v1::Value {
                    kind: Some(match *kind {
                        "float" => v1::value::Kind::FloatVal(i as f32),
                        "int" => v1::value::Kind::Int64Val(i as i64),
                        _ => v1::value::Kind::StringVal(format!("value-{i}")),
                    }),
                })
                .collect(),
        })
        .collect();
    Value::BulkString(
        v1::StoredVector {
            fingerprint: 7,
            views,
        }
        .encode_to_vec(),
    )
}

fn batch(entities: usize, feast: Option<FeastLayout>) -> Batch {
    let request = VectorRequest {
        project: "bench".into(),
        lookups: vec![Lookup {
            service: "scoring".into(),
            fingerprint: 7,
            entity_keys: (0..entities).map(|i| format!("user-{i}")).collect(),
            feast,
        }],
    };
    Batch::from_request(&request, 1000).unwrap()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("feast_read");
    for entities in [1, 100] {
        let cases = [
            ("precomputed", Some(layout(true)), precomputed_answer()),
            ("per_field", Some(layout(false)), per_field_answer()),
            ("own_layout", None, own_answer()),
        ];
        for (name, feast, answer) in cases {
            let batch = batch(entities, feast);
            let answers = vec![answer; entities];
            let (response, found, refused) = batch.respond(answers.clone()).unwrap();
            assert_eq!((found, refused), (entities, 0), "{name}");
            assert_eq!(response.results[0].vectors.len(), entities);
            group.bench_function(format!("{name}/{entities}"), |b| {
                b.iter_batched(
                    || answers.clone(),
                    |a| black_box(batch.respond(a).unwrap()),
                    BatchSize::SmallInput,
                )
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
