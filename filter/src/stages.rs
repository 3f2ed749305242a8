//! The Wasm filter's per-stage timers (issue #34), the counterpart of the native module's
//! (`native/src/stages.rs`): where a request's time goes inside Envoy's V8, stage by stage. Off
//! unless the VM's environment holds `FERRY_WASM_STAGES` (Envoy: the plugin's
//! `vm_config.environment_variables`); off, a stage costs a thread-local read. On, each worker's
//! VM sums its stages (`ferry_core::stage_clock::Totals`), and its root context logs them at
//! warn level on each tick when they changed (every 100 ms, or the snapshot pull's period when
//! the plugin pulls): one line, `ferry-stages VM LINE|LINE|...`, each `LINE` as the native
//! module writes its file, which `bench/wasm_stages.py` sums over the VMs for
//! `bench/miss_path.sh`.
//!
//! The clock is the host's (`proxy_get_current_time_nanoseconds`: Envoy's system clock, read
//! at each call), so each mark is one hostcall, and a stage includes any time the worker was
//! not running.

use std::cell::{Cell, RefCell};
use std::time::{Duration, UNIX_EPOCH};

use ferry_core::host::Stage as CoreStage;
use ferry_core::stage_clock::Totals;
use proxy_wasm::hostcalls;

/// The environment variable that turns the timers on.
pub const VARIABLE: &str = "FERRY_WASM_STAGES";

/// How often the totals are logged when the plugin does not pull its snapshot.
pub const EVERY: Duration = Duration::from_millis(100);

/// The timed stages, in the order a request meets them.
#[derive(Debug, Clone, Copy)]
pub enum Stage {
    /// The request-headers hook.
    Headers,
    /// From the last body hook's start to the entities parsed (the body copied in included).
    Parse,
    /// Parsed → the reader call dispatched (near cache, the reader request built).
    LookupRequest,
    /// The reader call dispatched → its answer's hook running (Envoy's async client, the
    /// reader and the way back).
    Call,
    /// The answer checked and decoded into vectors.
    Decode,
    /// Features chosen per entity.
    Enrich,
    /// The enriched body written into the request.
    Rewrite,
    /// `proxy_continue_stream` (the request sent on, as far as it runs inline).
    Resume,
}

const NAMES: [&str; 8] = [
    "headers",
    "parse",
    "lookup_request",
    "call",
    "decode",
    "enrich",
    "rewrite",
    "resume",
];

thread_local! {
    static ON: Cell<Option<bool>> = const { Cell::new(None) };
    static TOTALS: RefCell<Totals> = RefCell::new(Totals::new(NAMES.len()));
    /// This VM's name in the log lines, and the intervals counted at the last line.
    static LOGGED: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Whether the timers are on (the environment is read once per VM).
pub fn enabled() -> bool {
    ON.with(|on| match on.get() {
        Some(b) => b,
        None => {
            let b = std::env::var_os(VARIABLE).is_some();
            on.set(Some(b));
            b
        }
    })
}

fn clock_ns() -> u64 {
    hostcalls::get_current_time()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The time now when the timers are on.
pub fn now() -> Option<u64> {
    enabled().then(clock_ns)
}

/// One stream's clock: when its last stage ended (or its current hook started).
#[derive(Default)]
pub struct Marks(Cell<Option<u64>>);

impl Marks {
    /// A hook starts: the next stage counts from now.
    pub fn start(&self) {
        self.0.set(now());
    }

    /// `stage` ended now: it is timed from the last mark, and the next starts here.
    pub fn done(&self, stage: Stage) {
        let Some(from) = self.0.get() else {
            return;
        };
        let to = clock_ns();
        TOTALS.with(|t| t.borrow_mut().add(stage as usize, to.saturating_sub(from)));
        self.0.set(Some(to));
    }

    /// The core's steps, as this build's stages.
    pub fn core_done(&self, stage: CoreStage) {
        self.done(match stage {
            CoreStage::Parsed => Stage::Parse,
            CoreStage::Decoded => Stage::Decode,
            CoreStage::Enriched => Stage::Enrich,
            CoreStage::Rewritten => Stage::Rewrite,
        });
    }
}

/// Times `f` as `stage` (when the timers are on).
pub fn time<T>(stage: Stage, f: impl FnOnce() -> T) -> T {
    let marks = Marks::default();
    marks.start();
    let out = f();
    marks.done(stage);
    out
}

/// The line to log on a tick: `None` when the timers are off or nothing changed.
pub fn tick_line() -> Option<String> {
    if !enabled() {
        return None;
    }
    TOTALS.with(|t| {
        let t = t.borrow();
        let (mut vm, logged) = LOGGED.with(Cell::get);
        let now = t.intervals();
        if now == logged {
            return None;
        }
        if vm == 0 {
            vm = clock_ns(); // unique enough among one Envoy's VMs
        }
        LOGGED.with(|l| l.set((vm, now)));
        let lines: Vec<String> = t.lines(&NAMES).collect();
        Some(format!("ferry-stages {vm} {}", lines.join("|")))
    })
}
