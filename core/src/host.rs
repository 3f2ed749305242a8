//! What the filter needs from its host, as a trait: one implementation over proxy-wasm
//! hostcalls (`adapter`), one in memory for tests (`testing::FakeHost`).

use std::time::Duration;

/// A step of a request's handling that has just ended, told to the host so that it may time
/// the steps (the native module's per-stage timers, issue #34); hosts that do not time them
/// ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The entities were read from the request (headers or buffered body).
    Parsed,
    /// The reader's answer was checked and decoded into vectors (and cached).
    Decoded,
    /// Features were chosen per entity under the route's policies.
    Enriched,
    /// The enriched request was written (body or header) and is about to go on.
    Rewritten,
}

/// An HTTP call the host dispatches (the reader call): to `cluster`, with its pseudo-headers
/// and headers, its body, and how long to wait for the answer.
#[derive(Debug, Clone)]
pub struct HttpCall<'a> {
    pub cluster: &'a str,
    pub headers: Vec<(&'a str, &'a str)>,
    pub body: &'a [u8],
    pub timeout: Duration,
}

pub trait Host {
    fn request_header(&self, name: &str) -> Option<String>;
    fn request_header_names(&self) -> Vec<String>;
    fn set_request_header(&self, name: &str, value: Option<&str>);
    /// Names of the request trailers (valid in the trailers callback).
    fn request_trailer_names(&self) -> Vec<String>;
    fn remove_request_trailer(&self, name: &str);
    fn request_body(&self, size: usize) -> Option<Vec<u8>>;
    /// Replaces the whole buffered request body (`old_size` bytes) with `body`.
    fn replace_request_body(&self, old_size: usize, body: &[u8]);
    /// Dispatches an HTTP call; the token identifies its response.
    fn dispatch(&self, call: HttpCall<'_>) -> Result<u32, String>;
    /// The `:status` of the dispatched call's response being delivered.
    fn call_response_status(&self) -> Option<u16>;
    fn call_response_body(&self, size: usize) -> Option<Vec<u8>>;
    /// Host time, microseconds since the Unix epoch.
    fn now_us(&self) -> i64;
    fn send_response(&self, status: u16, headers: Vec<(&str, &str)>, body: &[u8]);
    /// Answers a gRPC request with a gRPC error: HTTP 200, `content-type: application/grpc`,
    /// `grpc-status` and `grpc-message` (percent-encoded, as gRPC and Envoy write it), no
    /// message. The default writes those headers through `send_response`; a host that has its
    /// own gRPC local reply (proxy-wasm's takes the status and encodes the message) overrides it.
    fn send_grpc_error(&self, grpc_status: u32, message: &str, headers: Vec<(&str, &str)>) {
        let status = grpc_status.to_string();
        let message = crate::error::grpc::percent_encode(message);
        let mut all = vec![
            ("content-type", "application/grpc"),
            ("grpc-status", status.as_str()),
            ("grpc-message", message.as_str()),
        ];
        all.extend(headers);
        self.send_response(200, all, b"");
    }
    fn resume_request(&self);
    /// Lets a response held by `on_response_headers` go on.
    fn resume_response(&self);
    fn log_warn(&self, message: &str);
    /// Shared data (shared by Envoy's workers): the value and its CAS token.
    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    /// Writes shared data; false when the CAS token no longer matches.
    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool;
    fn metric_add(&self, id: u32, delta: i64);
    fn metric_record(&self, id: u32, value: u64);
    fn set_response_header(&self, name: &str, value: &str);
    /// A string in the matched Envoy route's `metadata.filter_metadata.ferry` (the
    /// `xds.route_metadata` property), e.g. `route`.
    fn route_metadata(&self, key: &str) -> Option<String>;
    /// Stores the request's served-feature record where Envoy's access loggers read it (filter
    /// state `ferry.log`); false when the host refused it.
    fn store_log_record(&self, record: &[u8]) -> bool;
    /// `stage` just ended. Called on the hot path: a host that times stages must keep it cheap.
    fn stage_done(&self, _stage: Stage) {}
}

#[cfg(any(test, feature = "testing"))]
pub mod testing {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;

    pub type Headers = Vec<(String, String)>;
    /// (cluster, headers, body, timeout) of one dispatched call.
    pub type Dispatched = (String, Headers, Vec<u8>, Duration);
    /// (status, headers, body) of a local reply.
    pub type Reply = (u16, Headers, Vec<u8>);

    /// A scripted host: tests set the request and the call response, then read what the
    /// filter did.
    #[derive(Default)]
    pub struct FakeHost {
        pub headers: RefCell<Headers>,
        pub trailers: RefCell<Headers>,
        pub body: RefCell<Vec<u8>>,
        pub dispatched: RefCell<Vec<Dispatched>>,
        pub dispatch_error: RefCell<Option<String>>,
        pub call_status: RefCell<Option<u16>>,
        pub call_body: RefCell<Vec<u8>>,
        pub now_us: i64,
        pub sent: RefCell<Option<Reply>>,
        pub resumed: RefCell<bool>,
        pub response_resumed: RefCell<bool>,
        pub warnings: RefCell<Vec<String>>,
        pub shared: RefCell<HashMap<String, (Vec<u8>, u32)>>,
        pub metrics: RefCell<HashMap<u32, i64>>,
        pub recorded: RefCell<Vec<(u32, u64)>>,
        pub response_headers: RefCell<Headers>,
        pub route_metadata: RefCell<HashMap<String, String>>,
        /// Served-feature records stored, in order.
        pub log_records: RefCell<Vec<Vec<u8>>>,
    }

    fn owned(headers: Vec<(&str, &str)>) -> Headers {
        headers
            .into_iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    impl Host for FakeHost {
        fn request_header(&self, name: &str) -> Option<String> {
            self.headers
                .borrow()
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        }
        fn request_header_names(&self) -> Vec<String> {
            self.headers
                .borrow()
                .iter()
                .map(|(n, _)| n.clone())
                .collect()
        }
        fn request_trailer_names(&self) -> Vec<String> {
            self.trailers
                .borrow()
                .iter()
                .map(|(n, _)| n.clone())
                .collect()
        }
        fn remove_request_trailer(&self, name: &str) {
            self.trailers.borrow_mut().retain(|(n, _)| n != name);
        }
        fn set_request_header(&self, name: &str, value: Option<&str>) {
            let mut h = self.headers.borrow_mut();
            h.retain(|(n, _)| n != name);
            if let Some(v) = value {
                h.push((name.to_string(), v.to_string()));
            }
        }
        fn request_body(&self, size: usize) -> Option<Vec<u8>> {
            let b = self.body.borrow();
            Some(b[..size.min(b.len())].to_vec())
        }
        fn replace_request_body(&self, _old_size: usize, body: &[u8]) {
            *self.body.borrow_mut() = body.to_vec();
        }
        fn dispatch(&self, call: HttpCall<'_>) -> Result<u32, String> {
            if let Some(e) = self.dispatch_error.borrow().clone() {
                return Err(e);
            }
            let h = owned(call.headers);
            self.dispatched.borrow_mut().push((
                call.cluster.to_string(),
                h,
                call.body.to_vec(),
                call.timeout,
            ));
            Ok(7)
        }
        fn call_response_status(&self) -> Option<u16> {
            *self.call_status.borrow()
        }
        fn call_response_body(&self, size: usize) -> Option<Vec<u8>> {
            let b = self.call_body.borrow();
            Some(b[..size.min(b.len())].to_vec())
        }
        fn now_us(&self) -> i64 {
            self.now_us
        }
        fn send_response(&self, status: u16, headers: Vec<(&str, &str)>, body: &[u8]) {
            let h = owned(headers);
            *self.sent.borrow_mut() = Some((status, h, body.to_vec()));
        }
        fn resume_request(&self) {
            *self.resumed.borrow_mut() = true;
        }
        fn resume_response(&self) {
            *self.response_resumed.borrow_mut() = true;
        }
        fn log_warn(&self, message: &str) {
            self.warnings.borrow_mut().push(message.to_string());
        }
        fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
            match self.shared.borrow().get(key) {
                Some((v, cas)) => (Some(v.clone()), Some(*cas)),
                None => (None, None),
            }
        }
        fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
            let mut m = self.shared.borrow_mut();
            let current = m.get(key).map(|(_, c)| *c);
            if cas.is_some() && cas != current {
                return false;
            }
            m.insert(key.to_string(), (value.to_vec(), current.unwrap_or(0) + 1));
            true
        }
        fn metric_add(&self, id: u32, delta: i64) {
            *self.metrics.borrow_mut().entry(id).or_insert(0) += delta;
        }
        fn metric_record(&self, id: u32, value: u64) {
            self.recorded.borrow_mut().push((id, value));
        }
        fn route_metadata(&self, key: &str) -> Option<String> {
            self.route_metadata.borrow().get(key).cloned()
        }
        fn store_log_record(&self, record: &[u8]) -> bool {
            self.log_records.borrow_mut().push(record.to_vec());
            true
        }
        fn set_response_header(&self, name: &str, value: &str) {
            self.response_headers
                .borrow_mut()
                .push((name.to_string(), value.to_string()));
        }
    }
}
