//! Ferry's proxy-wasm HTTP filter: the adapter between Envoy's proxy-wasm ABI and `ferry-core`.
//! The root context owns the snapshot, HTTP contexts delegate to [`HttpFilter`] over
//! hostcalls. Only calls valid in the current callback are made, because
//! proxy-wasm 0.2.5's hostcalls panic on any unexpected status (and a panic kills the VM).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{
    Action as WasmAction, BufferType, ContextType, GrpcStatusCode, LogLevel, MapType, MetricType,
};

use ferry_core::config::Config;
use ferry_core::error::FerryError;
use ferry_core::host::{Host, HttpCall};
use ferry_core::metrics::{self, Metrics, ViewMetrics};
use ferry_core::plugin_config::{self, Plugin, Pull};
use ferry_core::request::{Action, HttpFilter};
use ferry_core::snapshot_pull::{Answer, HeldStore, Pulled, Puller};

mod stages;
use stages::{Marks, Stage};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
        Box::new(FerryRoot { config: None, metrics: None, puller: None })
    });
}}

struct FerryRoot {
    /// The last snapshot that validated; requests keep the one they started with.
    config: Option<Rc<Config>>,
    /// Defined on the first configure of this VM; ids stay valid for its life.
    metrics: Option<Rc<Metrics>>,
    /// When the plugin configuration names a `snapshot_url`: the pull on every tick.
    puller: Option<Puller>,
}

impl Context for FerryRoot {
    fn on_http_call_response(
        &mut self,
        _token_id: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        let Some(puller) = self.puller.as_mut() else {
            return;
        };
        // No headers: the call failed (reset, timeout, no such cluster), and there is no
        // response to read (reading it would fail, and the hostcall panic).
        let answer = if num_headers == 0 {
            Answer::default()
        } else {
            Answer {
                status: call_response_header(":status").and_then(|s| s.parse().ok()),
                etag: call_response_header("etag"),
                content_type: call_response_header("content-type"),
                body_size,
            }
        };
        // The body is copied into the VM only when the puller found its size acceptable.
        let read = |n: usize| {
            hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, n)
                .ok()
                .flatten()
                .unwrap_or_default()
        };
        match puller.answered(&answer, read) {
            Pulled::Loaded { config: c, .. } => {
                log_loaded(&c, &puller.pull().url);
                self.use_config(c);
            }
            Pulled::Unchanged | Pulled::Kept { log: None } => {}
            Pulled::Kept { log: Some(m) } => log(LogLevel::Warn, &format!("ferry: {m}")),
        }
    }
}

impl RootContext for FerryRoot {
    fn on_configure(&mut self, _size: usize) -> bool {
        if self.metrics.is_none() {
            self.metrics = Some(Rc::new(Metrics::define(define_metric)));
        }
        let bytes = match hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX) {
            Ok(Some(b)) => b,
            _ => {
                log(
                    LogLevel::Error,
                    "ferry: no plugin configuration (expected a ferry.v1.Snapshot or a JSON object)",
                );
                return false;
            }
        };
        match plugin_config::parse_plugin(&bytes) {
            Ok(Plugin::Snapshot(c)) => {
                log_loaded(&c, "the plugin configuration");
                self.use_config(Rc::new(c));
                if self.puller.take().is_some() {
                    let _ = hostcalls::set_tick_period(Duration::ZERO);
                }
                if stages::enabled() {
                    let _ = hostcalls::set_tick_period(stages::EVERY);
                }
                true
            }
            Ok(Plugin::Pull(p)) => {
                self.start_pull(p);
                true
            }
            Err(e) => {
                // Returning false makes Envoy refuse this config and keep the last good one.
                log(LogLevel::Error, &format!("ferry: {e}"));
                false
            }
        }
    }

    fn on_tick(&mut self) {
        if let Some(line) = stages::tick_line() {
            log(LogLevel::Warn, &line);
        }
        self.send_pull();
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        if let (None, Some(puller)) = (&self.config, &self.puller) {
            let pull = puller.pull();
            return Some(Box::new(NotLoaded(FerryError::SnapshotNotLoaded {
                url: pull.url.clone(),
                poll_ms: u64::try_from(pull.poll.as_millis()).unwrap_or(u64::MAX),
            })));
        }
        let metrics = self.metrics.clone().unwrap_or_default();
        Some(Box::new(FerryHttp {
            filter: HttpFilter::new(HostCalls::default(), self.config.clone(), metrics),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

impl FerryRoot {
    /// Takes `c` for new requests, with its per (service, view) metrics (defined here; the
    /// ids of pairs the last snapshot had are kept).
    fn use_config(&mut self, c: Rc<Config>) {
        if let Some(m) = &self.metrics {
            let views = ViewMetrics::define(&c, m.views(), define_metric);
            self.metrics = Some(Rc::new(m.with_views(views)));
        }
        self.config = Some(c);
    }

    /// Pulls from `pull` from now on, at once and then on every tick. `on_configure` runs more
    /// than once per update: the same pull keeps its state (and its last version). A new one
    /// starts afresh (but for the held sequence of a signed snapshot from the same URL), and the
    /// snapshot in use stays until the new source answers.
    fn start_pull(&mut self, pull: Pull) {
        if self.puller.as_ref().map(Puller::pull) == Some(&pull) {
            return;
        }
        log(
            LogLevel::Info,
            &format!(
                "ferry: pulling the snapshot from {} through cluster '{}' every {} ms",
                pull.url,
                pull.cluster,
                pull.poll.as_millis()
            ),
        );
        let _ = hostcalls::set_tick_period(pull.poll);
        let puller = Puller::replacing(pull, self.puller.take()).with_store(Box::new(SharedData));
        self.puller = Some(puller);
        self.send_pull();
    }

    fn send_pull(&mut self) {
        let Some(puller) = self.puller.as_mut() else {
            return;
        };
        let Some(headers) = puller.next_request() else {
            return;
        };
        let pull = puller.pull();
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        match hostcalls::dispatch_http_call(&pull.cluster, headers, None, vec![], pull.timeout) {
            Ok(_) => puller.sent(),
            Err(status) => {
                if let Some(m) = puller.not_sent(&format!("status {status:?}")) {
                    log(LogLevel::Warn, &format!("ferry: {m}"));
                }
            }
        }
    }
}

fn define_metric(kind: metrics::Kind, name: &str) -> Option<u32> {
    let t = match kind {
        metrics::Kind::Counter => MetricType::Counter,
        metrics::Kind::Histogram => MetricType::Histogram,
    };
    hostcalls::define_metric(t, name).ok()
}

fn log_loaded(c: &Config, from: &str) {
    log(
        LogLevel::Info,
        &format!(
            "ferry: snapshot {} of project '{}' with {} route(s) from {from}",
            c.version,
            c.project,
            c.routes.len()
        ),
    );
}

fn call_response_header(name: &str) -> Option<String> {
    hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, name)
        .ok()
        .flatten()
        .map(|v| String::from_utf8_lossy(&v).into_owned())
}

/// Every request while a pulled snapshot has not arrived: answered with a JSON 503, since
/// without the snapshot no request can be told apart from one that must be enriched.
struct NotLoaded(FerryError);

impl Context for NotLoaded {}

impl HttpContext for NotLoaded {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> WasmAction {
        let _ = hostcalls::send_http_response(
            u32::from(self.0.status()),
            self.0.reply_headers(),
            Some(&self.0.body("")),
        );
        WasmAction::Pause
    }
}

struct FerryHttp {
    filter: HttpFilter<HostCalls>,
}

fn to_wasm(a: Action) -> WasmAction {
    match a {
        Action::Continue => WasmAction::Continue,
        Action::Pause => WasmAction::Pause,
    }
}

impl Context for FerryHttp {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        self.filter.host().marks.done(Stage::Call);
        self.filter
            .on_call_response(token_id, num_headers, body_size);
    }
}

impl HttpContext for FerryHttp {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> WasmAction {
        #[cfg(feature = "fault-injection")]
        injected_crash();
        let host = self.filter.host();
        host.marks.start();
        host.hold_headers();
        let action = self.filter.on_request_headers(end_of_stream);
        let host = self.filter.host();
        host.drop_headers();
        host.marks.done(Stage::Headers);
        to_wasm(action)
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> WasmAction {
        self.filter.host().marks.start();
        to_wasm(self.filter.on_request_body(body_size, end_of_stream))
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> WasmAction {
        to_wasm(self.filter.on_request_trailers())
    }

    fn on_http_response_headers(
        &mut self,
        _num_headers: usize,
        _end_of_stream: bool,
    ) -> WasmAction {
        to_wasm(self.filter.on_response_headers())
    }
}

fn log(level: LogLevel, message: &str) {
    let _ = hostcalls::log(level, message);
}

/// Test builds only (`--features fault-injection`, a `.wasm` of its own that is never
/// shipped): a request carrying `x-wasm-fault: crash` traps the VM, as a failed allocation
/// would, so a test can show what a reload keeps (the held snapshot sequence).
#[cfg(feature = "fault-injection")]
fn injected_crash() {
    let fault = hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, "x-wasm-fault");
    if matches!(fault, Ok(Some(v)) if v == b"crash") {
        std::process::abort();
    }
}

/// The held snapshot sequence in Envoy's shared data: kept by Envoy across this VM's crash
/// and reload, and seen by every worker's VM of the plugin.
#[derive(Debug)]
struct SharedData;

impl HeldStore for SharedData {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        hostcalls::set_shared_data(key, Some(value), cas).is_ok()
    }
}

/// The real host: proxy-wasm hostcalls, and the stream's stage clock.
#[derive(Default)]
struct HostCalls {
    marks: Marks,
    /// The request headers, read in one hostcall when the request-headers hook starts and
    /// kept (updated by the hook's own writes) until it ends: the hook reads a dozen headers,
    /// and each read on its own costs a call out of V8 and an allocation call back into the VM.
    headers: RefCell<Option<HeaderPairs>>,
}

/// Header names and values, as proxy-wasm hands a header map over.
type HeaderPairs = Vec<(String, Vec<u8>)>;

impl HostCalls {
    fn hold_headers(&self) {
        *self.headers.borrow_mut() = hostcalls::get_map_bytes(MapType::HttpRequestHeaders).ok();
    }

    fn drop_headers(&self) {
        self.headers.borrow_mut().take();
    }
}

impl Host for HostCalls {
    // Header values may be any octets (HTTP/1 obs-text, HTTP/2): proxy-wasm 0.2.5's string
    // getters unwrap `String::from_utf8` and would kill the VM, so read bytes and convert
    // lossily (an id that was not UTF-8 then holds U+FFFD and is refused, see `format`).
    fn request_header(&self, name: &str) -> Option<String> {
        if let Some(held) = self.headers.borrow().as_ref() {
            // Envoy answers a name given several times with its first value.
            return held
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned());
        }
        hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name)
            .ok()
            .flatten()
            .map(|v| String::from_utf8_lossy(&v).into_owned())
    }

    fn request_header_names(&self) -> Vec<String> {
        if let Some(held) = self.headers.borrow().as_ref() {
            return held.iter().map(|(n, _)| n.clone()).collect();
        }
        // Names are checked by Envoy (tokens, ASCII); only the values can be arbitrary bytes.
        hostcalls::get_map_bytes(MapType::HttpRequestHeaders)
            .map(|h| h.into_iter().map(|(n, _)| n).collect())
            .unwrap_or_default()
    }

    fn request_trailer_names(&self) -> Vec<String> {
        hostcalls::get_map_bytes(MapType::HttpRequestTrailers)
            .map(|h| h.into_iter().map(|(n, _)| n).collect())
            .unwrap_or_default()
    }

    fn remove_request_trailer(&self, name: &str) {
        let _ = hostcalls::set_map_value(MapType::HttpRequestTrailers, name, None);
    }

    fn set_request_header(&self, name: &str, value: Option<&str>) {
        let _ = hostcalls::set_map_value(MapType::HttpRequestHeaders, name, value);
        // Envoy replaces every value of the name with this one (or removes them all).
        if let Some(held) = self.headers.borrow_mut().as_mut() {
            held.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            if let Some(v) = value {
                held.push((name.to_ascii_lowercase(), v.as_bytes().to_vec()));
            }
        }
    }

    fn request_body(&self, size: usize) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::HttpRequestBody, 0, size)
            .ok()
            .flatten()
    }

    fn replace_request_body(&self, old_size: usize, body: &[u8]) {
        let _ = hostcalls::set_buffer(BufferType::HttpRequestBody, 0, old_size, body);
    }

    fn dispatch(&self, call: HttpCall<'_>) -> Result<u32, String> {
        self.marks.done(Stage::LookupRequest);
        let cluster = call.cluster;
        hostcalls::dispatch_http_call(cluster, call.headers, Some(call.body), vec![], call.timeout)
            .map_err(|status| {
                format!("dispatch to cluster '{cluster}' failed with status {status:?}")
            })
    }

    fn call_response_status(&self) -> Option<u16> {
        hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, ":status")
            .ok()
            .flatten()
            .and_then(|s| std::str::from_utf8(&s).ok()?.parse().ok())
    }

    fn call_response_body(&self, size: usize) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, size)
            .ok()
            .flatten()
    }

    fn now_us(&self) -> i64 {
        hostcalls::get_current_time()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
    }

    fn send_response(&self, status: u16, headers: Vec<(&str, &str)>, body: &[u8]) {
        let _ = hostcalls::send_http_response(u32::from(status), headers, Some(body));
    }

    /// Envoy's gRPC local reply: it writes `grpc-status` and the percent-encoded
    /// `grpc-message` itself (the HTTP status is 200).
    fn send_grpc_error(&self, grpc_status: u32, message: &str, headers: Vec<(&str, &str)>) {
        let metadata = headers
            .into_iter()
            .map(|(n, v)| (n, v.as_bytes()))
            .collect();
        let _ = hostcalls::send_grpc_response(grpc_code(grpc_status), Some(message), metadata);
    }

    fn resume_request(&self) {
        let _ = stages::time(Stage::Resume, hostcalls::resume_http_request);
    }

    fn resume_response(&self) {
        let _ = hostcalls::resume_http_response();
    }

    fn log_warn(&self, message: &str) {
        log(LogLevel::Warn, message);
    }

    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        hostcalls::set_shared_data(key, Some(value), cas).is_ok()
    }

    fn metric_add(&self, id: u32, delta: i64) {
        let _ = hostcalls::increment_metric(id, delta);
    }

    fn metric_record(&self, id: u32, value: u64) {
        let _ = hostcalls::record_metric(id, value);
    }

    fn route_metadata(&self, key: &str) -> Option<String> {
        let path = vec!["xds", "route_metadata", "filter_metadata", "ferry", key];
        let bytes = hostcalls::get_property(path).ok().flatten()?;
        Some(String::from_utf8_lossy(&bytes).into_owned())
    }

    fn set_response_header(&self, name: &str, value: &str) {
        let _ = hostcalls::set_map_value(MapType::HttpResponseHeaders, name, Some(value));
    }

    /// Envoy keeps it as filter state `wasm.ferry.log` (a CelState of bytes), which its
    /// access loggers read (`filter_state_objects_to_log`).
    fn store_log_record(&self, record: &[u8]) -> bool {
        set_property(ferry_core::log::FILTER_STATE_KEY, record)
    }

    fn stage_done(&self, stage: ferry_core::host::Stage) {
        self.marks.core_done(stage);
    }
}

/// `proxy_set_property` called directly: the SDK's `hostcalls::set_property` panics on any
/// status but Ok (killing the VM), and a refused record must only be counted. A one-part path
/// is the part itself (the SDK joins parts with NUL).
fn set_property(name: &str, value: &[u8]) -> bool {
    #[allow(clashing_extern_declarations)]
    extern "C" {
        fn proxy_set_property(
            path_data: *const u8,
            path_size: usize,
            value_data: *const u8,
            value_size: usize,
        ) -> u32;
    }
    // SAFETY: both buffers are alive and unchanged for the call; the host copies them.
    let status =
        unsafe { proxy_set_property(name.as_ptr(), name.len(), value.as_ptr(), value.len()) };
    status == 0
}

/// The SDK's enum for a gRPC status code (the codes Ferry answers with; others are INTERNAL).
fn grpc_code(code: u32) -> GrpcStatusCode {
    use ferry_core::error::grpc;
    use GrpcStatusCode as G;
    match code {
        grpc::INVALID_ARGUMENT => G::InvalidArgument,
        grpc::DEADLINE_EXCEEDED => G::DeadlineExceeded,
        grpc::NOT_FOUND => G::NotFound,
        grpc::RESOURCE_EXHAUSTED => G::ResourceExhausted,
        grpc::FAILED_PRECONDITION => G::FailedPrecondition,
        grpc::UNAVAILABLE => G::Unavailable,
        _ => G::Internal,
    }
}
