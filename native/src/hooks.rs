//! The event hooks Envoy calls (`envoy_dynamic_module_on_*`): each turns Envoy's pointers back
//! into the module's objects and hands over to a `Stream` (the core's filter over Envoy) or the
//! `FilterConfig`. No panic crosses this boundary: the stream hooks fail their stream closed
//! (`stream`), the program and config hooks fail the load or the config. Envoy 1.40 resolves
//! every HTTP-filter hook when it loads the module, so the ones Ferry has no use for are here
//! too, doing nothing.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use ferry_core::config::Config;
use ferry_core::metrics;
use ferry_core::snapshot_pull::Answer;

use crate::abi::{
    self, BodyStatus, CalloutResult, EnvoyBuffer, EnvoyHeader, EnvoyPtr, HeadersStatus,
    LocalReplyStatus, LogLevel, ModuleBuffer, TrailersStatus,
};
use crate::config::FilterConfig;
use crate::envoy::{log, EnvoyConfig, EnvoyFilter};
use crate::slot::CallResponse;
use crate::stream::{panic_message, Stream};
use crate::ticker::Ticker;

/// The ABI version this module was written against (Envoy 1.40's `abi.h`).
static ABI_VERSION: &[u8] = b"v0.2.0\0";

type EnvoyStream = Stream<EnvoyFilter>;

/// Runs a program or config hook: a panic is logged and answered with `failed`.
fn or_on_panic<R>(failed: R, f: impl FnOnce() -> R) -> R {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        log(LogLevel::Error, &panic_message(&*p));
        failed
    })
}

/// Loads the module; with `FERRY_NATIVE_READER` set, also starts the in-process reader (a
/// null return makes Envoy refuse the module, with the reason in its log).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const u8 {
    if let Err(e) = crate::stages::init() {
        // Timers are a benchmark's aid: the module runs without them.
        log(LogLevel::Warn, &format!("ferry: {e}"));
    }
    or_on_panic(std::ptr::null(), || match crate::direct::init() {
        Ok(d) => {
            if let Some(d) = d {
                let redis = d.redis();
                let line = format!("ferry: reader calls answered in process from Redis at {redis}");
                log(LogLevel::Info, &line);
            }
            ABI_VERSION.as_ptr()
        }
        Err(e) => {
            log(LogLevel::Error, &format!("ferry: {e}"));
            std::ptr::null()
        }
    })
}

/// # Safety
/// Called by Envoy with its config object and two buffers valid for the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_new<'call>(
    config_envoy: EnvoyPtr,
    _name: EnvoyBuffer<'call>,
    config: EnvoyBuffer<'call>,
) -> *const c_void {
    // A null config makes Envoy refuse this configuration (and keep the last good one).
    or_on_panic(std::ptr::null(), || {
        // SAFETY: Envoy's buffer is valid for this call.
        let bytes = unsafe { config.as_slice() }.to_vec();
        let define = |kind: metrics::Kind, name: &str| define_metric(config_envoy, kind, name);
        // SAFETY: Envoy's config object, during its hook.
        match FilterConfig::new(bytes, define)
            .and_then(|(fc, c)| unsafe { started(fc, c, config_envoy) })
        {
            Ok(fc) => Box::into_raw(Box::new(fc)) as *const c_void,
            Err(e) => {
                log(LogLevel::Error, &format!("ferry: {e}"));
                std::ptr::null()
            }
        }
    })
}

/// Logs what the new config runs on; a pulled one starts its clock (`ticker`), whose first tick
/// sends the first GET.
///
/// # Safety
/// `config_envoy` is Envoy's config object of the running `config_new`.
unsafe fn started(
    fc: FilterConfig,
    c: Option<Config>,
    config_envoy: EnvoyPtr,
) -> Result<FilterConfig, String> {
    if let Some(c) = c {
        let (version, project, routes) = (c.version, c.project, c.routes.len());
        let line =
            format!("ferry: snapshot {version} of project '{project}' with {routes} route(s)");
        log(LogLevel::Info, &line);
    }
    if let Some(pulling) = fc.pull() {
        log(LogLevel::Info, &pulling.describe());
        // SAFETY: per the function's contract.
        let ticker = unsafe { Ticker::start(config_envoy, pulling.poll()) }?;
        pulling.keep_ticking(ticker);
    }
    Ok(fc)
}

fn define_metric(config_envoy: EnvoyPtr, kind: metrics::Kind, name: &str) -> Option<u32> {
    let define = match kind {
        metrics::Kind::Counter => {
            abi::envoy_dynamic_module_callback_http_filter_config_define_counter
        }
        metrics::Kind::Histogram => {
            abi::envoy_dynamic_module_callback_http_filter_config_define_histogram
        }
    };
    let mut id: usize = 0;
    let name = ModuleBuffer::of(name.as_bytes());
    // SAFETY: Envoy's config object is live during config_new; no labels.
    let result = unsafe { define(config_envoy, name, std::ptr::null_mut(), 0, &mut id) };
    abi::metrics_ok(result)
        .then(|| u32::try_from(id).ok())
        .flatten()
}

/// # Safety
/// `config` is a pointer returned by `on_http_filter_config_new`, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    if !config.is_null() {
        // SAFETY: made by Box::into_raw in config_new; Envoy destroys it once.
        let config = unsafe { Box::from_raw(config as *mut FilterConfig) };
        or_on_panic((), || drop(config));
    }
}

/// # Safety
/// `config` is a live pointer from `on_http_filter_config_new`; `filter_envoy` the new stream.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    filter_envoy: EnvoyPtr,
) -> *const c_void {
    // SAFETY: a live FilterConfig (Envoy keeps the config alive while streams use it).
    let Some(fc) = (unsafe { (config as *const FilterConfig).as_ref() }) else {
        return std::ptr::null();
    };
    // SAFETY: Envoy's filter object of this stream, used only while the stream lives.
    let envoy = unsafe { EnvoyFilter::new(filter_envoy) };
    // `Stream::new` catches a panic of its own (the stream then fails its request closed).
    Box::into_raw(Box::new(Stream::new(envoy, fc))) as *const c_void
}

/// # Safety
/// `filter` is a pointer returned by `on_http_filter_new`, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_destroy(filter: *const c_void) {
    if !filter.is_null() {
        // SAFETY: made by Box::into_raw in filter_new; Envoy destroys it once.
        let stream = unsafe { Box::from_raw(filter as *mut EnvoyStream) };
        or_on_panic((), || drop(stream));
    }
}

/// The stream behind Envoy's module pointer.
///
/// # Safety
/// `filter` is null or a live pointer from `on_http_filter_new`.
unsafe fn stream<'a>(filter: *const c_void) -> Option<&'a EnvoyStream> {
    // SAFETY: per the function's contract; only shared references are ever made.
    unsafe { (filter as *const EnvoyStream).as_ref() }
}

/// # Safety
/// Called by Envoy with a live module filter pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    _envoy: EnvoyPtr,
    filter: *const c_void,
    end_of_stream: bool,
) -> HeadersStatus {
    // SAFETY: Envoy passes the pointer from filter_new.
    let s = unsafe { stream(filter) };
    s.map_or(HeadersStatus::Continue, |s| {
        s.on_request_headers(end_of_stream)
    })
}

/// # Safety
/// Called by Envoy with a live module filter pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    _envoy: EnvoyPtr,
    filter: *const c_void,
    end_of_stream: bool,
) -> BodyStatus {
    // SAFETY: Envoy passes the pointer from filter_new.
    let s = unsafe { stream(filter) };
    s.map_or(BodyStatus::Continue, |s| s.on_request_body(end_of_stream))
}

/// # Safety
/// Called by Envoy with a live module filter pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _envoy: EnvoyPtr,
    filter: *const c_void,
) -> TrailersStatus {
    // SAFETY: Envoy passes the pointer from filter_new.
    let s = unsafe { stream(filter) };
    s.map_or(TrailersStatus::Continue, Stream::on_request_trailers)
}

/// # Safety
/// Called by Envoy with a live module filter pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    _envoy: EnvoyPtr,
    filter: *const c_void,
    _end_of_stream: bool,
) -> HeadersStatus {
    // SAFETY: Envoy passes the pointer from filter_new.
    let s = unsafe { stream(filter) };
    s.map_or(HeadersStatus::Continue, Stream::on_response_headers)
}

/// # Safety
/// Called by Envoy with a live module filter pointer; headers and body chunks are valid for
/// the call (or null when the callout failed).
#[no_mangle]
#[allow(clippy::too_many_arguments)] // Envoy's signature
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done<'call>(
    _envoy: EnvoyPtr,
    filter: *const c_void,
    callout_id: u64,
    result: u32,
    headers: *const EnvoyHeader<'call>,
    headers_size: usize,
    body_chunks: *const EnvoyBuffer<'call>,
    body_chunks_size: usize,
) {
    // SAFETY: Envoy passes the pointer from filter_new.
    let Some(s) = (unsafe { stream(filter) }) else {
        return;
    };
    let response = match CalloutResult::from_raw(result) {
        // SAFETY: arrays of the given sizes, valid for this call (or null).
        CalloutResult::Success => unsafe {
            let headers = envoy_array(headers, headers_size);
            read_response(headers, envoy_array(body_chunks, body_chunks_size))
        },
        // A reset or an oversized answer: no headers, as in proxy-wasm.
        CalloutResult::Failed(_) => CallResponse::default(),
    };
    s.on_callout_done(callout_id, response);
}

/// An in-process lookup (`direct`) finished: Envoy runs this on the stream's worker thread.
///
/// # Safety
/// Called by Envoy with a live module filter pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    _envoy: EnvoyPtr,
    filter: *const c_void,
    event_id: u64,
) {
    // SAFETY: Envoy passes the pointer from filter_new.
    if let Some(s) = unsafe { stream(filter) } {
        s.on_scheduled(event_id);
    }
}

/// The filter config's object behind Envoy's module pointer.
///
/// # Safety
/// `config` is null or a live pointer from `on_http_filter_config_new`.
unsafe fn filter_config<'a>(config: *const c_void) -> Option<&'a FilterConfig> {
    // SAFETY: per the function's contract; only shared references are ever made.
    unsafe { (config as *const FilterConfig).as_ref() }
}

/// A tick of a pulling config's clock (`ticker`): Envoy runs this on the main thread.
///
/// # Safety
/// Called by Envoy with its config object and a live module config pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    config_envoy: EnvoyPtr,
    config: *const c_void,
    _event_id: u64,
) {
    // SAFETY: Envoy passes the pointer from config_new, and its own object, during this hook.
    if let (Some(fc), envoy) = unsafe { (filter_config(config), EnvoyConfig::new(config_envoy)) } {
        or_on_panic((), || fc.on_pull_tick(&envoy));
    }
}

/// The answer to a pulling config's GET, on the main thread.
///
/// # Safety
/// Called by Envoy with its config object and a live module config pointer; headers and body
/// chunks are valid for the call (or null when the callout failed).
#[no_mangle]
#[allow(clippy::too_many_arguments)] // Envoy's signature
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done<'call>(
    config_envoy: EnvoyPtr,
    config: *const c_void,
    _callout_id: u64,
    result: u32,
    headers: *const EnvoyHeader<'call>,
    headers_size: usize,
    body_chunks: *const EnvoyBuffer<'call>,
    body_chunks_size: usize,
) {
    // SAFETY: Envoy passes the pointer from config_new, and its own object, during this hook.
    let Some(fc) = (unsafe { filter_config(config) }) else {
        return;
    };
    // SAFETY: as above.
    let envoy = unsafe { EnvoyConfig::new(config_envoy) };
    // SAFETY: arrays of the given sizes, valid for this call (or null).
    let (headers, chunks) = unsafe {
        let headers = envoy_array(headers, headers_size);
        (headers, envoy_array(body_chunks, body_chunks_size))
    };
    or_on_panic((), || {
        let answer = match CalloutResult::from_raw(result) {
            // SAFETY: Envoy's buffers, valid for this call.
            CalloutResult::Success => unsafe { read_answer(headers, chunks) },
            // A reset or an oversized answer: no headers, as in proxy-wasm.
            CalloutResult::Failed(_) => Answer::default(),
        };
        // SAFETY: as above; the puller reads the body only once its size is acceptable.
        fc.on_pulled(&envoy, &answer, |n| unsafe { read_prefix(chunks, n) });
    });
}

/// The pull's answer without its body: status, ETag, content type, size.
///
/// # Safety
/// The headers' and chunks' buffers are Envoy's, valid for `'call`.
unsafe fn read_answer<'call>(
    headers: &[EnvoyHeader<'call>],
    chunks: &[EnvoyBuffer<'call>],
) -> Answer {
    let text = |b: &EnvoyBuffer<'call>| {
        // SAFETY: per the function's contract.
        String::from_utf8_lossy(unsafe { b.as_slice() }).into_owned()
    };
    let mut answer = Answer {
        body_size: chunks.iter().map(EnvoyBuffer::len).sum(),
        ..Answer::default()
    };
    for h in headers {
        // SAFETY: per the function's contract.
        match unsafe { h.key.as_slice() } {
            b":status" => answer.status = text(&h.value).parse().ok(),
            b"etag" => answer.etag = Some(text(&h.value)),
            b"content-type" => answer.content_type = Some(text(&h.value)),
            _ => {}
        }
    }
    answer
}

/// The first `n` bytes of Envoy's body chunks.
///
/// # Safety
/// The chunks' buffers are Envoy's, valid for `'call`.
unsafe fn read_prefix(chunks: &[EnvoyBuffer<'_>], n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks {
        let left = n.saturating_sub(out.len());
        // SAFETY: per the function's contract.
        let bytes = unsafe { c.as_slice() };
        out.extend_from_slice(&bytes[..left.min(bytes.len())]);
    }
    out
}

/// An array Envoy lends for one call, as a slice of that call's lifetime.
///
/// # Safety
/// `p` is null or points to `n` values, valid for `'call`.
unsafe fn envoy_array<'call, T>(p: *const T, n: usize) -> &'call [T] {
    if p.is_null() {
        return &[];
    }
    // SAFETY: per the function's contract.
    unsafe { std::slice::from_raw_parts(p, n) }
}

/// The callout's answer, copied out of Envoy's buffers.
///
/// # Safety
/// The headers' and chunks' buffers are Envoy's, valid for `'call`.
unsafe fn read_response<'call>(
    headers: &[EnvoyHeader<'call>],
    chunks: &[EnvoyBuffer<'call>],
) -> CallResponse {
    let mut r = CallResponse::default();
    for h in headers {
        // SAFETY: Envoy's buffers, valid for this call.
        if unsafe { h.key.as_slice() } == b":status" {
            // SAFETY: as above.
            let v = unsafe { h.value.as_slice() };
            r.status = std::str::from_utf8(v).ok().and_then(|v| v.parse().ok());
        }
    }
    for c in chunks {
        // SAFETY: as above.
        r.body.extend_from_slice(unsafe { c.as_slice() });
    }
    r
}

/// Hooks Ferry does not use. Envoy resolves them all at load time; the arguments are
/// ignored, so each takes only what decides its calling convention (all are integer or pointer
/// sized, passed in registers, so the unused ones need not be declared). Each returns a
/// constant, so none can panic.
macro_rules! unused_hooks {
    ($($name:ident -> $ret:ty = $value:expr;)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> $ret {
            $value
        }
    )*};
}

unused_hooks! {
    // Per-route configs are not used: returning null refuses one with a clear config error.
    envoy_dynamic_module_on_http_filter_per_route_config_new -> *const c_void = std::ptr::null();
    envoy_dynamic_module_on_http_filter_per_route_config_destroy -> () = ();
    envoy_dynamic_module_on_http_filter_response_body -> BodyStatus = BodyStatus::Continue;
    envoy_dynamic_module_on_http_filter_response_trailers -> TrailersStatus = TrailersStatus::Continue;
    envoy_dynamic_module_on_http_filter_stream_complete -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_headers -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_data -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_trailers -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_complete -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_reset -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_headers -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_data -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_trailers -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_complete -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_reset -> () = ();
    envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark -> () = ();
    envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark -> () = ();
    envoy_dynamic_module_on_http_filter_local_reply -> LocalReplyStatus = LocalReplyStatus::Continue;
}
