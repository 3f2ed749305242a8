//! The filter's whole per-request step at one batch size, run a fixed number of times, for
//! counting instructions: `valgrind --tool=callgrind target/release/examples/filter_work 100
//! 200` (batch 100, 200 requests; a third argument: a file the last new body is written to). The same work, service and bodies as the criterion bench
//! `filter_request/BATCH` (bench/benches/filter.rs: 3 views x 10 features, float32, int64,
//! string; a KServe v1 body), without criterion, so that a change to the core is measured in
//! a couple of minutes' build instead of the bench package's (issue #34). Each stage is a
//! function of its own (`stage_*`, never inlined), so callgrind attributes it.

use std::hint::black_box;

use ferry_core::config::{Config, Route};
use ferry_core::enrich::{self, Enriched, ReaderCall};
use ferry_core::format::kserve_v1::{self, ParsedRequest};
use ferry_protos::v1::{self as pb, value::Kind};
use ferry_test_support::snapshot::{self as fixture, feature, prefix};

const FINGERPRINT: u64 = 0x5eed_f00d_0bad_cafe;
const NOW_US: i64 = 1_795_000_000_000_000;

fn view(name: &str, prefix: &str, t: pb::ValueType) -> pb::ServiceView {
    let features = (0..10)
        .map(|i| feature(&format!("{prefix}_{i}"), t, None))
        .collect();
    fixture::view(name, 7 * fixture::DAY, features)
}

/// The bench's config: the fixture's `scoring` service with 3 views x 10 features.
fn config() -> Result<Config, String> {
    use pb::ValueType as T;
    let snapshot = pb::Snapshot {
        project: "bench".into(),
        version: "bench".into(),
        services: vec![pb::FeatureService {
            feast: None,
            fingerprint: FINGERPRINT,
            views: vec![
                view("user_activity", "count", T::Int64),
                view("user_attrs", "attr", T::String),
                view("user_stats", "amount", T::Float32),
            ],
            derived: vec![],
            derived_version: String::new(),
            ..fixture::scoring()
        }],
        on_demand_views: vec![],
        routes: vec![pb::Route {
            r#match: prefix("/v1/models/scoring"),
            max_body_bytes: 1 << 20,
            max_entities: 1000,
            reader_timeout_ms: 200,
            ..fixture::route("scoring", "scoring", pb::Format::KserveV1, &["user_id"])
        }],
        ..fixture::snapshot()
    };
    Config::from_snapshot(snapshot).map_err(|e| e.to_string())
}

fn stored_vector(i: usize) -> Vec<u8> {
    let values = |f: &dyn Fn(usize) -> Kind| (0..10).map(|j| Some(f(j))).collect();
    let t = NOW_US - 3_600_000_000;
    ferry_test_support::vector::vector(
        FINGERPRINT,
        vec![
            (t, values(&|j| Kind::Int64Val((i * 31 + j) as i64))),
            (
                t,
                values(&|j| Kind::StringVal(["gold", "DE", "mobile_app"][j % 3].into())),
            ),
            (
                t,
                values(&|j| {
                    Kind::FloatVal(if random_floats() {
                        // As bench/repo/generate_data.py draws them: uniform times a scale.
                        let x = ((i * 10 + j) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
                        x as f32 / (1u64 << 24) as f32 * [500.0, 1.0, 900.0][j % 3]
                    } else {
                        i as f32 * 0.5 + j as f32
                    })
                }),
            ),
        ],
    )
}

/// `FILTER_WORK_FLOATS=random`: the float features drawn as the end-to-end bench's data are
/// (7 to 9 digits), not the criterion bench's halves and integers.
fn random_floats() -> bool {
    std::env::var("FILTER_WORK_FLOATS").is_ok_and(|v| v == "random")
}

fn request(batch: usize) -> Vec<u8> {
    let instances: Vec<String> = (0..batch)
        .map(|i| {
            format!(
                r#"{{"user_id":"u{:06}","amount":{}.25,"merchant_id":"m{:05}","channel":"web"}}"#,
                i + 1,
                i * 7,
                i * 13
            )
        })
        .collect();
    format!(r#"{{"instances":[{}]}}"#, instances.join(",")).into_bytes()
}

#[inline(never)]
fn stage_parse(body: &[u8], route: &Route) -> Result<ParsedRequest, String> {
    kserve_v1::parse(body, route).map_err(|e| e.to_string())
}

#[inline(never)]
fn stage_reader_request(config: &Config, route: &Route, keys: &[String]) -> ReaderCall {
    let all: Vec<usize> = (0..keys.len()).collect();
    enrich::reader_request(config, route, keys, &all)
}

#[inline(never)]
fn stage_reader_vectors(answer: &[u8], call: &ReaderCall) -> Result<Vec<Vec<u8>>, String> {
    enrich::reader_vectors(answer, &call.lookup_sizes).map_err(|e| e.to_string())
}

#[inline(never)]
fn stage_enrich(
    route: &Route,
    parsed: ParsedRequest,
    vectors: &[Vec<u8>],
) -> Result<Enriched, String> {
    enrich::enrich(route, parsed.into(), vectors, NOW_US).map_err(|e| e.to_string())
}

#[inline(never)]
fn stage_drop(e: Enriched) {
    drop(e);
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let mut arg = |default: usize| args.next().and_then(|a| a.parse().ok()).unwrap_or(default);
    let (batch, requests) = (arg(100), arg(200));
    let config = config()?;
    let route = &config.routes[0];
    let body = request(batch);
    let answer = ferry_test_support::reader::response((0..batch).map(stored_vector).collect());
    let dump = args.next();
    let mut bytes = 0;
    for _ in 0..requests {
        let parsed = stage_parse(black_box(&body), route)?;
        let call = stage_reader_request(&config, route, &parsed.keys);
        black_box(&call.body);
        let vectors = stage_reader_vectors(black_box(&answer), &call)?;
        let enriched = stage_enrich(route, parsed, &vectors)?;
        let body = enriched.rewritten.body.as_deref().unwrap_or_default();
        bytes += body.len();
        if let Some(path) = &dump {
            std::fs::write(path, body).map_err(|e| e.to_string())?;
        }
        stage_drop(enriched);
    }
    println!("batch {batch}: {requests} requests, {bytes} bytes written");
    Ok(())
}
