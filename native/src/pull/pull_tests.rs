use std::cell::Cell;

use ferry_protos::signed::CONTENT_TYPE;
use ferry_test_support::signed::{key, key_json, sign};
use ferry_test_support::snapshot::snapshot;
use prost::Message;

use super::*;
use crate::abi::{CalloutInit, HeaderKind, HeadersStatus};
use crate::config::{FilterConfig, ForStream};
use crate::envoy::testing::FakeEnvoy;
use crate::stream::Stream;

const MAX_BYTES: usize = 65536;

/// A config pulling signed snapshots (key k1) from a URL of its own: the held sequence is kept
/// per URL in the process-wide store, which the tests running beside this one share.
fn pulling(name: &str) -> (FilterConfig, String) {
    let url = format!("https://cp:8091/v1/snapshot/{name}");
    let json = format!(
        r#"{{"snapshot_url":"{url}","snapshot_cluster":"cp","snapshot_poll_ms":200,
             "snapshot_keys":[{}],"snapshot_max_bytes":{MAX_BYTES}}}"#,
        key_json("k1", &key(1))
    );
    let (fc, c) = FilterConfig::new(json.into_bytes(), |_, _| Some(1))
        .unwrap_or_else(|e| unreachable!("{e}"));
    assert!(c.is_none(), "nothing inline");
    (fc, url)
}

/// A signed snapshot of `project`, as `ferry serve --signing-key` answers it.
fn envelope(seed: u8, id: &str, seq: u64, project: &str) -> Vec<u8> {
    let mut s = snapshot();
    s.project = project.into();
    sign(&key(seed), id, seq, &s.encode_to_vec()).encode_to_vec()
}

/// Envoy hands `fc` an answer; returns whether the body was read.
fn answer(fc: &FilterConfig, envoy: &FakeEnvoy, status: Option<u16>, body: &[u8]) -> bool {
    let read = Cell::new(false);
    let answer = Answer {
        status,
        etag: Some(format!("\"{}\"", body.len())),
        content_type: Some(CONTENT_TYPE.into()),
        body_size: body.len(),
    };
    fc.on_pulled(envoy, &answer, |n| {
        read.set(true);
        body[..n].to_vec()
    });
    read.get()
}

/// A tick, then Envoy's answer `body` (a 200) to the GET it sent.
fn pulled(fc: &FilterConfig, envoy: &FakeEnvoy, body: &[u8]) {
    fc.on_pull_tick(envoy);
    answer(fc, envoy, Some(200), body);
}

/// The project new streams run on; None while nothing is loaded.
fn serving(fc: &FilterConfig) -> Option<String> {
    match fc.for_this_thread() {
        ForStream::Ready(c, _) => c.map(|c| c.project.clone()),
        ForStream::NotLoaded(_) => None,
    }
}

/// The last warning logged, if any.
fn warned(envoy: &FakeEnvoy) -> Option<String> {
    let logs = envoy.0.logs.borrow();
    let last = logs.iter().rev().find(|(l, _)| *l == LogLevel::Warn);
    last.map(|(_, m)| m.clone())
}

#[test]
fn before_the_first_load_every_request_is_answered_503_snapshot_not_loaded() {
    let (fc, url) = pulling("not-loaded");
    for path in ["/v1/models/fraud:predict", "/elsewhere"] {
        let envoy = FakeEnvoy::default();
        envoy.set_headers(HeaderKind::RequestHeader, &[(":path", path)]);
        let s = Stream::new(envoy.clone(), &fc);
        assert_eq!(s.on_request_headers(false), HeadersStatus::StopIteration);
        let replies = envoy.0.replies.borrow();
        let [(status, headers, body)] = &replies[..] else {
            unreachable!("{replies:?}")
        };
        assert_eq!(*status, 503);
        let code = headers.iter().find(|(k, _)| k == "x-ferry-error");
        assert_eq!(code.map(|(_, v)| v.as_str()), Some("snapshot_not_loaded"));
        let body: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        assert_eq!(body["error"], "snapshot_not_loaded");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&url) && message.contains("200 ms"),
            "{message}"
        );
    }
    // Loaded: the next stream runs the filter (no reply of its own at the headers).
    let envoy = FakeEnvoy::default();
    pulled(&fc, &envoy, &envelope(1, "k1", 1, "p1"));
    envoy.set_headers(HeaderKind::RequestHeader, &[(":path", "/elsewhere")]);
    let s = Stream::new(envoy.clone(), &fc);
    assert_eq!(s.on_request_headers(true), HeadersStatus::Continue);
    assert!(envoy.0.replies.borrow().is_empty());
}

#[test]
fn the_first_tick_sends_the_get_and_its_answer_loads() {
    let (fc, _) = pulling("first");
    let envoy = FakeEnvoy::default();
    fc.on_pull_tick(&envoy);
    fc.on_pull_tick(&envoy);
    {
        let calls = envoy.0.callouts.borrow();
        assert_eq!(calls.len(), 1, "one GET at a time");
        let (cluster, headers, _, _) = &calls[0];
        assert_eq!(cluster, "cp");
        let h = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(h(":path").as_deref(), Some("/v1/snapshot/first"));
        assert_eq!(h(":authority").as_deref(), Some("cp:8091"));
        assert_eq!(h("accept").as_deref(), Some(CONTENT_TYPE));
    }
    let body = envelope(1, "k1", 1, "p1");
    assert!(answer(&fc, &envoy, Some(200), &body));
    assert_eq!(serving(&fc).as_deref(), Some("p1"));
    let logs = envoy.0.logs.borrow();
    assert!(
        logs.iter()
            .any(|(l, m)| *l == LogLevel::Info && m.contains("of project 'p1'")),
        "{logs:?}"
    );
    drop(logs);
    // The next GET asks whether the version changed.
    fc.on_pull_tick(&envoy);
    let calls = envoy.0.callouts.borrow();
    let etag = calls[1].1.iter().find(|(k, _)| k == "if-none-match");
    assert_eq!(
        etag.map(|(_, v)| v.clone()),
        Some(format!("\"{}\"", body.len()))
    );
}

#[test]
fn a_newer_signed_snapshot_replaces_it_and_refusals_keep_it_serving() {
    let (fc, _) = pulling("refusals");
    let envoy = FakeEnvoy::default();
    pulled(&fc, &envoy, &envelope(1, "k1", 1, "p1"));
    pulled(&fc, &envoy, &envelope(1, "k1", 2, "p2"));
    assert_eq!(serving(&fc).as_deref(), Some("p2"));

    let mut tampered = sign(&key(1), "k1", 3, &snapshot().encode_to_vec());
    if let Some(b) = tampered.signature.first_mut() {
        *b ^= 1;
    }
    let refused = [
        (envelope(1, "k1", 1, "replayed"), "lower than the held"),
        (tampered.encode_to_vec(), "signature"),
        (envelope(9, "k9", 3, "unknown"), "k9"),
    ];
    for (body, why) in refused {
        pulled(&fc, &envoy, &body);
        let warning = warned(&envoy).unwrap_or_default();
        assert!(
            warning.contains("refused, the last good one stays"),
            "{warning}"
        );
        assert!(warning.contains(why), "{why}: {warning}");
        assert_eq!(serving(&fc).as_deref(), Some("p2"), "{why}");
    }

    // Over snapshot_max_bytes: refused unread.
    fc.on_pull_tick(&envoy);
    assert!(!answer(&fc, &envoy, Some(200), &vec![0; MAX_BYTES + 1]));
    assert!(warned(&envoy).is_some_and(|w| w.contains("over snapshot_max_bytes")));
    // Not a 200, and no answer at all (a reset, a timeout): logged, kept.
    fc.on_pull_tick(&envoy);
    answer(&fc, &envoy, Some(503), b"down");
    assert!(warned(&envoy).is_some_and(|w| w.contains("answered 503: down")));
    fc.on_pull_tick(&envoy);
    answer(&fc, &envoy, None, b"");
    assert!(warned(&envoy).is_some_and(|w| w.contains("unreachable, reset or timed out")));
    // Envoy cannot start the GET (no such cluster): logged, kept, tried again at the next tick.
    envoy
        .0
        .refuse_callouts
        .set(Some(CalloutInit::ClusterNotFound));
    fc.on_pull_tick(&envoy);
    assert!(warned(&envoy).is_some_and(|w| w.contains("cluster not found")));
    assert_eq!(serving(&fc).as_deref(), Some("p2"));
    envoy.0.refuse_callouts.set(None);
    pulled(&fc, &envoy, &envelope(1, "k1", 3, "p3"));
    assert_eq!(serving(&fc).as_deref(), Some("p3"));
}

#[test]
fn a_new_config_for_the_same_url_refuses_what_the_last_one_held() {
    let (first, _) = pulling("next-config");
    let envoy = FakeEnvoy::default();
    pulled(&first, &envoy, &envelope(1, "k1", 5, "p5"));
    drop(first);
    // Envoy makes the config anew (an xDS update): the held sequence is the process's.
    let (next, _) = pulling("next-config");
    pulled(&next, &envoy, &envelope(1, "k1", 4, "replayed"));
    assert_eq!(serving(&next), None, "still not loaded");
    assert!(warned(&envoy).is_some_and(|w| w.contains("lower than the held snapshot's 5")));
    pulled(&next, &envoy, &envelope(1, "k1", 5, "p5"));
    assert_eq!(
        serving(&next).as_deref(),
        Some("p5"),
        "the same snapshot again"
    );
}
