//! A reader answer on its way to a stream: `CallResponse`, and the `Slot` where in-process
//! lookups (`direct`) leave theirs until Envoy runs the stream's `on_scheduled` hook on its
//! worker thread. Both the host (which starts lookups) and the lookups use it, so it is the
//! one module they share.

use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use crate::abi;
use crate::stages::{self, Stage};

/// The reader's answer being delivered to the filter.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CallResponse {
    pub status: Option<u16>,
    pub body: Vec<u8>,
}

/// Envoy's scheduler of one stream, deleted when the stream and every lookup it started are
/// done with it (a lookup may finish after its stream: committing then is a no-op for Envoy,
/// which holds only a weak reference to the filter).
pub struct Scheduler(*mut c_void);

// SAFETY: Envoy's scheduler is made to be committed to from any thread, and deleting it only
// drops a weak reference and the dispatcher's address.
unsafe impl Send for Scheduler {}
unsafe impl Sync for Scheduler {}

impl Scheduler {
    /// A scheduler for the stream `envoy`; `None` if Envoy gave none.
    ///
    /// # Safety
    /// `envoy` is a live filter pointer, on its worker thread.
    pub unsafe fn new(envoy: abi::EnvoyPtr) -> Option<Self> {
        // SAFETY: per the function's contract.
        let p = unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_new(envoy) };
        (!p.is_null()).then_some(Scheduler(p))
    }

    fn commit(&self, event: u64) {
        // SAFETY: the scheduler lives until this value is dropped.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_commit(self.0, event) }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // SAFETY: made by scheduler_new, deleted once (this is its only owner).
        unsafe { abi::envoy_dynamic_module_callback_http_filter_scheduler_delete(self.0) }
    }
}

/// Where a stream's in-process lookups leave their answers.
#[derive(Clone, Default)]
pub struct Slot(Arc<SlotInner>);

#[derive(Default)]
struct SlotInner {
    scheduler: OnceLock<Option<Scheduler>>,
    /// Each with when it was left (when the stage timers are on).
    answers: Mutex<Vec<(u32, CallResponse, Option<Instant>)>>,
}

impl Slot {
    /// Makes the stream's scheduler on first use (on the worker thread, with the live filter).
    /// False if Envoy gave none.
    pub fn ready(&self, make: impl FnOnce() -> Option<Scheduler>) -> bool {
        self.0.scheduler.get_or_init(make).is_some()
    }

    /// Leaves lookup `token`'s answer and tells the stream (from any thread).
    pub fn answer(&self, token: u32, response: CallResponse) {
        if let Ok(mut answers) = self.0.answers.lock() {
            answers.push((token, response, stages::now()));
        }
        if let Some(Some(s)) = self.0.scheduler.get() {
            s.commit(u64::from(token));
        }
    }

    /// The answer of lookup `token`, once (on the worker thread, in `on_scheduled`).
    pub fn take(&self, token: u32) -> Option<CallResponse> {
        let mut answers = self.0.answers.lock().ok()?;
        let at = answers.iter().position(|(t, _, _)| *t == token)?;
        let (_, response, left) = answers.swap_remove(at);
        stages::since(Stage::HandBack, left);
        Some(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_taken_once_by_its_token() {
        let slot = Slot::default();
        assert!(!slot.ready(|| None), "no scheduler from Envoy");
        let from_lookup = slot.clone();
        let answer = CallResponse {
            status: Some(200),
            body: b"v".to_vec(),
        };
        std::thread::spawn(move || from_lookup.answer(7, answer))
            .join()
            .unwrap_or_else(|_| unreachable!());
        assert_eq!(slot.take(8), None);
        assert_eq!(slot.take(7).map(|r| r.body), Some(b"v".to_vec()));
        assert_eq!(slot.take(7), None);
    }
}
