//! The event hooks Envoy calls (`envoy_dynamic_module_on_*`). Each one turns Envoy's pointers
//! back into the module's objects and hands over to `ferry_core::request::HttpFilter`.
//! Envoy 1.40 resolves every HTTP-filter hook when it loads the module, so the ones Ferry has
//! no use for are here too, doing nothing.

use std::cell::RefCell;
use std::ffi::c_void;

use ferry_core::metrics;
use ferry_core::request::{Action, HttpFilter};

use crate::abi::{self, EnvoyBuffer, EnvoyHeader, EnvoyPtr, ModuleBuffer};
use crate::config::FilterConfig;
use crate::direct::Slot;
use crate::host::{log, CallResponse, EnvoyHost};

/// The ABI version this module was written against (Envoy 1.40's `abi.h`).
static ABI_VERSION: &[u8] = b"v0.2.0\0";

/// One HTTP stream. The core sits in a `RefCell`: Envoy may deliver a callout's answer while
/// a hook of the same stream is still running (inside the call that sent it); that answer
/// waits in `pending` and is handled before the hook returns.
struct Stream {
    filter: RefCell<HttpFilter<EnvoyHost>>,
    pending: RefCell<Option<(u32, CallResponse)>>,
    /// The answers of its in-process lookups (the host holds the same slot).
    direct: Slot,
}

/// Loads the module; with `FERRY_NATIVE_READER` set, also starts the in-process reader (a
/// null return makes Envoy refuse the module, with the reason in its log).
#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const u8 {
    match crate::direct::init() {
        Ok(None) => {}
        Ok(Some(d)) => log(
            abi::LOG_INFO,
            &format!(
                "ferry: reader calls answered in process from Redis at {}",
                d.redis()
            ),
        ),
        Err(e) => {
            log(abi::LOG_ERROR, &format!("ferry: {e}"));
            return std::ptr::null();
        }
    }
    ABI_VERSION.as_ptr()
}

/// # Safety
/// Called by Envoy with its config object and two buffers valid for the call.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    config_envoy: EnvoyPtr,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    // SAFETY: Envoy's buffer is valid for this call.
    let bytes = unsafe { abi::envoy_bytes(config) };
    let define = |kind: metrics::Kind, name: &str| define_metric(config_envoy, kind, name);
    match FilterConfig::new(bytes, define) {
        Ok((fc, c)) => {
            log(
                abi::LOG_INFO,
                &format!(
                    "ferry: snapshot {} of project '{}' with {} route(s)",
                    c.version,
                    c.project,
                    c.routes.len()
                ),
            );
            Box::into_raw(Box::new(fc)) as *const c_void
        }
        Err(e) => {
            // A null config makes Envoy refuse this configuration (and keep the last good one).
            log(abi::LOG_ERROR, &format!("ferry: {e}"));
            std::ptr::null()
        }
    }
}

fn define_metric(config_envoy: EnvoyPtr, kind: metrics::Kind, name: &str) -> Option<u32> {
    let mut id: usize = 0;
    let name = ModuleBuffer::of(name.as_bytes());
    // SAFETY: Envoy's config object is live during config_new; no labels.
    let result = unsafe {
        match kind {
            metrics::Kind::Counter => {
                abi::envoy_dynamic_module_callback_http_filter_config_define_counter(
                    config_envoy,
                    name,
                    std::ptr::null_mut(),
                    0,
                    &mut id,
                )
            }
            metrics::Kind::Histogram => {
                abi::envoy_dynamic_module_callback_http_filter_config_define_histogram(
                    config_envoy,
                    name,
                    std::ptr::null_mut(),
                    0,
                    &mut id,
                )
            }
        }
    };
    (result == abi::METRICS_SUCCESS)
        .then(|| u32::try_from(id).ok())
        .flatten()
}

/// # Safety
/// `config` is a pointer returned by `on_http_filter_config_new`, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    if !config.is_null() {
        // SAFETY: made by Box::into_raw in config_new; Envoy destroys it once.
        drop(unsafe { Box::from_raw(config as *mut FilterConfig) });
    }
}

/// # Safety
/// `config` is a live pointer from `on_http_filter_config_new`.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    filter_envoy: EnvoyPtr,
) -> *const c_void {
    // SAFETY: a live FilterConfig (Envoy keeps the config alive while streams use it).
    let Some(fc) = (unsafe { (config as *const FilterConfig).as_ref() }) else {
        return std::ptr::null();
    };
    let (snapshot, metrics) = fc.for_this_thread();
    let direct = Slot::default();
    let stream = Stream {
        filter: RefCell::new(HttpFilter::new(
            EnvoyHost::new(filter_envoy, direct.clone()),
            snapshot,
            metrics,
        )),
        pending: RefCell::new(None),
        direct,
    };
    Box::into_raw(Box::new(stream)) as *const c_void
}

/// # Safety
/// `filter` is a pointer returned by `on_http_filter_new`, destroyed once.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_destroy(filter: *const c_void) {
    if !filter.is_null() {
        // SAFETY: made by Box::into_raw in filter_new; Envoy destroys it once.
        drop(unsafe { Box::from_raw(filter as *mut Stream) });
    }
}

/// The stream behind Envoy's module pointer.
///
/// # Safety
/// `filter` is null or a live pointer from `on_http_filter_new`.
unsafe fn stream<'a>(filter: *const c_void) -> Option<&'a Stream> {
    // SAFETY: per the function's contract; only shared references are ever made.
    unsafe { (filter as *const Stream).as_ref() }
}

/// Runs one request/response hook: resumes the core asks for inside it become the hook's
/// return value (Continue), and a callout answer that arrived meanwhile is handled before
/// returning. `None`: the stream is busy (Envoy re-entered a hook), which then continues.
fn run_hook(
    s: &Stream,
    body_hook: bool,
    f: impl FnOnce(&mut HttpFilter<EnvoyHost>) -> Action,
) -> Option<Action> {
    let mut filter = s.filter.try_borrow_mut().ok()?;
    let host = filter.host();
    host.in_hook.set(true);
    host.in_body_hook.set(body_hook);
    let mut action = f(&mut filter);
    while let Some((token, response)) = s.pending.borrow_mut().take() {
        deliver(&mut filter, token, response);
    }
    let host = filter.host();
    host.in_hook.set(false);
    host.in_body_hook.set(false);
    let resumed_request = host.resume_request_deferred.replace(false);
    let resumed_response = host.resume_response_deferred.replace(false);
    if resumed_request || resumed_response {
        action = Action::Continue;
    }
    Some(action)
}

fn deliver(filter: &mut HttpFilter<EnvoyHost>, token: u32, response: CallResponse) {
    let has_headers = response.status.is_some();
    let size = response.body.len();
    *filter.host().call_response.borrow_mut() = response;
    filter.on_call_response(token, usize::from(has_headers), size);
    *filter.host().call_response.borrow_mut() = CallResponse::default();
}

fn hook_action(
    s: Option<&Stream>,
    body_hook: bool,
    f: impl FnOnce(&mut HttpFilter<EnvoyHost>) -> Action,
) -> Action {
    s.and_then(|s| run_hook(s, body_hook, f))
        .unwrap_or(Action::Continue)
}

fn headers_status(a: Action) -> u32 {
    match a {
        Action::Continue => abi::HEADERS_CONTINUE,
        Action::Pause => abi::HEADERS_STOP_ITERATION,
    }
}

/// # Safety
/// Called by Envoy with a live module filter pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    _envoy: EnvoyPtr,
    filter: *const c_void,
    end_of_stream: bool,
) -> u32 {
    // SAFETY: Envoy passes the pointer from filter_new.
    let s = unsafe { stream(filter) };
    headers_status(hook_action(s, false, |f| {
        f.on_request_headers(end_of_stream)
    }))
}

/// # Safety
/// Called by Envoy with a live module filter pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    _envoy: EnvoyPtr,
    filter: *const c_void,
    end_of_stream: bool,
) -> u32 {
    // SAFETY: Envoy passes the pointer from filter_new.
    let s = unsafe { stream(filter) };
    let action = hook_action(s, true, |f| {
        let size = f.host().request_body_size();
        f.on_request_body(size, end_of_stream)
    });
    match action {
        Action::Continue => abi::BODY_CONTINUE,
        // Paused bodies are buffered: the core reads the whole body at its end.
        Action::Pause => abi::BODY_STOP_AND_BUFFER,
    }
}

/// # Safety
/// Called by Envoy with a live module filter pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _envoy: EnvoyPtr,
    filter: *const c_void,
) -> u32 {
    // SAFETY: Envoy passes the pointer from filter_new.
    let s = unsafe { stream(filter) };
    match hook_action(s, false, |f| f.on_request_trailers()) {
        Action::Continue => abi::TRAILERS_CONTINUE,
        Action::Pause => abi::TRAILERS_STOP_ITERATION,
    }
}

/// # Safety
/// Called by Envoy with a live module filter pointer.
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    _envoy: EnvoyPtr,
    filter: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    // SAFETY: Envoy passes the pointer from filter_new.
    let s = unsafe { stream(filter) };
    headers_status(hook_action(s, false, |f| f.on_response_headers()))
}

/// # Safety
/// Called by Envoy with a live module filter pointer; headers and body chunks are valid for
/// the call (or null when the callout failed).
#[no_mangle]
pub unsafe extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    _envoy: EnvoyPtr,
    filter: *const c_void,
    callout_id: u64,
    result: u32,
    headers: *const EnvoyHeader,
    headers_size: usize,
    body_chunks: *const EnvoyBuffer,
    body_chunks_size: usize,
) {
    // SAFETY: Envoy passes the pointer from filter_new.
    let Some(s) = (unsafe { stream(filter) }) else {
        return;
    };
    let Ok(token) = u32::try_from(callout_id) else {
        return;
    };
    let response = if result == abi::CALLOUT_SUCCESS {
        // SAFETY: arrays of the given sizes, valid for this call (or null).
        unsafe { read_response(headers, headers_size, body_chunks, body_chunks_size) }
    } else {
        CallResponse::default() // a reset or an oversized answer: no headers, as in proxy-wasm
    };
    hand_over(s, token, response);
}

/// An answer for the stream: delivered now, or, inside the hook that sent the call, when that
/// hook ends.
fn hand_over(s: &Stream, token: u32, response: CallResponse) {
    match s.filter.try_borrow_mut() {
        Ok(mut f) => {
            deliver(&mut f, token, response);
        }
        Err(_) => *s.pending.borrow_mut() = Some((token, response)),
    }
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
    let Some(s) = (unsafe { stream(filter) }) else {
        return;
    };
    let Ok(token) = u32::try_from(event_id) else {
        return;
    };
    if let Some(response) = s.direct.take(token) {
        hand_over(s, token, response);
    }
}

/// # Safety
/// `headers`/`chunks` are null or arrays of the given lengths, valid for the call.
unsafe fn read_response(
    headers: *const EnvoyHeader,
    headers_size: usize,
    chunks: *const EnvoyBuffer,
    chunks_size: usize,
) -> CallResponse {
    let mut r = CallResponse::default();
    if !headers.is_null() {
        // SAFETY: Envoy's array of headers_size headers.
        for h in unsafe { std::slice::from_raw_parts(headers, headers_size) } {
            // SAFETY: Envoy's buffers, valid for this call.
            let key = unsafe {
                abi::envoy_bytes(EnvoyBuffer {
                    ptr: h.key_ptr,
                    length: h.key_length,
                })
            };
            if key == b":status" {
                // SAFETY: as above.
                let v = unsafe {
                    abi::envoy_bytes(EnvoyBuffer {
                        ptr: h.value_ptr,
                        length: h.value_length,
                    })
                };
                r.status = std::str::from_utf8(&v).ok().and_then(|v| v.parse().ok());
            }
        }
    }
    if !chunks.is_null() {
        // SAFETY: Envoy's array of chunks_size buffers.
        for c in unsafe { std::slice::from_raw_parts(chunks, chunks_size) } {
            // SAFETY: valid for this call.
            r.body.extend_from_slice(&unsafe { abi::envoy_bytes(*c) });
        }
    }
    r
}

/// Hooks Ferry does not use. Envoy resolves them all at load time; the arguments are
/// ignored, so each takes only what decides its calling convention (all are integer or pointer
/// sized, passed in registers, so the unused ones need not be declared).
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
    envoy_dynamic_module_on_http_filter_response_body -> u32 = abi::BODY_CONTINUE;
    envoy_dynamic_module_on_http_filter_response_trailers -> u32 = abi::TRAILERS_CONTINUE;
    envoy_dynamic_module_on_http_filter_stream_complete -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_headers -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_data -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_trailers -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_complete -> () = ();
    envoy_dynamic_module_on_http_filter_http_stream_reset -> () = ();
    envoy_dynamic_module_on_http_filter_config_scheduled -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_callout_done -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_headers -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_data -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_trailers -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_complete -> () = ();
    envoy_dynamic_module_on_http_filter_config_http_stream_reset -> () = ();
    envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark -> () = ();
    envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark -> () = ();
    // 0 = Continue: the local reply is sent.
    envoy_dynamic_module_on_http_filter_local_reply -> u32 = 0;
}
