//! One HTTP stream of the native build: the core's `HttpFilter` over `EnvoyHost`, driven by
//! Envoy's hooks (`hooks` only turns pointers into a `Stream`). Two rules live here:
//! - re-entrancy: Envoy may deliver a callout's answer while a hook of the same stream still
//!   runs (inside the call that sent it); that answer waits and is handled before the hook
//!   returns, and resumes asked for meanwhile become the hook's return value;
//! - no panic leaves a hook: one fails its stream closed instead (a 500 local reply while the
//!   request is processed, a reset once the response is), and the stream then does nothing.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ferry_core::error::FerryError;
use ferry_core::request::{Action, HttpFilter};

use crate::abi::{BodyStatus, HeadersStatus, LogLevel, TrailersStatus};
use crate::config::{FilterConfig, ForStream};
use crate::envoy::Envoy;
use crate::host::EnvoyHost;
use crate::reentry::Hook;
use crate::slot::{CallResponse, Slot};
use crate::stages::Stage;

type Filter<E> = HttpFilter<EnvoyHost<E>>;

pub struct Stream<E: Envoy + Clone> {
    /// Envoy's side of the stream, kept here too to fail it when the filter cannot.
    envoy: E,
    /// `None` once the stream failed (or when it could not be made).
    filter: RefCell<Option<Filter<E>>>,
    pending: RefCell<Option<(u32, CallResponse)>>,
    /// The answers of its in-process lookups (the host holds the same slot).
    direct: Slot,
    /// Envoy is processing the response: failing now means a reset, no longer a reply.
    responding: Cell<bool>,
    /// Made without a filter: its first hook answers with this reply.
    refusal: RefCell<Option<Reply>>,
}

/// A local reply the stream answers with instead of running the filter.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, &'static str)>,
    body: Vec<u8>,
}

impl Reply {
    /// The filter failed (a panic): a 500, the request closed.
    fn internal() -> Reply {
        Reply {
            status: 500,
            headers: vec![
                ("content-type", "application/json"),
                ("x-ferry-error", "internal"),
            ],
            body: br#"{"error":"internal","message":"the filter failed on this request"}"#.to_vec(),
        }
    }

    /// The core's error, as the Wasm build answers it.
    fn of(e: &FerryError) -> Reply {
        Reply {
            status: e.status(),
            headers: e.reply_headers(),
            body: e.body(""),
        }
    }
}

/// The core's verdict as each hook's status.
macro_rules! status_of_action {
    ($($status:ident: $continue:ident, $pause:ident;)*) => {$(
        impl From<Action> for $status {
            fn from(a: Action) -> Self {
                match a {
                    Action::Continue => $status::$continue,
                    Action::Pause => $status::$pause,
                }
            }
        }
    )*};
}

status_of_action! {
    HeadersStatus: Continue, StopIteration;
    // Paused bodies are buffered: the core reads the whole body at its end.
    BodyStatus: Continue, StopIterationAndBuffer;
    TrailersStatus: Continue, StopIteration;
}

impl<E: Envoy + Clone> Stream<E> {
    /// A stream on this thread's copy of `config`; one that failed to be made fails its
    /// request closed, and while a pulled snapshot has not arrived every request is answered
    /// 503 `snapshot_not_loaded`.
    pub fn new(envoy: E, config: &FilterConfig) -> Self {
        let direct = Slot::default();
        let made = catch_unwind(AssertUnwindSafe(|| match config.for_this_thread() {
            ForStream::Ready(snapshot, metrics) => {
                let host = EnvoyHost::new(envoy.clone(), direct.clone());
                Ok(HttpFilter::new(host, snapshot, metrics))
            }
            ForStream::NotLoaded(e) => Err(Reply::of(&e)),
        }));
        let made = made.map_err(|p| {
            log_panic(&envoy, &*p);
            Reply::internal()
        });
        Self::of(envoy, direct, made.and_then(|m| m))
    }

    fn of(envoy: E, direct: Slot, made: Result<Filter<E>, Reply>) -> Self {
        let (filter, refusal) = match made {
            Ok(f) => (Some(f), None),
            Err(reply) => (None, Some(reply)),
        };
        Stream {
            refusal: RefCell::new(refusal),
            envoy,
            filter: RefCell::new(filter),
            pending: RefCell::new(None),
            direct,
            responding: Cell::new(false),
        }
    }

    pub fn on_request_headers(&self, end_of_stream: bool) -> HeadersStatus {
        let action = self.run_hook(Hook::Headers, |f| {
            #[cfg(feature = "fault-injection")]
            injected_fault(f.host(), "request_headers");
            f.host().marks.start();
            let action = f.on_request_headers(end_of_stream);
            f.host().marks.done(Stage::Headers);
            action
        });
        action.into()
    }

    pub fn on_request_body(&self, end_of_stream: bool) -> BodyStatus {
        let action = self.run_hook(Hook::RequestBody, |f| {
            f.host().marks.start();
            let size = f.host().request_body_size();
            f.on_request_body(size, end_of_stream)
        });
        action.into()
    }

    pub fn on_request_trailers(&self) -> TrailersStatus {
        self.run_hook(Hook::Headers, |f| f.on_request_trailers())
            .into()
    }

    pub fn on_response_headers(&self) -> HeadersStatus {
        self.responding.set(true);
        self.run_hook(Hook::Headers, |f| {
            #[cfg(feature = "fault-injection")]
            injected_fault(f.host(), "response_headers");
            f.on_response_headers()
        })
        .into()
    }

    /// A callout finished (`response`: its answer, empty when it failed).
    pub fn on_callout_done(&self, callout_id: u64, response: CallResponse) {
        if let Ok(token) = u32::try_from(callout_id) {
            if let Ok(filter) = self.filter.try_borrow() {
                if let Some(f) = filter.as_ref() {
                    f.host().marks.done(Stage::Call);
                }
            }
            self.guarded((), || self.hand_over(token, response));
        }
    }

    /// An in-process lookup (`direct`) finished: Envoy runs this on the stream's worker thread.
    pub fn on_scheduled(&self, event_id: u64) {
        let Ok(token) = u32::try_from(event_id) else {
            return;
        };
        if let Some(response) = self.direct.take(token) {
            self.guarded((), || self.hand_over(token, response));
        }
    }

    /// Runs one request/response hook: resumes the core asks for inside it become the hook's
    /// return value (Continue), and a callout answer that arrived meanwhile is handled before
    /// returning. A busy stream (Envoy re-entered a hook) or a failed one continues.
    fn run_hook(&self, hook: Hook, f: impl FnOnce(&mut Filter<E>) -> Action) -> Action {
        self.guarded(Action::Pause, || {
            let Ok(mut slot) = self.filter.try_borrow_mut() else {
                return Action::Continue;
            };
            let Some(filter) = slot.as_mut() else {
                drop(slot);
                return self.refuse_once();
            };
            filter.host().reentry.enter(hook);
            let mut action = f(filter);
            // Taken before delivering: a delivery may start a call whose answer comes inline.
            let mut next = self.pending.borrow_mut().take();
            while let Some((token, response)) = next {
                deliver(filter, token, response);
                next = self.pending.borrow_mut().take();
            }
            if filter.host().reentry.leave() {
                action = Action::Continue;
            }
            action
        })
    }

    /// An answer for the stream: delivered now, or, inside the hook that sent the call, when
    /// that hook ends.
    fn hand_over(&self, token: u32, response: CallResponse) {
        match self.filter.try_borrow_mut() {
            Ok(mut slot) => {
                if let Some(filter) = slot.as_mut() {
                    deliver(filter, token, response);
                }
            }
            Err(_) => *self.pending.borrow_mut() = Some((token, response)),
        }
    }

    /// Runs `f`; if it panics, fails the stream closed and returns `failed` (what the hook
    /// then tells Envoy: a stopped stream, which the local reply or the reset ends).
    fn guarded<R>(&self, failed: R, f: impl FnOnce() -> R) -> R {
        match catch_unwind(AssertUnwindSafe(f)) {
            Ok(r) => r,
            Err(payload) => {
                log_panic(&self.envoy, &*payload);
                self.fail();
                failed
            }
        }
    }

    /// A stream made without a filter answers its first hook with its reply (later hooks let
    /// Envoy go on with it).
    fn refuse_once(&self) -> Action {
        let Some(reply) = self.refusal.borrow_mut().take() else {
            return Action::Continue;
        };
        self.answer(&reply);
        Action::Pause
    }

    fn fail(&self) {
        // The filter may be half way through a change: it is not used again.
        if let Ok(mut slot) = self.filter.try_borrow_mut() {
            slot.take();
        }
        self.answer(&Reply::internal());
    }

    /// A local reply while the request is processed, a reset once the response is.
    fn answer(&self, reply: &Reply) {
        if self.responding.get() {
            self.envoy.reset_stream();
        } else {
            self.envoy
                .send_response(reply.status, &reply.headers, &reply.body);
        }
    }
}

fn deliver<E: Envoy>(filter: &mut Filter<E>, token: u32, response: CallResponse) {
    let has_headers = response.status.is_some();
    let size = response.body.len();
    filter.host().marks.start();
    filter.host().begin_delivery(response);
    filter.on_call_response(token, usize::from(has_headers), size);
    filter.host().end_delivery();
}

/// Logs a caught panic with its message (a `&str` or `String` payload, as `panic!` makes).
pub fn log_panic(envoy: &impl Envoy, payload: &(dyn Any + Send)) {
    envoy.log(LogLevel::Error, &panic_message(payload));
}

pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    format!("ferry: a panic in the filter, failed closed: {what}")
}

/// Test builds only (`--features fault-injection`): the hook named in the request's
/// `x-native-fault` panics (the header is read through the host, as the core reads its own).
#[cfg(feature = "fault-injection")]
#[allow(clippy::panic)]
fn injected_fault(host: &impl ferry_core::host::Host, hook: &str) {
    if host.request_header("x-native-fault").as_deref() == Some(hook) {
        panic!("x-native-fault: {hook}");
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
