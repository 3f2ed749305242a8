//! A small proxy-wasm host on wasmtime for Ferry's ABI tests and benchmarks: it loads the built
//! filter (`ferry_filter.wasm`, the artifact Envoy runs), drives the ABI the way Envoy does
//! (configure, headers, body chunks, dispatched calls and their answers or failures, time, shared
//! data, metrics) and records what the filter did.
//!
//! - `abi`: the `env` hostcalls of proxy-wasm ABI 0.2.1, with Envoy's statuses.
//! - `wasi`: the few `wasi_snapshot_preview1` calls Rust's std imports.
//! - `memory`: guest memory and the serialized header map format.
//! - `state`: what the host knows and records.
//!
//! A trap in the guest (a Rust panic in the filter: in Envoy it kills the VM) panics the calling
//! test with the trap, the guest's backtrace, its log and any ABI misuse the host saw.

// A test host fails the calling test by panicking (with the guest's log): that is its job.
#![allow(clippy::panic)]

mod abi;
mod memory;
mod state;
mod wasi;

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wasmtime::{Engine, Linker, Module, Store, TypedFunc};

pub use memory::{deserialize_pairs, serialize_pairs};
use state::{CallResponse, Direction, GuestFns, State, StreamState};
pub use state::{DispatchedCall, LocalReply, LogEntry, Metric, MetricKind};

/// What a stream callback told the host to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    Pause,
}

/// The host's clock until a test sets it: 2027-01-15T08:00:00Z, in microseconds.
pub const DEFAULT_TIME_US: i64 = 1_800_000_000_000_000;

const ROOT_ID: u32 = 1;

/// The proxy-wasm callbacks the host calls.
struct Exports {
    on_context_create: TypedFunc<(i32, i32), ()>,
    on_vm_start: TypedFunc<(i32, i32), i32>,
    on_configure: TypedFunc<(i32, i32), i32>,
    on_tick: TypedFunc<i32, ()>,
    on_request_headers: StreamFn,
    on_request_body: StreamFn,
    on_request_trailers: TypedFunc<(i32, i32), i32>,
    on_response_headers: StreamFn,
    on_response_body: StreamFn,
    on_http_call_response: TypedFunc<(i32, i32, i32, i32, i32), ()>,
    on_done: TypedFunc<i32, i32>,
    on_log: TypedFunc<i32, ()>,
    on_delete: TypedFunc<i32, ()>,
}

struct Vm {
    store: Store<State>,
    exports: Exports,
    next_context: u32,
    /// Why the VM is dead (it trapped); every later call fails with this.
    dead: Option<String>,
    /// What the test is doing, shown if the guest traps (e.g. the input of a sweep case).
    note: String,
}

impl Vm {
    /// Runs one guest callback in `context`; a trap kills the VM and fails the test.
    fn call<R>(
        &mut self,
        what: &str,
        context: u32,
        f: impl FnOnce(&Exports, &mut Store<State>) -> wasmtime::Result<R>,
    ) -> R {
        if let Some(why) = &self.dead {
            panic!("{what}: the guest VM is dead since an earlier trap:\n{why}");
        }
        self.store.data_mut().current = context;
        match f(&self.exports, &mut self.store) {
            Ok(r) => r,
            Err(e) => {
                let report = self.trap_report(what, context, &e);
                self.dead = Some(report.clone());
                panic!("{report}");
            }
        }
    }

    fn trap_report(&mut self, what: &str, context: u32, e: &wasmtime::Error) -> String {
        let st = self.store.data_mut();
        st.flush_output();
        // The error and its causes: the wasm backtrace (with the guest's function names) is
        // in there; the host's own Rust backtrace is not, being noise here.
        let mut out = format!("the guest trapped in {what} (context {context}): {e}\n");
        for cause in e.chain().skip(1) {
            out += &format!("caused by: {cause}\n");
        }
        if !self.note.is_empty() {
            out += &format!("while: {}\n", self.note);
        }
        out += "guest log:\n";
        for l in &st.logs {
            out += &format!("  [{}] {}\n", level_name(l.level), l.message);
        }
        if !st.abi_errors.is_empty() {
            out += "hostcalls Envoy would have refused:\n";
            for a in &st.abi_errors {
                out += &format!("  {a}\n");
            }
        }
        out
    }

    fn stream(&mut self, id: u32) -> &mut StreamState {
        self.store.data_mut().streams.entry(id).or_default()
    }
}

pub fn level_name(level: u32) -> &'static str {
    ["trace", "debug", "info", "warn", "error", "critical"]
        .get(level as usize)
        .copied()
        .unwrap_or("?")
}

fn compiled(path: &Path) -> Result<(Engine, Module), String> {
    // Compiling the filter takes ~20 s in a debug build of cranelift: once per process and file
    // in memory, and once per .wasm content on disk (beside the .wasm) for the next test binary.
    type Cache = Mutex<HashMap<(PathBuf, Option<SystemTime>), (Engine, Module)>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let key = (path.to_path_buf(), modified);
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(hit) = cache.get(&key) {
        return Ok(hit.clone());
    }
    let engine = Engine::default();
    let wasm = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let module = precompiled(&engine, path, &wasm)?;
    cache.insert(key, (engine.clone(), module.clone()));
    Ok((engine, module))
}

/// The module from the on-disk cache, or compiled and stored there.
fn precompiled(engine: &Engine, path: &Path, wasm: &[u8]) -> Result<Module, String> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    wasm.hash(&mut h);
    let dir = path
        .parent()
        .unwrap_or(Path::new("."))
        .join("wasm-host-cache");
    let file = dir.join(format!("{:016x}.cwasm", h.finish()));
    // SAFETY: the file is one this function wrote with Module::serialize for an engine with the
    // same compatibility hash (part of its name); wasmtime checks its header again.
    if let Ok(m) = unsafe { Module::deserialize_file(engine, &file) } {
        return Ok(m);
    }
    let module = Module::new(engine, wasm)
        .map_err(|e| format!("cannot compile {}: {e:?}", path.display()))?;
    if let Ok(bytes) = module.serialize() {
        // Written under a unique name, then renamed: concurrent test binaries never read half.
        let tmp = dir.join(format!("{}.tmp", std::process::id()));
        let _ = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, &file));
        // Modules of older builds are of no further use.
        for old in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = old.path();
            if p != file && p.extension().is_some_and(|e| e == "cwasm") {
                let _ = std::fs::remove_file(p);
            }
        }
    }
    Ok(module)
}

fn typed<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
    instance: &wasmtime::Instance,
    store: &mut Store<State>,
    name: &str,
) -> Result<TypedFunc<P, R>, String> {
    instance
        .get_typed_func::<P, R>(&mut *store, name)
        .map_err(|e| format!("the module's export {name}: {e}"))
}

/// A proxy-wasm VM with one root context (the plugin), as Envoy runs per worker.
pub struct Host {
    vm: Rc<RefCell<Vm>>,
}

impl Host {
    /// Where `cargo build --release -p ferry-filter --target wasm32-wasip1` puts the filter
    /// (`FERRY_FILTER_WASM` overrides it).
    pub fn filter_wasm_path() -> PathBuf {
        if let Some(p) = std::env::var_os("FERRY_FILTER_WASM") {
            return p.into();
        }
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
        target.join("wasm32-wasip1/release/ferry_filter.wasm")
    }

    /// Loads the built filter; panics with how to build it if it is not there.
    pub fn load_filter() -> Host {
        let path = Host::filter_wasm_path();
        if !path.exists() {
            panic!(
                "{} does not exist: build the filter first with \
                 `cargo build --release -p ferry-filter --target wasm32-wasip1` (make test does)",
                path.display()
            );
        }
        warn_if_stale(&path);
        match Host::load(&path) {
            Ok(h) => h,
            Err(e) => panic!("{e}"),
        }
    }

    /// Compiles (once per process) and instantiates a proxy-wasm module, runs its start-up and
    /// creates the root context. Fails if the module imports anything this host does not
    /// implement, or does not speak ABI 0.2.1.
    pub fn load(path: impl AsRef<Path>) -> Result<Host, String> {
        let path = path.as_ref();
        let (engine, module) = compiled(path)?;
        let mut linker: Linker<State> = Linker::new(&engine);
        abi::add_to_linker(&mut linker).map_err(|e| format!("{e:?}"))?;
        wasi::add_to_linker(&mut linker).map_err(|e| format!("{e:?}"))?;
        let state = State {
            root_id: ROOT_ID,
            current: ROOT_ID,
            time_nanos: (DEFAULT_TIME_US as u64) * 1000,
            rng: 0x9e37_79b9_7f4a_7c15,
            ..Default::default()
        };
        let mut store = Store::new(&engine, state);
        let missing: Vec<String> = module
            .imports()
            .filter(|i| linker.get_by_import(&mut store, i).is_none())
            .map(|i| format!("{}::{} ({:?})", i.module(), i.name(), i.ty()))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{} imports what this test host does not implement (add it to tests/wasm-host):\n  {}",
                path.display(),
                missing.join("\n  ")
            ));
        }
        let instance = linker
            .instantiate(&mut store, &module)
            .map_err(|e| format!("cannot instantiate {}: {e:?}", path.display()))?;
        if instance
            .get_func(&mut store, "proxy_abi_version_0_2_1")
            .is_none()
        {
            return Err(format!(
                "{} does not export proxy_abi_version_0_2_1",
                path.display()
            ));
        }
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or("the module exports no memory")?;
        let malloc = typed(&instance, &mut store, "proxy_on_memory_allocate")?;
        store.data_mut().guest = Some(GuestFns { memory, malloc });
        let exports = Exports {
            on_context_create: typed(&instance, &mut store, "proxy_on_context_create")?,
            on_vm_start: typed(&instance, &mut store, "proxy_on_vm_start")?,
            on_configure: typed(&instance, &mut store, "proxy_on_configure")?,
            on_tick: typed(&instance, &mut store, "proxy_on_tick")?,
            on_request_headers: typed(&instance, &mut store, "proxy_on_request_headers")?,
            on_request_body: typed(&instance, &mut store, "proxy_on_request_body")?,
            on_request_trailers: typed(&instance, &mut store, "proxy_on_request_trailers")?,
            on_response_headers: typed(&instance, &mut store, "proxy_on_response_headers")?,
            on_response_body: typed(&instance, &mut store, "proxy_on_response_body")?,
            on_http_call_response: typed(&instance, &mut store, "proxy_on_http_call_response")?,
            on_done: typed(&instance, &mut store, "proxy_on_done")?,
            on_log: typed(&instance, &mut store, "proxy_on_log")?,
            on_delete: typed(&instance, &mut store, "proxy_on_delete")?,
        };
        let start = ["_initialize", "_start"]
            .into_iter()
            .find_map(|n| instance.get_typed_func::<(), ()>(&mut store, n).ok());
        let mut vm = Vm {
            store,
            exports,
            next_context: ROOT_ID + 1,
            dead: None,
            note: String::new(),
        };
        if let Some(start) = start {
            vm.call("_initialize", ROOT_ID, |_, s| start.call(s, ()));
        }
        vm.call("proxy_on_context_create", ROOT_ID, |e, s| {
            e.on_context_create.call(s, (ROOT_ID as i32, 0))
        });
        let started = vm.call("proxy_on_vm_start", ROOT_ID, |e, s| {
            e.on_vm_start.call(s, (ROOT_ID as i32, 0))
        });
        if started == 0 {
            return Err("proxy_on_vm_start returned false".into());
        }
        Ok(Host {
            vm: Rc::new(RefCell::new(vm)),
        })
    }

    /// Delivers a plugin configuration (`proxy_on_configure`); false = the guest refused it and
    /// Envoy would keep the previous one.
    pub fn configure(&self, plugin_configuration: &[u8]) -> bool {
        let mut vm = self.vm.borrow_mut();
        vm.store.data_mut().plugin_configuration = plugin_configuration.to_vec();
        let len = plugin_configuration.len() as i32;
        vm.call("proxy_on_configure", ROOT_ID, |e, s| {
            e.on_configure.call(s, (ROOT_ID as i32, len))
        }) != 0
    }

    /// A new HTTP stream (an HTTP context of the root).
    pub fn stream(&self) -> Stream {
        let mut vm = self.vm.borrow_mut();
        let id = vm.next_context;
        vm.next_context += 1;
        vm.store
            .data_mut()
            .streams
            .insert(id, StreamState::default());
        vm.call("proxy_on_context_create", id, |e, s| {
            e.on_context_create.call(s, (id as i32, ROOT_ID as i32))
        });
        Stream {
            vm: Rc::clone(&self.vm),
            id,
        }
    }

    /// The root context as the maker of dispatched calls (e.g. a snapshot pull): answer them
    /// with its `call_response` / `call_failure`; it is no stream, so nothing else applies.
    pub fn root_caller(&self) -> Stream {
        Stream {
            vm: Rc::clone(&self.vm),
            id: ROOT_ID,
        }
    }

    /// Runs the root's `proxy_on_tick`.
    pub fn tick(&self) {
        self.vm.borrow_mut().call("proxy_on_tick", ROOT_ID, |e, s| {
            e.on_tick.call(s, ROOT_ID as i32)
        });
    }

    /// The tick period the guest asked for, if any.
    pub fn tick_period(&self) -> Option<Duration> {
        let ms = self.state(|s| s.tick_period_ms);
        (ms > 0).then(|| Duration::from_millis(u64::from(ms)))
    }

    fn state<R>(&self, f: impl FnOnce(&State) -> R) -> R {
        f(self.vm.borrow().store.data())
    }

    fn state_mut<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(self.vm.borrow_mut().store.data_mut())
    }

    /// Every call the guest dispatched, answered or not, in order.
    pub fn dispatched_calls(&self) -> Vec<DispatchedCall> {
        self.state(|s| s.calls.clone())
    }

    /// Tokens of dispatched calls not answered yet.
    pub fn pending_calls(&self) -> Vec<u32> {
        self.state(|s| s.pending_calls.clone())
    }

    /// Only these clusters accept `proxy_http_call` (others get BadArgument, as in Envoy).
    pub fn set_clusters(&self, names: &[&str]) {
        self.state_mut(|s| s.clusters = Some(names.iter().map(|n| n.to_string()).collect()));
    }

    pub fn set_time(&self, t: SystemTime) {
        let nanos = t
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.state_mut(|s| s.time_nanos = nanos);
    }

    /// Sets the host clock, in microseconds since the Unix epoch (the filter's unit).
    pub fn set_time_us(&self, us: i64) {
        self.state_mut(|s| s.time_nanos = (us.max(0) as u64).saturating_mul(1000));
    }

    pub fn advance_time(&self, d: Duration) {
        self.state_mut(|s| s.time_nanos = s.time_nanos.saturating_add(d.as_nanos() as u64));
    }

    pub fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_nanos(self.state(|s| s.time_nanos))
    }

    /// The guest's log: `proxy_log` lines and what it wrote to stdout/stderr.
    pub fn logs(&self) -> Vec<LogEntry> {
        self.state(|s| s.logs.clone())
    }

    /// The log as text, one `[level] message` per line.
    pub fn log_text(&self) -> String {
        self.logs()
            .iter()
            .map(|l| format!("[{}] {}\n", level_name(l.level), l.message))
            .collect()
    }

    pub fn metric(&self, name: &str) -> Option<Metric> {
        self.state(|s| s.metrics.values().find(|m| m.name == name).cloned())
    }

    pub fn metrics(&self) -> Vec<Metric> {
        let mut all: Vec<Metric> = self.state(|s| s.metrics.values().cloned().collect());
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all
    }

    /// Shared data: (value, cas).
    pub fn shared_data(&self, key: &str) -> Option<(Vec<u8>, u32)> {
        self.state(|s| s.shared.get(key).cloned())
    }

    /// Sets shared data as another VM (another Envoy worker) would.
    pub fn set_shared_data(&self, key: &str, value: &[u8]) {
        self.state_mut(|s| {
            s.next_cas = s.next_cas.wrapping_add(1).max(1);
            s.shared
                .insert(key.to_string(), (value.to_vec(), s.next_cas));
        });
    }

    /// Sets a property (`proxy_get_property`), e.g. `&["plugin_name"]`. The guest sends a path
    /// as its parts joined by NUL (no trailing NUL), as Envoy reads it.
    pub fn set_property(&self, path: &[&str], value: &[u8]) {
        let key = path.join("\0").into_bytes();
        self.state_mut(|s| s.properties.insert(key, value.to_vec()));
    }

    /// Reads and forgets a property the guest set: a stream's filter state (e.g. `ferry.log`,
    /// the served-feature record), which Envoy keeps per stream but this host keeps per VM.
    pub fn take_property(&self, path: &[&str]) -> Option<Vec<u8>> {
        let key = path.join("\0").into_bytes();
        self.state_mut(|s| s.properties.remove(&key))
    }

    /// Hostcalls the guest made that Envoy would refuse (e.g. a header change after the headers
    /// went on). Tests assert this is empty.
    pub fn abi_errors(&self) -> Vec<String> {
        self.state(|s| s.abi_errors.clone())
    }

    /// Forgets the dispatched calls and log lines recorded so far (long benchmark runs).
    pub fn clear_records(&self) {
        self.state_mut(|s| {
            s.calls.clear();
            s.logs.clear();
        });
    }

    /// Shown with the report if the guest traps (e.g. which input a sweep is on).
    pub fn note(&self, note: impl Into<String>) {
        self.vm.borrow_mut().note = note.into();
    }

    /// Why the VM died, if it trapped.
    pub fn dead(&self) -> Option<String> {
        self.vm.borrow().dead.clone()
    }
}

fn lowercase_pairs<K: AsRef<str>, V: AsRef<[u8]>>(pairs: &[(K, V)]) -> Vec<(String, Vec<u8>)> {
    pairs
        .iter()
        .map(|(k, v)| (k.as_ref().to_ascii_lowercase(), v.as_ref().to_vec()))
        .collect()
}

/// A stream callback: (context, size, end of stream) -> action.
type StreamFn = TypedFunc<(i32, i32, i32), i32>;

/// A stream callback's export name and where [`Exports`] holds it.
#[derive(Clone, Copy)]
struct Hook {
    name: &'static str,
    export: fn(&Exports) -> &StreamFn,
}

impl Hook {
    const REQUEST_HEADERS: Hook = Hook {
        name: "proxy_on_request_headers",
        export: |e| &e.on_request_headers,
    };
    const REQUEST_BODY: Hook = Hook {
        name: "proxy_on_request_body",
        export: |e| &e.on_request_body,
    };
    const RESPONSE_HEADERS: Hook = Hook {
        name: "proxy_on_response_headers",
        export: |e| &e.on_response_headers,
    };
    const RESPONSE_BODY: Hook = Hook {
        name: "proxy_on_response_body",
        export: |e| &e.on_response_body,
    };
}

fn to_action(what: &str, v: i32) -> Action {
    match v {
        0 => Action::Continue,
        1 => Action::Pause,
        other => panic!("{what} returned {other}, not an ABI 0.2.1 action"),
    }
}

/// One HTTP stream through the filter.
pub struct Stream {
    vm: Rc<RefCell<Vm>>,
    id: u32,
}

impl Stream {
    /// The stream's context id.
    pub fn id(&self) -> u32 {
        self.id
    }

    fn with<R>(&self, f: impl FnOnce(&StreamState) -> R) -> R {
        let vm = self.vm.borrow();
        match vm.store.data().streams.get(&self.id) {
            Some(s) => f(s),
            None => f(&StreamState::default()),
        }
    }

    /// Delivers the request headers (names are lowercased, as Envoy keeps them; values are
    /// bytes, so obs-text can be sent). A stream Envoy already ended gets no callback (Pause).
    pub fn request_headers<K: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        headers: &[(K, V)],
        end_of_stream: bool,
    ) -> Action {
        self.headers(true, lowercase_pairs(headers), end_of_stream)
    }

    pub fn response_headers<K: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        headers: &[(K, V)],
        end_of_stream: bool,
    ) -> Action {
        self.headers(false, lowercase_pairs(headers), end_of_stream)
    }

    fn headers(&self, request: bool, headers: Vec<(String, Vec<u8>)>, eos: bool) -> Action {
        let hook = if request {
            Hook::REQUEST_HEADERS
        } else {
            Hook::RESPONSE_HEADERS
        };
        self.run_hook(request, eos, hook, |d| {
            let n = headers.len() as i32;
            d.headers = headers;
            d.headers_open = true;
            n
        })
    }

    /// Runs `hook` on the request (or response) direction, unless the stream is finished:
    /// `fill` first hands the direction what arrived and returns the size the hook is told;
    /// the hook's action then forwards the direction (Continue) or pauses it.
    fn run_hook(
        &self,
        request: bool,
        eos: bool,
        hook: Hook,
        fill: impl FnOnce(&mut Direction) -> i32,
    ) -> Action {
        let mut vm = self.vm.borrow_mut();
        let id = self.id;
        let s = vm.stream(id);
        if s.finished {
            return Action::Pause;
        }
        let d = s.direction(request);
        let size = fill(d);
        d.end_of_stream = eos;
        let raw = vm.call(hook.name, id, |e, s| {
            (hook.export)(e).call(s, (id as i32, size, eos as i32))
        });
        let action = to_action(hook.name, raw);
        let d = vm.stream(id).direction(request);
        match action {
            Action::Continue => d.forward(),
            Action::Pause => d.paused = true,
        }
        action
    }

    /// Delivers a request body chunk. While the filter returns Pause, Envoy buffers: the size
    /// the filter is told, and the buffer it reads, are everything buffered so far.
    pub fn request_body(&self, chunk: &[u8], end_of_stream: bool) -> Action {
        self.body(true, chunk, end_of_stream)
    }

    pub fn response_body(&self, chunk: &[u8], end_of_stream: bool) -> Action {
        self.body(false, chunk, end_of_stream)
    }

    fn body(&self, request: bool, chunk: &[u8], eos: bool) -> Action {
        let hook = if request {
            Hook::REQUEST_BODY
        } else {
            Hook::RESPONSE_BODY
        };
        self.run_hook(request, eos, hook, |d| {
            d.body.extend_from_slice(chunk);
            (d.body.len() - d.buffered_from) as i32
        })
    }

    /// Delivers the request trailers, which end the request (the last data frame was sent
    /// without end_of_stream). As in Envoy, Continue sends on whatever the filter still held
    /// (the headers, if paused, and the buffered body) with the trailers; Pause holds it all
    /// until the filter resumes the stream.
    pub fn request_trailers<K: AsRef<str>, V: AsRef<[u8]>>(&self, trailers: &[(K, V)]) -> Action {
        let mut vm = self.vm.borrow_mut();
        let id = self.id;
        let s = vm.stream(id);
        if s.finished {
            return Action::Pause;
        }
        s.request.trailers = lowercase_pairs(trailers);
        s.request.end_of_stream = true;
        let n = trailers.len() as i32;
        let raw = vm.call("proxy_on_request_trailers", id, |e, s| {
            e.on_request_trailers.call(s, (id as i32, n))
        });
        let action = to_action("proxy_on_request_trailers", raw);
        let d = &mut vm.stream(id).request;
        match action {
            Action::Continue => d.forward(),
            Action::Pause => d.paused = true,
        }
        action
    }

    /// The request trailers as the filter left them.
    pub fn request_trailer_map(&self) -> Vec<(String, String)> {
        self.with(|s| {
            s.request
                .trailers
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect()
        })
    }

    /// Answers the dispatched call `token` (made by this stream) with a response.
    pub fn call_response<K: AsRef<str>, V: AsRef<[u8]>>(
        &self,
        token: u32,
        headers: &[(K, V)],
        body: &[u8],
    ) {
        let response = CallResponse {
            headers: lowercase_pairs(headers),
            body: body.to_vec(),
            trailers: Vec::new(),
        };
        self.deliver(token, Some(response));
    }

    /// Fails the dispatched call `token` the way Envoy reports a reset, a timeout or an
    /// unreachable cluster: a response callback with no headers and no body.
    pub fn call_failure(&self, token: u32) {
        self.deliver(token, None);
    }

    fn deliver(&self, token: u32, response: Option<CallResponse>) {
        let mut vm = self.vm.borrow_mut();
        let id = self.id;
        let st = vm.store.data_mut();
        let Some(i) = st.pending_calls.iter().position(|t| *t == token) else {
            panic!(
                "token {token} is not a pending dispatched call (pending: {:?})",
                st.pending_calls
            );
        };
        let caller = st
            .calls
            .iter()
            .find(|c| c.token == token)
            .map(|c| c.context_id);
        if caller != Some(id) {
            panic!("call {token} was made by context {caller:?}, not by stream {id}");
        }
        st.pending_calls.remove(i);
        let (n_headers, body_len) = response
            .as_ref()
            .map_or((0, 0), |r| (r.headers.len() as i32, r.body.len() as i32));
        st.call_response = response;
        vm.call("proxy_on_http_call_response", id, |e, s| {
            e.on_http_call_response
                .call(s, (id as i32, token as i32, n_headers, body_len, 0))
        });
        vm.store.data_mut().call_response = None;
    }

    /// Ends the stream as Envoy does: `proxy_on_done`, `proxy_on_log`, `proxy_on_delete`.
    pub fn finish(self) {
        let mut vm = self.vm.borrow_mut();
        let id = self.id as i32;
        vm.call("proxy_on_done", self.id, |e, s| e.on_done.call(s, id));
        vm.call("proxy_on_log", self.id, |e, s| e.on_log.call(s, id));
        vm.call("proxy_on_delete", self.id, |e, s| e.on_delete.call(s, id));
        vm.store.data_mut().streams.remove(&self.id);
    }

    /// The request headers as the filter left them.
    pub fn request_header_map(&self) -> Vec<(String, String)> {
        self.with(|s| {
            s.request
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect()
        })
    }

    /// One request header as the filter left it (the first, if repeated).
    pub fn request_header(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.with(|s| {
            s.request
                .headers
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        })
    }

    /// The whole request body as it leaves the filter (forwarded chunks and what is buffered).
    pub fn request_body_bytes(&self) -> Vec<u8> {
        self.with(|s| s.request.body.clone())
    }

    pub fn response_header(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.with(|s| {
            s.response
                .headers
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        })
    }

    /// The response headers as the filter left them.
    pub fn response_header_map(&self) -> Vec<(String, String)> {
        self.with(|s| {
            s.response
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
                .collect()
        })
    }

    pub fn response_body_bytes(&self) -> Vec<u8> {
        self.with(|s| s.response.body.clone())
    }

    /// The local reply the filter sent, if any.
    pub fn local_reply(&self) -> Option<LocalReply> {
        self.with(|s| s.local_replies.first().cloned())
    }

    pub fn local_replies(&self) -> Vec<LocalReply> {
        self.with(|s| s.local_replies.clone())
    }

    /// Whether the filter resumed the request with `proxy_continue_stream`.
    pub fn resumed(&self) -> bool {
        self.with(|s| s.request.resumed > 0)
    }

    /// Whether the filter resumed the response with `proxy_continue_stream`.
    pub fn response_resumed(&self) -> bool {
        self.with(|s| s.response.resumed > 0)
    }

    /// Whether the request is waiting on the filter (the last callback paused it and nothing
    /// resumed or answered it since).
    pub fn paused(&self) -> bool {
        self.with(|s| s.request.paused && !s.finished)
    }

    /// Whether the request headers went upstream (a callback returned Continue, or the filter
    /// resumed the stream) rather than being answered locally.
    pub fn forwarded(&self) -> bool {
        self.with(|s| !s.request.headers_open && !s.request.paused && s.local_replies.is_empty())
    }

    /// Whether the request headers went upstream (even if the body is paused since).
    pub fn request_headers_sent(&self) -> bool {
        self.with(|s| !s.request.headers.is_empty() && !s.request.headers_open)
    }

    pub fn closed(&self) -> bool {
        self.with(|s| s.closed)
    }
}

/// Warns (on stderr) when the .wasm is older than the filter's sources: the tests would run
/// yesterday's filter.
fn warn_if_stale(wasm: &Path) {
    let Ok(built) = std::fs::metadata(wasm).and_then(|m| m.modified()) else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let newest = ["filter/src", "protos/proto/ferry/v1"]
        .iter()
        .filter_map(|d| std::fs::read_dir(root.join(d)).ok())
        .flatten()
        .filter_map(|e| e.ok()?.metadata().ok()?.modified().ok())
        .max();
    if newest.is_some_and(|n| n > built) {
        eprintln!(
            "warning: {} is older than the filter's sources; rebuild it with \
             `cargo build --release -p ferry-filter --target wasm32-wasip1`",
            wasm.display()
        );
    }
}
