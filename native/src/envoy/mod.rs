//! What one HTTP stream can ask of Envoy, as a trait: the seam between the adapter (`host`,
//! `stream`) and Envoy's callbacks. `EnvoyFilter` is the real one over the C ABI; tests use
//! the in-memory `testing::FakeEnvoy`. Everything Envoy lends (header values, body chunks) is
//! copied before a method returns, so nothing borrowed outlives the hook it came from.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::abi::{
    self, BodyKind, CalloutInit, EnvoyBuffer, EnvoyHeader, EnvoyPtr, HeaderKind, LogLevel,
    MetadataSource, ModuleBuffer, ModuleHeader, ResetReason,
};
use crate::slot::Scheduler;
use ferry_core::host::HttpCall;

/// The metadata namespace of Ferry's route keys, and the details of its local replies.
const FERRY: &[u8] = b"ferry";

pub trait Envoy {
    /// The first value of header `name`.
    fn header(&self, kind: HeaderKind, name: &str) -> Option<Vec<u8>>;
    fn header_names(&self, kind: HeaderKind) -> Vec<Vec<u8>>;
    /// Sets (or with `None` removes) a header.
    fn set_header(&self, kind: HeaderKind, name: &str, value: Option<&str>);
    fn body_size(&self, kind: BodyKind) -> usize;
    fn body(&self, kind: BodyKind) -> Vec<u8>;
    fn append_body(&self, kind: BodyKind, data: &[u8]);
    fn drain_body(&self, kind: BodyKind, bytes: usize);
    /// A local reply.
    fn send_response(&self, status: u16, headers: &[(&str, &str)], body: &[u8]);
    fn reset_stream(&self);
    fn continue_decoding(&self);
    fn continue_encoding(&self);
    /// Starts an HTTP call; its id comes back with the answer (`on_http_callout_done`).
    fn callout(&self, call: &HttpCall<'_>) -> Result<u64, CalloutInit>;
    /// A scheduler through which other threads wake this stream (`on_scheduled`).
    fn scheduler(&self) -> Option<Scheduler>;
    /// A string under `ferry` in the matched route's metadata.
    fn route_metadata(&self, key: &str) -> Option<Vec<u8>>;
    fn increment_counter(&self, id: u32, delta: u64);
    fn record_histogram(&self, id: u32, value: u64);
    /// Sets the stream's filter state `key` to `value`; false when Envoy refused.
    fn set_filter_state(&self, key: &str, value: &[u8]) -> bool;
    fn log(&self, level: LogLevel, message: &str) {
        log(level, message);
    }
    /// Wall-clock time, microseconds since the Unix epoch: Envoy's ABI has no clock callback,
    /// so the real side reads the system's; a test's Envoy sets its own (TTLs are judged by it).
    fn now_us(&self) -> i64 {
        system_now_us()
    }
}

/// The system clock, for the real Envoy (and a fake one whose clock is unset).
pub fn system_now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// What a filter config can ask of Envoy, on the main thread: the GET of a pulled snapshot
/// (`pull`). Tests use `testing::FakeEnvoy` here too.
pub trait ConfigEnvoy {
    /// Starts an HTTP call; its id comes back with the answer
    /// (`on_http_filter_config_http_callout_done`).
    fn callout(&self, call: &HttpCall<'_>) -> Result<u64, CalloutInit>;
    fn log(&self, level: LogLevel, message: &str) {
        log(level, message);
    }
}

/// Envoy's object of one filter config, as a hook of that config hands it over.
#[derive(Clone, Copy)]
pub struct EnvoyConfig(EnvoyPtr);

impl EnvoyConfig {
    /// # Safety
    /// `ptr` is the config pointer Envoy passed to the running config hook, used only during
    /// it, on the main thread.
    pub unsafe fn new(ptr: EnvoyPtr) -> Self {
        EnvoyConfig(ptr)
    }
}

impl ConfigEnvoy for EnvoyConfig {
    fn callout(&self, call: &HttpCall<'_>) -> Result<u64, CalloutInit> {
        // SAFETY: the config object is live during the hook (`new`'s contract).
        start_callout(call, |id, cluster, headers, count, body, ms| unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_http_callout(
                self.0, id, cluster, headers, count, body, ms,
            )
        })
    }
}

/// Starts a callout through `start`, the stream's or the config's ABI function (the same
/// arguments); Envoy copies the cluster name, headers and body into the request it sends.
fn start_callout(
    call: &HttpCall<'_>,
    start: impl FnOnce(
        *mut u64,
        ModuleBuffer<'_>,
        *mut ModuleHeader<'_>,
        usize,
        ModuleBuffer<'_>,
        u64,
    ) -> u32,
) -> Result<u64, CalloutInit> {
    let mut h = module_headers(&call.headers);
    let mut id: u64 = 0;
    let ms = u64::try_from(call.timeout.as_millis()).unwrap_or(u64::MAX);
    let code = start(
        &mut id,
        ModuleBuffer::of(call.cluster.as_bytes()),
        h.as_mut_ptr(),
        h.len(),
        ModuleBuffer::of(call.body),
        ms,
    );
    match CalloutInit::from_raw(code) {
        CalloutInit::Success => Ok(id),
        refused => Err(refused),
    }
}

/// Writes to Envoy's log (any thread).
pub fn log(level: LogLevel, message: &str) {
    // SAFETY: the message outlives the call.
    unsafe { abi::envoy_dynamic_module_callback_log(level, ModuleBuffer::of(message.as_bytes())) }
}

/// Envoy's filter object of one stream; valid until `on_http_filter_destroy`.
#[derive(Clone, Copy)]
pub struct EnvoyFilter(EnvoyPtr);

impl EnvoyFilter {
    /// # Safety
    /// `ptr` is the filter pointer Envoy passed to `on_http_filter_new`, used only while that
    /// stream lives, on its worker thread.
    pub unsafe fn new(ptr: EnvoyPtr) -> Self {
        EnvoyFilter(ptr)
    }
}

fn module_headers<'a>(headers: &[(&'a str, &'a str)]) -> Vec<ModuleHeader<'a>> {
    headers
        .iter()
        .map(|(k, v)| ModuleHeader::of(k, v))
        .collect()
}

// SAFETY (every block below): `self.0` is live for the stream's life (`EnvoyFilter::new`'s
// contract); the module's buffers outlive each call; Envoy's are copied before the call returns.
impl Envoy for EnvoyFilter {
    fn header(&self, kind: HeaderKind, name: &str) -> Option<Vec<u8>> {
        let mut out = EnvoyBuffer::empty();
        let name = ModuleBuffer::of(name.as_bytes());
        let null = std::ptr::null_mut();
        unsafe {
            let found = abi::envoy_dynamic_module_callback_http_get_header(
                self.0, kind, name, &mut out, 0, null,
            );
            (found && !out.is_null()).then(|| out.as_slice().to_vec())
        }
    }

    fn header_names(&self, kind: HeaderKind) -> Vec<Vec<u8>> {
        unsafe {
            let n = abi::envoy_dynamic_module_callback_http_get_headers_size(self.0, kind);
            let mut headers = vec![EnvoyHeader::empty(); n];
            let p = headers.as_mut_ptr();
            if n == 0 || !abi::envoy_dynamic_module_callback_http_get_headers(self.0, kind, p) {
                return Vec::new();
            }
            headers.iter().map(|h| h.key.as_slice().to_vec()).collect()
        }
    }

    fn set_header(&self, kind: HeaderKind, name: &str, value: Option<&str>) {
        let value = value.map_or(ModuleBuffer::NULL, |v| ModuleBuffer::of(v.as_bytes()));
        let name = ModuleBuffer::of(name.as_bytes());
        unsafe { abi::envoy_dynamic_module_callback_http_set_header(self.0, kind, name, value) };
    }

    fn body_size(&self, kind: BodyKind) -> usize {
        unsafe { abi::envoy_dynamic_module_callback_http_get_body_size(self.0, kind) }
    }

    fn body(&self, kind: BodyKind) -> Vec<u8> {
        unsafe {
            let n = abi::envoy_dynamic_module_callback_http_get_body_chunks_size(self.0, kind);
            let mut chunks = vec![EnvoyBuffer::empty(); n];
            let p = chunks.as_mut_ptr();
            if n == 0 || !abi::envoy_dynamic_module_callback_http_get_body_chunks(self.0, kind, p) {
                return Vec::new();
            }
            let mut out = Vec::with_capacity(chunks.iter().map(EnvoyBuffer::len).sum());
            for c in &chunks {
                out.extend_from_slice(c.as_slice());
            }
            out
        }
    }

    fn append_body(&self, kind: BodyKind, data: &[u8]) {
        let data = ModuleBuffer::of(data);
        unsafe { abi::envoy_dynamic_module_callback_http_append_body(self.0, kind, data) };
    }

    fn drain_body(&self, kind: BodyKind, bytes: usize) {
        unsafe { abi::envoy_dynamic_module_callback_http_drain_body(self.0, kind, bytes) };
    }

    fn send_response(&self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let mut h = module_headers(headers);
        let (body, details) = (ModuleBuffer::of(body), ModuleBuffer::of(FERRY));
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response(
                self.0,
                u32::from(status),
                h.as_mut_ptr(),
                h.len(),
                body,
                details,
            );
        }
    }

    fn reset_stream(&self) {
        let details = ModuleBuffer::of(FERRY);
        let reason = ResetReason::LocalReset;
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_reset_stream(self.0, reason, details)
        }
    }

    fn continue_decoding(&self) {
        unsafe { abi::envoy_dynamic_module_callback_http_filter_continue_decoding(self.0) }
    }

    fn continue_encoding(&self) {
        unsafe { abi::envoy_dynamic_module_callback_http_filter_continue_encoding(self.0) }
    }

    fn callout(&self, call: &HttpCall<'_>) -> Result<u64, CalloutInit> {
        start_callout(call, |id, cluster, headers, count, body, ms| unsafe {
            abi::envoy_dynamic_module_callback_http_filter_http_callout(
                self.0, id, cluster, headers, count, body, ms,
            )
        })
    }

    fn scheduler(&self) -> Option<Scheduler> {
        unsafe { Scheduler::new(self.0) }
    }

    fn route_metadata(&self, key: &str) -> Option<Vec<u8>> {
        let mut out = EnvoyBuffer::empty();
        let (namespace, key) = (ModuleBuffer::of(FERRY), ModuleBuffer::of(key.as_bytes()));
        let source = MetadataSource::Route;
        unsafe {
            let found = abi::envoy_dynamic_module_callback_http_get_metadata_string(
                self.0, source, namespace, key, &mut out,
            );
            found.then(|| out.as_slice().to_vec())
        }
    }

    fn increment_counter(&self, id: u32, delta: u64) {
        let add = abi::envoy_dynamic_module_callback_http_filter_increment_counter;
        unsafe { add(self.0, id as usize, std::ptr::null_mut(), 0, delta) };
    }

    fn record_histogram(&self, id: u32, value: u64) {
        let record = abi::envoy_dynamic_module_callback_http_filter_record_histogram_value;
        unsafe { record(self.0, id as usize, std::ptr::null_mut(), 0, value) };
    }

    fn set_filter_state(&self, key: &str, value: &[u8]) -> bool {
        let (key, value) = (ModuleBuffer::of(key.as_bytes()), ModuleBuffer::of(value));
        // SAFETY: both buffers outlive the call; Envoy copies them.
        unsafe {
            abi::envoy_dynamic_module_callback_http_set_filter_state_bytes(self.0, key, value)
        }
    }
}

#[cfg(any(test, feature = "testing"))]
pub mod testing;
