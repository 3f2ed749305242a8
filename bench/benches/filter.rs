//! criterion micro-benchmarks of the filter's host-agnostic logic, on the benchmark's service
//! shape (3 views x 10 features: float32, int64, string): decoding one stored vector, parsing a
//! KServe v1 request, rewriting it, and the whole enrichment step (reader answer -> new body).
//! `filter_request_derived5` is the whole step on a route whose service also lists five
//! on-demand features (request fields `amount` and `channel`, three stored inputs), against
//! `filter_request` on the same body; `derived5_stages` splits its extra cost (request-field
//! parsing, evaluation, writing). The wasm artifact is measured by `tests/wasm-host/benches`.
//! `filter_request_derived` is the same whole step on the standard fixture's route with and
//! without five on-demand features per instance (the wasm host's bench, tests/wasm-host/benches,
//! measures the same pair through the built `.wasm`).

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use ferry_core::config::{Config, Route};
use ferry_core::format::kserve_v1;
use ferry_core::request::{enrich, reader};
use ferry_core::vector;
use ferry_protos::v1::{self as pb, value::Kind};
use ferry_test_support::bench_service::{self as service, Floats, NOW_US};
use ferry_test_support::snapshot as fixture;

const BATCHES: [usize; 3] = [1, 10, 100];

/// The view `d5` over the bench layout; slots: request `amount` (0), `channel` (1),
/// `request.time` (2), `user_activity.count_0` (3), `user_attrs.attr_0` (4),
/// `user_stats.amount_0` (5). Features (by name): `big` = amount > 1000.0, `count_or_zero` =
/// has(count_0) ? count_0 : 0, `gold` = attr_0 == 'gold', `ratio` = amount / amount_0, `web` =
/// channel == 'web'.
fn derived5() -> pb::OnDemandView {
    use ferry_test_support::on_demand::{
        call, dbl, feature, has, input, int, request_field as field, stored, string,
    };
    use pb::{Function as F, ValueType as T};
    pb::OnDemandView {
        name: "d5".into(),
        request: vec![field("amount", T::Float64), field("channel", T::String)],
        sources: vec![
            "user_activity".into(),
            "user_attrs".into(),
            "user_stats".into(),
        ],
        stored: vec![
            stored("user_activity", "count_0", T::Int64),
            stored("user_attrs", "attr_0", T::String),
            stored("user_stats", "amount_0", T::Float32),
        ],
        features: vec![
            feature("big", T::Bool, call(F::Gt, vec![input(0), dbl(1000.0)])),
            feature(
                "count_or_zero",
                T::Int64,
                call(F::Conditional, vec![has(3), input(3), int(0)]),
            ),
            feature("gold", T::Bool, call(F::Eq, vec![input(4), string("gold")])),
            feature("ratio", T::Float64, call(F::Div, vec![input(0), input(5)])),
            feature("web", T::Bool, call(F::Eq, vec![input(1), string("web")])),
        ],
    }
}

/// The standard fixture's `scoring` service (keyed by `user_id`) with the benchmark's layout,
/// and a KServe v1 route to it with room for the largest batch.
fn config() -> Config {
    config_with(false)
}

/// [`config`], the service also listing the five features of [`derived5`] when `derived`.
fn config_with(derived: bool) -> Config {
    match Config::from_snapshot(snapshot_with(derived)) {
        Ok(c) => c,
        Err(e) => unreachable!("the bench snapshot is valid: {e}"),
    }
}

/// The snapshot of [`config_with`].
fn snapshot_with(derived: bool) -> pb::Snapshot {
    let mut snapshot = service::snapshot();
    if derived {
        let scoring = &mut snapshot.services[0];
        scoring.derived = vec![pb::ServiceDerived {
            view: "d5".into(),
            features: ["big", "count_or_zero", "gold", "ratio", "web"]
                .map(String::from)
                .to_vec(),
        }];
        scoring.derived_version = "00000000000000d5".into();
        snapshot.on_demand_views = vec![derived5()];
    }
    snapshot
}

/// One entity's stored vector, as `ferry materialize` writes it.
fn stored_vector(i: usize) -> Vec<u8> {
    service::stored_vector(i, Floats::Halves)
}

fn request(batch: usize) -> Vec<u8> {
    service::request(batch)
}

fn reader_answer(batch: usize) -> Vec<u8> {
    service::reader_answer(batch, Floats::Halves)
}

/// A whole request up to enrichment: `body` parsed on `route`, the reader call for every key
/// written, `answer` decoded into the stored vectors.
fn parse_and_read(
    config: &Config,
    route: &Route,
    body: &[u8],
    answer: &[u8],
) -> Result<(kserve_v1::ParsedRequest, Vec<Vec<u8>>), &'static str> {
    let parsed = kserve_v1::parse(black_box(body), route).map_err(|e| e.code())?;
    let all: Vec<usize> = (0..parsed.keys.len()).collect();
    let call = reader::reader_request(config, route, &parsed.keys, &all);
    black_box(&call.body);
    let vectors =
        reader::reader_vectors(black_box(answer), &call.lookup_sizes).map_err(|e| e.code())?;
    Ok((parsed, vectors))
}

fn route(config: &Config) -> &Route {
    &config.routes[0]
}

fn decode(c: &mut Criterion) {
    let config = config();
    let service = route(&config).service();
    let bytes = stored_vector(1);
    c.bench_function("vector_decode/30_features", |b| {
        b.iter(|| vector::decode(black_box(&bytes), service, "u000001", NOW_US))
    });
}

fn parse_and_rewrite(c: &mut Criterion) {
    let config = config();
    let route = route(&config);
    let mut parse = c.benchmark_group("kserve_v1_parse");
    for batch in BATCHES {
        let body = request(batch);
        parse.bench_with_input(BenchmarkId::from_parameter(batch), &body, |b, body| {
            b.iter(|| kserve_v1::parse(black_box(body), route))
        });
    }
    parse.finish();

    let mut rewrite = c.benchmark_group("kserve_v1_rewrite");
    for batch in BATCHES {
        let body = request(batch);
        let vectors: Vec<Vec<u8>> = (0..batch).map(stored_vector).collect();
        rewrite.bench_with_input(BenchmarkId::from_parameter(batch), &body, |b, body| {
            b.iter_batched(
                || {
                    let features: Result<Vec<_>, _> = vectors
                        .iter()
                        .map(|v| vector::decode(v, route.service(), "u", NOW_US))
                        .collect();
                    (
                        kserve_v1::parse(body, route).map_err(|e| e.code()),
                        features.map_err(|e| e.code()),
                    )
                },
                |(parsed, features)| Ok::<_, &str>(kserve_v1::rewrite(parsed?, route, features?)),
                BatchSize::SmallInput,
            )
        });
    }
    rewrite.finish();
}

/// The whole per-request work of the filter, host calls aside: parse the client's body, build
/// the reader request, decode and check every vector of the answer, and write the new body.
fn whole_request(c: &mut Criterion) {
    whole_request_of(c, "filter_request", false);
    whole_request_of(c, "filter_request_derived5", true);
}

fn whole_request_of(c: &mut Criterion, name: &str, derived: bool) {
    let config = config_with(derived);
    let route = route(&config);
    let mut group = c.benchmark_group(name);
    for batch in BATCHES {
        let body = request(batch);
        let answer = reader_answer(batch);
        group.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, _| {
            b.iter(|| {
                let (parsed, vectors) = parse_and_read(&config, route, &body, &answer)?;
                enrich::enrich(route, parsed.into(), &vectors, NOW_US).map_err(|e| e.code())
            })
        });
    }
    group.finish();
}

/// Where the five derived features' cost goes at batch 100: parsing the body on the derived
/// route (request fields read and typed) against the plain one; the enrichment step from the
/// parsed body and the reader's answer (decode, evaluate, rewrite) on each; and the rewrite alone
/// with five more values per instance (the values the features give, written without
/// evaluating), so that evaluation = enrich − rewrite differences.
fn derived5_stages(c: &mut Criterion) {
    const BATCH: usize = 100;
    let (plain, five) = (config_with(false), config_with(true));
    let body = request(BATCH);
    let answer = reader_answer(BATCH);
    let vectors: Vec<Vec<u8>> = (0..BATCH).map(stored_vector).collect();
    let mut g = c.benchmark_group("derived5_stages");
    for (name, config) in [("plain", &plain), ("derived5", &five)] {
        let route = route(config);
        g.bench_function(format!("parse/{name}"), |b| {
            b.iter(|| kserve_v1::parse(black_box(&body), route).map(|p| p.keys.len()))
        });
        let all: Vec<usize> = (0..BATCH).collect();
        g.bench_function(format!("enrich/{name}"), |b| {
            b.iter_batched(
                || {
                    let parsed = kserve_v1::parse(&body, route).map_err(|e| e.code());
                    let call = parsed
                        .as_ref()
                        .map_err(|e| *e)
                        .map(|p| reader::reader_request(config, route, &p.keys, &all));
                    let vectors = call.map(|c| reader::reader_vectors(&answer, &c.lookup_sizes));
                    (parsed, vectors)
                },
                |(parsed, vectors)| {
                    let vectors = vectors?.map_err(|e| e.code())?;
                    enrich::enrich(route, parsed?.into(), &vectors, NOW_US).map_err(|e| e.code())
                },
                BatchSize::SmallInput,
            )
        });
        g.bench_function(format!("rewrite/{name}"), |b| {
            b.iter_batched(
                || {
                    let features: Vec<vector::EntityFeatures> = vectors
                        .iter()
                        .filter_map(|v| vector::decode(v, route.service(), "u", NOW_US).ok())
                        .map(|mut f| {
                            for k in 0..route.derived.count {
                                f.values.push(Some(match k {
                                    1 => Kind::Int64Val(42),
                                    3 => Kind::DoubleVal(0.123_456_789_012_345_6),
                                    _ => Kind::BoolVal(k % 2 == 0),
                                }));
                                f.statuses.push(vector::FeatureStatus::Present);
                            }
                            f
                        })
                        .collect();
                    (
                        kserve_v1::parse(&body, route).map_err(|e| e.code()),
                        features,
                    )
                },
                |(parsed, features)| Ok::<_, &str>(kserve_v1::rewrite(parsed?, route, features)),
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// The fixture's `fraud` route (profile: age, score; txn: count) with room for batch 100, and a
/// route of the same service listing five of `risk`'s on-demand features (`abroad`, `age_at`
/// with `request.time`, `big`, `count_or_zero` with `has()`, `ratio`; not `huge`, which
/// overflows).
fn derived_configs() -> [(&'static str, Config); 2] {
    let wide = |mut s: pb::Snapshot| {
        s.routes[0].max_entities = 1000;
        s.routes[0].max_body_bytes = 1 << 20;
        s.services[0]
            .derived
            .iter_mut()
            .for_each(|d| d.features.retain(|f| f != "huge"));
        match Config::from_snapshot(s) {
            Ok(c) => c,
            Err(e) => unreachable!("the bench snapshot is valid: {e}"),
        }
    };
    [
        ("plain", wide(fixture::snapshot())),
        ("derived5", wide(ferry_test_support::on_demand::with_risk())),
    ]
}

/// The whole per-request step (as [`whole_request`]) with and without five on-demand features
/// per instance; the bodies carry the request fields in both.
fn derived(c: &mut Criterion) {
    use ferry_test_support::vector::{scoring, NOW_US as FIXTURE_NOW_US};
    let configs = derived_configs();
    let mut group = c.benchmark_group("filter_request_derived");
    for batch in BATCHES {
        let instances: Vec<String> = (0..batch)
            .map(|i| format!(r#"{{"user_id":"u{i}","amount":{i}.5,"country":"DE"}}"#))
            .collect();
        let body = format!(r#"{{"instances":[{}]}}"#, instances.join(",")).into_bytes();
        let vector = |i: usize| scoring(FIXTURE_NOW_US, Some(30 + i as i64), Some(0.25), Some(9));
        let answer = ferry_test_support::reader::response((0..batch).map(vector).collect());
        for (name, config) in &configs {
            let route = &config.routes[0];
            let once = |body: &[u8]| {
                let parsed = kserve_v1::parse(body, route).map_err(|e| e.code())?;
                let vectors = vec![vector(0); parsed.keys.len()];
                enrich::enrich(route, parsed.into(), &vectors, FIXTURE_NOW_US).map_err(|e| e.code())
            };
            // What is measured computes what it should: five values per instance, or none.
            match once(&body) {
                Ok(e) => assert_eq!(
                    e.derived.values,
                    if *name == "plain" { 0 } else { 5 * batch }
                ),
                Err(e) => unreachable!("the bench request is refused: {e}"),
            }
            group.bench_with_input(BenchmarkId::new(*name, batch), &batch, |b, _| {
                b.iter(|| {
                    let (parsed, vectors) = parse_and_read(config, route, &body, &answer)?;
                    enrich::enrich(route, parsed.into(), &vectors, FIXTURE_NOW_US)
                        .map_err(|e| e.code())
                })
            });
        }
    }
    group.finish();
}

/// Envoy-style request ids (UUID v4 text), deterministic: the sampled routes cycle through them,
/// so a rate of 0.1 logs about a tenth of the iterations, as it would a tenth of the requests.
fn request_ids(n: usize) -> Vec<String> {
    (0..n as u64)
        .map(|i| {
            let h = ferry_core::config::log_policy::request_hash(&i.to_string());
            format!(
                "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
                h >> 32,
                (h >> 16) & 0xffff,
                h & 0xfff,
                (h >> 20) & 0xfff,
                h.rotate_left(17) & 0xffff_ffff_ffff
            )
        })
        .collect()
}

/// The bench's route with `log: {sample}` (`None`: no `log:`, logging off).
fn logged_config(sample: Option<f64>) -> Config {
    let mut snapshot = snapshot_with(false);
    snapshot.routes[0].log = sample.map(|sample| pb::RouteLog {
        sample,
        statuses: Default::default(),
    });
    match Config::from_snapshot(snapshot) {
        Ok(c) => c,
        Err(e) => unreachable!("the bench snapshot is valid: {e}"),
    }
}

/// Served-feature logging's added work in the filter (host calls aside: reading
/// `x-request-id` and handing the record to Envoy's filter state are not measured here):
/// - `decision/RATE`: the sampling decision on one request id;
/// - `enrich/{off,keep}/BATCH`: `enrich_at` from the parsed body and the reader's answer, keeping
///   the copy of what the model received or not;
/// - `encode/BATCH`: building and encoding the `ServedLog` record from that copy;
/// - `request/{off,sample_1.0,sample_0.1}/BATCH`: the whole per-request step of
///   [`whole_request`] plus the decision, the copy and the record, as `request/mod.rs` does it.
fn served_log(c: &mut Criterion) {
    use ferry_core::config::log_policy::ServedStatus;
    use ferry_core::log::record::{self, Stamp};
    let ids = request_ids(1024);
    let mut g = c.benchmark_group("served_log");
    g.warm_up_time(std::time::Duration::from_secs(1));
    g.measurement_time(std::time::Duration::from_secs(3));
    for sample in [1.0, 0.1] {
        let config = logged_config(Some(sample));
        let Some(policy) = route(&config).log else {
            unreachable!("the route logs")
        };
        let mut i = 0;
        g.bench_function(BenchmarkId::new("decision", sample), |b| {
            b.iter(|| {
                i = (i + 1) % ids.len();
                policy.picks(black_box(&ids[i]), ServedStatus::Ok)
            })
        });
    }
    let config = logged_config(Some(1.0));
    let route_on = route(&config);
    let stamp = Stamp {
        request_id: &ids[0],
        now_us: NOW_US,
        received_us: NOW_US,
    };
    for batch in [1, 100] {
        let body = request(batch);
        let answer = reader_answer(batch);
        let all: Vec<usize> = (0..batch).collect();
        let parsed = || {
            let parsed = kserve_v1::parse(&body, route_on).map_err(|e| e.code())?;
            let call = reader::reader_request(&config, route_on, &parsed.keys, &all);
            let vectors =
                reader::reader_vectors(&answer, &call.lookup_sizes).map_err(|e| e.code())?;
            Ok::<_, &str>((parsed, vectors))
        };
        let keep_all = |_: ServedStatus| true;
        for (name, keep) in [
            ("off", &enrich::keep_none as enrich::Keep<'_>),
            ("keep", &keep_all),
        ] {
            g.bench_function(BenchmarkId::new(format!("enrich/{name}"), batch), |b| {
                b.iter_batched(
                    &parsed,
                    |p| {
                        let (parsed, vectors) = p?;
                        enrich::enrich_at(route_on, parsed.into(), &vectors, NOW_US, NOW_US, keep)
                            .map_err(|e| e.code())
                    },
                    BatchSize::SmallInput,
                )
            });
        }
        let kept = parsed().and_then(|(parsed, vectors)| {
            enrich::enrich_at(route_on, parsed.into(), &vectors, NOW_US, NOW_US, &keep_all)
                .map_err(|e| e.code())
        });
        let Some(served) = kept.ok().and_then(|e| e.logged) else {
            unreachable!("the bench request is enriched and kept")
        };
        // What is measured encodes what it should: a record under the bound, every instance.
        match record::encode(route_on, stamp, &served) {
            Ok(bytes) => assert!(bytes.len() > 100 * batch, "{} bytes", bytes.len()),
            Err(e) => unreachable!("the bench record is dropped: {e:?}"),
        }
        g.bench_function(BenchmarkId::new("encode", batch), |b| {
            b.iter(|| record::encode(route_on, black_box(stamp), black_box(&served)))
        });
    }
    served_log_request(&mut g, &ids);
    g.finish();
}

/// `served_log/request/...`: the whole step with logging off (no `log:`), and at 1.0 and 0.1,
/// the request id changing every iteration.
fn served_log_request(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    ids: &[String],
) {
    use ferry_core::config::log_policy::ServedStatus;
    use ferry_core::log::record::{self, Stamp};
    for batch in [1, 100] {
        let body = request(batch);
        let answer = reader_answer(batch);
        for (name, sample) in [
            ("off", None),
            ("sample_1.0", Some(1.0)),
            ("sample_0.1", Some(0.1)),
        ] {
            let config = logged_config(sample);
            let route = route(&config);
            // The ids sample as the rate says (1024 ids at 0.1: about 102).
            let picked = ids
                .iter()
                .filter(|id| route.log.is_some_and(|p| p.picks(id, ServedStatus::Ok)))
                .count();
            let expected = (sample.unwrap_or(0.0) * ids.len() as f64) as usize;
            assert!(
                picked.abs_diff(expected) <= 30,
                "{picked} of {} picked",
                ids.len()
            );
            let mut i = 0;
            g.bench_function(BenchmarkId::new(format!("request/{name}"), batch), |b| {
                b.iter(|| {
                    i = (i + 1) % ids.len();
                    let id = ids[i].as_str();
                    let (parsed, vectors) = parse_and_read(&config, route, &body, &answer)?;
                    let keep = |s| route.log.is_some_and(|p| p.picks(id, s));
                    let mut out =
                        enrich::enrich_at(route, parsed.into(), &vectors, NOW_US, NOW_US, &keep)
                            .map_err(|e| e.code())?;
                    if let Some(served) = out.logged.take() {
                        let stamp = Stamp {
                            request_id: id,
                            now_us: NOW_US,
                            received_us: NOW_US,
                        };
                        black_box(record::encode(route, stamp, &served).map(|b| b.len()).ok());
                    }
                    Ok::<_, &str>(out)
                })
            });
        }
    }
}

criterion_group!(
    benches,
    decode,
    parse_and_rewrite,
    whole_request,
    derived5_stages,
    derived,
    served_log
);
criterion_main!(benches);
