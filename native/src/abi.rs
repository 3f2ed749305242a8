//! Our own bindings to the few parts of Envoy's dynamic-module C ABI that Ferry uses
//! (`source/extensions/dynamic_modules/abi.h`; every name checked against the symbols Envoy
//! 1.40's binary exports). Types are `#[repr(C)]` mirrors; the C enums are passed as `u32`.

use std::ffi::c_void;

/// `envoy_dynamic_module_type_http_filter_envoy_ptr` / `..._config_envoy_ptr`: Envoy's objects.
pub type EnvoyPtr = *mut c_void;

/// A buffer owned by Envoy (valid until the end of the current hook).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer {
    pub ptr: *const u8,
    pub length: usize,
}

impl EnvoyBuffer {
    /// What Envoy writes into.
    pub const EMPTY: EnvoyBuffer = EnvoyBuffer {
        ptr: std::ptr::null(),
        length: 0,
    };
}

/// A buffer owned by the module (valid for the duration of the call).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer {
    pub ptr: *const u8,
    pub length: usize,
}

impl ModuleBuffer {
    pub fn of(bytes: &[u8]) -> Self {
        ModuleBuffer {
            ptr: bytes.as_ptr(),
            length: bytes.len(),
        }
    }
    pub const NULL: ModuleBuffer = ModuleBuffer {
        ptr: std::ptr::null(),
        length: 0,
    };
}

/// A header owned by the module.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleHeader {
    pub key_ptr: *const u8,
    pub key_length: usize,
    pub value_ptr: *const u8,
    pub value_length: usize,
}

impl ModuleHeader {
    pub fn of(key: &str, value: &str) -> Self {
        ModuleHeader {
            key_ptr: key.as_ptr(),
            key_length: key.len(),
            value_ptr: value.as_ptr(),
            value_length: value.len(),
        }
    }
}

/// A header owned by Envoy.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyHeader {
    pub key_ptr: *const u8,
    pub key_length: usize,
    pub value_ptr: *const u8,
    pub value_length: usize,
}

// envoy_dynamic_module_type_http_header_type
pub const REQUEST_HEADER: u32 = 0;
pub const REQUEST_TRAILER: u32 = 1;
pub const RESPONSE_HEADER: u32 = 2;

// envoy_dynamic_module_type_http_body_type
pub const RECEIVED_REQUEST_BODY: u32 = 0;
pub const BUFFERED_REQUEST_BODY: u32 = 1;

// envoy_dynamic_module_type_log_level
pub const LOG_INFO: u32 = 2;
pub const LOG_WARN: u32 = 3;
pub const LOG_ERROR: u32 = 4;

// envoy_dynamic_module_type_http_callout_init_result: 0 = Success.
pub const CALLOUT_INIT_SUCCESS: u32 = 0;
// envoy_dynamic_module_type_http_callout_result: 0 = Success.
pub const CALLOUT_SUCCESS: u32 = 0;

// envoy_dynamic_module_type_metadata_source: 1 = the matched route's metadata.
pub const METADATA_ROUTE: u32 = 1;

// envoy_dynamic_module_type_metrics_result: 0 = Success.
pub const METRICS_SUCCESS: u32 = 0;

// Statuses returned by the request/response hooks (FilterHeadersStatus, FilterDataStatus,
// FilterTrailersStatus in envoy/http/filter.h).
pub const HEADERS_CONTINUE: u32 = 0;
pub const HEADERS_STOP_ITERATION: u32 = 1;
pub const BODY_CONTINUE: u32 = 0;
pub const BODY_STOP_AND_BUFFER: u32 = 1;
pub const TRAILERS_CONTINUE: u32 = 0;
pub const TRAILERS_STOP_ITERATION: u32 = 1;

extern "C" {
    pub fn envoy_dynamic_module_callback_log(level: u32, message: ModuleBuffer);

    pub fn envoy_dynamic_module_callback_http_get_header(
        filter: EnvoyPtr,
        header_type: u32,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
        index: usize,
        optional_size: *mut usize,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_get_headers_size(
        filter: EnvoyPtr,
        header_type: u32,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_headers(
        filter: EnvoyPtr,
        header_type: u32,
        result: *mut EnvoyHeader,
    ) -> bool;
    /// A null `value` removes the header.
    pub fn envoy_dynamic_module_callback_http_set_header(
        filter: EnvoyPtr,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;

    pub fn envoy_dynamic_module_callback_http_send_response(
        filter: EnvoyPtr,
        status_code: u32,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );

    pub fn envoy_dynamic_module_callback_http_get_body_size(
        filter: EnvoyPtr,
        body_type: u32,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_body_chunks_size(
        filter: EnvoyPtr,
        body_type: u32,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_body_chunks(
        filter: EnvoyPtr,
        body_type: u32,
        result: *mut EnvoyBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_append_body(
        filter: EnvoyPtr,
        body_type: u32,
        data: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_drain_body(
        filter: EnvoyPtr,
        body_type: u32,
        bytes: usize,
    ) -> bool;

    pub fn envoy_dynamic_module_callback_http_get_metadata_string(
        filter: EnvoyPtr,
        source: u32,
        namespace: ModuleBuffer,
        key: ModuleBuffer,
        result: *mut EnvoyBuffer,
    ) -> bool;

    pub fn envoy_dynamic_module_callback_http_filter_http_callout(
        filter: EnvoyPtr,
        callout_id_out: *mut u64,
        cluster_name: ModuleBuffer,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_milliseconds: u64,
    ) -> u32;

    /// A scheduler for `filter`: events committed to it (from any thread) run the stream's
    /// `on_http_filter_scheduled` hook on its worker thread.
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_new(filter: EnvoyPtr)
        -> *mut c_void;
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    );
    pub fn envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler: *mut c_void);

    pub fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: EnvoyPtr);
    pub fn envoy_dynamic_module_callback_http_filter_continue_encoding(filter: EnvoyPtr);

    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: EnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_length: usize,
        id_out: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_define_histogram(
        config: EnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_length: usize,
        id_out: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter: EnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_record_histogram_value(
        filter: EnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> u32;
}

/// Copies an Envoy-owned buffer.
///
/// # Safety
/// `b` must be a buffer Envoy handed out in the current hook (or null with length 0).
pub unsafe fn envoy_bytes(b: EnvoyBuffer) -> Vec<u8> {
    if b.ptr.is_null() || b.length == 0 {
        return Vec::new();
    }
    // SAFETY: Envoy guarantees ptr..ptr+length is readable until the hook ends (caller's duty).
    unsafe { std::slice::from_raw_parts(b.ptr, b.length) }.to_vec()
}
