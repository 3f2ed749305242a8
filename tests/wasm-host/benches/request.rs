//! The filter's per-request cost, measured through the wasmtime host: one whole request
//! (headers → body → the reader's answer → resumed) with the body rewrite, for a batch of 1 and
//! of 10 entities, the same with five on-demand features of the `risk` view computed per
//! entity (`derived5`), and a passthrough request (unmatched path) for the host's own share.
//! `cargo bench -p ferry-wasm-host` (the filter must be built first, see README).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/abi/support.rs"]
mod support;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ferry_wasm_host::{Action, Host};
use support::*;

fn enriched(host: &Host, body: &[u8], reader: &[u8]) {
    let s = host.stream();
    let headers = post_headers(PATH, body.len());
    assert_eq!(s.request_headers(&headers, false), Action::Pause);
    assert_eq!(s.request_body(body, true), Action::Pause);
    let token = host.dispatched_calls()[0].token;
    s.call_response(token, &[(":status", "200")], reader);
    assert!(s.resumed());
    s.finish();
    host.clear_records();
}

fn bench(c: &mut Criterion) {
    let host = host();
    let mut g = c.benchmark_group("request");
    g.throughput(Throughput::Elements(1));
    for n in [1usize, 10] {
        let ids: Vec<String> = (0..n).map(|i| format!("u{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let body = kserve_body(&ids);
        let reader = reader_response((0..n).map(|i| good_vector(i as i64, NOW_US)).collect());
        g.bench_function(format!("enriched_{n}_entities"), |b| {
            b.iter(|| enriched(&host, body.as_bytes(), &reader))
        });
    }
    let body = kserve_body(&["u1"]);
    g.bench_function("passthrough", |b| {
        b.iter(|| {
            let s = host.stream();
            let headers = post_headers("/other", body.len());
            assert_eq!(s.request_headers(&headers, false), Action::Continue);
            assert_eq!(s.request_body(body.as_bytes(), true), Action::Continue);
            s.finish();
        })
    });
    g.finish();
    assert!(host.abi_errors().is_empty(), "{:?}", host.abi_errors());
    derived(c);
}

/// The same requests on a route whose service lists five on-demand features, against the same
/// route without them (the bodies carry the request fields in both).
fn derived(c: &mut Criterion) {
    let five = |mut s: ferry_protos::v1::Snapshot| {
        s.services[0].derived[0].features.retain(|f| f != "huge");
        s
    };
    let with = host_with(&five(ferry_test_support::on_demand::with_risk()));
    let without = host();
    let mut g = c.benchmark_group("request");
    g.throughput(Throughput::Elements(1));
    for n in [1usize, 10] {
        let instances: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"user_id":"u{i}","amount":{i}.5,"country":"DE"}}"#))
            .collect();
        let body = format!(r#"{{"instances":[{}]}}"#, instances.join(","));
        let reader = reader_response((0..n).map(|i| good_vector(i as i64, NOW_US)).collect());
        for (name, host) in [("plain", &without), ("derived5", &with)] {
            g.bench_function(format!("enriched_{n}_entities_{name}"), |b| {
                b.iter(|| enriched(host, body.as_bytes(), &reader))
            });
        }
    }
    g.finish();
    assert!(with.abi_errors().is_empty(), "{:?}", with.abi_errors());
}

criterion_group!(benches, bench);
criterion_main!(benches);
