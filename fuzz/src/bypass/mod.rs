//! The `bypass` target: the whole request state machine (`HttpFilter` over the in-memory
//! `FakeHost`) driven as Envoy drives it, through headers, data frames, trailers and the
//! reader's answer, then judged on what reached the model (issue #9: the model only ever sees
//! features from the store).
//!
//! The invariant: either the request goes upstream and every Ferry-owned place holds exactly
//! what Ferry wrote from the reader's vectors (or is absent where Ferry wrote nothing), or the
//! client gets a local 4xx/5xx JSON reply and the request never goes upstream. Besides: a
//! spelling of a route's path is handled by that route, an unmatched path under the protected
//! prefix is a 404 and an unmatched one outside it passes untouched but for Ferry's headers; a
//! reader refusal or an unusable answer is never forwarded; one reader call at most.
//!
//! - `input`: the fuzz input, read one choice (byte) at a time.
//! - `scenario`: the input decoded into a request and the reader's behaviour; `path`, its path
//!   and where it must lead.
//! - `reader`: the fake reader's answer, and what each entity's features must be.
//! - `expected`: what Ferry must write, from that answer and the route's policies.
//! - `check`: the owned places of what reached the model; `grpc`, those of a gRPC request.
//! - `verdict`: the checks of one run, from what the client got or the model received.

pub(crate) mod check;
mod expected;
mod grpc;
mod input;
mod path;
pub(crate) mod reader;
pub(crate) mod scenario;
mod verdict;

use std::rc::Rc;

use ferry_core::config::Config;
use ferry_core::host::testing::FakeHost;
use ferry_core::metrics::Metrics;
use ferry_core::request::{Action, HttpFilter};

use crate::upstream::{Next, Upstream};

use input::Bytes;
use reader::Answer;
use scenario::{ReaderPlan, Scenario};

/// The token `FakeHost::dispatch` hands out.
const TOKEN: u32 = 7;
const BODY_METHODS: [&str; 3] = ["POST", "PUT", "PATCH"];
const READER_FAILURES: [&str; 6] = [
    "reader_unavailable",
    "reader_timeout",
    "redis_unavailable",
    "redis_timeout",
    "reader_error",
    "dispatch_failed",
];

/// The reader's answer as delivered.
enum Delivered {
    Vectors(Answer),
    Failure(ReaderPlan),
}

/// One request through the filter, with Envoy's side of the stream.
struct Run<'a> {
    config: &'a Rc<Config>,
    sc: Scenario,
    input: Bytes<'a>,
    filter: HttpFilter<FakeHost>,
    up: Upstream,
    /// The last stream callback returned Pause and nothing released the stream since.
    paused: bool,
    /// A local reply was sent: Envoy calls nothing more on the request side.
    answered_locally: bool,
    /// The reader's answer was delivered (or, for `Never`, withheld).
    call_done: bool,
    delivered: Option<Delivered>,
}

impl<'a> Run<'a> {
    fn host(&self) -> &FakeHost {
        self.filter.host()
    }

    fn context(&self) -> String {
        context(&self.sc)
    }

    /// After a stream callback returned `action`.
    fn after_callback(&mut self, what: &str, action: Action) {
        match self.up.after_callback(self.filter.host(), what, action) {
            Next::AnsweredLocally => self.answered_locally = true,
            Next::Released => self.paused = false,
            Next::Paused => self.paused = true,
        }
    }

    /// After the filter handled the reader's answer: it answered, resumed, or neither.
    fn after_call(&mut self) {
        match self.up.after_call(self.filter.host(), self.paused) {
            Some(Next::AnsweredLocally) => self.answered_locally = true,
            Some(_) => self.paused = false,
            None => {}
        }
    }

    fn call_out(&self) -> bool {
        !self.call_done && !self.host().dispatched.borrow().is_empty()
    }

    /// Envoy delivers the reader's answer (or its failure).
    fn deliver(&mut self) {
        self.call_done = true;
        let plan = self.sc.reader.clone();
        if plan == ReaderPlan::Never {
            return;
        }
        if self.sc.stray_answer {
            // An answer to some other call of the same context: ignored.
            *self.host().call_status.borrow_mut() = Some(200);
            *self.host().call_body.borrow_mut() = b"\x0a\x02\x0a\x00".to_vec();
            self.filter.on_call_response(TOKEN + 1, 2, 4);
            assert!(
                self.host().sent.borrow().is_none() && !*self.host().resumed.borrow(),
                "an answer to another token was taken for the reader's"
            );
        }
        let request = self.host().dispatched.borrow()[0].2.clone();
        let (status, body, delivered) = match &plan {
            ReaderPlan::Vectors | ReaderPlan::WrongCount => {
                let short = plan == ReaderPlan::WrongCount;
                let a = reader::answer(&mut self.input, self.config, &request, short);
                let body = a.body.clone();
                let d = if short {
                    Delivered::Failure(plan.clone())
                } else {
                    Delivered::Vectors(a)
                };
                (Some(200), body, d)
            }
            ReaderPlan::Status(s, code) => {
                let body = match code {
                    Some(c) => format!(r#"{{"error":"{c}","message":"refused"}}"#).into_bytes(),
                    None => b"upstream connect error or disconnect/reset before headers".to_vec(),
                };
                (Some(*s), body, Delivered::Failure(plan.clone()))
            }
            ReaderPlan::Garbage => (
                Some(200),
                b"\xff\xff\xff".to_vec(),
                Delivered::Failure(plan.clone()),
            ),
            _ => (None, Vec::new(), Delivered::Failure(plan.clone())),
        };
        let headers = if status.is_some() { 2 } else { 0 };
        let len = body.len();
        *self.host().call_status.borrow_mut() = status;
        *self.host().call_body.borrow_mut() = body;
        self.delivered = Some(delivered);
        self.filter.on_call_response(TOKEN, headers, len);
        self.after_call();
    }

    fn maybe_deliver(&mut self, step: usize) {
        if !self.answered_locally && self.sc.answer_after == step && self.call_out() {
            self.deliver();
        }
    }

    /// The stream as Envoy delivers it: headers, data frames, trailers, with the reader's
    /// answer at the scenario's point (or at the end).
    fn drive(&mut self) {
        if self.sc.reader == ReaderPlan::DispatchFails {
            *self.host().dispatch_error.borrow_mut() = Some("unknown cluster".into());
            self.delivered = Some(Delivered::Failure(ReaderPlan::DispatchFails));
        }
        let frames = self.sc.chunks.len();
        let trailers = self.sc.trailers;
        let action = self.filter.on_request_headers(frames == 0 && !trailers);
        self.after_callback("on_request_headers", action);
        self.maybe_deliver(0);
        for i in 0..frames {
            if self.answered_locally {
                return;
            }
            let chunk = self.sc.chunks[i].clone();
            self.host().body.borrow_mut().extend_from_slice(&chunk);
            let size = self.host().body.borrow().len();
            let end = i + 1 == frames && !trailers;
            let action = self.filter.on_request_body(size, end);
            self.after_callback("on_request_body", action);
            self.maybe_deliver(i + 1);
        }
        if trailers && !self.answered_locally {
            let action = self.filter.on_request_trailers();
            self.after_callback("on_request_trailers", action);
            self.maybe_deliver(frames + 1);
        }
        if !self.answered_locally && self.call_out() {
            self.deliver();
        }
        let answered = self.call_done && self.sc.reader != ReaderPlan::Never;
        if self.sc.late_answer && !self.answered_locally && answered {
            self.late_answer();
        }
    }

    /// The same token answered again: the filter is done with it and must change nothing.
    fn late_answer(&mut self) {
        let headers = self.host().headers.borrow().clone();
        *self.host().call_status.borrow_mut() = Some(200);
        *self.host().call_body.borrow_mut() = Vec::new();
        self.filter.on_call_response(TOKEN, 2, 0);
        assert!(
            self.host().sent.borrow().is_none() && !*self.host().resumed.borrow(),
            "a second answer to the call was acted on"
        );
        assert_eq!(
            *self.host().headers.borrow(),
            headers,
            "a second answer changed the headers"
        );
    }
}

/// A scenario in words, to read a crash report.
fn context(sc: &Scenario) -> String {
    format!(
        "path {:?} ({:?}), {} with {} data frames{}, reader {:?}; headers {:?}; body {}",
        sc.path,
        sc.expect,
        sc.method,
        sc.chunks.len(),
        if sc.trailers { " and trailers" } else { "" },
        sc.reader,
        sc.headers,
        String::from_utf8_lossy(&sc.body)
    )
}

thread_local! {
    /// The input being run (and its snapshot), described if a check fails.
    static RUNNING: std::cell::RefCell<Option<(Vec<u8>, Rc<Config>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Prints the scenario of a failing run before the panic's own report (libFuzzer aborts in its
/// panic hook, so the report cannot be caught and extended). The scenario is decoded again
/// from the input only then: describing every run would cost more than running it.
fn install_panic_context() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            RUNNING.with(|r| {
                if let Ok(Some((data, config))) = r.try_borrow().as_deref() {
                    let sc = Scenario::decode(&mut Bytes::new(data), config);
                    eprintln!("bypass scenario: {}", context(&sc));
                }
            });
            previous(info);
        }));
    });
}

/// Runs one input: drives the filter and checks what reached the model; a panic names the
/// broken property (and the hook prints the scenario).
pub fn run(data: &[u8], config: &Rc<Config>) {
    play(data, config);
}

/// Runs one input and says what happened, in a few words and the scenario (to pick seeds and
/// read inputs).
pub fn describe(data: &[u8], config: &Rc<Config>) -> String {
    play(data, config).outcome()
}

fn play<'a>(data: &'a [u8], config: &'a Rc<Config>) -> Run<'a> {
    install_panic_context();
    RUNNING.with(|r| *r.borrow_mut() = Some((data.to_vec(), config.clone())));
    let _forget = ForgetRunning;
    let mut input = Bytes::new(data);
    let sc = Scenario::decode(&mut input, config);
    let host = FakeHost {
        now_us: super::NOW_US,
        ..Default::default()
    };
    *host.headers.borrow_mut() = sc.headers.clone();
    let metrics = Rc::new(Metrics::define(|_, _| Some(1)));
    let filter = HttpFilter::new(host, Some(config.clone()), metrics);
    let mut run = Run {
        config,
        sc,
        input,
        filter,
        up: Upstream::default(),
        paused: false,
        answered_locally: false,
        call_done: false,
        delivered: None,
    };
    run.drive();
    run.check();
    run
}

/// Forgets the input when a run ends, passed or not (the hook runs before unwinding).
struct ForgetRunning;

impl Drop for ForgetRunning {
    fn drop(&mut self) {
        RUNNING.with(|r| {
            if let Ok(mut r) = r.try_borrow_mut() {
                *r = None;
            }
        });
    }
}
