//! `snapshot_url` in the native module: the filter config pulls its snapshot from `ferry serve`,
//! as the Wasm filter's root context does. What to ask for and what an answer may replace (the
//! signature under `snapshot_keys`, the held sequence, `snapshot_max_bytes`, the ETag) are
//! ferry-core's `snapshot_pull::Puller`, the Wasm filter's own; this file only moves its GET
//! and the answers through Envoy's config-level callout on the main thread, and hands what it
//! loads to the `FilterConfig` to swap in. Until the first snapshot arrives every request is
//! answered 503 `snapshot_not_loaded`, as in the Wasm build.
//!
//! The held sequence is also kept in the process-wide store ([`crate::shared`], keyed by URL),
//! so a new filter config for the same URL (an xDS update, a listener made again) refuses what
//! the previous one would have: Envoy has no VM to reload here, but it makes configs anew.

use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use ferry_core::error::FerryError;
use ferry_core::host::HttpCall;
use ferry_core::plugin_config::{Overrides, Pull};
use ferry_core::snapshot_pull::{Answer, HeldStore, Pulled, Puller};

use crate::abi::LogLevel;
use crate::envoy::ConfigEnvoy;
use crate::ticker::Ticker;

/// The pull of one filter config.
pub struct Pulling {
    /// The GET's state; used on the main thread only (the lock is for the type system).
    puller: Mutex<Puller>,
    /// For the 503 while nothing is loaded, read on worker threads without the puller's lock.
    url: String,
    poll: Duration,
    /// The pull's clock, set by the hook that made the config.
    ticker: OnceLock<Ticker>,
}

impl Pulling {
    pub fn new(pull: Pull) -> Pulling {
        Pulling {
            url: pull.url.clone(),
            poll: pull.poll,
            puller: Mutex::new(Puller::new(pull).with_store(Box::new(SharedHeld))),
            ticker: OnceLock::new(),
        }
    }

    pub fn poll(&self) -> Duration {
        self.poll
    }

    /// The log line when the config is made.
    pub fn describe(&self) -> String {
        let puller = self.puller();
        let pull = puller.pull();
        format!(
            "ferry: pulling the snapshot from {} through cluster '{}' every {} ms",
            pull.url,
            pull.cluster,
            pull.poll.as_millis()
        )
    }

    /// Keeps the pull's clock for the config's life (a second one is dropped, i.e. stopped).
    pub fn keep_ticking(&self, ticker: Ticker) {
        let _ = self.ticker.set(ticker);
    }

    /// What a request gets while no snapshot has arrived.
    pub fn not_loaded(&self) -> FerryError {
        FerryError::SnapshotNotLoaded {
            url: self.url.clone(),
            poll_ms: u64::try_from(self.poll.as_millis()).unwrap_or(u64::MAX),
        }
    }

    fn puller(&self) -> MutexGuard<'_, Puller> {
        self.puller.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Pulling {
    /// A tick of the pull's clock (main thread): sends the GET unless one is on its way.
    pub fn tick(&self, envoy: &impl ConfigEnvoy) {
        let mut puller = self.puller();
        let Some(headers) = puller.next_request() else {
            return;
        };
        let headers: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let pull = puller.pull();
        let call = HttpCall {
            cluster: &pull.cluster,
            headers,
            body: b"",
            timeout: pull.timeout,
        };
        match envoy.callout(&call) {
            Ok(_) => puller.sent(),
            Err(refused) => {
                if let Some(m) = puller.not_sent(refused.reason()) {
                    envoy.log(LogLevel::Warn, &format!("ferry: {m}"));
                }
            }
        }
    }

    /// The GET's answer (main thread); `read_body(n)` copies its first `n` bytes, called only
    /// when the puller found the size acceptable. A snapshot it loads goes to `swap`, with the
    /// JSON form's overrides that every worker applies when it parses it again.
    pub fn answered(
        &self,
        envoy: &impl ConfigEnvoy,
        answer: &Answer,
        read_body: impl FnOnce(usize) -> Vec<u8>,
        swap: impl FnOnce(Vec<u8>, Overrides),
    ) {
        let mut puller = self.puller();
        match puller.answered(answer, read_body) {
            Pulled::Loaded { config, raw } => {
                let line = format!(
                    "ferry: snapshot {} of project '{}' with {} route(s) from {}",
                    config.version,
                    config.project,
                    config.routes.len(),
                    self.url
                );
                envoy.log(LogLevel::Info, &line);
                swap(raw, puller.pull().overrides.clone());
            }
            Pulled::Unchanged | Pulled::Kept { log: None } => {}
            Pulled::Kept { log: Some(m) } => envoy.log(LogLevel::Warn, &format!("ferry: {m}")),
        }
    }
}

/// The held sequence in the process-wide store, which outlives any one filter config.
#[derive(Debug)]
struct SharedHeld;

impl HeldStore for SharedHeld {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        crate::shared_data::store().get(key)
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        crate::shared_data::store().set(key, value, cas)
    }
}

#[cfg(test)]
#[path = "pull_tests.rs"]
mod tests;
