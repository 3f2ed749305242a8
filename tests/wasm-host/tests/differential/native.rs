//! The native build's side: the module's `Stream` (what its hooks call) over the in-memory
//! Envoy of `ferry-native`'s `testing` feature, configured as its config-new hook does
//! (`FilterConfig::new` on the snapshot's bytes). The fake Envoy only records; what Envoy does
//! with each hook's status (send the headers on, buffer or pass a data frame, hold or release
//! trailers, release on `continue_decoding`) is modelled here, so that what went upstream can
//! be compared with the Wasm host's model of the same Envoy. The reader is called over an HTTP
//! callout, as the Wasm build does (not the in-process reader, `direct`, which needs Redis).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use ferry_fuzz::config_space::reader::Plan;
use ferry_fuzz::config_space::request::Request;
use ferry_fuzz::config_space::schedule::Stream as Schedule;
use ferry_native::abi::{BodyKind, BodyStatus, CalloutInit, HeaderKind, HeadersStatus};
use ferry_native::config::FilterConfig;
use ferry_native::envoy::testing::FakeEnvoy;
use ferry_native::envoy::Envoy as _;
use ferry_native::slot::CallResponse;
use ferry_native::stream::Stream;

use super::seen::{envoy_local_reply, sorted, without_host_refusal, Headers, Seen};

/// The module's filter config for the case's snapshot.
pub struct Native {
    config: FilterConfig,
    /// Metric names by id (id = index + 1), as the config-new hook defined them.
    metric_names: Rc<RefCell<Vec<String>>>,
    /// Counters over the case's streams (the Wasm VM's count over its streams too).
    counters: RefCell<BTreeMap<String, u64>>,
    now_us: i64,
}

impl Native {
    /// The config, or `None` if the module refused the snapshot. The near cache, one store
    /// per process, is emptied: each case starts from none, as each case's Wasm VM does.
    pub fn configured(snapshot: &[u8], now_us: i64) -> Option<Native> {
        ferry_native::shared_data::store().clear();
        let names = Rc::new(RefCell::new(Vec::new()));
        let define = |_, name: &str| {
            let mut names = names.borrow_mut();
            names.push(name.to_string());
            u32::try_from(names.len()).ok()
        };
        let (config, _) = FilterConfig::new(snapshot.to_vec(), define).ok()?;
        Some(Native {
            config,
            metric_names: names,
            counters: RefCell::default(),
            now_us,
        })
    }

    /// A stream for `req`; with `Plan::DispatchFails` Envoy refuses the callout.
    pub fn stream(&self, req: &Request, plan: &Plan) -> NativeStream<'_> {
        let envoy = FakeEnvoy::default();
        envoy.0.now_us.set(Some(self.now_us));
        if *plan == Plan::DispatchFails {
            envoy
                .0
                .refuse_callouts
                .set(Some(CalloutInit::ClusterNotFound));
        }
        NativeStream {
            native: self,
            stream: Stream::new(envoy.clone(), &self.config),
            envoy,
            request: req.headers.clone(),
            trailers: req.trailers.clone(),
            seen: Seen::default(),
            sent: None,
            body: Vec::new(),
            paused: false,
            answered_call: false,
        }
    }
}

pub struct NativeStream<'n> {
    native: &'n Native,
    stream: Stream<FakeEnvoy>,
    envoy: FakeEnvoy,
    request: Headers,
    trailers: Headers,
    seen: Seen,
    /// The request headers as they went upstream, once they did.
    sent: Option<Headers>,
    /// The body bytes that went upstream.
    body: Vec<u8>,
    /// The last hook stopped the request and nothing released it since.
    paused: bool,
    answered_call: bool,
}

fn headers(h: &[(String, String)]) -> Vec<(&str, &str)> {
    h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

impl NativeStream<'_> {
    fn verdict(&mut self, hook: &'static str, continued: bool) {
        self.seen.verdicts.push((hook, continued));
    }

    /// Envoy sends on the headers (if not yet) and every buffered body byte (and the trailers,
    /// if they arrived: compared as the filter left them).
    fn release(&mut self) {
        self.paused = false;
        if self.sent.is_none() {
            self.sent = Some(self.envoy.headers(HeaderKind::RequestHeader));
        }
        for kind in [BodyKind::BufferedRequest, BodyKind::ReceivedRequest] {
            self.body.extend(self.envoy.body_of(kind));
            self.envoy.set_body(kind, b"");
        }
    }

    /// What it did, as `Seen`.
    pub fn seen(mut self) -> Seen {
        let e = &self.envoy.0;
        self.seen.calls = e
            .callouts
            .borrow()
            .iter()
            .map(|(cluster, h, body, timeout)| {
                let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
                (cluster.clone(), sorted(h.clone()), body.clone(), ms)
            })
            .collect();
        let replies = e.replies.borrow().clone();
        if let Some((status, h, body)) = replies.first().cloned() {
            let reply = envoy_local_reply(&self.request, u32::from(status), h, body, None);
            self.seen.reply = Some(without_host_refusal(reply));
        }
        if replies.len() > 1 {
            self.seen.refused.push("a second local reply".into());
        }
        let now = self.envoy.headers(HeaderKind::RequestHeader);
        if let Some(sent) = &self.sent {
            if *sent != now {
                let why = format!("request headers changed after they went upstream: {now:?}");
                self.seen.refused.push(why);
            }
            // The Wasm host's record of the body is what went on and what is still buffered.
            let mut body = self.body.clone();
            body.extend(self.envoy.body_of(BodyKind::BufferedRequest));
            let trailers = self.envoy.headers(HeaderKind::RequestTrailer);
            self.seen.upstream = Some((sorted(sent.clone()), body, sorted(trailers)));
        }
        self.seen.paused = self.paused && replies.is_empty();
        self.seen.reset = e.resets.get() > 0;
        let state = e.filter_state.borrow();
        let record = state.get(ferry_core::log::FILTER_STATE_KEY);
        self.seen.log_record = record.map(|text| {
            use base64::Engine as _;
            // The module stores the record as base64 text (Envoy 1.40's filter state is a
            // string): decoded, it must be the Wasm build's bytes.
            let b64 = base64::engine::general_purpose::STANDARD;
            b64.decode(text)
                .unwrap_or_else(|e| format!("not base64: {e}").into_bytes())
        });
        self.seen.counters = self.count();
        self.seen
    }

    /// Adds this stream's counters to the case's.
    fn count(&self) -> BTreeMap<String, u64> {
        let names = self.native.metric_names.borrow();
        let mut all = self.native.counters.borrow_mut();
        for (id, n) in self.envoy.0.counters.borrow().iter() {
            let name = names.get(*id as usize - 1).cloned().unwrap_or_default();
            *all.entry(name).or_default() += n;
        }
        all.retain(|_, n| *n != 0);
        all.clone()
    }

    fn answered_now(&self) -> bool {
        !self.envoy.0.replies.borrow().is_empty()
    }

    /// After `hook` returned (Continue when `go`): unless the filter answered, Continue
    /// releases the request and anything else pauses it.
    fn settle(&mut self, hook: &'static str, go: bool) {
        self.verdict(hook, go);
        if self.answered_now() {
            return;
        }
        if go {
            self.release();
        } else {
            self.paused = true;
        }
    }

    /// After a delivery: a `continue_decoding` releases the request.
    fn after_delivery(&mut self, continued_before: u32) {
        if self.envoy.0.continued_decoding.get() > continued_before && !self.answered_now() {
            self.release();
        }
    }
}

impl Schedule for NativeStream<'_> {
    fn headers(&mut self, end_of_stream: bool) {
        let h = self.request.clone();
        self.envoy
            .set_headers(HeaderKind::RequestHeader, &headers(&h));
        let status = self.stream.on_request_headers(end_of_stream);
        let go = status == HeadersStatus::Continue;
        self.settle("request_headers", go);
    }

    /// Envoy hands the frame to the hook as the received chunk; Continue sends the buffered
    /// body and the chunk on, StopIterationAndBuffer keeps the chunk in the buffer.
    fn data(&mut self, chunk: &[u8], end_of_stream: bool) {
        self.envoy.set_body(BodyKind::ReceivedRequest, chunk);
        let status = self.stream.on_request_body(end_of_stream);
        let go = status == BodyStatus::Continue;
        if !go && !self.answered_now() {
            let received = self.envoy.body_of(BodyKind::ReceivedRequest);
            self.envoy.append_body(BodyKind::BufferedRequest, &received);
            self.envoy.set_body(BodyKind::ReceivedRequest, b"");
        }
        self.settle("request_body", go);
    }

    fn trailers(&mut self) {
        let t = self.trailers.clone();
        self.envoy
            .set_headers(HeaderKind::RequestTrailer, &headers(&t));
        let status = self.stream.on_request_trailers();
        let go = status == ferry_native::abi::TrailersStatus::Continue;
        self.settle("request_trailers", go);
    }

    fn answered(&self) -> bool {
        self.answered_now()
    }

    fn call_out(&self) -> Option<Vec<u8>> {
        let calls = self.envoy.0.callouts.borrow();
        let call = calls.first().filter(|_| !self.answered_call)?;
        Some(call.2.clone())
    }

    fn deliver(&mut self, answer: Option<(Option<u16>, Vec<u8>)>) {
        self.answered_call = true;
        let Some((status, body)) = answer else {
            return;
        };
        let before = self.envoy.0.continued_decoding.get();
        // The fake's callout ids count from 1.
        self.stream
            .on_callout_done(1, CallResponse { status, body });
        self.after_delivery(before);
    }

    /// As the Wasm host says it: the headers went on and nothing holds the request.
    fn forwarded(&self) -> bool {
        self.sent.is_some() && !self.paused && !self.answered_now()
    }

    fn response_headers(&mut self) {
        let status = [(":status", "200")];
        self.envoy.set_headers(HeaderKind::ResponseHeader, &status);
        let go = self.stream.on_response_headers() == HeadersStatus::Continue;
        self.verdict("response_headers", go);
        let h = self.envoy.headers(HeaderKind::ResponseHeader);
        self.seen.response_headers = sorted(h);
    }
}
