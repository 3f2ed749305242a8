//! The in-process reader: with `FERRY_NATIVE_READER` set in Envoy's environment, the module
//! answers the filter's reader calls itself instead of sending them to the reader cluster. The
//! reader's own lookup (`ferry_reader::Reader::lookup`: the same batch, the same single Redis
//! round trip, the same errors and limits) runs on a small Tokio runtime inside the Envoy
//! process, and its answer comes back to the stream's worker thread through Envoy's scheduler
//! (`envoy_dynamic_module_callback_http_filter_scheduler_*`). What the dispatched call cost
//! Envoy (an upstream request through its async client, the reader's HTTP, two more context
//! switches) is gone; the reader's flags are the variable's value (`--redis URL ...`, with the
//! reader's `FERRY_REDIS_*` variables too), so the two paths share one definition of each limit.
//!
//! The core does not see the difference: a call is still a token and an answer (status, body),
//! and a failure is the reader's own JSON error, so every policy applies unchanged.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use clap::Parser;
use ferry_reader::{Config, Reader};

use crate::abi::{self, EnvoyPtr};
use crate::host::CallResponse;

/// The variable that turns the in-process reader on; its value is the reader's flags.
pub const VARIABLE: &str = "FERRY_NATIVE_READER";

pub struct Direct {
    runtime: tokio::runtime::Runtime,
    reader: Arc<Reader>,
}

static DIRECT: OnceLock<Option<Direct>> = OnceLock::new();

/// Reads `FERRY_NATIVE_READER` and starts the in-process reader, once per process (at module
/// load, on Envoy's main thread). An unusable value is an error: Envoy then refuses to load
/// the module instead of running without what the operator asked for.
pub fn init() -> Result<Option<&'static Direct>, String> {
    if let Some(d) = DIRECT.get() {
        return Ok(d.as_ref());
    }
    let direct = match std::env::var(VARIABLE) {
        Ok(flags) => Some(start(&flags)?),
        Err(std::env::VarError::NotPresent) => None,
        Err(e) => return Err(format!("{VARIABLE}: {e}")),
    };
    Ok(DIRECT.get_or_init(|| direct).as_ref())
}

/// The in-process reader, if `init` started one.
pub fn get() -> Option<&'static Direct> {
    DIRECT.get().and_then(Option::as_ref)
}

fn start(flags: &str) -> Result<Direct, String> {
    let args = std::iter::once("ferry-native").chain(flags.split_whitespace());
    let config = Config::try_parse_from(args).map_err(|e| format!("{VARIABLE}: {e}"))?;
    // The reader's `--threads` (default: one per core) sizes the runtime here too; always a
    // multi-thread one, whose workers run the lookups (nothing here blocks on the runtime).
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if config.threads > 0 {
        builder.worker_threads(config.threads);
    }
    let runtime = builder
        .thread_name("ferry-reader")
        .enable_all()
        .build()
        .map_err(|e| format!("{VARIABLE}: cannot start its runtime: {e}"))?;
    // The reader's Redis connection belongs to the runtime that will drive it.
    let reader = {
        let _inside = runtime.enter();
        Reader::new(&config).map_err(|e| format!("{VARIABLE}: {e}"))?
    };
    Ok(Direct {
        runtime,
        reader: Arc::new(reader),
    })
}

impl Direct {
    /// Where Redis is, without credentials, for the log line at load.
    pub fn redis(&self) -> &str {
        self.reader.store().addr()
    }

    /// Starts one lookup; its answer is put in `slot` and announced to the stream through the
    /// scheduler as event `token`. No answer within `timeout` is a 504 without the reader's
    /// JSON: the core reports it as the reader's timeout, like a dispatched call's.
    pub fn submit(&'static self, slot: &Slot, token: u32, body: Vec<u8>, timeout: Duration) {
        let slot = slot.clone();
        self.runtime.spawn(async move {
            let answer = match tokio::time::timeout(timeout, self.reader.lookup(&body[..])).await {
                Ok(Ok(vectors)) => CallResponse {
                    status: Some(200),
                    body: vectors.to_vec(),
                },
                Ok(Err(e)) => error(e),
                Err(_) => CallResponse {
                    status: Some(504),
                    body: Vec::new(),
                },
            };
            slot.answer(token, answer);
        });
    }
}

fn error(e: ferry_reader::ReaderError) -> CallResponse {
    CallResponse {
        status: Some(e.status().as_u16()),
        body: e.body().to_string().into_bytes(),
    }
}

/// Envoy's scheduler of one stream, deleted when the stream and every lookup it started are
/// done with it (a lookup may finish after its stream: committing then is a no-op for Envoy,
/// which holds only a weak reference to the filter).
struct Scheduler(*mut c_void);

// SAFETY: Envoy's scheduler is made to be committed to from any thread, and deleting it only
// drops a weak reference and the dispatcher's address.
unsafe impl Send for Scheduler {}
unsafe impl Sync for Scheduler {}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // SAFETY: made by scheduler_new, deleted once (this is its only owner).
        unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_delete(self.0) }
    }
}

/// Where a stream's in-process lookups leave their answers until Envoy runs the stream's
/// `on_scheduled` hook on its worker thread.
#[derive(Clone, Default)]
pub struct Slot(Arc<SlotInner>);

#[derive(Default)]
struct SlotInner {
    scheduler: OnceLock<Option<Scheduler>>,
    answers: Mutex<Vec<(u32, CallResponse)>>,
}

impl Slot {
    /// Makes the stream's scheduler on first use (on the worker thread, with the live filter).
    /// False if Envoy gave none.
    ///
    /// # Safety
    /// `envoy` is the live filter of the stream this slot belongs to, on its worker thread.
    pub unsafe fn ready(&self, envoy: EnvoyPtr) -> bool {
        self.0
            .scheduler
            .get_or_init(|| {
                // SAFETY: a live filter pointer, on its worker thread.
                let p =
                    unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_new(envoy) };
                (!p.is_null()).then_some(Scheduler(p))
            })
            .is_some()
    }

    fn answer(&self, token: u32, response: CallResponse) {
        if let Ok(mut answers) = self.0.answers.lock() {
            answers.push((token, response));
        }
        if let Some(Some(s)) = self.0.scheduler.get() {
            // SAFETY: the scheduler lives as long as this slot.
            unsafe {
                abi::envoy_dynamic_module_callback_http_filter_scheduler_commit(
                    s.0,
                    u64::from(token),
                )
            }
        }
    }

    /// The answer of lookup `token`, once (on the worker thread, in `on_scheduled`).
    pub fn take(&self, token: u32) -> Option<CallResponse> {
        let mut answers = self.0.answers.lock().ok()?;
        let at = answers.iter().position(|(t, _)| *t == token)?;
        Some(answers.swap_remove(at).1)
    }
}
