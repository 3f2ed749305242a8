//! Everything the host knows and records: per-stream maps and buffers, dispatched calls, time,
//! shared data, metrics and logs. The hostcalls (`abi`, `wasi`) read and write it; the scripting
//! API (`lib.rs`) sets it up and reads it back.

use std::collections::HashMap;

use wasmtime::{Memory, TypedFunc};

/// One header map, in order, with lowercase names (as Envoy keeps them). Values are bytes:
/// HTTP/1 allows obs-text, so a value need not be UTF-8.
pub type HeaderMap = Vec<(String, Vec<u8>)>;

/// Statuses of the proxy-wasm ABI 0.2.1 (proxy_wasm::types::Status and the C++ host's WasmResult).
pub mod status {
    pub const OK: i32 = 0;
    pub const NOT_FOUND: i32 = 1;
    pub const BAD_ARGUMENT: i32 = 2;
    pub const INVALID_MEMORY_ACCESS: i32 = 6;
    pub const EMPTY: i32 = 7;
    pub const CAS_MISMATCH: i32 = 8;
}

/// A log line of the guest: `proxy_log`, or what it wrote to stdout/stderr through WASI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// proxy-wasm level (0 trace .. 5 critical); stdout is logged as 2 (info), stderr as 4 (error).
    pub level: u32,
    pub message: String,
}

/// One `proxy_http_call` the guest made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchedCall {
    /// What `proxy_http_call` returned; deliver the answer with `Stream::call_response`.
    pub token: u32,
    /// The context that made the call (the stream's id, or the root's).
    pub context_id: u32,
    pub cluster: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub trailers: Vec<(String, String)>,
    /// As the guest gave it; 0 means no timeout (Envoy's semantics).
    pub timeout_ms: u32,
}

impl DispatchedCall {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A reply the guest sent with `proxy_send_local_response` instead of forwarding the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalReply {
    pub status: u32,
    pub details: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub grpc_status: i32,
}

impl LocalReply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: String,
    pub kind: MetricKind,
    /// Counter total or gauge value; for a histogram, the sum of recorded values.
    pub value: i64,
    /// Every value recorded into a histogram.
    pub recorded: Vec<u64>,
}

/// One direction (request or response) of an HTTP stream as the filter sees it.
#[derive(Debug, Default, Clone)]
pub struct Direction {
    pub headers: HeaderMap,
    /// Whether the filter may still read and change `headers`. Envoy forgets the header map once
    /// the headers went on (the callback returned Continue, or the stream was resumed); after
    /// that every header call fails with BadArgument, which proxy-wasm 0.2.5 turns into a panic.
    pub headers_open: bool,
    pub trailers: HeaderMap,
    /// The whole body as it would leave the filter (forwarded chunks, then what is buffered).
    pub body: Vec<u8>,
    /// Where the part still buffered by the host (what `proxy_get_buffer_bytes` sees) starts.
    pub buffered_from: usize,
    /// Whether the last headers/body callback returned Pause and nothing resumed it yet.
    pub paused: bool,
    /// Times the filter called `proxy_continue_stream` for this direction.
    pub resumed: u32,
    pub end_of_stream: bool,
}

impl Direction {
    /// Headers and buffered body go on (a callback returned Continue, or the stream resumed).
    pub fn forward(&mut self) {
        self.headers_open = false;
        self.paused = false;
        self.buffered_from = self.body.len();
    }
}

/// An HTTP stream (an HTTP context of the guest).
#[derive(Debug, Default, Clone)]
pub struct StreamState {
    pub request: Direction,
    pub response: Direction,
    pub local_replies: Vec<LocalReply>,
    /// `proxy_close_stream` was called.
    pub closed: bool,
    /// Envoy calls nothing more on a stream once it answered it locally or closed it.
    pub finished: bool,
}

impl StreamState {
    /// The request direction, or the response's.
    pub fn direction(&mut self, request: bool) -> &mut Direction {
        if request {
            &mut self.request
        } else {
            &mut self.response
        }
    }
}

/// The answer to a dispatched call, while `proxy_on_http_call_response` runs.
#[derive(Debug, Default, Clone)]
pub struct CallResponse {
    pub headers: HeaderMap,
    pub body: Vec<u8>,
    pub trailers: HeaderMap,
}

/// Guest functions the hostcalls need (set once the instance exists).
#[derive(Clone)]
pub struct GuestFns {
    pub memory: Memory,
    /// `proxy_on_memory_allocate`: where returned data is copied.
    pub malloc: TypedFunc<i32, i32>,
}

#[derive(Default)]
pub struct State {
    pub guest: Option<GuestFns>,
    pub root_id: u32,
    /// The context the host called into, or the one set by `proxy_set_effective_context`.
    pub current: u32,
    pub streams: HashMap<u32, StreamState>,
    pub vm_configuration: Vec<u8>,
    pub plugin_configuration: Vec<u8>,
    /// Host time, nanoseconds since the Unix epoch.
    pub time_nanos: u64,
    pub log_level: u32,
    pub logs: Vec<LogEntry>,
    /// Partial lines written to stdout / stderr, until their newline.
    pub stdout_line: Vec<u8>,
    pub stderr_line: Vec<u8>,
    pub calls: Vec<DispatchedCall>,
    /// Tokens dispatched and not answered yet.
    pub pending_calls: Vec<u32>,
    pub next_token: u32,
    /// Set while a call's answer is being delivered; None outside, or for a failed call.
    pub call_response: Option<CallResponse>,
    /// Clusters `proxy_http_call` accepts; None = any (an unknown one is BadArgument, as in Envoy).
    pub clusters: Option<Vec<String>>,
    /// Shared data: key → (value, cas).
    pub shared: HashMap<String, (Vec<u8>, u32)>,
    pub next_cas: u32,
    /// Shared queues: (vm_id, name) → id, and each queue's items.
    pub queue_ids: HashMap<(String, String), u32>,
    pub queues: HashMap<u32, std::collections::VecDeque<Vec<u8>>>,
    /// Metrics by id (the id's low 2 bits are its kind, as in Envoy).
    pub metrics: HashMap<u32, Metric>,
    pub next_metric: u32,
    /// Properties by path (segments joined with NUL, as the guest serializes them).
    pub properties: HashMap<Vec<u8>, Vec<u8>>,
    pub tick_period_ms: u32,
    /// Hostcalls the guest made that Envoy would refuse, with why: shown when the VM traps.
    pub abi_errors: Vec<String>,
    pub rng: u64,
}

impl State {
    pub fn abi_error(&mut self, call: &str, why: impl Into<String>) -> i32 {
        self.abi_errors
            .push(format!("{call} (context {}): {}", self.current, why.into()));
        status::BAD_ARGUMENT
    }

    pub fn flush_output(&mut self) {
        for (level, line) in [
            (2, std::mem::take(&mut self.stdout_line)),
            (4, std::mem::take(&mut self.stderr_line)),
        ] {
            if !line.is_empty() {
                self.logs.push(LogEntry {
                    level,
                    message: String::from_utf8_lossy(&line).into_owned(),
                });
            }
        }
    }
}
