//! One request of the `config_space` target through `HttpFilter` on `FakeHost`, driven as Envoy
//! drives a stream (`schedule`); `check` judges what it did.

use std::collections::HashMap;
use std::rc::Rc;

use ferry_core::config::Config;
use ferry_core::host::testing::FakeHost;
use ferry_core::metrics::Metrics;
use ferry_core::request::{Action, HttpFilter};

use crate::upstream::{Next, Upstream};

use super::pick::Pick;
use super::reader::Plan;
use super::request::Request;
use super::schedule::{self, Stream};

/// The token `FakeHost::dispatch` hands out.
const TOKEN: u32 = 7;

pub(crate) struct Run {
    pub(super) config: Rc<Config>,
    pub(super) req: Request,
    pub(super) plan: Plan,
    pub(super) filter: HttpFilter<FakeHost>,
    pub(super) up: Upstream,
    pub(super) paused: bool,
    pub(super) answered_locally: bool,
    pub(super) call_done: bool,
}

/// What one input did, for the seed tools and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The drawn snapshot was refused by the filter's validation (the reason).
    Refused(String),
    /// A local reply: its status and `x-ferry-error`.
    Replied(u16, String),
    Forwarded,
    /// Reaches a known open bug and `FERRY_FUZZ_SKIP_KNOWN=1` (see `known_open`).
    Skipped,
    /// Still waiting for a reader call that never comes back.
    Held,
}

/// One request through a fresh filter over `shared` (Envoy's shared data), driven and checked.
pub(super) fn one_request(
    config: &Rc<Config>,
    req: Request,
    plan: Plan,
    pick: &mut Pick<'_>,
    shared: HashMap<String, (Vec<u8>, u32)>,
) -> Run {
    let host = FakeHost {
        now_us: crate::NOW_US,
        ..Default::default()
    };
    *host.headers.borrow_mut() = req.headers.clone();
    *host.trailers.borrow_mut() = req.trailers.clone();
    *host.shared.borrow_mut() = shared;
    let metrics = Rc::new(Metrics::define(|_, _| Some(1)));
    let filter = HttpFilter::new(host, Some(config.clone()), metrics);
    let mut run = Run {
        config: config.clone(),
        req,
        plan,
        filter,
        up: Upstream::default(),
        paused: false,
        answered_locally: false,
        call_done: false,
    };
    if run.plan == Plan::DispatchFails {
        *run.host().dispatch_error.borrow_mut() = Some("unknown cluster".into());
    }
    let (req, plan, config) = (run.req.clone(), run.plan.clone(), run.config.clone());
    schedule::drive(&mut run, &req, &plan, &config, pick);
    run.check();
    run
}

impl Run {
    pub(super) fn host(&self) -> &FakeHost {
        self.filter.host()
    }

    pub(super) fn outcome(&self) -> Outcome {
        if let Some((status, headers, _)) = &*self.host().sent.borrow() {
            let code = headers
                .iter()
                .find(|(n, _)| n == "x-ferry-error")
                .map_or(String::new(), |(_, v)| v.clone());
            return Outcome::Replied(*status, code);
        }
        if self.up.released {
            Outcome::Forwarded
        } else {
            Outcome::Held
        }
    }

    /// After a stream callback returned `action`.
    pub(super) fn after_callback(&mut self, what: &str, action: Action) {
        match self.up.after_callback(self.filter.host(), what, action) {
            Next::AnsweredLocally => self.answered_locally = true,
            Next::Released => self.paused = false,
            Next::Paused => self.paused = true,
        }
    }
}

impl Stream for Run {
    fn headers(&mut self, end_of_stream: bool) {
        let action = self.filter.on_request_headers(end_of_stream);
        self.after_callback("on_request_headers", action);
    }

    fn data(&mut self, chunk: &[u8], end_of_stream: bool) {
        self.host().body.borrow_mut().extend_from_slice(chunk);
        let size = self.host().body.borrow().len();
        let action = self.filter.on_request_body(size, end_of_stream);
        self.after_callback("on_request_body", action);
    }

    fn trailers(&mut self) {
        let action = self.filter.on_request_trailers();
        self.after_callback("on_request_trailers", action);
    }

    fn answered(&self) -> bool {
        self.answered_locally
    }

    fn call_out(&self) -> Option<Vec<u8>> {
        let dispatched = self.host().dispatched.borrow();
        let call = dispatched.first().filter(|_| !self.call_done)?;
        Some(call.2.clone())
    }

    fn deliver(&mut self, answer: Option<(Option<u16>, Vec<u8>)>) {
        self.call_done = true;
        let Some((status, body)) = answer else {
            return;
        };
        let headers = if status.is_some() { 2 } else { 0 };
        let len = body.len();
        *self.host().call_status.borrow_mut() = status;
        *self.host().call_body.borrow_mut() = body;
        self.filter.on_call_response(TOKEN, headers, len);
        match self.up.after_call(self.filter.host(), self.paused) {
            Some(Next::AnsweredLocally) => self.answered_locally = true,
            Some(_) => self.paused = false,
            None => {}
        }
    }

    fn forwarded(&self) -> bool {
        self.up.released
    }

    fn response_headers(&mut self) {
        *self.host().response_headers.borrow_mut() = vec![(":status".into(), "200".into())];
        self.filter.on_response_headers();
    }
}
