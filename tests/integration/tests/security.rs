//! Issue #22's security matrix, in the style of the bypass matrix: one table of cases, each
//! tried through real processes — Envoy configured over mTLS xDS and calling the reader over
//! mTLS, `ferry serve` with TLS, tokens, a push grant and a signing key, the reader, Redis, and
//! a second Envoy pulling signed snapshots as Istio would — each with its expected refusal,
//! and after each a check that Envoy still answers enriched requests with the store's values
//! (the cases that load the services check during as well). One stack serves the whole
//! matrix; one line per case (`ok <case>: <outcome>`) is printed for the docs' list.
//!
//! The log sink's cases (issue #37) each run a sink of their own beside the stack.
//!
//! Where another test proves a case in depth it calls the same helper: the idle pollers
//! (`serve_security.rs`), the plaintext start rule (`mtls.rs`), the signed pull
//! (`istio/signed.rs`: the man in the middle).

#[path = "security/acl.rs"]
mod acl;
#[path = "security/bounds.rs"]
mod bounds;
#[path = "security/links.rs"]
mod links;
#[path = "security/pull.rs"]
mod pull;
#[path = "security/shared.rs"]
mod shared;
#[path = "security/signed.rs"]
mod signed;
#[path = "security/sink.rs"]
mod sink;
#[path = "istio/support.rs"]
#[allow(dead_code)]
mod support;
#[path = "security/trust.rs"]
mod trust;
#[path = "security/writes.rs"]
mod writes;
#[path = "security/xds.rs"]
mod xds;

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use ferry_integration_tests::secure::{SecureOptions, SecureStack};
use ferry_test_support::certs::{Ca, LeafFiles};

/// What every case sees: the stack, the pulling Envoy, a certificate of another CA.
pub struct Ctx {
    pub stack: SecureStack,
    pub pull: pull::PullEnvoy,
    /// A certificate with Envoy's names, from a CA nobody trusts.
    pub stranger: LeafFiles,
    _other_ca: Ca,
}

/// A case's run: its outcome, or why it is not the expected one.
pub type Fut<'a> = Pin<Box<dyn Future<Output = Result<String, String>> + 'a>>;
type Run = for<'a> fn(&'a mut Ctx) -> Fut<'a>;

/// The matrix: (case, run).
const CASES: &[(&str, Run)] = &[
    ("xds: no client certificate", links::xds_no_certificate),
    ("xds: a certificate of another CA", links::xds_another_ca),
    (
        "xds: a certificate for another identity's node id",
        links::xds_another_identitys_node_id,
    ),
    (
        "xds: a forged NACK under another identity's node id",
        links::xds_forged_nack,
    ),
    (
        "reader: a lookup without a client certificate",
        links::reader_no_certificate,
    ),
    (
        "reader: a lookup with a certificate of another CA",
        links::reader_another_ca,
    ),
    (
        "api: no credential (push, snapshot read, status read)",
        links::api_no_credential,
    ),
    ("api: a certificate of another CA", links::api_another_ca),
    (
        "api: a credential without the role",
        links::api_without_the_role,
    ),
    (
        "pull: a replayed lower-sequence signed snapshot",
        signed::replayed_lower_sequence,
    ),
    ("pull: a tampered signature", signed::tampered_signature),
    ("pull: an unknown key", signed::unknown_key),
    ("pull: an oversize snapshot", signed::oversize),
    (
        "pull: a validly signed snapshot at sequence 2^60",
        shared::pull_sequence_over_the_bound,
    ),
    (
        "shared state: a sequence written at 2^60 into the shared record",
        shared::shared_sequence_at_two_to_the_60,
    ),
    (
        "shared state: a record forged by a Redis writer without the deployment's key",
        shared::forged_shared_record,
    ),
    (
        "redis: the readers' ACL user writing ferry:cp:* or a vector",
        acl::reader_user_writing_control_plane_keys,
    ),
    ("reader: the memory bomb", bounds::reader_memory_bomb),
    (
        "reader: a connection flood over --max-connections",
        bounds::reader_connection_flood,
    ),
    (
        "api: 2,000 idle keep-alive pollers, then a push",
        bounds::idle_pollers_then_a_push,
    ),
    (
        "serve: two concurrent installs × 100",
        bounds::concurrent_installs,
    ),
    (
        "start: plaintext on a non-loopback address without --insecure",
        bounds::plaintext_on_a_network_address,
    ),
    ("start: a token under 128 bits", trust::short_token_at_start),
    (
        "api: a feature write with no write credential configured (loopback too)",
        trust::write_without_a_write_credential,
    ),
    (
        "identity: a `*` pattern that would have matched across `/` (--grant, --node-identity)",
        trust::star_across_a_slash,
    ),
    (
        "api: a write over a bound of its content (a cell, a list, the rows)",
        writes::oversize_content,
    ),
    (
        "api: a write flood over --max-concurrent-writes",
        writes::write_flood,
    ),
    (
        "api: a large write under --max-write-keys-per-second",
        writes::paced_write,
    ),
    (
        "envoy: a write flood that ignores Retry-After, over --write-max-requests",
        writes::write_flood_through_envoy,
    ),
    (
        "api: the write route over mTLS (--write-server-san)",
        writes::write_route_over_mtls,
    ),
    (
        "log sink: a connection flood over --max-connections and --max-http-connections",
        sink::connection_flood,
    ),
    (
        "log sink: a record naming services with no instances",
        sink::zero_instance_record,
    ),
    (
        "log sink: a certificate of the client CA with another identity (SAN)",
        sink::another_identity,
    ),
    (
        "log sink: retention past --max-bytes",
        sink::retention_past_max_bytes,
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_is_refused_and_the_service_keeps_enriching() {
    let started = Instant::now();
    let mut ctx = tokio::task::block_in_place(|| {
        let stack = SecureStack::start(SecureOptions {
            reader_args: vec![
                "--max-connections".into(),
                bounds::READER_MAX_CONNECTIONS.to_string().into(),
            ],
            ..SecureOptions::default()
        });
        let pull = pull::start(&stack);
        let other_ca = Ca::new("another CA");
        let stranger = other_ca
            .issue(&["envoy.ml.svc"], &[ferry_integration_tests::secure::ENVOY])
            .write(stack.dir.path(), "stranger");
        Ctx {
            stack,
            pull,
            stranger,
            _other_ca: other_ca,
        }
    });
    println!(
        "the stack started in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let mut lines = Vec::new();
    for (name, run) in CASES {
        let at = Instant::now();
        let outcome = match tokio::time::timeout(Duration::from_secs(60), run(&mut ctx)).await {
            Ok(outcome) => outcome,
            Err(_) => Err("did not finish within 60 s".into()),
        };
        // After each case: both Envoys still enrich with the store's values.
        let after = match (
            ctx.stack.enriched().await,
            ctx.stack.enriched_at(ctx.pull.port).await,
        ) {
            (Ok(()), Ok(())) => Ok(()),
            (a, b) => Err(format!("after the case, not enriched: {a:?} / {b:?}")),
        };
        let verdict = outcome.and_then(|o| after.map(|()| o));
        match &verdict {
            Ok(o) => println!("ok {name}: {o} [{:.1} s]", at.elapsed().as_secs_f64()),
            Err(e) => println!("FAIL {name}: {e}"),
        }
        lines.push((name, verdict));
    }
    println!("the matrix ran in {:.1} s", started.elapsed().as_secs_f64());
    let failed: Vec<String> = lines
        .iter()
        .filter_map(|(n, v)| v.as_ref().err().map(|e| format!("{n}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} cases failed:\n{}",
        failed.len(),
        lines.len(),
        failed.join("\n")
    );
}
