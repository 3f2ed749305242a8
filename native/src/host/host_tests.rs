use super::*;
use crate::envoy::testing::FakeEnvoy;
use crate::reentry::Hook;

use crate::abi::CalloutInit;

/// A host whose request has `buffered` in Envoy's buffer and `received` as the newest chunk.
fn host(buffered: &[u8], received: &[u8]) -> (FakeEnvoy, EnvoyHost<FakeEnvoy>) {
    let envoy = FakeEnvoy::default();
    envoy.set_body(BodyKind::BufferedRequest, buffered);
    envoy.set_body(BodyKind::ReceivedRequest, received);
    (envoy.clone(), EnvoyHost::new(envoy, Slot::default()))
}

#[test]
fn inside_the_body_hook_the_body_is_the_buffer_and_the_newest_chunk() {
    let (_, h) = host(b"{\"a\":", b"1}");
    assert_eq!(
        h.request_body_size(),
        5,
        "outside: only what Envoy buffered"
    );
    assert_eq!(h.request_body(100), Some(b"{\"a\":".to_vec()));
    h.reentry.enter(Hook::RequestBody);
    assert_eq!(h.request_body_size(), 7);
    assert_eq!(h.request_body(100), Some(b"{\"a\":1}".to_vec()));
    assert_eq!(
        h.request_body(3),
        Some(b"{\"a".to_vec()),
        "cut at the size asked"
    );
    h.reentry.leave();
    h.reentry.enter(Hook::Headers);
    assert_eq!(
        h.request_body_size(),
        5,
        "only the body hook has a newest chunk"
    );
}

#[test]
fn a_new_body_goes_where_envoy_passes_it_on() {
    // Inside the body hook: the newest chunk is what goes on; the buffer is emptied.
    let (envoy, h) = host(b"old ", b"body");
    h.reentry.enter(Hook::RequestBody);
    h.replace_request_body(8, b"new body");
    assert_eq!(envoy.body_of(BodyKind::BufferedRequest), b"");
    assert_eq!(envoy.body_of(BodyKind::ReceivedRequest), b"new body");
    h.reentry.leave();
    // Afterwards (a reader answer outside hooks): everything is in the buffer.
    let (envoy, h) = host(b"old body", b"");
    h.replace_request_body(8, b"new");
    assert_eq!(envoy.body_of(BodyKind::BufferedRequest), b"new");
    assert_eq!(envoy.body_of(BodyKind::ReceivedRequest), b"");
}

#[test]
fn resumes_inside_a_hook_wait_for_its_end_and_outside_go_to_envoy() {
    let (envoy, h) = host(b"", b"");
    h.reentry.enter(Hook::Headers);
    h.resume_request();
    h.resume_response();
    assert_eq!(
        envoy.0.continued_decoding.get(),
        0,
        "not from inside a hook"
    );
    assert!(h.reentry.leave(), "the hook continues instead");
    h.resume_request();
    h.resume_response();
    assert_eq!(envoy.0.continued_decoding.get(), 1);
    assert_eq!(envoy.0.continued_encoding.get(), 1);
}

#[test]
fn a_delivered_answer_is_readable_only_while_it_is_delivered() {
    let (_, h) = host(b"", b"");
    h.begin_delivery(CallResponse {
        status: Some(200),
        body: b"vectors".to_vec(),
    });
    assert_eq!(h.call_response_status(), Some(200));
    assert_eq!(h.call_response_body(3), Some(b"vec".to_vec()));
    assert_eq!(h.call_response_body(99), Some(b"vectors".to_vec()));
    h.end_delivery();
    assert_eq!(h.call_response_status(), None);
}

#[test]
fn callouts_carry_their_id_or_envoys_reason() {
    let (envoy, h) = host(b"", b"");
    let headers = vec![(":path", "/v1/vectors")];
    let timeout = Duration::from_millis(5);
    assert_eq!(
        h.dispatch(HttpCall {
            cluster: "ferry_reader",
            headers: headers.clone(),
            body: b"q",
            timeout
        }),
        Ok(1)
    );
    assert_eq!(envoy.0.callouts.borrow()[0].2, b"q");
    envoy
        .0
        .refuse_callouts
        .set(Some(CalloutInit::ClusterNotFound));
    let err = h.dispatch(HttpCall {
        cluster: "nowhere",
        headers,
        body: b"q",
        timeout,
    });
    assert_eq!(
        err,
        Err("callout to cluster 'nowhere' failed: cluster not found".into())
    );
}

#[test]
fn headers_and_metadata_read_as_text_and_counters_only_count_up() {
    let (envoy, h) = host(b"", b"");
    envoy.set_headers(HeaderKind::RequestHeader, &[("x-id", "u1"), ("b", "2")]);
    envoy
        .0
        .metadata
        .borrow_mut()
        .insert("route".into(), "fraud".into());
    assert_eq!(h.request_header("x-id"), Some("u1".into()));
    assert_eq!(h.request_header("nope"), None);
    assert_eq!(h.request_header_names(), ["x-id", "b"]);
    h.set_request_header("x-id", None);
    assert_eq!(h.request_header_names(), ["b"]);
    assert_eq!(h.route_metadata("route"), Some("fraud".into()));
    h.metric_add(3, 2);
    h.metric_add(3, -1);
    assert_eq!(envoy.0.counters.borrow().get(&3), Some(&2));
}
