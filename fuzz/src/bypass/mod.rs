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
//! - `scenario`: the input decoded into a request and the reader's behaviour.
//! - `reader`: the fake reader's answer, and what each entity's features must be.
//! - `expected`: what Ferry must write, from that answer and the route's policies.
//! - `check`: the owned places of what reached the model.

mod check;
mod expected;
mod reader;
mod scenario;

use std::rc::Rc;

use ferry_filter::config::{Config, Format, HeaderEncoding, OnReaderError};
use ferry_filter::header_mode::STATUS_HEADER;
use ferry_filter::host::testing::FakeHost;
use ferry_filter::http_context::{Action, HttpFilter};
use ferry_filter::metrics::Metrics;
use serde_json::Value as Json;

use check::{assert_owned_headers, owned_header, Headers};
use reader::Answer;
use scenario::{Bytes, Expect, ReaderPlan, Scenario};

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

/// What went upstream, as Envoy would have sent it: the request headers as they were when the
/// stream first continued, and every body byte released since.
#[derive(Default)]
struct Upstream {
    released: bool,
    headers: Headers,
    body: Vec<u8>,
}

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

    /// Envoy sends the headers (if not yet) and the buffered body on.
    fn release(&mut self) {
        if !self.up.released {
            let headers = self.host().headers.borrow().clone();
            self.up.released = true;
            self.up.headers = headers;
        }
        let buffered = std::mem::take(&mut *self.host().body.borrow_mut());
        self.up.body.extend(buffered);
        self.paused = false;
    }

    /// After a stream callback returned `action`.
    fn after_callback(&mut self, what: &str, action: Action) {
        if self.host().sent.borrow().is_some() {
            assert!(
                action == Action::Pause,
                "{what} sent a local reply and returned Continue"
            );
            assert!(
                !self.up.released,
                "{what} sent a local reply after the request went upstream"
            );
            self.answered_locally = true;
            return;
        }
        match action {
            Action::Continue => self.release(),
            Action::Pause => self.paused = true,
        }
    }

    /// After the filter handled the reader's answer: it answered, resumed, or neither.
    fn after_call(&mut self) {
        let resumed = std::mem::take(&mut *self.host().resumed.borrow_mut());
        if self.host().sent.borrow().is_some() {
            assert!(!resumed, "the request was answered and resumed");
            assert!(
                !self.up.released,
                "a local reply after the request went upstream"
            );
            self.answered_locally = true;
        } else if resumed {
            assert!(self.paused, "resumed a stream that was not paused");
            self.release();
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

    fn check(&self) {
        assert!(
            self.host().dispatched.borrow().len() <= 1,
            "more than one reader call"
        );
        if let Some(reply) = self.host().sent.borrow().clone() {
            return self.check_reply(reply);
        }
        if !self.up.released {
            // Still paused: only while the reader's call is out (Envoy ends it at the timeout).
            assert!(
                self.sc.reader == ReaderPlan::Never && !self.host().dispatched.borrow().is_empty(),
                "the request was neither forwarded nor answered"
            );
            assert!(
                self.sc.expect != Expect::Pass,
                "an unmatched request was held"
            );
            return;
        }
        assert_eq!(
            *self.host().headers.borrow(),
            self.up.headers,
            "request headers changed after they went upstream"
        );
        match self.sc.expect {
            Expect::NoRoute => {
                panic!("a path under the protected prefix that no route matches went upstream")
            }
            Expect::Pass => self.check_untouched(),
            Expect::Route(r) => self.check_route(r),
        }
    }

    fn check_reply(&self, (status, headers, body): (u16, Headers, Vec<u8>)) {
        assert!((400..600).contains(&status), "local reply {status}");
        let json: Json = serde_json::from_slice(&body).unwrap_or(Json::Null);
        let code = json["error"].as_str().unwrap_or_else(|| {
            panic!(
                "local reply without a JSON error: {}",
                String::from_utf8_lossy(&body)
            )
        });
        let header = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(header("content-type"), Some("application/json"));
        assert_eq!(header("x-ferry-error"), Some(code));
        match self.sc.expect {
            Expect::Pass => panic!(
                "an unmatched path outside the protected prefix was answered {status} {code}"
            ),
            Expect::NoRoute => assert_eq!((status, code), (404, "no_route")),
            Expect::Route(r) => {
                assert_ne!(
                    code, "no_route",
                    "a spelling of route {r}'s path found no route"
                );
                assert_eq!(json["route"], self.config.routes[r].name.as_str(), "{json}");
            }
        }
    }

    /// An unmatched request: only Ferry-owned headers were removed.
    fn check_untouched(&self) {
        let kept: Headers = self
            .sc
            .headers
            .iter()
            .filter(|(n, _)| !owned_header(self.config, n))
            .cloned()
            .collect();
        assert_eq!(self.up.headers, kept, "the headers of an unmatched request");
        assert_eq!(
            self.up.body, self.sc.body,
            "the body of an unmatched request"
        );
        assert!(self.host().dispatched.borrow().is_empty(), "reader called");
    }

    fn check_route(&self, r: usize) {
        let route = &self.config.routes[r];
        let header_mode = matches!(route.format, Format::Header { .. });
        if !header_mode && !BODY_METHODS.contains(&self.sc.method.as_str()) {
            // A GET and the like pass, without a body, and without Ferry's headers.
            assert!(
                self.sc.chunks.is_empty() && !self.sc.trailers,
                "a {} with a body went upstream unenriched",
                self.sc.method
            );
            assert_owned_headers(self.config, &self.up.headers, &[], &[]);
            return;
        }
        match &self.delivered {
            None => panic!("the request went upstream before the reader answered"),
            Some(Delivered::Vectors(answer)) => match expected::expected(route, answer) {
                Err(why) => panic!("the request went upstream although {why}"),
                Ok(want) => self.check_enriched(r, &want, answer),
            },
            Some(Delivered::Failure(plan)) => {
                let known = known::READER_4XX_WITHOUT_CODE_FAILS_OPEN
                    && matches!(plan, ReaderPlan::Status(400..=499, None));
                assert!(
                    plan.may_fail_open() || known,
                    "forwarded after the reader's {plan:?} (a refusal or an unusable answer)"
                );
                assert!(
                    route.on_reader_error == OnReaderError::Forward,
                    "forwarded unenriched on a route that rejects on reader errors"
                );
                self.check_degraded(r);
            }
        }
    }

    fn check_enriched(&self, r: usize, want: &expected::Expected, answer: &Answer) {
        let route = &self.config.routes[r];
        let summary = want.summary(route);
        // The features are those of the entities the model sees.
        let header_mode = matches!(route.format, Format::Header { .. });
        let doc = if header_mode {
            Json::Null
        } else {
            check::parse_body(&self.up.body)
        };
        let asked: Vec<String> = (0..want.entities.len())
            .flat_map(|j| answer.asked.iter().map(move |(_, keys)| keys[j].clone()))
            .collect();
        let seen = check::model_keys(route, &self.up.headers, &doc);
        assert_eq!(
            seen, asked,
            "the model sees other entities than Ferry looked up"
        );
        let Format::Header {
            features_header,
            encoding,
            ..
        } = &route.format
        else {
            assert_owned_headers(self.config, &self.up.headers, &summary, &[]);
            self.assert_content_length();
            check::check_enriched_body(route, want, &doc);
            return;
        };
        let features = |v: &str| check::check_features_header(route, want, v);
        let statuses = want.entities[0].statuses(route);
        let status = |v: &str| {
            let got: Json = serde_json::from_str(v).unwrap_or(Json::Null);
            assert!(
                expected::same(&got, &statuses),
                "{STATUS_HEADER}: {v}, want {statuses}"
            );
        };
        let mut checked: Vec<check::ValueCheck<'_>> = vec![(features_header, &features)];
        let some_not_present = statuses.as_object().is_some_and(|m| !m.is_empty());
        if *encoding == HeaderEncoding::Json && some_not_present {
            checked.push((STATUS_HEADER, &status));
        }
        assert_owned_headers(self.config, &self.up.headers, &summary, &checked);
    }

    fn check_degraded(&self, r: usize) {
        let route = &self.config.routes[r];
        let code = self
            .up
            .headers
            .iter()
            .find(|(n, _)| n == "x-ferry-error")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        assert!(
            READER_FAILURES.contains(&code.as_str()),
            "x-ferry-error {code:?}"
        );
        let want = vec![
            ("x-ferry-service".to_string(), route.services_label.clone()),
            ("x-ferry-status".to_string(), "degraded".to_string()),
            ("x-ferry-error".to_string(), code),
        ];
        assert_owned_headers(self.config, &self.up.headers, &want, &[]);
        if matches!(route.format, Format::Header { .. }) {
            return;
        }
        self.assert_content_length();
        let doc: Json = serde_json::from_slice(&self.up.body).unwrap_or(Json::Null);
        let forged = check::owned_places(route, &doc);
        if !forged.is_empty() && known::DEGRADED_BODY_KEEPS_CLIENT_FIELDS {
            return;
        }
        assert!(
            forged.is_empty(),
            "forwarded unenriched ({}) with the client's values under Ferry's names: {forged:?}",
            route.name
        );
    }

    fn outcome(&self) -> String {
        let what = if let Some((status, _, body)) = self.host().sent.borrow().as_ref() {
            let json: Json = serde_json::from_slice(body).unwrap_or(Json::Null);
            format!("answered {status} {}", json["error"].as_str().unwrap_or(""))
        } else if !self.up.released {
            "held (the reader never answered)".to_string()
        } else if self
            .up
            .headers
            .iter()
            .any(|(n, v)| n == "x-ferry-status" && v == "degraded")
        {
            "forwarded degraded".to_string()
        } else if self.up.headers.iter().any(|(n, _)| n == "x-ferry-status") {
            "forwarded enriched".to_string()
        } else {
            "passed".to_string()
        };
        let on = match self.sc.expect {
            Expect::Route(r) => self.config.routes[r].name.as_str(),
            Expect::NoRoute => "no route",
            Expect::Pass => "no route, unprotected",
        };
        format!("{what} on {on}: {}", self.context())
    }

    fn assert_content_length(&self) {
        let cl = self.up.headers.iter().find(|(n, _)| n == "content-length");
        assert_eq!(
            cl.map(|(_, v)| v.as_str()),
            Some(self.up.body.len().to_string().as_str()),
            "content-length of the forwarded body"
        );
    }
}

/// Filter bugs this target found, reported and not fixed yet. While a flag is true the check
/// it names is skipped, so that the target can look for other bugs; the input that shows it is
/// in fuzz/regressions/bypass/. Set it to false once the filter is fixed.
mod known {
    /// `on_reader_error: forward` forwards the client's body as it came: whatever the client
    /// put under the route's feature names (and `ferry`) reaches the model, beside
    /// `x-ferry-status: degraded` (regressions/bypass/degraded_forward_keeps_forged_fields).
    pub const DEGRADED_BODY_KEEPS_CLIENT_FIELDS: bool = true;
    /// A 4xx from the reader cluster without the reader's JSON error (Envoy's own 400/413/431,
    /// a proxy in between) is `reader_error`, a reader failure, and `on_reader_error: forward`
    /// forwards the request; only a 4xx with the reader's code is `reader_rejected`
    /// (regressions/bypass/reader_4xx_without_code_fails_open).
    pub const READER_4XX_WITHOUT_CODE_FAILS_OPEN: bool = true;
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
