//! Issue #9 end to end: "the model only ever sees features from the store". Every way a client
//! could get features of its own choosing to the model, tried through real Envoy over HTTP/1.1
//! and h2c: request trailers, path spellings, missed host and header conditions, forged
//! feature fields, metadata and headers, over-long and duplicate ids, and client numbers. Triton
//! `ModelInfer` calls (`kserve_v2_grpc`) go over h2c only (gRPC is HTTP/2; their rows are
//! skipped on HTTP/1.1) and are refused with gRPC statuses; `feast_rest` requests are answered by
//! the filter itself (`bypass/grpc_cases.rs`).
//!
//! Each case is one row of a table and must end in exactly one of two outcomes (see
//! `outcome.rs`): the model received the request with every Ferry-owned place holding what the
//! store holds (or nothing where Ferry writes nothing), or the client got a 4xx JSON refusal
//! and the model was not called. One stack serves the whole matrix; every request has its own
//! connection (Envoy closes an HTTP/1.1 connection after a local reply) and a time bound.
//!
//! Derived (on-demand) features are Ferry's names like stored ones: the repo gains an on-demand
//! view over a stored feature and a request field (`bypass/derived.rs`), whose values the checks
//! compute from the source data and the request; a client's value under a derived name, a
//! request field of the wrong type and the service of request fields only (no reader call) are
//! rows (`bypass/derived_cases.rs`).

#[path = "bypass/case.rs"]
mod case;
#[path = "bypass/cases.rs"]
mod cases;
#[path = "bypass/derived.rs"]
mod derived;
#[path = "bypass/derived_cases.rs"]
mod derived_cases;
#[path = "bypass/feast.rs"]
mod feast;
#[path = "bypass/grpc.rs"]
mod grpc;
#[path = "bypass/grpc_cases.rs"]
mod grpc_cases;
#[path = "bypass/numbers.rs"]
mod numbers;
#[path = "bypass/outcome.rs"]
mod outcome;
#[path = "bypass/places.rs"]
mod places;
#[path = "bypass/routes.rs"]
mod routes;

use std::sync::Arc;
use std::time::Duration;

use ferry_integration_tests::expected::{Entity, Store};
use ferry_integration_tests::http::{reader_keys_requested, Conn, Protocol, Response};
use ferry_integration_tests::{each_runtime, Options, Runtime, Stack};

use case::Case;
use cases::Pair;

async fn send(port: u16, protocol: Protocol, case: Arc<Case>) -> Response {
    let mut conn = Conn::open_with(port, protocol).await;
    let headers: Vec<(&str, &str)> = case
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    match &case.trailers {
        Some(t) => {
            conn.send_with_trailers(case.method, &case.path, &headers, case.body.clone(), t)
                .await
        }
        None => {
            conn.send(case.method, &case.path, &headers, case.body.clone())
                .await
        }
    }
}

fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "a panic".into()),
        Err(e) => e.to_string(),
    }
}

async fn the_model_only_ever_sees_features_from_the_store(runtime: Runtime) {
    let stack = Stack::start_edited(
        Options {
            runtime,
            extra_routes: routes::EXTRA_ROUTES,
            entities: Some(300),
        },
        routes::protect,
    );
    let store = Store::load(&stack);
    derived::load(&stack);
    let pair = store
        .fresh_pairs()
        .into_iter()
        .find_map(|e| match e {
            Entity::Pair { merchant, user } => Some(Pair { merchant, user }),
            Entity::User(_) => None,
        })
        .expect("a fresh (merchant, user) pair in the data");
    let cases: Vec<Arc<Case>> = cases::all(&pair).into_iter().map(Arc::new).collect();
    let port = stack.listen_port;
    let reader_port = stack.reader_port;
    let matrix = async {
        let mut lines = Vec::new();
        for protocol in [Protocol::Http1, Protocol::H2c] {
            for case in cases
                .iter()
                .filter(|c| protocol == Protocol::H2c || !c.h2c_only)
            {
                // Its own task: a request that fails or hangs names its case instead of ending
                // the matrix.
                let keys_before = case
                    .no_reader_call
                    .then(|| reader_keys_requested(reader_port));
                let sent = tokio::spawn(send(port, protocol, case.clone())).await;
                let mut verdict = match sent {
                    Ok(resp) => outcome::check(&case.expect, &case.body, &resp, &store),
                    Err(e) => Err(format!("request failed: {}", panic_text(e))),
                };
                if let (Ok(()), Some(before)) = (&verdict, keys_before) {
                    let after = reader_keys_requested(reader_port);
                    if after != before {
                        verdict = Err(format!(
                            "the reader was asked for {} keys on a route that looks nothing up",
                            after - before
                        ));
                    }
                }
                let name = format!("{:?} {}: {}", protocol, case.name, case.expect.summary());
                lines.push((name, verdict));
            }
        }
        lines
    };
    let lines = tokio::time::timeout(Duration::from_secs(300), matrix)
        .await
        .expect("the matrix finished within 300 s");
    for (name, verdict) in &lines {
        match verdict {
            Ok(()) => println!("ok    {name}"),
            Err(e) => println!("FAIL  {name}: {e}"),
        }
    }
    let failed: Vec<String> = lines
        .iter()
        .filter_map(|(name, v)| v.as_ref().err().map(|e| format!("{name}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} cases broke the invariant:\n{}",
        failed.len(),
        lines.len(),
        failed.join("\n")
    );
}

each_runtime!(the_model_only_ever_sees_features_from_the_store,);
// And on the native module reading Redis in process: the same matrix, the same two outcomes.
ferry_integration_tests::also_in_process!(the_model_only_ever_sees_features_from_the_store,);
