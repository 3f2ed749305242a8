//! The real host of the native build: `ferry_core::host::Host` over what a stream can ask of
//! Envoy (`envoy::Envoy`). Resumes asked for inside a hook become its return value
//! (`reentry`); the request body is the buffered part plus, inside the body hook, the newest
//! chunk, which is also where a rewritten body goes.

use std::cell::RefCell;
use std::time::Duration;

use ferry_core::host::{Host, HttpCall, Stage};

use crate::abi::{BodyKind, HeaderKind, LogLevel};
use crate::direct;
use crate::envoy::Envoy;
use crate::reentry::{Reentry, Resume};
use crate::slot::{CallResponse, Slot};
use crate::stages::{self, Marks};

/// Tokens of in-process lookups start here, above any id Envoy gives a callout.
const FIRST_DIRECT_TOKEN: u32 = 1 << 31;

pub struct EnvoyHost<E: Envoy> {
    envoy: E,
    pub reentry: Reentry,
    /// The stream's per-stage clock (`stages`; idle unless the timers are on).
    pub marks: Marks,
    /// The reader's answer while it is being delivered to the filter.
    delivering: RefCell<CallResponse>,
    /// Answers of in-process lookups (`direct`), shared with the stream and the lookups.
    direct: Slot,
    next_direct_token: std::cell::Cell<u32>,
}

impl<E: Envoy> EnvoyHost<E> {
    pub fn new(envoy: E, direct: Slot) -> Self {
        EnvoyHost {
            envoy,
            reentry: Reentry::default(),
            marks: Marks::default(),
            delivering: RefCell::new(CallResponse::default()),
            direct,
            next_direct_token: std::cell::Cell::new(FIRST_DIRECT_TOKEN),
        }
    }

    /// The answer `call_response_*` read until `end_delivery`.
    pub fn begin_delivery(&self, response: CallResponse) {
        *self.delivering.borrow_mut() = response;
    }

    pub fn end_delivery(&self) {
        *self.delivering.borrow_mut() = CallResponse::default();
    }

    fn header_names(&self, kind: HeaderKind) -> Vec<String> {
        let names = self.envoy.header_names(kind);
        names.iter().map(|n| lossy(n)).collect()
    }

    fn drain(&self, kind: BodyKind) {
        let n = self.envoy.body_size(kind);
        if n > 0 {
            self.envoy.drain_body(kind, n);
        }
    }

    /// Bytes of the request body so far: the buffered part, plus the newest chunk inside the
    /// body hook.
    pub fn request_body_size(&self) -> usize {
        let buffered = self.envoy.body_size(BodyKind::BufferedRequest);
        let received = if self.reentry.in_body_hook() {
            self.envoy.body_size(BodyKind::ReceivedRequest)
        } else {
            0
        };
        buffered + received
    }

    /// An in-process lookup instead of a dispatched call.
    fn submit_direct(&self, d: &'static direct::Direct, body: &[u8], timeout: Duration) -> u32 {
        let token = self.next_direct_token.get();
        self.next_direct_token
            .set(token.checked_add(1).unwrap_or(FIRST_DIRECT_TOKEN));
        d.submit(&self.direct, token, body.to_vec(), timeout);
        token
    }
}

/// Header values may be any octets: an id that was not UTF-8 holds U+FFFD and is refused by
/// the format (as in the Wasm build).
fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl<E: Envoy> Host for EnvoyHost<E> {
    fn request_header(&self, name: &str) -> Option<String> {
        let value = self.envoy.header(HeaderKind::RequestHeader, name)?;
        Some(lossy(&value))
    }

    fn request_header_names(&self) -> Vec<String> {
        self.header_names(HeaderKind::RequestHeader)
    }

    fn set_request_header(&self, name: &str, value: Option<&str>) {
        self.envoy
            .set_header(HeaderKind::RequestHeader, name, value);
    }

    fn request_trailer_names(&self) -> Vec<String> {
        self.header_names(HeaderKind::RequestTrailer)
    }

    fn remove_request_trailer(&self, name: &str) {
        self.envoy
            .set_header(HeaderKind::RequestTrailer, name, None);
    }

    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        let mut body = self.envoy.body(BodyKind::BufferedRequest);
        if self.reentry.in_body_hook() {
            body.extend_from_slice(&self.envoy.body(BodyKind::ReceivedRequest));
        }
        body.truncate(size);
        Some(body)
    }

    fn replace_request_body(&self, _old_size: usize, body: &[u8]) {
        self.drain(BodyKind::BufferedRequest);
        // Inside the body hook the newest chunk is what Envoy passes on: the new body goes
        // there; afterwards everything is in the buffered body.
        let target = if self.reentry.in_body_hook() {
            self.drain(BodyKind::ReceivedRequest);
            BodyKind::ReceivedRequest
        } else {
            BodyKind::BufferedRequest
        };
        self.envoy.append_body(target, body);
    }

    fn dispatch(&self, call: HttpCall<'_>) -> Result<u32, String> {
        self.marks.done(stages::Stage::LookupRequest);
        let to_reader = call
            .headers
            .iter()
            .any(|(n, v)| *n == ":path" && *v == ferry_protos::READER_PATH);
        if let (Some(d), true) = (direct::get(), to_reader) {
            if !self.direct.ready(|| self.envoy.scheduler()) {
                return Err("Envoy gave no scheduler for the in-process reader".into());
            }
            return Ok(self.submit_direct(d, call.body, call.timeout));
        }
        let id = self.envoy.callout(&call).map_err(|refused| {
            let reason = refused.reason();
            format!("callout to cluster '{}' failed: {reason}", call.cluster)
        })?;
        u32::try_from(id).map_err(|_| format!("callout id {id} out of range"))
    }

    fn call_response_status(&self) -> Option<u16> {
        self.delivering.borrow().status
    }

    fn call_response_body(&self, size: usize) -> Option<Vec<u8>> {
        let r = self.delivering.borrow();
        Some(r.body[..size.min(r.body.len())].to_vec())
    }

    fn now_us(&self) -> i64 {
        self.envoy.now_us()
    }

    fn send_response(&self, status: u16, headers: Vec<(&str, &str)>, body: &[u8]) {
        self.envoy.send_response(status, &headers, body);
    }

    fn resume_request(&self) {
        if !self.reentry.defer(Resume::Request) {
            let at = stages::now();
            self.envoy.continue_decoding();
            stages::since(stages::Stage::Resume, at);
        }
    }

    fn resume_response(&self) {
        if !self.reentry.defer(Resume::Response) {
            self.envoy.continue_encoding();
        }
    }

    fn log_warn(&self, message: &str) {
        self.envoy.log(LogLevel::Warn, message);
    }

    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        crate::shared_data::store().get(key)
    }

    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        crate::shared_data::store().set(key, value, cas)
    }

    fn metric_add(&self, id: u32, delta: i64) {
        // Ferry's metrics are counters: only ever incremented.
        if let Ok(delta) = u64::try_from(delta) {
            self.envoy.increment_counter(id, delta);
        }
    }

    fn metric_record(&self, id: u32, value: u64) {
        self.envoy.record_histogram(id, value);
    }

    fn set_response_header(&self, name: &str, value: &str) {
        self.envoy
            .set_header(HeaderKind::ResponseHeader, name, Some(value));
    }

    fn route_metadata(&self, key: &str) -> Option<String> {
        self.envoy.route_metadata(key).map(|v| lossy(&v))
    }

    /// Envoy 1.40's dynamic-module ABI stores filter state as a string accessor, which the
    /// access loggers serialize as a `google.protobuf.StringValue`: a protobuf string must be
    /// UTF-8, so the record goes as standard base64 (`ferry log-sink` decodes it by type).
    fn store_log_record(&self, record: &[u8]) -> bool {
        use base64::Engine as _;
        let text = base64::engine::general_purpose::STANDARD.encode(record);
        let key = ferry_core::log::FILTER_STATE_KEY;
        self.envoy.set_filter_state(key, text.as_bytes())
    }

    fn stage_done(&self, stage: Stage) {
        self.marks.done(match stage {
            Stage::Parsed => stages::Stage::Parse,
            Stage::Decoded => stages::Stage::Decode,
            Stage::Enriched => stages::Stage::Enrich,
            Stage::Rewritten => stages::Stage::Rewrite,
        });
    }
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
