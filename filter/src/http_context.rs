//! One request's life in the filter, as a small state machine over the [`Host`] seam:
//! headers → reading the body → waiting for vectors → resumed or answered.

use std::rc::Rc;
use std::time::Duration;

use crate::config::{Config, OnReaderError};
use crate::enrich;
use crate::error::FerryError;
use crate::host::Host;
use crate::kserve_v1::{self, ParsedRequest};

/// What the host should do with the stream after a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    Pause,
}

enum State {
    /// Before headers, or on a request this filter does not touch.
    Passthrough,
    ReadingBody {
        route: usize,
    },
    AwaitingVectors {
        route: usize,
        token: u32,
        request: ParsedRequest,
        body_size: usize,
    },
    /// Resumed or answered; nothing more to do.
    Done,
}

/// How a paused request goes on: inside a stream callback by returning Continue, from a
/// dispatched call's response by asking the host.
#[derive(PartialEq, Eq)]
enum Resume {
    ByReturningContinue,
    ByHostCall,
}

/// Methods that carry an inference body; others on a matched path (e.g. KServe's
/// `GET /v1/models/NAME` readiness) pass through untouched.
const BODY_METHODS: [&str; 3] = ["POST", "PUT", "PATCH"];

/// Header prefix Ferry owns: whatever a client sends under it is removed.
const OWN_HEADER_PREFIX: &str = "x-ferry-";

pub struct HttpFilter<H: Host> {
    host: H,
    config: Option<Rc<Config>>,
    state: State,
}

impl<H: Host> HttpFilter<H> {
    pub fn new(host: H, config: Option<Rc<Config>>) -> Self {
        HttpFilter {
            host,
            config,
            state: State::Passthrough,
        }
    }

    pub fn host(&self) -> &H {
        &self.host
    }

    pub fn on_request_headers(&mut self, end_of_stream: bool) -> Action {
        let Some(config) = self.config.clone() else {
            return Action::Continue;
        };
        let path = self.host.request_header(":path").unwrap_or_default();
        let Some(index) = config.match_route(&path) else {
            return Action::Continue;
        };
        let route = &config.routes[index];
        let method = self.host.request_header(":method").unwrap_or_default();
        if !BODY_METHODS.contains(&method.as_str()) {
            return Action::Continue;
        }
        for name in self.host.request_header_names() {
            if name.starts_with(OWN_HEADER_PREFIX) {
                self.host.set_request_header(&name, None);
            }
        }
        if end_of_stream {
            return self.answer(index, &FerryError::NoBody);
        }
        let declared = self
            .host
            .request_header("content-length")
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(size) = declared.filter(|s| *s > u64::from(route.max_body_bytes)) {
            return self.answer(
                index,
                &FerryError::BodyTooLarge {
                    limit: route.max_body_bytes,
                    size,
                },
            );
        }
        // The body will change size; the right length is set again before resuming.
        self.host.set_request_header("content-length", None);
        self.state = State::ReadingBody { route: index };
        Action::Pause
    }

    pub fn on_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let State::ReadingBody { route: index } = self.state else {
            return Action::Continue;
        };
        let Some(config) = self.config.clone() else {
            return Action::Continue;
        };
        let route = &config.routes[index];
        if body_size > route.max_body_bytes as usize {
            let err = FerryError::BodyTooLarge {
                limit: route.max_body_bytes,
                size: body_size as u64,
            };
            return self.answer(index, &err);
        }
        if !end_of_stream {
            return Action::Pause;
        }
        let body = self.host.request_body(body_size).unwrap_or_default();
        let request = match kserve_v1::parse(&body, route) {
            Ok(r) => r,
            Err(e) => return self.answer(index, &e),
        };
        let call = enrich::reader_request(&config, route, request.keys.clone());
        let headers = vec![
            (":method", "POST"),
            (":path", ferry_protos::READER_PATH),
            (":authority", config.reader_authority.as_str()),
            ("content-type", ferry_protos::PROTOBUF_CONTENT_TYPE),
        ];
        let timeout = Duration::from_millis(u64::from(route.reader_timeout_ms));
        match self
            .host
            .dispatch(&config.reader_cluster, headers, &call, timeout)
        {
            Ok(token) => {
                self.state = State::AwaitingVectors {
                    route: index,
                    token,
                    request,
                    body_size,
                };
                Action::Pause
            }
            Err(detail) => {
                let err = FerryError::DispatchFailed { detail };
                self.reader_failed(index, body_size, err, Resume::ByReturningContinue)
            }
        }
    }

    pub fn on_call_response(&mut self, token: u32, num_headers: usize, body_size: usize) {
        let state = std::mem::replace(&mut self.state, State::Done);
        let State::AwaitingVectors {
            route: index,
            token: expected,
            request,
            body_size: old_size,
        } = state
        else {
            self.state = state;
            return;
        };
        if token != expected {
            self.state = State::AwaitingVectors {
                route: index,
                token: expected,
                request,
                body_size: old_size,
            };
            return;
        }
        let Some(config) = self.config.clone() else {
            return;
        };
        let route = &config.routes[index];
        let status = if num_headers == 0 {
            None
        } else {
            self.host.call_response_status()
        };
        let body = self.host.call_response_body(body_size).unwrap_or_default();
        if let Err(e) = enrich::check_reader_status(status, &body, route.reader_timeout_ms) {
            self.reader_failed(index, old_size, e, Resume::ByHostCall);
            return;
        }
        match enrich::enrich(route, request, &body, self.host.now_us()) {
            Ok(out) => {
                self.host.replace_request_body(old_size, &out.body);
                self.host
                    .set_request_header("content-length", Some(&out.body.len().to_string()));
                for (name, value) in &out.headers {
                    self.host.set_request_header(name, Some(value));
                }
                self.host.resume_request();
            }
            Err(e) => {
                self.answer(index, &e);
            }
        }
    }

    /// A reader-side failure: fail closed (answer) or open (forward unenriched), per the route.
    fn reader_failed(
        &mut self,
        index: usize,
        body_size: usize,
        err: FerryError,
        resume: Resume,
    ) -> Action {
        let Some(config) = self.config.clone() else {
            return Action::Continue;
        };
        let route = &config.routes[index];
        self.host
            .log_warn(&format!("route '{}': {}", route.name, err.message()));
        match route.on_reader_error {
            OnReaderError::Reject => self.answer(index, &err),
            OnReaderError::Forward => {
                self.host
                    .set_request_header("content-length", Some(&body_size.to_string()));
                for (name, value) in enrich::degraded_headers(route, &err) {
                    self.host.set_request_header(name, Some(&value));
                }
                self.state = State::Done;
                if resume == Resume::ByHostCall {
                    self.host.resume_request();
                }
                Action::Continue
            }
        }
    }

    fn answer(&mut self, index: usize, err: &FerryError) -> Action {
        let route_name = self
            .config
            .as_ref()
            .and_then(|c| c.routes.get(index))
            .map_or("", |r| r.name.as_str());
        let body = err.body(route_name);
        self.host.send_response(
            err.status(),
            vec![
                ("content-type", "application/json"),
                ("x-ferry-error", err.code()),
            ],
            &body,
        );
        self.state = State::Done;
        Action::Pause
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixture::{config, route_with, FP};
    use crate::host::testing::FakeHost;
    use crate::vector::testing::vector;
    use ferry_protos::v1::{self as pb, value::Kind, LookupResult, VectorResponse};
    use prost::Message;

    const NOW: i64 = 1_800_000_000_000_000;

    fn filter(c: Config, method: &str, path: &str, body: &str) -> HttpFilter<FakeHost> {
        let host = FakeHost {
            now_us: NOW,
            ..Default::default()
        };
        *host.headers.borrow_mut() = vec![
            (":method".into(), method.into()),
            (":path".into(), path.into()),
            ("content-length".into(), body.len().to_string()),
            ("x-ferry-status".into(), "forged".into()),
        ];
        *host.body.borrow_mut() = body.as_bytes().to_vec();
        HttpFilter::new(host, Some(Rc::new(c)))
    }

    fn reader_ok(f: &HttpFilter<FakeHost>, vectors: Vec<Vec<u8>>) {
        *f.host().call_status.borrow_mut() = Some(200);
        *f.host().call_body.borrow_mut() = VectorResponse {
            results: vec![LookupResult { vectors }],
        }
        .encode_to_vec();
    }

    fn sent(f: &HttpFilter<FakeHost>) -> (u16, serde_json::Value) {
        let s = f.host().sent.borrow().clone().expect("a local reply");
        (s.0, serde_json::from_slice(&s.2).unwrap())
    }

    const BODY: &str = r#"{"instances":[{"user_id":"u1"}]}"#;

    #[test]
    fn enriches_through_one_dispatch_and_resumes() {
        let mut f = filter(config(), "POST", "/v1/models/fraud:predict", BODY);
        assert_eq!(f.on_request_headers(false), Action::Pause);
        assert_eq!(f.host().request_header("content-length"), None);
        assert_eq!(
            f.host().request_header("x-ferry-status"),
            None,
            "client's x-ferry-* removed"
        );
        assert_eq!(f.on_request_body(10, false), Action::Pause);
        assert_eq!(f.on_request_body(BODY.len(), true), Action::Pause);
        let calls = f.host().dispatched.borrow().clone();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, "ferry_reader");
        assert!(calls[0].1.contains(&(":path".into(), "/v1/vectors".into())));
        assert_eq!(calls[0].3, Duration::from_millis(100));
        let v = vector(
            FP,
            vec![
                (
                    NOW,
                    vec![Some(Kind::Int64Val(30)), Some(Kind::FloatVal(1.5))],
                ),
                (NOW, vec![Some(Kind::Int64Val(2))]),
            ],
        );
        reader_ok(&f, vec![v]);
        f.on_call_response(7, 3, 100);
        assert!(*f.host().resumed.borrow());
        let body = f.host().body.borrow().clone();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["instances"][0]["profile__age"], 30);
        assert_eq!(
            f.host().request_header("content-length"),
            Some(body.len().to_string())
        );
        assert_eq!(f.host().request_header("x-ferry-status"), Some("ok".into()));
        assert_eq!(
            f.host().request_header("x-ferry-fingerprint"),
            Some("123456789abcdef0".into())
        );
    }

    #[test]
    fn unmatched_paths_and_bodiless_methods_pass_through() {
        let mut f = filter(config(), "POST", "/healthz", BODY);
        assert_eq!(f.on_request_headers(false), Action::Continue);
        assert_eq!(f.on_request_body(BODY.len(), true), Action::Continue);
        assert_eq!(
            f.host().request_header("x-ferry-status"),
            Some("forged".into()),
            "untouched"
        );
        let mut f = filter(config(), "GET", "/v1/models/fraud", "");
        assert_eq!(f.on_request_headers(true), Action::Continue);
        assert!(f.host().sent.borrow().is_none());
    }

    #[test]
    fn bad_requests_are_answered_with_json_errors() {
        let mut f = filter(config(), "POST", "/v1/models/fraud", "{oops");
        f.on_request_headers(false);
        assert_eq!(f.on_request_body(5, true), Action::Pause);
        let (status, body) = sent(&f);
        assert_eq!(
            (status, body["error"].as_str()),
            (400, Some("malformed_json"))
        );
        assert_eq!(body["route"], "fraud");
        assert!(f.host().dispatched.borrow().is_empty());

        let mut f = filter(config(), "POST", "/v1/models/fraud", "");
        assert_eq!(f.on_request_headers(true), Action::Pause);
        assert_eq!(sent(&f).0, 400);
    }

    #[test]
    fn oversize_bodies_are_refused_by_header_or_while_streaming() {
        let mut f = filter(config(), "POST", "/v1/models/fraud", &"x".repeat(5000));
        assert_eq!(f.on_request_headers(false), Action::Pause);
        let (status, body) = sent(&f);
        assert_eq!(
            (status, body["error"].as_str()),
            (413, Some("body_too_large"))
        );

        let mut f = filter(config(), "POST", "/v1/models/fraud", BODY);
        f.host().set_request_header("content-length", None); // chunked
        f.on_request_headers(false);
        f.on_request_body(4097, false);
        assert_eq!(sent(&f).0, 413);
    }

    #[test]
    fn reader_failure_fails_closed_by_default() {
        let mut f = filter(config(), "POST", "/v1/models/fraud", BODY);
        f.on_request_headers(false);
        f.on_request_body(BODY.len(), true);
        f.on_call_response(7, 0, 0);
        let (status, body) = sent(&f);
        assert_eq!(
            (status, body["error"].as_str()),
            (503, Some("reader_unavailable"))
        );
        assert!(!*f.host().resumed.borrow());
    }

    #[test]
    fn reader_failure_can_fail_open() {
        let c =
            route_with(|r| r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32);
        let mut f = filter(c, "POST", "/v1/models/fraud", BODY);
        f.on_request_headers(false);
        f.on_request_body(BODY.len(), true);
        *f.host().call_status.borrow_mut() = Some(503);
        *f.host().call_body.borrow_mut() =
            br#"{"error":"redis_unavailable","message":"down"}"#.to_vec();
        f.on_call_response(7, 2, 46);
        assert!(*f.host().resumed.borrow());
        assert!(f.host().sent.borrow().is_none());
        assert_eq!(
            f.host().request_header("x-ferry-status"),
            Some("degraded".into())
        );
        assert_eq!(
            f.host().request_header("x-ferry-error"),
            Some("redis_unavailable".into())
        );
        assert_eq!(
            f.host().request_header("content-length"),
            Some(BODY.len().to_string())
        );
        assert_eq!(
            f.host().body.borrow().as_slice(),
            BODY.as_bytes(),
            "body untouched"
        );

        let c =
            route_with(|r| r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32);
        let mut f = filter(c, "POST", "/v1/models/fraud", BODY);
        *f.host().dispatch_error.borrow_mut() = Some("unknown cluster".into());
        f.on_request_headers(false);
        assert_eq!(f.on_request_body(BODY.len(), true), Action::Continue);
        assert!(
            !*f.host().resumed.borrow(),
            "a body callback resumes by returning Continue"
        );
    }

    #[test]
    fn responses_to_other_tokens_are_ignored() {
        let mut f = filter(config(), "POST", "/v1/models/fraud", BODY);
        f.on_request_headers(false);
        f.on_request_body(BODY.len(), true);
        f.on_call_response(99, 0, 0);
        assert!(f.host().sent.borrow().is_none());
        assert!(!*f.host().resumed.borrow());
        f.on_call_response(7, 0, 0);
        assert_eq!(sent(&f).0, 503);
    }
}
