//! The Wasm build's side: the built `.wasm` on this crate's proxy-wasm host, one VM per case
//! (a fresh near cache, as the native side's is emptied), one stream per request.

use ferry_fuzz::config_space::reader::Plan;
use ferry_fuzz::config_space::request::Request;
use ferry_fuzz::config_space::schedule::Stream as Schedule;
use ferry_wasm_host::{Action, Host, Stream};

use super::seen::{envoy_local_reply, sorted, without_host_refusal, Headers, Seen};

/// A VM configured with the case's snapshot.
pub struct Wasm {
    host: Host,
}

impl Wasm {
    /// The VM, or `None` if the filter refused the snapshot.
    pub fn configured(snapshot: &[u8], now_us: i64) -> Option<Wasm> {
        let host = Host::load_filter();
        host.set_time_us(now_us);
        host.configure(snapshot).then_some(Wasm { host })
    }

    /// A stream for `req`; with `Plan::DispatchFails` no cluster takes a call.
    pub fn stream(&self, req: &Request, plan: &Plan, reader_cluster: &str) -> WasmStream<'_> {
        let clusters: &[&str] = if *plan == Plan::DispatchFails {
            &[]
        } else {
            &[reader_cluster]
        };
        self.host.set_clusters(clusters);
        self.host.note(format!("{:?} {plan:?}", req.headers));
        WasmStream {
            host: &self.host,
            stream: self.host.stream(),
            request: req.headers.clone(),
            trailers: req.trailers.clone(),
            seen: Seen::default(),
            answered_call: false,
        }
    }
}

pub struct WasmStream<'h> {
    host: &'h Host,
    stream: Stream,
    request: Headers,
    trailers: Headers,
    seen: Seen,
    answered_call: bool,
}

impl WasmStream<'_> {
    fn verdict(&mut self, hook: &'static str, action: Action) {
        self.seen.verdicts.push((hook, action == Action::Continue));
    }

    /// The stream's reader call (at most one), if it made one.
    fn call(&self) -> Option<ferry_wasm_host::DispatchedCall> {
        let id = self.stream.id();
        let calls = self.host.dispatched_calls();
        calls.into_iter().find(|c| c.context_id == id)
    }

    /// What it did, as `Seen`; ends the stream as Envoy does.
    pub fn seen(mut self) -> Seen {
        let s = &self.stream;
        let id = s.id();
        let calls = self.host.dispatched_calls().into_iter();
        self.seen.calls = calls
            .filter(|c| c.context_id == id)
            .map(|c| {
                let timeout = u64::from(c.timeout_ms);
                (c.cluster, sorted(c.headers), c.body, timeout)
            })
            .collect();
        let replies = s.local_replies();
        if let Some(r) = replies.first() {
            let grpc = u32::try_from(r.grpc_status).ok();
            let (headers, body) = (r.headers.clone(), r.body.clone());
            let reply = envoy_local_reply(&self.request, r.status, headers, body, grpc);
            self.seen.reply = Some(without_host_refusal(reply));
        }
        if replies.len() > 1 {
            self.seen.refused.push("a second local reply".into());
        }
        if s.request_headers_sent() {
            let trailers = sorted(s.request_trailer_map());
            let headers = sorted(s.request_header_map());
            self.seen.upstream = Some((headers, s.request_body_bytes(), trailers));
        }
        self.seen.paused = s.paused();
        self.seen.reset = s.closed();
        self.seen.log_record = self
            .host
            .take_property(&[ferry_core::log::FILTER_STATE_KEY]);
        self.seen.counters = counters(self.host);
        self.seen.refused.extend(self.host.abi_errors());
        self.stream.finish();
        self.seen
    }
}

/// The VM's counters by name (non-zero ones); histograms are not compared (their values are
/// latencies, 0 on both fixed clocks, but the fake Envoy does not keep them).
fn counters(host: &Host) -> std::collections::BTreeMap<String, u64> {
    host.metrics()
        .into_iter()
        .filter(|m| m.kind == ferry_wasm_host::MetricKind::Counter && m.value != 0)
        .map(|m| (m.name, u64::try_from(m.value).unwrap_or(0)))
        .collect()
}

impl Schedule for WasmStream<'_> {
    fn headers(&mut self, end_of_stream: bool) {
        let action = self.stream.request_headers(&self.request, end_of_stream);
        self.verdict("request_headers", action);
    }

    fn data(&mut self, chunk: &[u8], end_of_stream: bool) {
        let action = self.stream.request_body(chunk, end_of_stream);
        self.verdict("request_body", action);
    }

    fn trailers(&mut self) {
        let action = self.stream.request_trailers(&self.trailers);
        self.verdict("request_trailers", action);
    }

    fn answered(&self) -> bool {
        self.stream.local_reply().is_some()
    }

    fn call_out(&self) -> Option<Vec<u8>> {
        let call = self.call().filter(|_| !self.answered_call)?;
        Some(call.body)
    }

    fn deliver(&mut self, answer: Option<(Option<u16>, Vec<u8>)>) {
        self.answered_call = true;
        let (Some(answer), Some(call)) = (answer, self.call()) else {
            return;
        };
        match answer {
            (Some(status), body) => {
                let status = status.to_string();
                let headers = [(":status", status.as_str())];
                self.stream.call_response(call.token, &headers, &body);
            }
            (None, _) => self.stream.call_failure(call.token),
        }
    }

    fn forwarded(&self) -> bool {
        self.stream.forwarded()
    }

    fn response_headers(&mut self) {
        let action = self.stream.response_headers(&[(":status", "200")], false);
        self.verdict("response_headers", action);
        self.seen.response_headers = sorted(self.stream.response_header_map());
    }
}
