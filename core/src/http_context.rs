//! One request's life in the filter, as a small state machine over the [`Host`] seam:
//! headers → reading the body → (near cache) → waiting for vectors → resumed or answered.

use std::rc::Rc;
use std::time::Duration;

use crate::config::{Config, Format, OnReaderError, Route};
use crate::enrich;
use crate::error::FerryError;
use crate::format::header;
use crate::format::kserve_v2::binary;
use crate::format::{self, ParsedRequest};
use crate::host::Host;
use crate::metrics::{Metric, Metrics};
use crate::near_cache;

/// What the host should do with the stream after a callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Continue,
    Pause,
}

/// A request waiting for the reader.
struct Pending {
    route: usize,
    token: u32,
    request: ParsedRequest,
    body_size: usize,
    /// One per entity key (per route part for each entity): the cached vector, or empty
    /// until the reader answers.
    vectors: Vec<Vec<u8>>,
    /// Indices of the keys asked of the reader, in the order of its answer.
    misses: Vec<usize>,
    /// Vectors per lookup in the reader's answer.
    lookup_sizes: Vec<usize>,
    sent_at_us: i64,
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

/// Methods that carry an inference body; others on a matched path (e.g. KServe's
/// `GET /v1/models/NAME` readiness) pass through untouched.
const BODY_METHODS: [&str; 3] = ["POST", "PUT", "PATCH"];

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
        }
    }

    pub fn host(&self) -> &H {
        &self.host
    }

    fn count(&self, m: Metric, delta: usize) {
        if let (Some(id), true) = (self.metrics.id(m), delta > 0) {
            self.host
                .metric_add(id, i64::try_from(delta).unwrap_or(i64::MAX));
        }
    }

    pub fn on_request_headers(&mut self, end_of_stream: bool) -> Action {
        let Some(config) = self.config.clone() else {
            return Action::Continue;
        };
        // Whatever a client sent under a header Ferry writes never reaches the model, whether or
        // not a route matches. The names also tell how often each id header was sent.
        let names = self.host.request_header_names();
        self.grpc_client = self
            .host
            .request_header("content-type")
            .is_some_and(|t| t.starts_with("application/grpc"));
        for name in &names {
            if config.owns_header(name) {
                self.host.set_request_header(name, None);
            }
        }
        let index = match self.select_route(&config) {
            Ok(Some(i)) => i,
            Ok(None) => return Action::Continue,
            Err((route, e)) => return self.answer_named(&route, &e),
        };
        let route = &config.routes[index];
        if let Format::Header { .. } = &route.format {
            let count = |n: &str| names.iter().filter(|x| x.as_str() == n).count();
            let parsed = header::parse(|n| self.host.request_header(n), count, route);
            return match parsed {
                Ok(r) => self.lookup(
                    &config,
                    index,
                    ParsedRequest::Header(r),
                    0,
                    Resume::ByReturningContinue,
                ),
                Err(e) => self.answer(route, &e),
            };
        }
        match self.body_expected(route, end_of_stream) {
            Ok(true) => {}
            Ok(false) => return Action::Continue,
            Err(e) => return self.answer(route, &e),
        }
        // Only KServe v2 reads the binary extension; other formats parse the whole body.
        let framing = match &route.format {
            Format::KserveV2 { .. } => match self.framing(&names) {
                Ok(f) => f,
                Err(e) => return self.answer(route, &e),
            },
            _ => None,
        };
        // The body will change size (and its binary framing with it); the right values are set
        // again before resuming, when Envoy holds the headers. When it does not (no
        // `allow_on_headers_stop_iteration`, as under Istio and Envoy Gateway) a paused header
        // callback stops the body too, so the headers go on now, without a length (HTTP/1
        // upstreams get the body chunked), and the body callbacks hold the body. A binary
        // framing header cannot be corrected then: such a request is refused, never forwarded
        // with a header that no longer matches its body.
        if framing.is_some() && !config.headers_held {
            return self.answer(
                route,
                &FerryError::BadFraming(
                    "the binary tensor extension needs Envoy to hold the request headers while \
                     Ferry rewrites the body (allow_on_headers_stop_iteration), which this \
                     deployment does not; send the tensors as JSON (binary_data=False)"
                        .into(),
                ),
            );
        }
        self.host.set_request_header("content-length", None);
        self.host.set_request_header(binary::HEADER, None);
        self.state = State::ReadingBody {
            route: index,
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

    /// The binary framing header of a body route's request. Given twice, Ferry and the model
    /// could each read another value: refused.
    fn framing(&self, names: &[String]) -> Result<Option<String>, FerryError> {
        let sent = names
            .iter()
            .filter(|n| n.eq_ignore_ascii_case(binary::HEADER))
            .count();
        if sent > 1 {
            return Err(FerryError::BadFraming(
                "Inference-Header-Content-Length is given more than once; send it exactly once"
                    .into(),
            ));
        }
        Ok(self.host.request_header(binary::HEADER))
    }

    /// The route this request takes, if any. An Envoy route that names a Ferry route in its
    /// metadata selects it (looked at only when the snapshot has a route selected by name);
    /// otherwise the routes' conditions do, on the normalised path. An unmatched path under a
    /// protected prefix, or a name the snapshot lacks, is an error (with the route to name).
    fn select_route(&self, config: &Config) -> Result<Option<usize>, (String, FerryError)> {
        let named = if config.reads_route_metadata {
            self.host.route_metadata("route")
        } else {
            None
        };
        if let Some(name) = named {
            return match config.route_named(&name) {
                Some(i) => Ok(Some(i)),
                None => Err((name.clone(), FerryError::UnknownRoute { name })),
            };
        }
        let raw = self.host.request_header(":path").unwrap_or_default();
        let path = ferry_protos::path::normalize(&raw);
        let host = &self.host;
        if let Some(i) = config.match_route(&path, &|h| host.request_header(h)) {
            return Ok(Some(i));
        }
        match config.protected_prefix(&path) {
            Some(prefix) => Err((
                String::new(),
                FerryError::NoRoute {
                    path: raw,
                    prefix: prefix.to_string(),
                },
            )),
            None => Ok(None),
        }
    }

    /// Whether a body route reads this request's body: POST, PUT and PATCH with a body within
    /// the route's limit do; other methods without a body pass (KServe's `GET
    /// /v1/models/NAME`); a body they carry would reach the model unenriched, so it is refused.
    fn body_expected(&self, route: &Route, end_of_stream: bool) -> Result<bool, FerryError> {
        let method = self.host.request_header(":method").unwrap_or_default();
        if !BODY_METHODS.contains(&method.as_str()) {
            return if end_of_stream {
                Ok(false)
            } else {
                Err(FerryError::UnexpectedBody { method })
            };
        }
        if end_of_stream {
            return Err(FerryError::NoBody);
        }
        let declared = self
            .host
            .request_header("content-length")
            .and_then(|v| v.trim().parse::<u64>().ok());
        match declared.filter(|s| *s > u64::from(route.max_body_bytes)) {
            Some(size) => Err(FerryError::BodyTooLarge {
                limit: route.max_body_bytes,
                size,
            }),
            None => Ok(true),
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
        // A client's value under a name Ferry owns never goes on, in trailers either (an
        // HTTP/2 upstream would receive them).
        if let Some(config) = &self.config {
            for name in self.host.request_trailer_names() {
                if config.owns_header(&name) {
                    self.host.remove_request_trailer(&name);
                }
            }
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
        if body_size == 0 {
            return self.answer(route, &FerryError::NoBody);
        }
        let body = self.host.request_body(body_size).unwrap_or_default();
        let framing = match &self.state {
            State::ReadingBody { framing, .. } => framing.clone(),
            _ => None,
        };
        let parsed = match &route.format {
            Format::FeastRest => format::feast_rest::parse(&body, route, config)
                .map(|r| ParsedRequest::FeastRest(Box::new(r))),
            _ => format::parse(&body, route, framing.as_deref()),
        };
        let request = match parsed {
            Ok(r) => r,
            Err(e) => return self.answer(route, &e),
        };
        self.lookup(
            config,
            index,
            request,
            body_size,
            Resume::ByReturningContinue,
        )
    }

    /// Near cache first, then one reader call for the misses (or straight to the rewrite when
    /// everything was cached).
    fn lookup(
        &mut self,
        config: &Config,
        index: usize,
        request: ParsedRequest,
        body_size: usize,
        resume: Resume,
    ) -> Action {
        let route = served_route(config, index, &request);
        let route = &*route;
        let vectors = self.cached_vectors(config, route, request.keys());
        let misses: Vec<usize> = (0..vectors.len())
            .filter(|i| vectors[*i].is_empty())
            .collect();
        if misses.is_empty() {
            return self.finish(route, request, body_size, &vectors, resume);
        }
        let call = enrich::reader_request(config, route, request.keys(), &misses);
        let headers = vec![
            (":method", "POST"),
            (":path", ferry_protos::READER_PATH),
            (":authority", config.reader_authority.as_str()),
            ("content-type", ferry_protos::PROTOBUF_CONTENT_TYPE),
        ];
        let timeout = Duration::from_millis(u64::from(route.reader_timeout_ms));
        match self
            .host
            .dispatch(&config.reader_cluster, headers, &call.body, timeout)
        {
            Ok(token) => {
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
            Err(detail) => {
                let err = FerryError::DispatchFailed { detail };
                self.reader_failed(route, request, body_size, &err, resume)
            }
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
        self.tell_client();
        Action::Continue
    }

    fn tell_client(&mut self) {
        for (name, value) in std::mem::take(&mut self.summary) {
            self.host.set_response_header(name, &value);
        }
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
        let route = served_route(&config, p.route, &p.request);
        let route = &*route;
        if let Some(id) = self.metrics.id(Metric::ReaderLatencyUs) {
            let took = self.host.now_us().saturating_sub(p.sent_at_us);
            self.host
                .metric_record(id, u64::try_from(took).unwrap_or(0));
        }
        let status = if num_headers == 0 {
            None
        } else {
            self.host.call_response_status()
        };
        let body = self.host.call_response_body(body_size).unwrap_or_default();
        let fetched = enrich::check_reader_status(status, &body, route.reader_timeout_ms)
            .and_then(|()| enrich::reader_vectors(&body, &p.lookup_sizes));
        let fetched = match fetched {
            Ok(v) => v,
            Err(e) => {
                let Pending {
                    request, body_size, ..
                } = *p;
                self.reader_failed(route, request, body_size, &e, Resume::ByHostCall);
                return;
            }
        };
        for (i, v) in p.misses.iter().zip(fetched) {
            p.vectors[*i] = v;
        }
        self.cache_fetched(route, &p);
        let Pending {
            request,
            body_size,
            vectors,
            ..
        } = *p;
        self.finish(route, request, body_size, &vectors, Resume::ByHostCall);
    }

    /// Per entity: the near cache's vector when the route uses it and holds a fresh one, else
    /// empty (to fetch).
    fn cached_vectors(&self, config: &Config, route: &Route, keys: &[String]) -> Vec<Vec<u8>> {
        if route.cache_max_age_ms == 0 {
            return vec![Vec::new(); keys.len()];
        }
        let now_ms = u64::try_from(self.host.now_us() / 1000).unwrap_or(0);
        let out: Vec<Vec<u8>> = keys
            .iter()
            .enumerate()
            .map(|(j, k)| {
                let service = route.service_of_key(j);
                let id = near_cache::entry_id(service.fingerprint, &service.name, k);
                let (set, _) = self
                    .host
                    .shared_get(&near_cache::set_key(&id, config.near_cache_sets));
                set.and_then(|s| {
                    near_cache::lookup(&s, &id, now_ms, route.cache_max_age_ms).map(<[u8]>::to_vec)
                })
                .unwrap_or_default()
            })
            .collect();
        let hits = out.iter().filter(|v| !v.is_empty()).count();
        self.count(Metric::CacheHits, hits);
        self.count(Metric::CacheMisses, keys.len() - hits);
        out
    }

    /// Puts the vectors the reader just returned into the near cache (best effort: a set
    /// changed by another worker meanwhile is left alone).
    fn cache_fetched(&self, route: &Route, p: &Pending) {
        let Some(config) = self.config.as_ref() else {
            return;
        };
        if route.cache_max_age_ms == 0 {
            return;
        }
        let now_ms = u64::try_from(self.host.now_us() / 1000).unwrap_or(0);
        let mut evictions = 0;
        for i in &p.misses {
            let vector = &p.vectors[*i];
            if vector.is_empty() {
                continue;
            }
            let service = route.service_of_key(*i);
            let id =
                near_cache::entry_id(service.fingerprint, &service.name, &p.request.keys()[*i]);
            let key = near_cache::set_key(&id, config.near_cache_sets);
            let (set, cas) = self.host.shared_get(&key);
            if let near_cache::Insert::Write { set, evicted } =
                near_cache::insert(set.as_deref(), &id, vector, now_ms)
            {
                if self.host.shared_set(&key, &set, cas) && evicted {
                    evictions += 1;
                }
            }
        }
        self.count(Metric::CacheEvictions, evictions);
    }

    fn finish(
        &mut self,
        route: &Route,
        request: ParsedRequest,
        body_size: usize,
        vectors: &[Vec<u8>],
        resume: Resume,
    ) -> Action {
        match enrich::enrich(route, request, vectors, self.host.now_us()) {
            Ok(out) => {
                self.count(Metric::Enriched, 1);
                self.count(Metric::EntitiesFound, out.found);
                self.count(Metric::EntitiesMissing, out.missing);
                self.count(Metric::EntitiesStale, out.stale);
                self.forward(route, out, body_size, resume)
            }
            Err(e) => self.answer(route, &e),
        }
    }

    /// Sends the request on with what Ferry wrote: the new body, the features header(s) and
    /// `x-ferry-*` (also told to the client on the response).
    /// When the headers already went on, only the body is rewritten; the model then learns
    /// what Ferry did from the body alone (the client still gets `x-ferry-*`), and a rewrite
    /// that needs request headers is refused rather than sent half done.
    fn forward(
        &mut self,
        route: &Route,
        out: enrich::Enriched,
        body_size: usize,
        resume: Resume,
    ) -> Action {
        if route.format == Format::FeastRest {
            return self.reply(out);
        }
        if self.headers_sent && !out.rewritten.headers.is_empty() {
            let names: Vec<&str> = out
                .rewritten
                .headers
                .iter()
                .map(|(n, _)| n.as_str())
                .collect();
            let err = FerryError::HeadersAlreadySent {
                names: names.join(", "),
            };
            return self.answer(route, &err);
        }
        if let Some(body) = &out.rewritten.body {
            self.host.replace_request_body(body_size, body);
            if !self.headers_sent {
                self.host
                    .set_request_header("content-length", Some(&body.len().to_string()));
            }
        }
        if !self.headers_sent {
            for (name, value) in &out.rewritten.headers {
                self.host.set_request_header(name, Some(value));
            }
            for (name, value) in &out.headers {
                self.host.set_request_header(name, Some(value));
            }
        }
        self.summary = out.headers;
        self.state = State::Done;
        if resume == Resume::ByHostCall {
            self.host.resume_request();
        }
        if self.response_held {
            self.response_held = false;
            self.tell_client();
            self.host.resume_response();
        }
        Action::Continue
    }

    /// A route that answers itself (`feast_rest`): the new body is the response, with
    /// `x-ferry-*`; nothing reaches an upstream.
    fn reply(&mut self, out: enrich::Enriched) -> Action {
        let mut headers: Vec<(&str, &str)> = vec![("content-type", "application/json")];
        headers.extend(out.headers.iter().map(|(n, v)| (*n, v.as_str())));
        let body = out.rewritten.body.unwrap_or_default();
        self.host.send_response(200, headers, &body);
        self.state = State::Done;
        Action::Pause
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
        self.host
            .log_warn(&format!("route '{}': {}", route.name, err.message()));
        if err.is_reader_failure() {
            self.count(Metric::ReaderErrors, 1);
        }
        if matches!(
            err,
            FerryError::ReaderTimeout { .. } | FerryError::RedisTimeout { .. }
        ) {
            self.count(Metric::ReaderTimeouts, 1);
        }
        // Only failures of the reader path may fail open; a bad vector is never forwarded.
        if route.on_reader_error != OnReaderError::Forward || !err.is_reader_failure() {
            return self.answer(route, err);
        }
        match enrich::degraded(route, request, err) {
            Ok(out) => {
                self.count(Metric::Degraded, 1);
                self.forward(route, out, body_size, resume)
            }
            Err(e) => self.answer(route, &e),
        }
    }

    fn answer(&mut self, route: &Route, err: &FerryError) -> Action {
        self.answer_named(&route.name, err)
    }

    /// Answers the request with `err`: a JSON error body, or to a gRPC client (its
    /// `content-type` says so) a gRPC status whose message starts with the error's code.
    fn answer_named(&mut self, route: &str, err: &FerryError) -> Action {
        if self.grpc_client {
            let message = format!("{}: {}", err.code(), err.message());
            self.host.send_grpc_error(
                err.grpc_status(),
                &message,
                vec![("x-ferry-error", err.code())],
            );
        } else {
            let body = err.body(route);
            self.host
                .send_response(err.status(), err.reply_headers(), &body);
        }
        self.count(Metric::Rejected, 1);
        self.state = State::Done;
        Action::Pause
    }
}

/// The route a request is served by: its own for a `feast_rest` request (the services its
/// body names), else the snapshot's route `index`.
enum Served<'a> {
    Snapshot(&'a Route),
    Own(Rc<Route>),
}

impl std::ops::Deref for Served<'_> {
    type Target = Route;
    fn deref(&self) -> &Route {
        match self {
            Served::Snapshot(r) => r,
            Served::Own(r) => r,
        }
    }
}

fn served_route<'a>(config: &'a Config, index: usize, request: &ParsedRequest) -> Served<'a> {
    match request {
        ParsedRequest::FeastRest(r) => Served::Own(r.route.clone()),
        _ => Served::Snapshot(&config.routes[index]),
    }
}

#[cfg(test)]
#[path = "http_context_unheld_tests.rs"]
mod unheld_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::fixture::{config, route_with, FP};
    use crate::host::testing::FakeHost;
    use ferry_protos::v1::{self as pb, value::Kind};
    use ferry_test_support::snapshot::{header_format, with_merchant, MERCHANT_FP};
    use ferry_test_support::vector::{vector, NOW_US as NOW};
    use ferry_test_support::{reader, vector as vectors};
    use prost::Message;
    use std::collections::HashMap;

    /// A filter on a fake host holding this request (and a forged `x-ferry-status`).
    pub(super) fn filter(c: Config, method: &str, path: &str, body: &str) -> HttpFilter<FakeHost> {
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
        HttpFilter::new(
            host,
            Some(Rc::new(c)),
            Rc::new(Metrics::define(|_, _| Some(1))),
        )
    }

    fn reader_ok(f: &HttpFilter<FakeHost>, vectors: Vec<Vec<u8>>) {
        *f.host().call_status.borrow_mut() = Some(200);
        *f.host().call_body.borrow_mut() = reader::response(vectors);
    }

    fn sent(f: &HttpFilter<FakeHost>) -> (u16, serde_json::Value) {
        let s = f.host().sent.borrow().clone().expect("a local reply");
        (s.0, serde_json::from_slice(&s.2).unwrap())
    }

    const BODY: &str = r#"{"instances":[{"user_id":"u1"}]}"#;

    #[test]
    fn a_feast_rest_route_answers_itself_and_forwards_nothing() {
        let c = route_with(|r| {
            r.format = pb::Format::FeastRest as i32;
            r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
        });
        let body = r#"{"features":["txn:count"],"entities":{"user_id":["u1","u2"]}}"#;
        let mut f = filter(c, "POST", "/v1/models/fraud", body);
        assert_eq!(f.on_request_headers(false), Action::Pause);
        assert_eq!(f.on_request_body(body.len(), true), Action::Pause);
        reader_ok(
            &f,
            vec![
                vectors::scoring(NOW, Some(1), Some(0.5), Some(9)),
                Vec::new(),
            ],
        );
        f.on_call_response(7, 3, 100);
        assert!(!*f.host().resumed.borrow(), "never forwarded");
        let (status, v) = sent(&f);
        assert_eq!(status, 200);
        assert_eq!(
            v["metadata"]["feature_names"],
            serde_json::json!(["user_id", "count"])
        );
        assert_eq!(v["results"][1]["values"], serde_json::json!([9, null]));
        assert_eq!(
            v["results"][1]["statuses"],
            serde_json::json!(["PRESENT", "NOT_FOUND"])
        );
    }

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
        f.on_response_headers();
        let told = f.host().response_headers.borrow().clone();
        assert!(
            told.contains(&("x-ferry-status".into(), "ok".into())),
            "{told:?}"
        );
        assert!(told.contains(&("x-ferry-fingerprint".into(), "123456789abcdef0".into())));
    }

    #[test]
    fn unmatched_paths_and_bodiless_methods_pass_through() {
        let mut f = filter(config(), "POST", "/healthz", BODY);
        assert_eq!(f.on_request_headers(false), Action::Continue);
        assert_eq!(f.on_request_body(BODY.len(), true), Action::Continue);
        assert_eq!(f.host().body.borrow().as_slice(), BODY.as_bytes());
        assert_eq!(
            f.host().request_header("x-ferry-status"),
            None,
            "a client's x-ferry-* never goes on, matched or not"
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
    fn a_grpc_client_gets_its_errors_as_grpc_statuses() {
        use crate::format::kserve_v2_grpc::frame;
        use ferry_protos::inference::{model_infer_request::InferInputTensor, *};
        let grpc_filter = |body: &[u8]| {
            let c = route_with(|r| r.format = pb::Format::KserveV2Grpc as i32);
            let mut f = filter(c, "POST", "/v1/models/fraud", "");
            *f.host().body.borrow_mut() = body.to_vec();
            let h = f.host();
            h.set_request_header("content-type", Some("application/grpc"));
            h.set_request_header("content-length", None);
            f.on_request_headers(false);
            f.on_request_body(body.len(), true);
            f
        };
        let grpc_reply = |f: &HttpFilter<FakeHost>| {
            let (status, headers, body) = f.host().sent.borrow().clone().expect("a reply");
            assert_eq!((status, body.len()), (200, 0));
            let h: HashMap<String, String> = headers.into_iter().collect();
            assert_eq!(h["content-type"], "application/grpc");
            (
                h["grpc-status"].clone(),
                h["grpc-message"].clone(),
                h["x-ferry-error"].clone(),
            )
        };
        let f = grpc_filter(&frame(b"abc"));
        let (status, message, code) = grpc_reply(&f);
        assert_eq!(
            (status.as_str(), code.as_str()),
            ("3", "malformed_protobuf")
        );
        assert!(message.starts_with("malformed_protobuf: request body is not a valid protobuf"));
        // A well-formed call whose reader is away: UNAVAILABLE.
        let request = ModelInferRequest {
            inputs: vec![InferInputTensor {
                name: "user_id".into(),
                datatype: "BYTES".into(),
                shape: vec![1],
                contents: Some(InferTensorContents {
                    bytes_contents: vec![b"u1".to_vec()],
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut f = grpc_filter(&frame(&request.encode_to_vec()));
        assert!(f.host().sent.borrow().is_none());
        f.on_call_response(7, 0, 0);
        let (status, message, _) = grpc_reply(&f);
        assert_eq!(status, "14", "{message}");
        assert!(message.starts_with("reader_unavailable: "), "{message}");
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
        // Forwarded with every feature null: a client's value under a feature's name or
        // `ferry` never goes on, even unenriched.
        let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
        assert_eq!(
            f.host().request_header("content-length"),
            Some(f.host().body.borrow().len().to_string())
        );
        assert_eq!(body["instances"][0]["user_id"], "u1");
        assert!(body["instances"][0]["profile__age"].is_null());
        assert_eq!(body["ferry"]["statuses"][0]["profile__age"], "NOT_FOUND");
        f.on_response_headers();
        let told = f.host().response_headers.borrow().clone();
        assert!(
            told.contains(&("x-ferry-status".into(), "degraded".into())),
            "{told:?}"
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
    fn a_degraded_forward_carries_no_forged_feature() {
        let forged = r#"{"instances":[{"user_id":"u1","profile__age":99}],"ferry":{"forged":1}}"#;
        let c =
            route_with(|r| r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32);
        let mut f = filter(c, "POST", "/v1/models/fraud", forged);
        f.on_request_headers(false);
        f.on_request_body(forged.len(), true);
        f.on_call_response(7, 0, 0); // the reader never answered
        assert!(*f.host().resumed.borrow());
        let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
        assert!(body["instances"][0]["profile__age"].is_null(), "{body}");
        assert_eq!(body["ferry"]["service"], "scoring");
        assert_eq!(
            f.host().request_header("x-ferry-status").as_deref(),
            Some("degraded")
        );
    }

    #[test]
    fn a_reader_refusal_is_never_failed_open() {
        let c =
            route_with(|r| r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32);
        let mut f = filter(c, "POST", "/v1/models/fraud", BODY);
        f.on_request_headers(false);
        f.on_request_body(BODY.len(), true);
        *f.host().call_status.borrow_mut() = Some(400);
        *f.host().call_body.borrow_mut() =
            br#"{"error":"bad_request","message":"key too long"}"#.to_vec();
        f.on_call_response(7, 2, 49);
        assert!(!*f.host().resumed.borrow(), "not forwarded");
        assert_eq!(sent(&f).0, 502);
        assert_eq!(sent(&f).1["error"], "reader_rejected");

        // A 4xx that is not the reader's JSON (another server at its address) neither.
        let c =
            route_with(|r| r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32);
        let mut f = filter(c, "POST", "/v1/models/fraud", BODY);
        f.on_request_headers(false);
        f.on_request_body(BODY.len(), true);
        *f.host().call_status.borrow_mut() = Some(404);
        *f.host().call_body.borrow_mut() = b"not here".to_vec();
        f.on_call_response(7, 2, 8);
        assert!(!*f.host().resumed.borrow(), "not forwarded");
        assert_eq!(sent(&f).1["error"], "reader_rejected");
    }

    #[test]
    fn an_over_long_id_is_the_clients_fault_on_every_route() {
        let part = "u".repeat(ferry_protos::limits::MAX_KEY_PART_BYTES);
        for policy in [
            pb::ReaderErrorPolicy::ReaderErrorReject,
            pb::ReaderErrorPolicy::ReaderErrorForward,
        ] {
            let body = format!(r#"{{"instances":[{{"user_id":"{part}x"}}]}}"#);
            let c = route_with(|r| r.on_reader_error = policy as i32);
            let mut f = filter(c, "POST", "/v1/models/fraud", &body);
            f.on_request_headers(false);
            assert_eq!(f.on_request_body(body.len(), true), Action::Pause);
            assert_eq!(
                (sent(&f).0, sent(&f).1["error"].as_str()),
                (400, Some("invalid_entity_id"))
            );
            assert!(f.host().dispatched.borrow().is_empty(), "no reader call");
            // At the limit: looked up.
            let body = format!(r#"{{"instances":[{{"user_id":"{part}"}}]}}"#);
            let c = route_with(|r| r.on_reader_error = policy as i32);
            let mut f = filter(c, "POST", "/v1/models/fraud", &body);
            f.on_request_headers(false);
            assert_eq!(f.on_request_body(body.len(), true), Action::Pause);
            assert_eq!(f.host().dispatched.borrow().len(), 1);
        }
    }

    #[test]
    fn a_body_that_ends_with_trailers_is_enriched() {
        let mut f = filter(config(), "POST", "/v1/models/fraud:predict", BODY);
        assert_eq!(f.on_request_headers(false), Action::Pause);
        assert_eq!(f.on_request_body(BODY.len(), false), Action::Pause);
        assert_eq!(f.on_request_trailers(), Action::Pause, "trailers wait");
        assert_eq!(f.host().dispatched.borrow().len(), 1);
        reader_ok(&f, vec![good_vector(30)]);
        f.on_call_response(7, 3, 100);
        assert!(*f.host().resumed.borrow());
        let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
        assert_eq!(body["instances"][0]["profile__age"], 30);

        // Ferry's names are removed from trailers too; other trailers go on.
        let mut f = filter(config(), "POST", "/other", BODY);
        *f.host().trailers.borrow_mut() = vec![
            ("x-ferry-status".into(), "ok".into()),
            ("grpc-status".into(), "0".into()),
        ];
        f.on_request_headers(false);
        assert_eq!(f.on_request_trailers(), Action::Continue);
        assert_eq!(f.host().request_trailer_names(), ["grpc-status"]);

        // A bad body ending in trailers is answered, not forwarded.
        let mut f = filter(config(), "POST", "/v1/models/fraud:predict", "{oops");
        f.on_request_headers(false);
        f.on_request_body(5, false);
        assert_eq!(f.on_request_trailers(), Action::Pause);
        assert_eq!(sent(&f).1["error"], "malformed_json");
        // Trailers right after the headers: no body.
        let mut f = filter(config(), "POST", "/v1/models/fraud:predict", "");
        f.on_request_headers(false);
        assert_eq!(f.on_request_trailers(), Action::Pause);
        assert_eq!(sent(&f).1["error"], "no_body");
    }

    #[test]
    fn routes_match_the_normalised_path_and_protected_prefixes_refuse_the_rest() {
        for path in [
            "/v1/models/fr%61ud:predict",
            "//v1/models/fraud:predict",
            "/v1/./models/x/../fraud:predict",
        ] {
            let mut f = filter(config(), "POST", path, BODY);
            assert_eq!(f.on_request_headers(false), Action::Pause, "{path}");
            f.on_request_body(BODY.len(), true);
            assert_eq!(f.host().dispatched.borrow().len(), 1, "{path} enriched");
        }
        for path in [
            "/V1/Models/fraud:predict",
            "/v1/models/other:predict",
            "/v1/models/",
        ] {
            let mut f = filter(config(), "GET", path, "");
            assert_eq!(f.on_request_headers(true), Action::Pause, "{path}");
            let (status, body) = sent(&f);
            assert_eq!((status, body["error"].as_str()), (404, Some("no_route")));
            assert!(body["message"].as_str().unwrap().contains("/v1/models/"));
        }
        // Outside the protected prefixes an unmatched request goes on.
        let mut f = filter(config(), "POST", "/V2/whatever", BODY);
        assert_eq!(f.on_request_headers(false), Action::Continue);
    }

    #[test]
    fn a_body_on_a_bodiless_method_is_refused() {
        let mut f = filter(config(), "GET", "/v1/models/fraud:predict", BODY);
        assert_eq!(f.on_request_headers(false), Action::Pause);
        assert_eq!(
            (sent(&f).0, sent(&f).1["error"].as_str()),
            (405, Some("unexpected_body"))
        );
    }

    #[test]
    fn custom_features_headers_are_removed_from_every_request() {
        let mut s = crate::config::fixture::snapshot();
        let mut h = s.routes[0].clone();
        h.name = "hdr".into();
        h.r#match = Some(pb::RouteMatch {
            path_prefix: "/hdr".into(),
            ..Default::default()
        });
        header_format(&mut h);
        h.features_header = "x-features".into();
        s.routes.push(h);
        let c = Config::from_snapshot(s).unwrap();
        assert_eq!(c.owned_headers, ["x-features"]);
        let mut f = filter(c, "POST", "/unrouted", BODY);
        f.host()
            .set_request_header("x-features", Some(r#"{"forged":1}"#));
        assert_eq!(f.on_request_headers(false), Action::Continue);
        assert_eq!(f.host().request_header("x-features"), None);
        assert_eq!(f.host().request_header("x-ferry-status"), None);
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

    fn cached_route() -> Config {
        route_with(|r| r.cache_max_age_ms = 1000)
    }

    fn good_vector(age: i64) -> Vec<u8> {
        vectors::scoring(NOW, Some(age), Some(1.5), Some(2))
    }

    /// A new stream at `now_us` on the same shared data (the near cache) as `prev`'s.
    fn next_stream(
        prev: &HttpFilter<FakeHost>,
        now_us: i64,
        c: &Rc<Config>,
        metrics: &Rc<Metrics>,
    ) -> HttpFilter<FakeHost> {
        let host = FakeHost {
            now_us,
            shared: std::cell::RefCell::new(prev.host().shared.borrow().clone()),
            ..Default::default()
        };
        let f = HttpFilter::new(host, Some(c.clone()), metrics.clone());
        *f.host().headers.borrow_mut() = vec![
            (":method".into(), "POST".into()),
            (":path".into(), "/v1/models/fraud".into()),
        ];
        f
    }

    /// Runs one request through `f`'s host and returns the decoded reader request, if any.
    fn run_cached(
        f: &mut HttpFilter<FakeHost>,
        body: &str,
        reader: Vec<Vec<u8>>,
    ) -> Option<Vec<String>> {
        *f.host().body.borrow_mut() = body.as_bytes().to_vec();
        f.host()
            .set_request_header("content-length", Some(&body.len().to_string()));
        assert_eq!(f.on_request_headers(false), Action::Pause);
        let action = f.on_request_body(body.len(), true);
        let call = f.host().dispatched.borrow_mut().pop();
        match call {
            None => {
                assert_eq!(
                    action,
                    Action::Continue,
                    "all hits: resumed by returning Continue"
                );
                None
            }
            Some(c) => {
                assert_eq!(action, Action::Pause);
                reader_ok(f, reader);
                f.on_call_response(7, 3, 100);
                let req = ferry_protos::v1::VectorRequest::decode(c.2.as_slice()).unwrap();
                Some(req.lookups[0].entity_keys.clone())
            }
        }
    }

    #[test]
    fn near_cache_serves_repeat_entities_without_a_reader_call() {
        let c = Rc::new(cached_route());
        let metrics = Rc::new(Metrics::define(|kind, name| {
            Some(
                crate::metrics::ALL
                    .iter()
                    .position(|(_, k, n)| *k == kind && *n == name)
                    .unwrap() as u32,
            )
        }));
        let host = FakeHost {
            now_us: NOW,
            ..Default::default()
        };
        let mut f = HttpFilter::new(host, Some(c.clone()), metrics.clone());
        *f.host().headers.borrow_mut() = vec![
            (":method".into(), "POST".into()),
            (":path".into(), "/v1/models/fraud".into()),
        ];
        let sent = run_cached(
            &mut f,
            r#"{"instances":[{"user_id":"u1"}]}"#,
            vec![good_vector(30)],
        );
        assert_eq!(sent, Some(vec!["u1".to_string()]));

        // Same host (same shared data), new stream: u1 is cached, only u2 is fetched.
        let mut f = next_stream(&f, NOW + 500_000, &c, &metrics);
        let sent = run_cached(
            &mut f,
            r#"{"instances":[{"user_id":"u1"},{"user_id":"u2"}]}"#,
            vec![good_vector(40)],
        );
        assert_eq!(sent, Some(vec!["u2".to_string()]));
        let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
        assert_eq!(
            (
                body["instances"][0]["profile__age"].as_i64(),
                body["instances"][1]["profile__age"].as_i64()
            ),
            (Some(30), Some(40))
        );
        let id = |m| metrics.id(m).unwrap();
        assert_eq!(
            f.host().metrics.borrow().get(&id(Metric::CacheHits)),
            Some(&1)
        );
        assert_eq!(
            f.host().metrics.borrow().get(&id(Metric::CacheMisses)),
            Some(&1)
        );

        // Both cached now: no reader call at all.
        let mut f = next_stream(&f, NOW + 900_000, &c, &metrics);
        assert_eq!(
            run_cached(
                &mut f,
                r#"{"instances":[{"user_id":"u2"},{"user_id":"u1"}]}"#,
                vec![]
            ),
            None
        );
        assert_eq!(f.host().request_header("x-ferry-status"), Some("ok".into()));
        let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
        assert_eq!(body["instances"][0]["profile__age"], 40);

        // Past the route's max age (1 s after insertion): fetched again.
        let mut f = next_stream(&f, NOW + 1_600_000, &c, &metrics);
        let sent = run_cached(
            &mut f,
            r#"{"instances":[{"user_id":"u1"}]}"#,
            vec![good_vector(31)],
        );
        assert_eq!(sent, Some(vec!["u1".to_string()]));
    }

    #[test]
    fn cache_is_off_unless_the_route_asks() {
        let mut f = filter(config(), "POST", "/v1/models/fraud", BODY);
        f.on_request_headers(false);
        f.on_request_body(BODY.len(), true);
        reader_ok(&f, vec![good_vector(1)]);
        f.on_call_response(7, 3, 100);
        assert!(f.host().shared.borrow().is_empty());
        assert!(*f.host().resumed.borrow());
    }

    #[test]
    fn counts_outcomes() {
        let mut f = filter(config(), "POST", "/v1/models/fraud", "{oops");
        f.on_request_headers(false);
        f.on_request_body(5, true);
        // Every metric has id 1 in `filter()`: one rejection counted once.
        assert_eq!(f.host().metrics.borrow().get(&1), Some(&1));
    }

    #[test]
    fn header_mode_enriches_a_get_without_touching_its_body() {
        let c = route_with(header_format);
        let mut f = filter(c, "GET", "/v1/models/fraud", "");
        f.host().set_request_header("x-user-id", Some("u1"));
        f.host()
            .set_request_header("x-ferry-features", Some("{\"forged\":1}"));
        assert_eq!(f.on_request_headers(true), Action::Pause);
        assert_eq!(
            f.host().request_header("x-ferry-features"),
            None,
            "forged header removed"
        );
        reader_ok(&f, vec![good_vector(30)]);
        f.on_call_response(7, 3, 100);
        assert!(*f.host().resumed.borrow());
        assert_eq!(
            f.host().request_header("x-ferry-features").as_deref(),
            Some(r#"{"profile__age":30,"profile__score":1.5,"txn__count":2}"#)
        );
        assert_eq!(
            f.host().request_header("content-length"),
            Some("0".into()),
            "untouched"
        );
        assert_eq!(f.host().request_header("x-ferry-status"), Some("ok".into()));

        let c = route_with(header_format);
        let mut f = filter(c, "GET", "/v1/models/fraud", "");
        assert_eq!(f.on_request_headers(true), Action::Pause);
        assert_eq!(sent(&f).0, 400, "no id header");
    }

    #[test]
    fn header_mode_holds_a_body_and_trailers_until_the_features_are_written() {
        let c = route_with(header_format);
        let mut f = filter(c, "POST", "/v1/models/fraud", "\0\0\0\0\x05hello");
        f.host().set_request_header("x-user-id", Some("u1"));
        assert_eq!(f.on_request_headers(false), Action::Pause);
        assert_eq!(f.on_request_body(5, false), Action::Pause);
        assert_eq!(f.on_request_body(10, true), Action::Pause);
        assert_eq!(f.on_request_trailers(), Action::Pause);
        assert!(f.host().request_header("x-ferry-features").is_none());
        reader_ok(&f, vec![good_vector(30)]);
        f.on_call_response(7, 3, 100);
        assert!(*f.host().resumed.borrow());
        assert!(f.host().request_header("x-ferry-features").is_some());
        // Once resumed, later callbacks go on.
        assert_eq!(f.on_request_trailers(), Action::Continue);
    }

    #[test]
    fn envoy_route_metadata_selects_a_route_by_name() {
        let c = route_with(|r| {
            r.name = "by-name".into();
            r.r#match = Some(pb::RouteMatch::default());
        });
        // Without metadata a by-name route never matches: passthrough (outside the protected
        // prefix).
        let mut f = filter(c, "POST", "/other/fraud:predict", BODY);
        assert_eq!(f.on_request_headers(false), Action::Continue);
        assert!(f.host().sent.borrow().is_none());

        let c = route_with(|r| {
            r.name = "by-name".into();
            r.r#match = Some(pb::RouteMatch::default());
        });
        let mut f = filter(c, "POST", "/anything", BODY);
        f.host()
            .route_metadata
            .borrow_mut()
            .insert("route".into(), "by-name".into());
        assert_eq!(f.on_request_headers(false), Action::Pause);
        assert_eq!(f.on_request_body(BODY.len(), true), Action::Pause);
        assert_eq!(f.host().dispatched.borrow().len(), 1, "enriched");

        let mut s = crate::config::fixture::snapshot();
        let mut by_name = s.routes[0].clone();
        by_name.name = "by-name".into();
        by_name.r#match = None;
        s.routes.push(by_name);
        let c = Config::from_snapshot(s).unwrap();
        assert!(c.reads_route_metadata);
        let mut f = filter(c, "POST", "/v1/models/fraud:predict", BODY);
        f.host()
            .route_metadata
            .borrow_mut()
            .insert("route".into(), "gone".into());
        assert_eq!(f.on_request_headers(false), Action::Pause);
        let (status, body) = sent(&f);
        assert_eq!(status, 500);
        assert_eq!(body["error"], "unknown_route");
        assert_eq!(body["route"], "gone");
        assert!(f.host().dispatched.borrow().is_empty());

        // Without a by-name route the metadata is not even read: the path decides.
        let c = config();
        assert!(!c.reads_route_metadata);
        let mut f = filter(c, "POST", "/v1/models/fraud:predict", BODY);
        f.host()
            .route_metadata
            .borrow_mut()
            .insert("route".into(), "gone".into());
        assert_eq!(f.on_request_headers(false), Action::Pause);
        assert!(
            f.host().sent.borrow().is_none(),
            "enriched by the path's route"
        );
    }

    /// The fixture route, also enriching from a merchant-keyed service.
    fn two_services(cache_max_age_ms: u32) -> Config {
        let mut s = with_merchant(pb::ValueType::String);
        s.routes[0].cache_max_age_ms = cache_max_age_ms;
        Config::from_snapshot(s).unwrap()
    }

    const PAIR_BODY: &str = r#"{"instances":[{"user_id":"u1","merchant_id":"m1"},{"user_id":"u2","merchant_id":"m2"}]}"#;

    fn merchant_vector(risk: f32) -> Vec<u8> {
        vectors::merchant(NOW, risk)
    }

    #[test]
    fn a_route_enriches_from_several_services_in_one_reader_call() {
        let mut f = filter(two_services(0), "POST", "/v1/models/fraud", PAIR_BODY);
        f.on_request_headers(false);
        assert_eq!(f.on_request_body(PAIR_BODY.len(), true), Action::Pause);
        let calls = f.host().dispatched.borrow().clone();
        assert_eq!(calls.len(), 1, "one reader call for both services");
        let req = pb::VectorRequest::decode(calls[0].2.as_slice()).unwrap();
        let lookups: Vec<(&str, u64, Vec<String>)> = req
            .lookups
            .iter()
            .map(|l| (l.service.as_str(), l.fingerprint, l.entity_keys.clone()))
            .collect();
        assert_eq!(
            lookups,
            [
                ("scoring", FP, vec!["u1".to_string(), "u2".to_string()]),
                (
                    "merchant",
                    MERCHANT_FP,
                    vec!["m1".to_string(), "m2".to_string()]
                ),
            ]
        );
        *f.host().call_status.borrow_mut() = Some(200);
        *f.host().call_body.borrow_mut() = reader::responses(vec![
            vec![good_vector(30), good_vector(40)],
            vec![merchant_vector(0.25), Vec::new()],
        ]);
        let n = f.host().call_body.borrow().len();
        f.on_call_response(7, 3, n);
        assert!(*f.host().resumed.borrow(), "{:?}", f.host().sent.borrow());
        let body: serde_json::Value = serde_json::from_slice(&f.host().body.borrow()).unwrap();
        let i = &body["instances"];
        assert_eq!(
            (&i[0]["profile__age"], &i[0]["mprofile__risk"]),
            (&30.into(), &0.25.into())
        );
        assert_eq!(i[1]["profile__age"], 40);
        assert!(i[1]["mprofile__risk"].is_null());
        assert_eq!(body["ferry"]["service"], "scoring,merchant");
        assert_eq!(
            body["ferry"]["fingerprint"],
            "123456789abcdef0,0fedcba987654321"
        );
        assert_eq!(
            body["ferry"]["statuses"],
            serde_json::json!([{}, {"mprofile__risk": "NOT_FOUND"}])
        );
        let h = |n: &str| f.host().request_header(n);
        assert_eq!(h("x-ferry-entities").as_deref(), Some("4"));
        assert_eq!(h("x-ferry-missing").as_deref(), Some("1"));
        assert_eq!(h("x-ferry-status").as_deref(), Some("partial"));
    }

    #[test]
    fn several_services_share_the_near_cache_per_service() {
        let c = Rc::new(two_services(60_000));
        let metrics = Rc::new(Metrics::define(|_, _| Some(1)));
        let stream = |shared: HashMap<String, (Vec<u8>, u32)>, body: &str| {
            let host = FakeHost {
                now_us: NOW,
                shared: std::cell::RefCell::new(shared),
                ..Default::default()
            };
            *host.headers.borrow_mut() = vec![
                (":method".into(), "POST".into()),
                (":path".into(), "/v1/models/fraud".into()),
            ];
            *host.body.borrow_mut() = body.as_bytes().to_vec();
            HttpFilter::new(host, Some(c.clone()), metrics.clone())
        };
        let mut f = stream(HashMap::new(), PAIR_BODY);
        f.on_request_headers(false);
        f.on_request_body(PAIR_BODY.len(), true);
        *f.host().call_status.borrow_mut() = Some(200);
        *f.host().call_body.borrow_mut() = reader::responses(vec![
            vec![good_vector(30), good_vector(40)],
            vec![merchant_vector(0.25), merchant_vector(0.5)],
        ]);
        let n = f.host().call_body.borrow().len();
        f.on_call_response(7, 3, n);
        // Same users, one new merchant: only that merchant is asked for.
        let body = r#"{"instances":[{"user_id":"u1","merchant_id":"m1"},{"user_id":"u2","merchant_id":"m9"}]}"#;
        let mut g = stream(f.host().shared.borrow().clone(), body);
        g.on_request_headers(false);
        assert_eq!(g.on_request_body(body.len(), true), Action::Pause);
        let calls = g.host().dispatched.borrow().clone();
        let req = pb::VectorRequest::decode(calls[0].2.as_slice()).unwrap();
        assert_eq!(req.lookups.len(), 1);
        assert_eq!(req.lookups[0].service, "merchant");
        assert_eq!(req.lookups[0].entity_keys, ["m9"]);
        *g.host().call_status.borrow_mut() = Some(200);
        *g.host().call_body.borrow_mut() = reader::response(vec![merchant_vector(0.75)]);
        let n = g.host().call_body.borrow().len();
        g.on_call_response(7, 3, n);
        let out: serde_json::Value = serde_json::from_slice(&g.host().body.borrow()).unwrap();
        let i = &out["instances"];
        assert_eq!(
            (&i[0]["profile__age"], &i[0]["mprofile__risk"]),
            (&30.into(), &0.25.into())
        );
        assert_eq!(
            (&i[1]["profile__age"], &i[1]["mprofile__risk"]),
            (&40.into(), &0.75.into())
        );
    }

    /// A framed KServe v2 request (BYTES ids in the binary part, then 4 bytes of another
    /// binary input) on a `format` route: (filter, the client's header length, the body).
    fn framed(format: pb::Format) -> (HttpFilter<FakeHost>, usize, Vec<u8>) {
        let c = route_with(|r| r.format = format as i32);
        let header = br#"{"inputs":[{"name":"user_id","shape":[1],"datatype":"BYTES","parameters":{"binary_data_size":6}},{"name":"x","shape":[1],"datatype":"FP32","parameters":{"binary_data_size":4}}]}"#;
        let mut body = header.to_vec();
        body.extend([2, 0, 0, 0, b'u', b'1', 0, 0, 0xc0, 0x3f]);
        let f = filter(c, "POST", "/v1/models/fraud", "");
        f.host()
            .set_request_header("content-length", Some(&body.len().to_string()));
        f.host()
            .set_request_header(binary::HEADER, Some(&header.len().to_string()));
        *f.host().body.borrow_mut() = body.clone();
        (f, header.len(), body)
    }

    #[test]
    fn a_framed_v2_body_goes_on_with_its_header_length_and_binary_data_updated() {
        let (mut f, _, body) = framed(pb::Format::KserveV2);
        assert_eq!(f.on_request_headers(false), Action::Pause);
        assert_eq!(f.host().request_header(binary::HEADER), None);
        assert_eq!(f.on_request_body(body.len(), true), Action::Pause);
        reader_ok(&f, vec![good_vector(30)]);
        f.on_call_response(7, 3, 100);
        assert!(*f.host().resumed.borrow());
        let out = f.host().body.borrow().clone();
        let n: usize = f
            .host()
            .request_header(binary::HEADER)
            .expect("the new header length")
            .parse()
            .unwrap();
        assert_eq!(
            f.host().request_header("content-length"),
            Some(out.len().to_string())
        );
        let v: serde_json::Value = serde_json::from_slice(&out[..n]).unwrap();
        assert_eq!(v["inputs"][2]["name"], "profile__age");
        assert_eq!(v["inputs"][2]["data"], serde_json::json!([30]));
        assert_eq!(&out[n..], &body[body.len() - 10..], "binary data unchanged");
    }

    #[test]
    fn the_framing_header_reads_nothing_on_other_formats_and_counts_once() {
        // On a kserve_v1 route the binary body is the route's format, wrongly: malformed JSON.
        let (mut f, _, body) = framed(pb::Format::KserveV1);
        f.on_request_headers(false);
        f.on_request_body(body.len(), true);
        assert_eq!(sent(&f).1["error"], "malformed_json");
        // A JSON body there goes on without the header, which no longer describes it.
        let mut f = filter(config(), "POST", "/v1/models/fraud", BODY);
        f.host().set_request_header(binary::HEADER, Some("5"));
        f.on_request_headers(false);
        f.on_request_body(BODY.len(), true);
        reader_ok(&f, vec![good_vector(1)]);
        f.on_call_response(7, 3, 100);
        assert!(*f.host().resumed.borrow());
        assert_eq!(f.host().request_header(binary::HEADER), None);
        // Sent twice on a kserve_v2 route: the model might read the other one.
        let (mut f, n, _) = framed(pb::Format::KserveV2);
        f.host()
            .headers
            .borrow_mut()
            .push((binary::HEADER.into(), n.to_string()));
        assert_eq!(f.on_request_headers(false), Action::Pause);
        let (status, err) = sent(&f);
        assert_eq!(
            (status, err["error"].as_str()),
            (400, Some("bad_binary_framing"))
        );
    }
}
