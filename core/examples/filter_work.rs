//! The filter's whole per-request step at one batch size, run a fixed number of times, for
//! counting instructions: `valgrind --tool=callgrind target/release/examples/filter_work 100
//! 200` (batch 100, 200 requests; a third argument: a file the last new body is written to).
//! The same work, service and bodies as the criterion bench `filter_request/BATCH`
//! (`ferry_test_support::bench_service`: 3 views x 10 features, float32, int64, string; a
//! KServe v1 body), without criterion, so that a change to the core is measured in
//! a couple of minutes' build instead of the bench package's (issue #34). Each stage is a
//! function of its own (`stage_*`, never inlined), so callgrind attributes it.

use std::hint::black_box;

use ferry_core::config::{Config, Route};
use ferry_core::format::kserve_v1::{self, ParsedRequest};
use ferry_core::request::enrich::{self, Enriched};
use ferry_core::request::reader::{self, ReaderCall};
use ferry_test_support::bench_service::{self as service, Floats, NOW_US};

/// `FILTER_WORK_FLOATS=random`: the float features drawn as the end-to-end bench's data are
/// (7 to 9 digits), not the criterion bench's halves and integers.
fn floats() -> Floats {
    match std::env::var("FILTER_WORK_FLOATS") {
        Ok(v) if v == "random" => Floats::Drawn,
        _ => Floats::Halves,
    }
}

#[inline(never)]
fn stage_parse(body: &[u8], route: &Route) -> Result<ParsedRequest, String> {
    kserve_v1::parse(body, route).map_err(|e| e.to_string())
}

#[inline(never)]
fn stage_reader_request(config: &Config, route: &Route, keys: &[String]) -> ReaderCall {
    let all: Vec<usize> = (0..keys.len()).collect();
    reader::reader_request(config, route, keys, &all)
}

#[inline(never)]
fn stage_reader_vectors(answer: &[u8], call: &ReaderCall) -> Result<Vec<Vec<u8>>, String> {
    reader::reader_vectors(answer, &call.lookup_sizes).map_err(|e| e.to_string())
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
    let config = Config::from_snapshot(service::snapshot()).map_err(|e| e.to_string())?;
    let route = &config.routes[0];
    let body = service::request(batch);
    let answer = service::reader_answer(batch, floats());
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
