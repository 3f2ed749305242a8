//! One request's life in the filter: a small executor over the [`Host`] seam that moves the
//! request through its states and runs one step per file.
//!
//! States (`State`): headers → `ReadingBody` (a body route buffers its body) →
//! `AwaitingVectors` (the reader call is out) → `Done` (resumed or answered). A request no
//! route takes stays `Passthrough`.
//!
//! Steps, each a file of free functions over the host (none of them imports this one):
//! - `admission.rs`: the headers Ferry owns removed, the route selected, a body route's
//!   method, size and framing checked.
//! - `parse.rs`: the entities, from the headers (header mode) or the buffered body.
//! - `lookup.rs`: the near cache, then one reader call for the misses (`reader.rs`: the call's
//!   body, its answer judged, the vectors it holds; none for a service of on-demand views over
//!   request fields only).
//! - `enrich.rs`: features per entity under the route's policies, and the rewrite.
//! - `on_demand.rs`: the on-demand features of every entity, computed after the lookup (called
//!   by `enrich.rs`, between the route's policies and the rewrite).
//! - `log.rs`: served-feature logging: the route's sampling decision on the request id, and
//!   the record of what the model received handed to the host (called from `finish`).
//! - `forward.rs`: the enriched request sent on; `reply.rs`: Ferry's own answers (errors as
//!   JSON or gRPC statuses, `feast_rest` features) and the `x-ferry-*` summary.
//!
//! Where a new step plugs in: a step that needs every vector of the request (request-time
//! feature computation) is a file here called from `HttpFilter::finish` before
//! `enrich::enrich`; a step that reads what was served (served-feature logging) is a file here
//! called from `finish` once enrichment succeeded, before the request is forwarded or answered.
//! A step that must wait for a host callback gets a `State` of its own and a line in the hook
//! that ends the wait.

mod admission;
pub mod enrich;
mod forward;
pub(crate) mod log;
mod lookup;
mod on_demand;
mod parse;
pub mod reader;
mod reply;

use std::rc::Rc;

use crate::config::{Config, Format, Route};
use crate::error::FerryError;
use crate::format::ParsedRequest;
use crate::host::{Host, Stage};
use crate::log::record;
use crate::metrics::{Metric, Metrics};
use admission::Admitted;
use enrich::Enriched;
use lookup::Pending;

/// What the host should do with the stream after a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    Pause,
}

enum State {
    /// Before headers, or on a request this filter does not touch.
    Passthrough,
    /// A body route buffering the body; `body_size` is what is buffered so far.
    ReadingBody {
        route: usize,
        body_size: usize,
        /// KServe v2's `Inference-Header-Content-Length`, as the client sent it.
        framing: Option<String>,
    },
    AwaitingVectors(Box<Pending>),
    /// Resumed or answered; nothing more to do.
    Done,
}

/// How a paused request goes on: inside a stream callback by returning Continue, from a
/// dispatched call's response by asking the host.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resume {
    ByReturningContinue,
    ByHostCall,
}

pub struct HttpFilter<H: Host> {
    host: H,
    config: Option<Rc<Config>>,
    metrics: Rc<Metrics>,
    state: State,
    /// What the client is told on the response (`x-ferry-*`), once the request was handled.
    summary: Vec<(&'static str, String)>,
    /// The request headers went on before the body was read: they can no longer be written
    /// (Envoy refuses, and proxy-wasm's SDK would panic on its answer).
    headers_sent: bool,
    /// `on_response_headers` paused the response until the request is forwarded.
    response_held: bool,
    /// The client speaks gRPC (`content-type: application/grpc...`): errors are answered as
    /// gRPC statuses. Read with the headers, as they may be gone by the time of an answer.
    grpc_client: bool,
    /// The host's clock when the request headers arrived: on-demand views' `request.time`.
    received_us: i64,
    /// Envoy's `x-request-id`, read with the headers when the route logs served features.
    request_id: Option<String>,
}

impl<H: Host> HttpFilter<H> {
    pub fn new(host: H, config: Option<Rc<Config>>, metrics: Rc<Metrics>) -> Self {
        HttpFilter {
            host,
            config,
            metrics,
            state: State::Passthrough,
            summary: Vec::new(),
            headers_sent: false,
            response_held: false,
            grpc_client: false,
            received_us: 0,
            request_id: None,
        }
    }

    pub fn host(&self) -> &H {
        &self.host
    }

    pub fn on_request_headers(&mut self, end_of_stream: bool) -> Action {
        let Some(config) = self.config.clone() else {
            return Action::Continue;
        };
        self.grpc_client = admission::grpc_client(&self.host);
        self.received_us = self.host.now_us();
        match admission::admit(&self.host, &config, end_of_stream) {
            Admitted::Pass => Action::Continue,
            Admitted::Refused { route, err } => self.answer_named(&route, &err),
            Admitted::HeaderMode { route, names } => {
                self.request_id = log::request_id(&self.host, &config, route);
                let parsed = parse::headers(&self.host, &names, &config.routes[route]);
                self.host.stage_done(Stage::Parsed);
                match parsed {
                    Ok(request) => {
                        self.fetch_vectors(&config, route, request, 0, Resume::ByReturningContinue)
                    }
                    Err(e) => self.answer(&config.routes[route], &e),
                }
            }
            Admitted::Body { route, framing } => {
                self.request_id = log::request_id(&self.host, &config, route);
                self.state = State::ReadingBody {
                    route,
                    body_size: 0,
                    framing,
                };
                if config.headers_held {
                    Action::Pause
                } else {
                    self.headers_sent = true;
                    Action::Continue
                }
            }
        }
    }

    pub fn on_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let index = match &mut self.state {
            State::ReadingBody {
                route,
                body_size: seen,
                ..
            } => {
                *seen = body_size;
                *route
            }
            // Header mode with a body (POST, gRPC): the body waits with the headers until the
            // features header is written; continuing here would send the headers upstream.
            State::AwaitingVectors(_) => return Action::Pause,
            _ => return Action::Continue,
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
            return self.answer(route, &err);
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.body_complete(&config, index, body_size)
    }

    /// On a body route the body may end with trailers instead of a last data frame: the
    /// buffered body is complete then, and the trailers wait with it while the vectors are
    /// fetched. A header-mode request's trailers wait while its reader call is out.
    pub fn on_request_trailers(&mut self) -> Action {
        if let Some(config) = &self.config {
            admission::strip_owned_trailers(&self.host, config);
        }
        match self.state {
            State::ReadingBody {
                route, body_size, ..
            } => {
                let Some(config) = self.config.clone() else {
                    return Action::Continue;
                };
                self.body_complete(&config, route, body_size)
            }
            State::AwaitingVectors(_) => Action::Pause,
            _ => Action::Continue,
        }
    }

    /// The whole body of a body route is buffered: parse it and look its entities up.
    fn body_complete(&mut self, config: &Rc<Config>, index: usize, body_size: usize) -> Action {
        let route = &config.routes[index];
        let framing = match &self.state {
            State::ReadingBody { framing, .. } => framing.as_deref(),
            _ => None,
        };
        let parsed = parse::body(&self.host, config, route, body_size, framing);
        self.host.stage_done(Stage::Parsed);
        match parsed {
            Ok(request) => self.fetch_vectors(
                config,
                index,
                request,
                body_size,
                Resume::ByReturningContinue,
            ),
            Err(e) => self.answer(route, &e),
        }
    }

    /// Near cache first, then one reader call for the misses (or straight to the rewrite when
    /// everything was cached).
    fn fetch_vectors(
        &mut self,
        config: &Config,
        index: usize,
        request: ParsedRequest,
        body_size: usize,
        resume: Resume,
    ) -> Action {
        let route = parse::served_route(config, index, &request);
        let route = &*route;
        let vectors = lookup::cached(&self.host, &self.metrics, config, route, request.keys());
        // A service of on-demand views over request fields only has nothing to look up.
        let misses: Vec<usize> = (0..vectors.len())
            .filter(|i| vectors[*i].is_empty() && route.service_of_key(*i).feature_count > 0)
            .collect();
        if misses.is_empty() {
            return self.finish(route, request, body_size, &vectors, resume);
        }
        match lookup::ask_reader(&self.host, config, route, request.keys(), &misses) {
            Ok((token, call)) => {
                self.state = State::AwaitingVectors(Box::new(Pending {
                    route: index,
                    token,
                    request,
                    body_size,
                    vectors,
                    misses: call.order,
                    lookup_sizes: call.lookup_sizes,
                    sent_at_us: self.host.now_us(),
                }));
                Action::Pause
            }
            Err(err) => self.reader_failed(route, request, body_size, &err, resume),
        }
    }

    /// Tells the client, on the response, what Ferry did (status, fingerprint, counts). When
    /// the headers went on before the body was read, the model may answer while Ferry still
    /// holds the body (a streaming server answers on the headers): that response is held too,
    /// until the request is forwarded (then it gets the summary) or answered (Envoy then sends
    /// Ferry's answer instead, since nothing of the response reached the client).
    pub fn on_response_headers(&mut self) -> Action {
        if self.headers_sent
            && matches!(
                self.state,
                State::ReadingBody { .. } | State::AwaitingVectors(_)
            )
        {
            self.response_held = true;
            return Action::Pause;
        }
        reply::tell_client(&self.host, std::mem::take(&mut self.summary));
        Action::Continue
    }

    pub fn on_call_response(&mut self, token: u32, num_headers: usize, body_size: usize) {
        let state = std::mem::replace(&mut self.state, State::Done);
        let State::AwaitingVectors(mut p) = state else {
            self.state = state;
            return;
        };
        if token != p.token {
            self.state = State::AwaitingVectors(p);
            return;
        }
        let Some(config) = self.config.clone() else {
            return;
        };
        let route = parse::served_route(&config, p.route, &p.request);
        let route = &*route;
        let (host, metrics) = (&self.host, &*self.metrics);
        if let Err(e) = lookup::answered(host, metrics, route, &mut p, num_headers, body_size) {
            let Pending {
                request, body_size, ..
            } = *p;
            self.reader_failed(route, request, body_size, &e, Resume::ByHostCall);
            return;
        }
        lookup::cache_fetched(host, metrics, &config, route, &p);
        host.stage_done(Stage::Decoded);
        let Pending {
            request,
            body_size,
            vectors,
            ..
        } = *p;
        self.finish(route, request, body_size, &vectors, Resume::ByHostCall);
    }

    /// Every vector of the request is there: enrich it, then forward it (or answer it, on a
    /// route that answers itself).
    fn finish(
        &mut self,
        route: &Route,
        request: ParsedRequest,
        body_size: usize,
        vectors: &[Vec<u8>],
        resume: Resume,
    ) -> Action {
        let now = self.host.now_us();
        let id = self.request_id.as_deref();
        let keep = |status| log::picks(route, id, status);
        let enriched = enrich::enrich_at(route, request, vectors, now, self.received_us, &keep);
        self.host.stage_done(Stage::Enriched);
        match enriched {
            Ok(out) => {
                let count = |m, n| self.metrics.count(&self.host, m, n);
                count(Metric::Enriched, 1);
                count(Metric::EntitiesFound, out.found);
                count(Metric::EntitiesMissing, out.missing);
                count(Metric::EntitiesStale, out.stale);
                self.metrics.count_derived(&self.host, &out.derived);
                self.metrics.count_served(&self.host, route, &out.served);
                self.forward(route, out, body_size, resume)
            }
            Err(e) => self.answer(route, &e),
        }
    }

    /// Sends the request on with what Ferry wrote (`forward.rs`), or, on a `feast_rest` route,
    /// answers with the features; a request paused by a host callback is resumed, and a
    /// response held meanwhile gets the summary and goes on.
    fn forward(
        &mut self,
        route: &Route,
        mut out: Enriched,
        body_size: usize,
        resume: Resume,
    ) -> Action {
        if let Some(logged) = out.logged.take() {
            let stamp = record::Stamp {
                request_id: self.request_id.as_deref().unwrap_or_default(),
                now_us: self.host.now_us(),
                received_us: self.received_us,
            };
            log::hand_out(&self.host, &self.metrics, route, stamp, &logged);
        }
        if route.format == Format::FeastRest {
            reply::features(&self.host, out);
            self.state = State::Done;
            return Action::Pause;
        }
        self.summary = match forward::rewrite(&self.host, self.headers_sent, out, body_size) {
            Ok(summary) => summary,
            Err(e) => return self.answer(route, &e),
        };
        self.host.stage_done(Stage::Rewritten);
        self.state = State::Done;
        if resume == Resume::ByHostCall {
            self.host.resume_request();
        }
        if self.response_held {
            self.response_held = false;
            reply::tell_client(&self.host, std::mem::take(&mut self.summary));
            self.host.resume_response();
        }
        Action::Continue
    }

    /// A reader-side failure: fail closed (answer) or open (forward with every feature null),
    /// per the route.
    fn reader_failed(
        &mut self,
        route: &Route,
        request: ParsedRequest,
        body_size: usize,
        err: &FerryError,
        resume: Resume,
    ) -> Action {
        if !lookup::failed(&self.host, &self.metrics, route, err) {
            return self.answer(route, err);
        }
        let id = self.request_id.as_deref();
        let keep = |status| log::picks(route, id, status);
        match enrich::degraded(route, request, err, self.received_us, &keep) {
            Ok(out) => {
                self.metrics.count(&self.host, Metric::Degraded, 1);
                self.metrics.count_derived(&self.host, &out.derived);
                self.metrics.count_served(&self.host, route, &out.served);
                self.forward(route, out, body_size, resume)
            }
            Err(e) => self.answer(route, &e),
        }
    }

    fn answer(&mut self, route: &Route, err: &FerryError) -> Action {
        self.answer_named(&route.name, err)
    }

    /// Answers the request with `err` (`reply.rs`); nothing more is done for it.
    fn answer_named(&mut self, route: &str, err: &FerryError) -> Action {
        reply::error(&self.host, self.grpc_client, route, err);
        self.metrics.count(&self.host, Metric::Rejected, 1);
        self.state = State::Done;
        Action::Pause
    }
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod admission_tests;
#[cfg(test)]
mod lookup_tests;
#[cfg(test)]
mod on_demand_tests;
#[cfg(test)]
mod reply_tests;
#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
#[cfg(test)]
mod unheld_tests;
