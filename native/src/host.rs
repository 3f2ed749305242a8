//! The real host of the native build: `ferry_core::host::Host` over Envoy's dynamic-module
//! callbacks for one HTTP stream. Resuming is deferred while a hook runs (the hook returns
//! Continue instead): Envoy may deliver a reader response inside the call that sent it, and
//! continuing a stream from inside its own filter callback is not allowed.

use std::cell::{Cell, RefCell};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferry_core::host::Host;

use crate::abi::{self, EnvoyBuffer, EnvoyHeader, EnvoyPtr, ModuleBuffer, ModuleHeader};
use crate::direct::{self, Slot};

/// Tokens of in-process lookups start here, above any id Envoy gives a callout.
const FIRST_DIRECT_TOKEN: u32 = 1 << 31;

/// The reader's answer being delivered to the filter.
#[derive(Default)]
pub struct CallResponse {
    pub status: Option<u16>,
    pub body: Vec<u8>,
}

pub struct EnvoyHost {
    /// Envoy's filter object; valid until `on_http_filter_destroy`.
    envoy: EnvoyPtr,
    /// A request or response hook is running: resumes become its return value.
    pub in_hook: Cell<bool>,
    pub resume_request_deferred: Cell<bool>,
    pub resume_response_deferred: Cell<bool>,
    /// Inside the request-body hook the newest chunk is not in the buffered body yet.
    pub in_body_hook: Cell<bool>,
    pub call_response: RefCell<CallResponse>,
    /// Answers of in-process lookups (`direct`), shared with the stream and the lookups.
    direct: Slot,
    next_direct_token: Cell<u32>,
}

impl EnvoyHost {
    pub fn new(envoy: EnvoyPtr, direct: Slot) -> Self {
        EnvoyHost {
            envoy,
            in_hook: Cell::new(false),
            resume_request_deferred: Cell::new(false),
            resume_response_deferred: Cell::new(false),
            in_body_hook: Cell::new(false),
            call_response: RefCell::new(CallResponse::default()),
            direct,
            next_direct_token: Cell::new(FIRST_DIRECT_TOKEN),
        }
    }

    fn header_names(&self, kind: u32) -> Vec<String> {
        // SAFETY: `self.envoy` is live for the filter's life; the array is sized by Envoy's count
        // and only read after Envoy filled it; the names are copied before the hook ends.
        unsafe {
            let n = abi::envoy_dynamic_module_callback_http_get_headers_size(self.envoy, kind);
            let empty = EnvoyHeader {
                key_ptr: std::ptr::null(),
                key_length: 0,
                value_ptr: std::ptr::null(),
                value_length: 0,
            };
            let mut headers = vec![empty; n];
            if n == 0
                || !abi::envoy_dynamic_module_callback_http_get_headers(
                    self.envoy,
                    kind,
                    headers.as_mut_ptr(),
                )
            {
                return Vec::new();
            }
            headers
                .iter()
                .map(|h| {
                    let b = EnvoyBuffer {
                        ptr: h.key_ptr,
                        length: h.key_length,
                    };
                    String::from_utf8_lossy(&abi::envoy_bytes(b)).into_owned()
                })
                .collect()
        }
    }

    fn set_header(&self, kind: u32, name: &str, value: Option<&str>) {
        let value = value.map_or(ModuleBuffer::NULL, |v| ModuleBuffer::of(v.as_bytes()));
        // SAFETY: live filter pointer; both buffers outlive the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_set_header(
                self.envoy,
                kind,
                ModuleBuffer::of(name.as_bytes()),
                value,
            );
        }
    }

    fn body_of(&self, kind: u32) -> Vec<u8> {
        // SAFETY: live filter pointer; the chunk array is sized by Envoy's count; chunks are
        // copied before the hook ends.
        unsafe {
            let n = abi::envoy_dynamic_module_callback_http_get_body_chunks_size(self.envoy, kind);
            if n == 0 {
                return Vec::new();
            }
            let mut chunks = vec![EnvoyBuffer::EMPTY; n];
            if !abi::envoy_dynamic_module_callback_http_get_body_chunks(
                self.envoy,
                kind,
                chunks.as_mut_ptr(),
            ) {
                return Vec::new();
            }
            let mut out = Vec::with_capacity(chunks.iter().map(|c| c.length).sum());
            for c in chunks {
                out.extend_from_slice(&abi::envoy_bytes(c));
            }
            out
        }
    }

    fn drain(&self, kind: u32) {
        // SAFETY: live filter pointer.
        unsafe {
            let n = abi::envoy_dynamic_module_callback_http_get_body_size(self.envoy, kind);
            if n > 0 {
                abi::envoy_dynamic_module_callback_http_drain_body(self.envoy, kind, n);
            }
        }
    }

    /// Bytes of the request body so far: the buffered part, plus the newest chunk inside the
    /// body hook.
    pub fn request_body_size(&self) -> usize {
        // SAFETY: live filter pointer.
        unsafe {
            let buffered = abi::envoy_dynamic_module_callback_http_get_body_size(
                self.envoy,
                abi::BUFFERED_REQUEST_BODY,
            );
            let received = if self.in_body_hook.get() {
                abi::envoy_dynamic_module_callback_http_get_body_size(
                    self.envoy,
                    abi::RECEIVED_REQUEST_BODY,
                )
            } else {
                0
            };
            buffered + received
        }
    }
}

pub fn log(level: u32, message: &str) {
    // SAFETY: the message outlives the call.
    unsafe { abi::envoy_dynamic_module_callback_log(level, ModuleBuffer::of(message.as_bytes())) }
}

fn module_headers(headers: &[(&str, &str)]) -> Vec<ModuleHeader> {
    headers
        .iter()
        .map(|(k, v)| ModuleHeader::of(k, v))
        .collect()
}

impl Host for EnvoyHost {
    fn request_header(&self, name: &str) -> Option<String> {
        let mut out = EnvoyBuffer::EMPTY;
        // SAFETY: live filter pointer; `out` is written by Envoy and copied before the hook ends.
        unsafe {
            let found = abi::envoy_dynamic_module_callback_http_get_header(
                self.envoy,
                abi::REQUEST_HEADER,
                ModuleBuffer::of(name.as_bytes()),
                &mut out,
                0,
                std::ptr::null_mut(),
            );
            // Header values may be any octets: an id that was not UTF-8 holds U+FFFD and is
            // refused by the format (as in the Wasm build).
            (found && !out.ptr.is_null())
                .then(|| String::from_utf8_lossy(&abi::envoy_bytes(out)).into_owned())
        }
    }

    fn request_header_names(&self) -> Vec<String> {
        self.header_names(abi::REQUEST_HEADER)
    }

    fn set_request_header(&self, name: &str, value: Option<&str>) {
        self.set_header(abi::REQUEST_HEADER, name, value);
    }

    fn request_trailer_names(&self) -> Vec<String> {
        self.header_names(abi::REQUEST_TRAILER)
    }

    fn remove_request_trailer(&self, name: &str) {
        self.set_header(abi::REQUEST_TRAILER, name, None);
    }

    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        let mut body = self.body_of(abi::BUFFERED_REQUEST_BODY);
        if self.in_body_hook.get() {
            body.extend_from_slice(&self.body_of(abi::RECEIVED_REQUEST_BODY));
        }
        body.truncate(size);
        Some(body)
    }

    fn replace_request_body(&self, _old_size: usize, body: &[u8]) {
        self.drain(abi::BUFFERED_REQUEST_BODY);
        // Inside the body hook the newest chunk is what Envoy passes on: the new body goes
        // there; afterwards everything is in the buffered body.
        let target = if self.in_body_hook.get() {
            self.drain(abi::RECEIVED_REQUEST_BODY);
            abi::RECEIVED_REQUEST_BODY
        } else {
            abi::BUFFERED_REQUEST_BODY
        };
        // SAFETY: live filter pointer; the body outlives the call (Envoy copies it).
        unsafe {
            abi::envoy_dynamic_module_callback_http_append_body(
                self.envoy,
                target,
                ModuleBuffer::of(body),
            );
        }
    }

    fn dispatch(
        &self,
        cluster: &str,
        headers: Vec<(&str, &str)>,
        body: &[u8],
        timeout: Duration,
    ) -> Result<u32, String> {
        let to_reader = headers
            .iter()
            .any(|(n, v)| *n == ":path" && *v == ferry_protos::READER_PATH);
        if let (Some(d), true) = (direct::get(), to_reader) {
            // SAFETY: this stream's live filter, inside one of its hooks.
            if !unsafe { self.direct.ready(self.envoy) } {
                return Err("Envoy gave no scheduler for the in-process reader".into());
            }
            let token = self.next_direct_token.get();
            self.next_direct_token
                .set(token.checked_add(1).unwrap_or(FIRST_DIRECT_TOKEN));
            d.submit(&self.direct, token, body.to_vec(), timeout);
            return Ok(token);
        }
        let mut h = module_headers(&headers);
        let mut id: u64 = 0;
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        // SAFETY: live filter pointer; headers, cluster name and body outlive the call (Envoy
        // copies them into the request it sends).
        let result = unsafe {
            abi::envoy_dynamic_module_callback_http_filter_http_callout(
                self.envoy,
                &mut id,
                ModuleBuffer::of(cluster.as_bytes()),
                h.as_mut_ptr(),
                h.len(),
                ModuleBuffer::of(body),
                ms,
            )
        };
        if result != abi::CALLOUT_INIT_SUCCESS {
            return Err(format!(
                "callout to cluster '{cluster}' failed: {}",
                callout_init_error(result)
            ));
        }
        u32::try_from(id).map_err(|_| format!("callout id {id} out of range"))
    }

    fn call_response_status(&self) -> Option<u16> {
        self.call_response.borrow().status
    }

    fn call_response_body(&self, size: usize) -> Option<Vec<u8>> {
        let r = self.call_response.borrow();
        Some(r.body[..size.min(r.body.len())].to_vec())
    }

    fn now_us(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
    }

    fn send_response(&self, status: u16, headers: Vec<(&str, &str)>, body: &[u8]) {
        let mut h = module_headers(&headers);
        // SAFETY: live filter pointer; headers and body outlive the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response(
                self.envoy,
                u32::from(status),
                h.as_mut_ptr(),
                h.len(),
                ModuleBuffer::of(body),
                ModuleBuffer::of(b"ferry"),
            );
        }
    }

    fn resume_request(&self) {
        if self.in_hook.get() {
            self.resume_request_deferred.set(true);
            return;
        }
        // SAFETY: live filter pointer, outside any filter callback.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_continue_decoding(self.envoy) }
    }

    fn resume_response(&self) {
        if self.in_hook.get() {
            self.resume_response_deferred.set(true);
            return;
        }
        // SAFETY: live filter pointer, outside any filter callback.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_continue_encoding(self.envoy) }
    }

    fn log_warn(&self, message: &str) {
        log(abi::LOG_WARN, message);
    }

    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        crate::shared::store().get(key)
    }

    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        crate::shared::store().set(key, value, cas)
    }

    fn metric_add(&self, id: u32, delta: i64) {
        let Ok(delta) = u64::try_from(delta) else {
            return; // Ferry's metrics are counters: only ever incremented.
        };
        // SAFETY: live filter pointer; no labels.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_increment_counter(
                self.envoy,
                id as usize,
                std::ptr::null_mut(),
                0,
                delta,
            );
        }
    }

    fn metric_record(&self, id: u32, value: u64) {
        // SAFETY: live filter pointer; no labels.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_record_histogram_value(
                self.envoy,
                id as usize,
                std::ptr::null_mut(),
                0,
                value,
            );
        }
    }

    fn set_response_header(&self, name: &str, value: &str) {
        self.set_header(abi::RESPONSE_HEADER, name, Some(value));
    }

    fn route_metadata(&self, key: &str) -> Option<String> {
        let mut out = EnvoyBuffer::EMPTY;
        // SAFETY: live filter pointer; `out` is copied before the hook ends.
        unsafe {
            let found = abi::envoy_dynamic_module_callback_http_get_metadata_string(
                self.envoy,
                abi::METADATA_ROUTE,
                ModuleBuffer::of(b"ferry"),
                ModuleBuffer::of(key.as_bytes()),
                &mut out,
            );
            found.then(|| String::from_utf8_lossy(&abi::envoy_bytes(out)).into_owned())
        }
    }
}

/// Why Envoy refused to start a callout (`envoy_dynamic_module_type_http_callout_init_result`).
pub fn callout_init_error(code: u32) -> &'static str {
    match code {
        1 => "missing required headers (:method, :path, host)",
        2 => "cluster not found",
        3 => "duplicate callout id",
        4 => "cannot create the request (no healthy upstream?)",
        _ => "unknown error",
    }
}
