//! The in-process reader: with `FERRY_NATIVE_READER` set in Envoy's environment, the module
//! answers the filter's reader calls itself instead of sending them to the reader cluster. The
//! reader's own lookup (`ferry_reader::Reader::lookup`: the same batch, the same single Redis
//! round trip, the same errors and limits) runs on a Tokio runtime inside the Envoy process
//! (by default one current-thread runtime on a thread of its own, see `start`), and its answer
//! comes back to the stream's worker thread through Envoy's scheduler
//! (`envoy_dynamic_module_callback_http_filter_scheduler_*`). What the dispatched call cost
//! Envoy (an upstream request through its async client, the reader's HTTP, two more context
//! switches) is gone; the reader's flags are the variable's value (`--redis URL ...`, split as
//! shell words by `reader_flags`, with the reader's `FERRY_REDIS_*` variables too), so the two
//! paths share one definition of each limit.
//!
//! The core does not see the difference: a call is still a token and an answer (status, body),
//! and a failure is the reader's own JSON error, so every policy applies unchanged.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ferry_reader::service::LookupStep;
use ferry_reader::Reader;

use crate::reader_flags::{self, VARIABLE};
use crate::slot::{CallResponse, Slot};
use crate::stages::{self, Stage};

pub struct Direct {
    /// Where lookups are spawned; the runtime itself lives on its own thread(s).
    runtime: tokio::runtime::Handle,
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
    let config = reader_flags::parse(flags)?;
    let cannot = |e: std::io::Error| format!("{VARIABLE}: cannot start its runtime: {e}");
    // `--threads` 0 (the default) or 1: one current-thread runtime on a thread of its own, so a
    // lookup's task and redis-rs's connection task run on the same thread, with no hand-off
    // between runtime workers (measured, issue #34: bench/README.md); more: a multi-thread
    // runtime with that many workers.
    let runtime = if config.threads > 1 {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.threads)
            .thread_name("ferry-reader")
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .map_err(cannot)?;
    // The reader's Redis connection belongs to the runtime that will drive it.
    let reader = {
        let _inside = runtime.enter();
        Reader::new(&config).map_err(|e| format!("{VARIABLE}: {e}"))?
    };
    let handle = runtime.handle().clone();
    // The runtime runs for the life of the process (as Envoy keeps the module loaded): a
    // current-thread runtime only runs its tasks inside `block_on`, a multi-thread one is
    // parked here the same way.
    std::thread::Builder::new()
        .name("ferry-reader".into())
        .spawn(move || runtime.block_on(std::future::pending::<()>()))
        .map_err(cannot)?;
    Ok(Direct {
        runtime: handle,
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
        let handed = stages::now();
        self.runtime.spawn(async move {
            let mut mark = stages::since(Stage::HandOff, handed);
            let lookup = self.reader.lookup_marked(&body[..], |step| {
                mark = stages::since(
                    match step {
                        LookupStep::Decoded => Stage::ReaderDecode,
                        LookupStep::Fetched => Stage::Redis,
                    },
                    mark,
                );
            });
            let answer = match tokio::time::timeout(timeout, lookup).await {
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
            stages::since(Stage::ReaderEncode, mark);
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
