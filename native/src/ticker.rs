//! The pull's clock. Envoy 1.40 gives a filter config no timer, only a scheduler whose events
//! run `on_http_filter_config_scheduled` on the main thread: a thread of the module commits one
//! event at once (the first pull) and then one per poll period. Dropping the `Ticker` (the
//! config is destroyed) ends the thread and waits for it, so no event is committed after, and
//! deletes the scheduler on the thread that made it.

use std::ffi::c_void;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::abi::{self, EnvoyPtr};

/// Envoy's scheduler of one filter config.
struct ConfigScheduler(*mut c_void);

// SAFETY: Envoy's config scheduler is made to be committed to from any thread (it posts to the
// main thread's dispatcher, holding the config weakly).
unsafe impl Send for ConfigScheduler {}

impl ConfigScheduler {
    fn commit(&self) {
        // SAFETY: the scheduler lives until this value is dropped.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_config_scheduler_commit(self.0, 0) }
    }
}

impl Drop for ConfigScheduler {
    fn drop(&mut self) {
        // SAFETY: made by scheduler_new, deleted once (this is its only owner).
        unsafe { abi::envoy_dynamic_module_callback_http_filter_config_scheduler_delete(self.0) }
    }
}

pub struct Ticker {
    /// Dropped to stop the thread (it waits on the other end between ticks).
    stop: Option<Sender<()>>,
    /// Hands the scheduler back when it ends.
    thread: Option<JoinHandle<ConfigScheduler>>,
}

impl Ticker {
    /// Ticks now and then every `period`.
    ///
    /// # Safety
    /// `config` is the config pointer Envoy passed to the running config hook (main thread).
    pub unsafe fn start(config: EnvoyPtr, period: Duration) -> Result<Ticker, String> {
        // SAFETY: per the function's contract.
        let p =
            unsafe { abi::envoy_dynamic_module_callback_http_filter_config_scheduler_new(config) };
        if p.is_null() {
            return Err("Envoy gave no scheduler for the snapshot pull".into());
        }
        let scheduler = ConfigScheduler(p);
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("ferry-pull".into())
            .spawn(move || {
                scheduler.commit();
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(period) {
                    scheduler.commit();
                }
                scheduler
            })
            .map_err(|e| format!("cannot start the snapshot pull's clock: {e}"))?;
        Ok(Ticker {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // The scheduler comes back and is deleted here; a panicked thread took it along.
            drop(thread.join());
        }
    }
}
