use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

use super::*;
use crate::abi::{BodyKind, HeaderKind};
use crate::envoy::testing::FakeEnvoy;
use ferry_test_support::{reader, snapshot, vector};

const HEAD: &[u8] = br#"{"instances":"#;
const TAIL: &[u8] = br#"[{"user_id":"u1"}]}"#;

/// A stream of the test snapshot's `fraud` route, its request headers in place.
fn stream() -> (FakeEnvoy, Rc<Stream<FakeEnvoy>>) {
    let bytes = prost::Message::encode_to_vec(&snapshot::snapshot());
    let (config, _) =
        FilterConfig::new(bytes, |_, _| Some(1)).unwrap_or_else(|e| unreachable!("{e}"));
    let envoy = FakeEnvoy::default();
    let length = (HEAD.len() + TAIL.len()).to_string();
    envoy.set_headers(
        HeaderKind::RequestHeader,
        &[
            (":method", "POST"),
            (":path", "/v1/models/fraud:predict"),
            ("content-length", &length),
        ],
    );
    let s = Rc::new(Stream::new(envoy.clone(), &config));
    (envoy, s)
}

/// The reader's answer for `u1`, fresh now.
fn answer() -> CallResponse {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    let now = i64::try_from(now).unwrap_or(i64::MAX);
    let v = vector::scoring(now, Some(30), Some(1.5), Some(2));
    CallResponse {
        status: Some(200),
        body: reader::response(vec![v]),
    }
}

/// Envoy delivers `chunk` to the body hook and, if the hook stops, buffers it.
fn body_chunk(envoy: &FakeEnvoy, s: &Stream<FakeEnvoy>, chunk: &[u8], end: bool) -> BodyStatus {
    envoy.set_body(BodyKind::ReceivedRequest, chunk);
    let status = s.on_request_body(end);
    if status == BodyStatus::StopIterationAndBuffer {
        let received = envoy.body_of(BodyKind::ReceivedRequest);
        envoy.append_body(BodyKind::BufferedRequest, &received);
        envoy.set_body(BodyKind::ReceivedRequest, b"");
    }
    status
}

fn enriched(body: &[u8]) -> serde_json::Value {
    let json: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    json["instances"][0]["profile__age"].clone()
}

#[test]
fn a_body_in_chunks_is_read_whole_and_the_answer_resumes_the_stream() {
    let (envoy, s) = stream();
    assert_eq!(s.on_request_headers(false), HeadersStatus::StopIteration);
    assert_eq!(
        body_chunk(&envoy, &s, HEAD, false),
        BodyStatus::StopIterationAndBuffer
    );
    assert_eq!(
        body_chunk(&envoy, &s, TAIL, true),
        BodyStatus::StopIterationAndBuffer
    );
    let calls = envoy.0.callouts.borrow().clone();
    assert_eq!(calls.len(), 1, "one reader call for the whole body");
    assert_eq!(calls[0].0, "ferry_reader");
    s.on_callout_done(1, answer());
    assert_eq!(
        envoy.0.continued_decoding.get(),
        1,
        "resumed from outside a hook"
    );
    let body = envoy.body_of(BodyKind::BufferedRequest);
    assert_eq!(enriched(&body), 30, "{}", String::from_utf8_lossy(&body));
    assert!(envoy.0.replies.borrow().is_empty());
    assert_eq!(s.on_response_headers(), HeadersStatus::Continue);
    let told = envoy.headers(HeaderKind::ResponseHeader);
    assert!(
        told.contains(&("x-ferry-status".into(), "ok".into())),
        "{told:?}"
    );
}

#[test]
fn an_answer_inside_the_hook_that_asked_for_it_lets_that_hook_continue() {
    let (envoy, s) = stream();
    let inner = Rc::downgrade(&s);
    *envoy.0.answer_inline.borrow_mut() = Some(Box::new(move |id| {
        if let Some(s) = inner.upgrade() {
            s.on_callout_done(id, answer());
        }
    }));
    assert_eq!(s.on_request_headers(false), HeadersStatus::StopIteration);
    let whole = [HEAD, TAIL].concat();
    assert_eq!(body_chunk(&envoy, &s, &whole, true), BodyStatus::Continue);
    assert_eq!(
        envoy.0.continued_decoding.get(),
        0,
        "never from inside the hook"
    );
    // The enriched body is the newest chunk, which Envoy passes on.
    assert_eq!(enriched(&envoy.body_of(BodyKind::ReceivedRequest)), 30);
    assert!(envoy.body_of(BodyKind::BufferedRequest).is_empty());
}

#[test]
fn a_hook_reentered_while_busy_continues_without_touching_the_filter() {
    let (envoy, s) = stream();
    let inner = Rc::downgrade(&s);
    let seen = Rc::new(Cell::new(None));
    let seen_inside = seen.clone();
    *envoy.0.answer_inline.borrow_mut() = Some(Box::new(move |_| {
        if let Some(s) = inner.upgrade() {
            seen_inside.set(Some(s.on_request_trailers()));
        }
    }));
    s.on_request_headers(false);
    body_chunk(&envoy, &s, &[HEAD, TAIL].concat(), true);
    assert_eq!(seen.get(), Some(TrailersStatus::Continue));
}

/// The one local reply, with its status and `x-ferry-error`.
fn reply(envoy: &FakeEnvoy) -> Option<(u16, Option<String>)> {
    let replies = envoy.0.replies.borrow();
    assert!(replies.len() <= 1, "{replies:?}");
    replies.first().map(|(status, headers, _)| {
        let code = headers.iter().find(|(k, _)| k == "x-ferry-error");
        (*status, code.map(|(_, v)| v.clone()))
    })
}

fn logged_panic(envoy: &FakeEnvoy) -> bool {
    let logs = envoy.0.logs.borrow();
    logs.iter()
        .any(|(level, m)| *level == LogLevel::Error && m.contains("scripted panic"))
}

#[test]
fn a_panic_in_a_request_hook_answers_500_and_the_stream_then_stands_aside() {
    let (envoy, s) = stream();
    *envoy.0.panic_on_header.borrow_mut() = Some("content-length".into());
    assert_eq!(s.on_request_headers(false), HeadersStatus::StopIteration);
    assert_eq!(reply(&envoy), Some((500, Some("internal".into()))));
    assert!(logged_panic(&envoy));
    // Envoy goes on with the local reply: every later hook lets it through.
    assert_eq!(body_chunk(&envoy, &s, HEAD, true), BodyStatus::Continue);
    assert_eq!(s.on_response_headers(), HeadersStatus::Continue);
    s.on_callout_done(1, answer());
    assert_eq!(envoy.0.resets.get(), 0);
    assert!(envoy.0.callouts.borrow().is_empty());
    assert_eq!(reply(&envoy).map(|r| r.0), Some(500), "still the one reply");
}

#[test]
fn a_panic_while_an_answer_is_delivered_fails_the_request_closed() {
    let (envoy, s) = stream();
    s.on_request_headers(false);
    body_chunk(&envoy, &s, &[HEAD, TAIL].concat(), true);
    // Delivering the answer rewrites content-length: that write panics.
    *envoy.0.panic_on_header.borrow_mut() = Some("content-length".into());
    s.on_callout_done(1, answer());
    assert_eq!(reply(&envoy).map(|r| r.0), Some(500));
    assert_eq!(envoy.0.continued_decoding.get(), 0, "never forwarded");
}

#[test]
fn a_panic_on_the_response_path_resets_the_stream() {
    let (envoy, s) = stream();
    s.on_request_headers(false);
    body_chunk(&envoy, &s, &[HEAD, TAIL].concat(), true);
    s.on_callout_done(1, answer());
    *envoy.0.panic_on_header.borrow_mut() = Some("x-ferry-status".into());
    assert_eq!(s.on_response_headers(), HeadersStatus::StopIteration);
    assert_eq!(envoy.0.resets.get(), 1);
    assert_eq!(reply(&envoy), None, "too late for a reply");
    assert!(logged_panic(&envoy));
}

#[test]
fn a_stream_that_could_not_be_made_fails_its_request_closed() {
    let envoy = FakeEnvoy::default();
    let s = Stream::of(envoy.clone(), Slot::default(), Err(Reply::internal()));
    assert_eq!(s.on_request_headers(false), HeadersStatus::StopIteration);
    assert_eq!(reply(&envoy).map(|r| r.0), Some(500));
    assert_eq!(s.on_response_headers(), HeadersStatus::Continue);
    assert_eq!(reply(&envoy).map(|r| r.0), Some(500), "still the one reply");
}

#[test]
fn a_panic_message_is_read_from_either_payload() {
    let s: Box<dyn Any + Send> = Box::new("static");
    assert!(panic_message(&*s).ends_with(": static"));
    let s: Box<dyn Any + Send> = Box::new(String::from("owned"));
    assert!(panic_message(&*s).ends_with(": owned"));
    let s: Box<dyn Any + Send> = Box::new(7);
    assert!(panic_message(&*s).ends_with("(no message)"));
}
