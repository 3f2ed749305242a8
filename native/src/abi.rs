//! Our own bindings to the few parts of Envoy's dynamic-module C ABI that Ferry uses
//! (`source/extensions/dynamic_modules/abi.h`; every name checked against the symbols Envoy
//! 1.40's binary exports): `#[repr(C)]` mirrors of its types, its C enums as Rust enums, and
//! the callbacks. A buffer borrowed from Envoy carries the lifetime of the hook it came from.

use std::ffi::c_void;
use std::marker::PhantomData;

/// `envoy_dynamic_module_type_http_filter_envoy_ptr` / `..._config_envoy_ptr`: Envoy's objects.
pub type EnvoyPtr = *mut c_void;

/// A buffer owned by Envoy, readable for `'hook` (the hook, or the callback call, that handed it
/// out): a slice of it cannot be kept past that.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyBuffer<'hook> {
    ptr: *const u8,
    length: usize,
    hook: PhantomData<&'hook [u8]>,
}

impl<'hook> EnvoyBuffer<'hook> {
    /// What Envoy writes into (its lifetime is the caller's: not `'static`).
    pub const fn empty() -> Self {
        EnvoyBuffer {
            ptr: std::ptr::null(),
            length: 0,
            hook: PhantomData,
        }
    }

    /// The bytes (empty for a null buffer).
    ///
    /// # Safety
    /// Envoy filled this buffer during `'hook`, or it is `empty()`.
    pub unsafe fn as_slice(&self) -> &'hook [u8] {
        if self.ptr.is_null() || self.length == 0 {
            return &[];
        }
        // SAFETY: Envoy guarantees ptr..ptr+length is readable during 'hook (caller's duty).
        unsafe { std::slice::from_raw_parts(self.ptr, self.length) }
    }

    pub fn is_null(&self) -> bool {
        self.ptr.is_null()
    }

    pub fn len(&self) -> usize {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }
}

/// A buffer owned by the module, lent to Envoy for one call.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleBuffer<'a> {
    ptr: *const u8,
    length: usize,
    lent: PhantomData<&'a [u8]>,
}

impl<'a> ModuleBuffer<'a> {
    pub fn of(bytes: &'a [u8]) -> Self {
        ModuleBuffer {
            ptr: bytes.as_ptr(),
            length: bytes.len(),
            lent: PhantomData,
        }
    }
    /// "No value" (e.g. a header to remove).
    pub const NULL: ModuleBuffer<'static> = ModuleBuffer {
        ptr: std::ptr::null(),
        length: 0,
        lent: PhantomData,
    };
}

/// A header owned by the module, lent to Envoy for one call.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ModuleHeader<'a> {
    key: ModuleBuffer<'a>,
    value: ModuleBuffer<'a>,
}

impl<'a> ModuleHeader<'a> {
    pub fn of(key: &'a str, value: &'a str) -> Self {
        ModuleHeader {
            key: ModuleBuffer::of(key.as_bytes()),
            value: ModuleBuffer::of(value.as_bytes()),
        }
    }
}

/// A header owned by Envoy, readable for `'hook`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct EnvoyHeader<'hook> {
    pub key: EnvoyBuffer<'hook>,
    pub value: EnvoyBuffer<'hook>,
}

impl EnvoyHeader<'_> {
    pub const fn empty() -> Self {
        EnvoyHeader {
            key: EnvoyBuffer::empty(),
            value: EnvoyBuffer::empty(),
        }
    }
}

/// `envoy_dynamic_module_type_http_header_type`: which header map.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HeaderKind {
    RequestHeader = 0,
    RequestTrailer = 1,
    ResponseHeader = 2,
    ResponseTrailer = 3,
}

/// `envoy_dynamic_module_type_http_body_type`: the chunk being processed (received) or what
/// earlier hooks buffered.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BodyKind {
    ReceivedRequest = 0,
    BufferedRequest = 1,
    ReceivedResponse = 2,
    BufferedResponse = 3,
}

/// `envoy_dynamic_module_type_log_level`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Trace = 0,
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
    Critical = 5,
}

/// `envoy_dynamic_module_type_metadata_source`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetadataSource {
    Dynamic = 0,
    /// The matched route's metadata.
    Route = 1,
}

/// `envoy_dynamic_module_type_http_filter_stream_reset_reason`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetReason {
    LocalReset = 0,
}

/// `envoy_dynamic_module_type_on_http_filter_request_headers_status` (and the response's):
/// FilterHeadersStatus in envoy/http/filter.h.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeadersStatus {
    Continue = 0,
    StopIteration = 1,
}

/// `..._request_body_status` (and the response's): FilterDataStatus.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyStatus {
    Continue = 0,
    StopIterationAndBuffer = 1,
}

/// `..._request_trailers_status` (and the response's): FilterTrailersStatus.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrailersStatus {
    Continue = 0,
    StopIteration = 1,
}

/// `envoy_dynamic_module_type_on_http_filter_local_reply_status`.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalReplyStatus {
    /// The local reply is sent.
    Continue = 0,
}

/// `envoy_dynamic_module_type_http_callout_init_result`: why Envoy did or did not start a
/// callout. Read from Envoy as a `u32` (an unknown value must not be UB), then mapped here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CalloutInit {
    Success,
    MissingRequiredHeaders,
    ClusterNotFound,
    DuplicateCalloutId,
    CannotCreateRequest,
    Unknown(u32),
}

impl CalloutInit {
    pub fn from_raw(code: u32) -> Self {
        match code {
            0 => CalloutInit::Success,
            1 => CalloutInit::MissingRequiredHeaders,
            2 => CalloutInit::ClusterNotFound,
            3 => CalloutInit::DuplicateCalloutId,
            4 => CalloutInit::CannotCreateRequest,
            other => CalloutInit::Unknown(other),
        }
    }

    /// Why Envoy refused to start the callout, for the filter's error.
    pub fn reason(self) -> &'static str {
        match self {
            CalloutInit::Success => "no error",
            CalloutInit::MissingRequiredHeaders => {
                "missing required headers (:method, :path, host)"
            }
            CalloutInit::ClusterNotFound => "cluster not found",
            CalloutInit::DuplicateCalloutId => "duplicate callout id",
            CalloutInit::CannotCreateRequest => "cannot create the request (no healthy upstream?)",
            CalloutInit::Unknown(_) => "unknown error",
        }
    }
}

/// `envoy_dynamic_module_type_http_callout_result`, read as a `u32` like `CalloutInit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CalloutResult {
    Success,
    /// A reset, an oversized answer, or a value this module does not know.
    Failed(u32),
}

impl CalloutResult {
    pub fn from_raw(code: u32) -> Self {
        match code {
            0 => CalloutResult::Success,
            other => CalloutResult::Failed(other),
        }
    }
}

/// `envoy_dynamic_module_type_metrics_result`: only success matters to Ferry.
pub fn metrics_ok(code: u32) -> bool {
    code == 0
}

/// Declares Envoy's callbacks; in unit tests and other crates' tests (the `testing` feature),
/// which do not run inside Envoy, it also defines each one as a stub returning `$default`, so
/// the adapter links there too. Tests drive the adapter through the in-memory `Envoy` instead
/// (`envoy::testing`), never through these. (A module built with `testing` would bind its own
/// stubs instead of Envoy's callbacks: the feature is for test binaries only.)
macro_rules! callbacks {
    ($(
        $(#[$doc:meta])*
        fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $default:expr;
    )*) => {
        extern "C" {
            $($(#[$doc])* pub fn $name($($arg: $ty),*) $(-> $ret)?;)*
        }
        #[cfg(any(test, feature = "testing"))]
        mod stubs {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[no_mangle]
                #[allow(unused_variables)]
                extern "C" fn $name($($arg: $ty),*) $(-> $ret)? { $default }
            )*
        }
    };
}

callbacks! {
    fn envoy_dynamic_module_callback_log(level: LogLevel, message: ModuleBuffer<'_>) = ();

    fn envoy_dynamic_module_callback_http_get_header(
        filter: EnvoyPtr,
        header_type: HeaderKind,
        key: ModuleBuffer<'_>,
        result: *mut EnvoyBuffer<'_>,
        index: usize,
        optional_size: *mut usize,
    ) -> bool = false;
    fn envoy_dynamic_module_callback_http_get_headers_size(
        filter: EnvoyPtr,
        header_type: HeaderKind,
    ) -> usize = 0;
    fn envoy_dynamic_module_callback_http_get_headers(
        filter: EnvoyPtr,
        header_type: HeaderKind,
        result: *mut EnvoyHeader<'_>,
    ) -> bool = false;
    /// A null `value` removes the header.
    fn envoy_dynamic_module_callback_http_set_header(
        filter: EnvoyPtr,
        header_type: HeaderKind,
        key: ModuleBuffer<'_>,
        value: ModuleBuffer<'_>,
    ) -> bool = false;

    fn envoy_dynamic_module_callback_http_send_response(
        filter: EnvoyPtr,
        status_code: u32,
        headers: *mut ModuleHeader<'_>,
        headers_size: usize,
        body: ModuleBuffer<'_>,
        details: ModuleBuffer<'_>,
    ) = ();
    fn envoy_dynamic_module_callback_http_filter_reset_stream(
        filter: EnvoyPtr,
        reason: ResetReason,
        details: ModuleBuffer<'_>,
    ) = ();

    fn envoy_dynamic_module_callback_http_get_body_size(
        filter: EnvoyPtr,
        body_type: BodyKind,
    ) -> usize = 0;
    fn envoy_dynamic_module_callback_http_get_body_chunks_size(
        filter: EnvoyPtr,
        body_type: BodyKind,
    ) -> usize = 0;
    fn envoy_dynamic_module_callback_http_get_body_chunks(
        filter: EnvoyPtr,
        body_type: BodyKind,
        result: *mut EnvoyBuffer<'_>,
    ) -> bool = false;
    fn envoy_dynamic_module_callback_http_append_body(
        filter: EnvoyPtr,
        body_type: BodyKind,
        data: ModuleBuffer<'_>,
    ) -> bool = false;
    fn envoy_dynamic_module_callback_http_drain_body(
        filter: EnvoyPtr,
        body_type: BodyKind,
        bytes: usize,
    ) -> bool = false;

    fn envoy_dynamic_module_callback_http_get_metadata_string(
        filter: EnvoyPtr,
        source: MetadataSource,
        namespace: ModuleBuffer<'_>,
        key: ModuleBuffer<'_>,
        result: *mut EnvoyBuffer<'_>,
    ) -> bool = false;

    /// Returns an `envoy_dynamic_module_type_http_callout_init_result` (see `CalloutInit`).
    fn envoy_dynamic_module_callback_http_filter_http_callout(
        filter: EnvoyPtr,
        callout_id_out: *mut u64,
        cluster_name: ModuleBuffer<'_>,
        headers: *mut ModuleHeader<'_>,
        headers_size: usize,
        body: ModuleBuffer<'_>,
        timeout_milliseconds: u64,
    ) -> u32 = 1;

    /// A scheduler for `filter`: events committed to it (from any thread) run the stream's
    /// `on_http_filter_scheduled` hook on its worker thread.
    fn envoy_dynamic_module_callback_http_filter_scheduler_new(filter: EnvoyPtr) -> *mut c_void
        = std::ptr::null_mut();
    fn envoy_dynamic_module_callback_http_filter_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    ) = ();
    fn envoy_dynamic_module_callback_http_filter_scheduler_delete(scheduler: *mut c_void) = ();

    /// The filter config's own callout (Envoy 1.40's abi.h): the same arguments as a stream's,
    /// on the config's Envoy object, from the main thread; the answer comes to
    /// `on_http_filter_config_http_callout_done`. Returns a `CalloutInit` code.
    fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        config: EnvoyPtr,
        callout_id_out: *mut u64,
        cluster_name: ModuleBuffer<'_>,
        headers: *mut ModuleHeader<'_>,
        headers_size: usize,
        body: ModuleBuffer<'_>,
        timeout_milliseconds: u64,
    ) -> u32 = 1;

    /// A scheduler for the filter config: events committed to it (from any thread) run
    /// `on_http_filter_config_scheduled` on Envoy's main thread, while the config lives (Envoy
    /// holds it weakly: a commit after the config is gone does nothing).
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(config: EnvoyPtr)
        -> *mut c_void = std::ptr::null_mut();
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
        scheduler: *mut c_void,
        event_id: u64,
    ) = ();
    fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(scheduler: *mut c_void)
        = ();

    /// Stores `value` as the stream's filter state `key` (a read-only string accessor, which
    /// Envoy's access loggers serialize as a `google.protobuf.StringValue`); false without a
    /// stream (abi.h, Envoy 1.40).
    fn envoy_dynamic_module_callback_http_set_filter_state_bytes(
        filter: EnvoyPtr,
        key: ModuleBuffer<'_>,
        value: ModuleBuffer<'_>,
    ) -> bool = false;

    fn envoy_dynamic_module_callback_http_filter_continue_decoding(filter: EnvoyPtr) = ();
    fn envoy_dynamic_module_callback_http_filter_continue_encoding(filter: EnvoyPtr) = ();
}

/// The two metric kinds share one shape: one macro declares both of each pair.
macro_rules! metric_callbacks {
    ($($define:ident, $update:ident;)*) => {
        callbacks! {$(
            /// Returns an `envoy_dynamic_module_type_metrics_result` (see `metrics_ok`).
            fn $define(
                config: EnvoyPtr,
                name: ModuleBuffer<'_>,
                label_names: *mut ModuleBuffer<'_>,
                label_names_length: usize,
                id_out: *mut usize,
            ) -> u32 = 1;
            fn $update(
                filter: EnvoyPtr,
                id: usize,
                label_values: *mut ModuleBuffer<'_>,
                label_values_length: usize,
                value: u64,
            ) -> u32 = 1;
        )*}
    };
}

pub use metric_abi::*;

mod metric_abi {
    use super::{EnvoyPtr, ModuleBuffer};

    metric_callbacks! {
        envoy_dynamic_module_callback_http_filter_config_define_counter,
        envoy_dynamic_module_callback_http_filter_increment_counter;
        envoy_dynamic_module_callback_http_filter_config_define_histogram,
        envoy_dynamic_module_callback_http_filter_record_histogram_value;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_match_the_c_abi() {
        // Two words each, as abi.h's structs: the lifetime markers take no room.
        let word = std::mem::size_of::<usize>();
        assert_eq!(std::mem::size_of::<EnvoyBuffer<'_>>(), 2 * word);
        assert_eq!(std::mem::size_of::<ModuleBuffer<'_>>(), 2 * word);
        assert_eq!(std::mem::size_of::<EnvoyHeader<'_>>(), 4 * word);
        assert_eq!(std::mem::size_of::<ModuleHeader<'_>>(), 4 * word);
        assert_eq!(std::mem::size_of::<HeaderKind>(), 4);
    }

    #[test]
    fn unknown_codes_from_envoy_are_values_not_ub() {
        assert_eq!(CalloutInit::from_raw(0), CalloutInit::Success);
        assert_eq!(CalloutInit::from_raw(2).reason(), "cluster not found");
        assert_eq!(CalloutInit::from_raw(99), CalloutInit::Unknown(99));
        assert_eq!(CalloutResult::from_raw(1), CalloutResult::Failed(1));
        assert!(metrics_ok(0) && !metrics_ok(1));
    }

    #[test]
    fn a_slice_of_an_envoy_buffer_is_its_bytes() {
        let bytes = b"abc";
        let b = EnvoyBuffer {
            ptr: bytes.as_ptr(),
            length: bytes.len(),
            hook: PhantomData,
        };
        // SAFETY: points into `bytes`, alive for the test.
        assert_eq!(unsafe { b.as_slice() }, b"abc");
        // SAFETY: empty.
        assert!(unsafe { EnvoyBuffer::empty().as_slice() }.is_empty());
    }
}
