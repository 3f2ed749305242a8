//! An in-memory Envoy for one stream: tests set the request (headers, buffered and received
//! body), script callouts, and read what the adapter did (replies, resets, continues, logs).
//! Clones share one state, as the stream and its host share Envoy's filter object. Other
//! crates' tests reach it through the `testing` feature.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use super::{ConfigEnvoy, Envoy};
use crate::abi::{BodyKind, CalloutInit, HeaderKind, LogLevel};
use crate::slot::Scheduler;
use ferry_core::host::HttpCall;

pub type Headers = Vec<(String, String)>;

/// (status, headers, body) of a local reply.
pub type Reply = (u16, Headers, Vec<u8>);

/// (cluster, headers, body, timeout) of a callout started.
pub type Callout = (String, Headers, Vec<u8>, Duration);

/// What Envoy does with a callout id before `callout` returns.
pub type InlineAnswer = Box<dyn Fn(u64)>;

#[derive(Clone, Default)]
pub struct FakeEnvoy(pub Rc<State>);

#[derive(Default)]
pub struct State {
    pub headers: RefCell<HashMap<HeaderKind, Headers>>,
    pub bodies: RefCell<HashMap<BodyKind, Vec<u8>>>,
    pub replies: RefCell<Vec<Reply>>,
    pub resets: Cell<u32>,
    pub continued_decoding: Cell<u32>,
    pub continued_encoding: Cell<u32>,
    /// Each callout started.
    pub callouts: RefCell<Vec<Callout>>,
    /// Set: Envoy refuses to start callouts, with this reason.
    pub refuse_callouts: Cell<Option<CalloutInit>>,
    /// Runs inside `callout` with the new id, as Envoy may answer before the call returns.
    pub answer_inline: RefCell<Option<InlineAnswer>>,
    pub metadata: RefCell<HashMap<String, String>>,
    pub counters: RefCell<HashMap<u32, u64>>,
    pub filter_state: RefCell<HashMap<String, Vec<u8>>>,
    pub logs: RefCell<Vec<(LogLevel, String)>>,
    /// A test's way to make the code inside a hook panic: the header read (or write) of this
    /// name panics.
    pub panic_on_header: RefCell<Option<String>>,
    /// The clock (microseconds since the Unix epoch); unset, the system's.
    pub now_us: Cell<Option<i64>>,
}

impl FakeEnvoy {
    pub fn set_headers(&self, kind: HeaderKind, headers: &[(&str, &str)]) {
        let h = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.0.headers.borrow_mut().insert(kind, h);
    }

    pub fn headers(&self, kind: HeaderKind) -> Headers {
        self.0
            .headers
            .borrow()
            .get(&kind)
            .cloned()
            .unwrap_or_default()
    }

    pub fn set_body(&self, kind: BodyKind, body: &[u8]) {
        self.0.bodies.borrow_mut().insert(kind, body.to_vec());
    }

    pub fn body_of(&self, kind: BodyKind) -> Vec<u8> {
        self.0
            .bodies
            .borrow()
            .get(&kind)
            .cloned()
            .unwrap_or_default()
    }

    /// A callout as Envoy starts one (a stream's or the config's): recorded, or refused.
    fn start_callout(&self, call: &HttpCall<'_>) -> Result<u64, CalloutInit> {
        if let Some(refused) = self.0.refuse_callouts.get() {
            return Err(refused);
        }
        let h = call
            .headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let id = {
            let mut calls = self.0.callouts.borrow_mut();
            calls.push((
                call.cluster.to_string(),
                h,
                call.body.to_vec(),
                call.timeout,
            ));
            calls.len() as u64
        };
        if let Some(answer) = self.0.answer_inline.borrow().as_ref() {
            answer(id);
        }
        Ok(id)
    }

    // A scripted panic is this fake's purpose (the stream's fail-closed tests).
    #[allow(clippy::panic)]
    fn trip(&self, name: &str) {
        if self.0.panic_on_header.borrow().as_deref() == Some(name) {
            panic!("scripted panic on header {name}");
        }
    }
}

impl Envoy for FakeEnvoy {
    fn header(&self, kind: HeaderKind, name: &str) -> Option<Vec<u8>> {
        self.trip(name);
        let h = self.headers(kind);
        h.into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_bytes())
    }

    fn header_names(&self, kind: HeaderKind) -> Vec<Vec<u8>> {
        let h = self.headers(kind);
        h.into_iter().map(|(k, _)| k.into_bytes()).collect()
    }

    fn set_header(&self, kind: HeaderKind, name: &str, value: Option<&str>) {
        self.trip(name);
        let mut all = self.0.headers.borrow_mut();
        let h = all.entry(kind).or_default();
        h.retain(|(k, _)| k != name);
        if let Some(v) = value {
            h.push((name.to_string(), v.to_string()));
        }
    }

    fn body_size(&self, kind: BodyKind) -> usize {
        self.body_of(kind).len()
    }

    fn body(&self, kind: BodyKind) -> Vec<u8> {
        self.body_of(kind)
    }

    fn append_body(&self, kind: BodyKind, data: &[u8]) {
        let mut bodies = self.0.bodies.borrow_mut();
        bodies.entry(kind).or_default().extend_from_slice(data);
    }

    fn drain_body(&self, kind: BodyKind, bytes: usize) {
        let mut bodies = self.0.bodies.borrow_mut();
        let b = bodies.entry(kind).or_default();
        b.drain(..bytes.min(b.len()));
    }

    fn send_response(&self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        let h = headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.0.replies.borrow_mut().push((status, h, body.to_vec()));
    }

    fn reset_stream(&self) {
        self.0.resets.set(self.0.resets.get() + 1);
    }

    fn continue_decoding(&self) {
        let n = &self.0.continued_decoding;
        n.set(n.get() + 1);
    }

    fn continue_encoding(&self) {
        let n = &self.0.continued_encoding;
        n.set(n.get() + 1);
    }

    fn callout(&self, call: &HttpCall<'_>) -> Result<u64, CalloutInit> {
        self.start_callout(call)
    }

    fn scheduler(&self) -> Option<Scheduler> {
        None
    }

    fn route_metadata(&self, key: &str) -> Option<Vec<u8>> {
        let m = self.0.metadata.borrow();
        m.get(key).map(|v| v.clone().into_bytes())
    }

    fn increment_counter(&self, id: u32, delta: u64) {
        *self.0.counters.borrow_mut().entry(id).or_default() += delta;
    }

    fn record_histogram(&self, _id: u32, _value: u64) {}

    fn set_filter_state(&self, key: &str, value: &[u8]) -> bool {
        let mut m = self.0.filter_state.borrow_mut();
        m.insert(key.to_string(), value.to_vec());
        true
    }

    fn log(&self, level: LogLevel, message: &str) {
        self.0.logs.borrow_mut().push((level, message.to_string()));
    }

    fn now_us(&self) -> i64 {
        self.0.now_us.get().unwrap_or_else(super::system_now_us)
    }
}

/// The same fake as the config's Envoy object: its callouts and logs are recorded alike.
impl ConfigEnvoy for FakeEnvoy {
    fn callout(&self, call: &HttpCall<'_>) -> Result<u64, CalloutInit> {
        self.start_callout(call)
    }

    fn log(&self, level: LogLevel, message: &str) {
        self.0.logs.borrow_mut().push((level, message.to_string()));
    }
}
