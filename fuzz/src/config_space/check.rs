//! The verdict on one run of `config_space`, for any drawn configuration:
//! - at most one reader call;
//! - a local reply is a 4xx/5xx with Ferry's JSON error and `x-ferry-error` (to a gRPC client a
//!   gRPC status: HTTP 200, `grpc-status` ≠ 0, `grpc-message` starting with the code; on
//!   `feast_rest` also Feast's 200 answer, JSON), and never follows a forward;
//! - a request neither answered nor forwarded is one whose reader call never came back;
//! - a forward carries no client value under a Ferry-owned name: no canary in any `x-ferry-*`
//!   or features header or trailer, nor (on the route the path leads to) in any route output
//!   name of the body, `ferry`, a KServe v2 feature tensor or `ferry_*` parameter, over JSON,
//!   binary-framed JSON or gRPC; a `feast_rest` request with a body and a bodiless method's
//!   request with a body are never forwarded; an enriched KServe v1 or JSON body holds every
//!   output name in every entity, an enriched KServe v2 request (JSON or gRPC) each of Ferry's
//!   tensors once, and every forwarded JSON body is JSON without duplicate keys
//!   (the model could read the client's value of a name Ferry also wrote).

use ferry_core::config::{Config, Format, Route};
use ferry_core::format::kserve_v2::PACKED_TENSOR;
use ferry_protos::inference::infer_parameter::ParameterChoice;
use ferry_protos::inference::ModelInferRequest;
use prost::Message;
use serde_json::Value as Json;

use super::reader::Plan;
use super::request::{spells, Request, Target, FORGED_NUMBER};
use super::run::Run;

fn json_spells(v: &Json) -> bool {
    spells(v.to_string().as_bytes())
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The drawn configuration, request and reader plan in words, to read a failure.
pub fn describe(config: &Config, req: &Request, plan: &Plan) -> String {
    let routes: Vec<String> = config
        .routes
        .iter()
        .map(|r| {
            let keys: Vec<String> = r
                .parts
                .iter()
                .map(|p| format!("{}{:?}", p.service.name, p.entity_fields))
                .collect();
            format!(
                "{} {:?} over {} (request fields {:?}, names {:?})",
                r.name,
                r.format,
                keys.join("+"),
                r.derived
                    .fields
                    .iter()
                    .map(|f| &f.field)
                    .collect::<Vec<_>>(),
                r.output_names
            )
        })
        .collect();
    format!(
        "routes [{}]; request to {:?} headers {:?} body {} ({} frames) trailers {:?}; reader {:?}",
        routes.join("; "),
        req.target,
        req.headers,
        String::from_utf8_lossy(&req.body),
        req.chunks.len(),
        req.trailers,
        plan
    )
}

impl Run {
    pub(super) fn describe(&self) -> String {
        describe(&self.config, &self.req, &self.plan)
    }

    pub(super) fn check(&self) {
        let ctx = || self.describe();
        assert!(
            self.host().dispatched.borrow().len() <= 1,
            "more than one reader call: {}",
            ctx()
        );
        if let Some((status, headers, body)) = self.host().sent.borrow().clone() {
            return self.check_reply(status, &headers, &body);
        }
        if !self.up.released {
            assert!(
                self.plan == Plan::Never && !self.host().dispatched.borrow().is_empty(),
                "neither forwarded nor answered: {}",
                ctx()
            );
            return;
        }
        self.check_forward();
    }

    /// A request meant for a route found one: its error code is not `no_route`.
    fn assert_routed(&self, code: &str) {
        if let Target::Route(i) = self.req.target {
            assert_ne!(
                code,
                "no_route",
                "route {i}'s request found no route: {}",
                self.describe()
            );
        }
    }

    pub(super) fn route(&self) -> Option<&Route> {
        match self.req.target {
            Target::Route(i) => Some(&self.config.routes[i]),
            _ => None,
        }
    }

    pub(super) fn check_reply(&self, status: u16, headers: &[(String, String)], body: &[u8]) {
        let ctx = || self.describe();
        let code = header(headers, "x-ferry-error").unwrap_or("");
        if header(headers, "content-type") == Some("application/grpc") {
            let grpc: u32 = header(headers, "grpc-status")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            assert_eq!(status, 200, "a gRPC status goes with HTTP 200: {}", ctx());
            assert!(
                grpc != 0 && !code.is_empty(),
                "gRPC status {grpc}, code {code:?}: {}",
                ctx()
            );
            let message = header(headers, "grpc-message").unwrap_or("");
            self.assert_routed(code);
            assert!(
                message.starts_with(&format!("{code}: ")),
                "grpc-message {message:?} for {code}: {}",
                ctx()
            );
            return;
        }
        let feast = self.route().is_some_and(|r| r.format == Format::FeastRest);
        let json: Json = serde_json::from_slice(body).unwrap_or_else(|e| {
            panic!(
                "a local {status} whose body is not JSON ({e}): {:?}; {}",
                String::from_utf8_lossy(body),
                ctx()
            )
        });
        // Feast's answer; under `on_reader_error: forward` a degraded one (every feature
        // NOT_FOUND) also names the reader's failure in x-ferry-error.
        if feast && status == 200 {
            assert!(
                json["results"].is_array(),
                "Feast's answer without results: {json}"
            );
            assert!(
                !json_spells(&json),
                "Feast's answer echoes a forged value: {json}; {}",
                ctx()
            );
            return;
        }
        assert!(
            (400..600).contains(&status),
            "a local {status}: {json}; {}",
            ctx()
        );
        assert!(
            !code.is_empty(),
            "a local {status} without x-ferry-error: {}",
            ctx()
        );
        if !feast {
            assert_eq!(
                json["error"].as_str(),
                Some(code),
                "the JSON error vs x-ferry-error"
            );
        }
        if self.req.target == Target::NoRoute && !self.config.protected_paths.is_empty() {
            assert_eq!((status, code), (404, "no_route"), "{}", ctx());
        }
        self.assert_routed(code);
    }

    pub(super) fn check_forward(&self) {
        let ctx = || self.describe();
        for (name, value) in &self.up.headers {
            if self.config.owns_header(name) {
                assert!(
                    !spells(value.as_bytes()),
                    "owned header {name}: {value:?} reached the model: {}",
                    ctx()
                );
            }
        }
        for (name, value) in self.host().trailers.borrow().iter() {
            if self.config.owns_header(name) {
                assert!(
                    !spells(value.as_bytes()),
                    "owned trailer {name}: {value:?}: {}",
                    ctx()
                );
            }
        }
        for record in self.host().log_records.borrow().iter() {
            assert!(
                !spells(record),
                "a forged value in a served-feature log record: {}",
                ctx()
            );
        }
        let Some(route) = self.route() else {
            if self.req.target == Target::NoRoute {
                assert!(
                    self.config.protected_paths.is_empty(),
                    "an unmatched path under the protected prefix went upstream: {}",
                    ctx()
                );
            }
            return;
        };
        let method = header(&self.req.headers, ":method").unwrap_or("");
        let header_mode = matches!(route.format, Format::Header { .. });
        if !matches!(method, "POST" | "PUT" | "PATCH") {
            if !header_mode {
                assert!(
                    self.req.chunks.is_empty() && self.req.trailers.is_empty(),
                    "a {method} with a body went upstream unenriched: {}",
                    ctx()
                );
            }
            return;
        }
        assert!(
            route.format != Format::FeastRest,
            "a feast_rest request went upstream: {}",
            ctx()
        );
        let degraded = header(&self.up.headers, "x-ferry-status") == Some("degraded");
        match &route.format {
            Format::KserveV2Grpc { .. } => self.check_grpc(route),
            Format::KserveV2 { packed } => {
                let doc = self.upstream_json();
                check_v2(route, &doc, &ctx);
                // Enriched: Ferry's tensors, each once (the packed one alone when packed).
                let count = |name: &str| {
                    doc["inputs"]
                        .as_array()
                        .map_or(0, |i| i.iter().filter(|t| t["name"] == name).count())
                };
                if *packed {
                    assert_eq!(count(PACKED_TENSOR), 1, "{PACKED_TENSOR}: {}", ctx());
                } else {
                    for name in &route.output_names {
                        assert_eq!(count(name), 1, "tensors named {name}: {}", ctx());
                    }
                }
            }
            Format::KserveV1 => {
                let doc = self.upstream_json();
                assert!(
                    !doc.get("ferry").is_some_and(json_spells),
                    "ferry forged: {}",
                    ctx()
                );
                let instances = doc["instances"].as_array().map_or(&[][..], Vec::as_slice);
                assert!(
                    !instances.is_empty(),
                    "forwarded without instances: {}",
                    ctx()
                );
                for inst in instances {
                    entity_names(route, inst, "", degraded, &ctx);
                }
            }
            Format::Json {
                entity_pointer,
                inject_pointer,
            } => {
                let doc = self.upstream_json();
                if doc.is_object() {
                    assert!(
                        !doc.get("ferry").is_some_and(json_spells),
                        "ferry forged: {}",
                        ctx()
                    );
                }
                let at = doc.pointer(entity_pointer).cloned().unwrap_or(Json::Null);
                let entities = match at {
                    Json::Array(a) => a,
                    one => vec![one],
                };
                for e in &entities {
                    entity_names(route, e, inject_pointer, degraded, &ctx);
                }
            }
            Format::Header {
                features_header, ..
            } => {
                let n = self
                    .up
                    .headers
                    .iter()
                    .filter(|(k, _)| k == features_header)
                    .count();
                assert!(
                    n == 1 || (n == 0 && degraded),
                    "{n} {features_header} headers on an enriched request: {}",
                    ctx()
                );
            }
            Format::FeastRest => {}
        }
    }

    /// The upstream body as JSON: the body, or the JSON header of a binary-framed body.
    pub(super) fn upstream_json(&self) -> Json {
        let body = &self.up.body;
        let framed = header(&self.up.headers, "inference-header-content-length")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n <= body.len());
        let json = framed.map_or(&body[..], |n| &body[..n]);
        // A duplicate key is two values under one name: the model may read the client's.
        if let Some(why) = crate::bypass::check::strict_problem(json) {
            panic!(
                "an enriched body that is not strict JSON ({why}): {:?}; {}",
                String::from_utf8_lossy(body),
                self.describe()
            );
        }
        serde_json::from_slice(json).unwrap_or_else(|e| {
            panic!(
                "an enriched body that is not JSON ({e}): {:?}; {}",
                String::from_utf8_lossy(body),
                self.describe()
            )
        })
    }

    pub(super) fn check_grpc(&self, route: &Route) {
        let ctx = || self.describe();
        let body = &self.up.body;
        assert!(
            body.len() >= 5,
            "a gRPC forward without a message: {}",
            ctx()
        );
        let got = ModelInferRequest::decode(&body[5..])
            .unwrap_or_else(|e| panic!("the forwarded message does not decode ({e}): {}", ctx()));
        let count = |name: &str| got.inputs.iter().filter(|t| t.name == name).count();
        if matches!(route.format, Format::KserveV2Grpc { packed: true }) {
            assert_eq!(count(PACKED_TENSOR), 1, "{PACKED_TENSOR}: {}", ctx());
        } else {
            for name in &route.output_names {
                assert_eq!(count(name), 1, "tensors named {name}: {}", ctx());
            }
        }
        let owned = |n: &str| n == PACKED_TENSOR || route.output_names.iter().any(|o| o == n);
        for (i, t) in got.inputs.iter().enumerate() {
            if !owned(&t.name) {
                continue;
            }
            let contents = t
                .contents
                .as_ref()
                .map(Message::encode_to_vec)
                .unwrap_or_default();
            let raw = got.raw_input_contents.get(i).cloned().unwrap_or_default();
            let forged_int = t
                .contents
                .as_ref()
                .is_some_and(|c| c.int64_contents.contains(&FORGED_NUMBER));
            let forged_raw = raw.windows(8).any(|w| w == FORGED_NUMBER.to_le_bytes());
            assert!(
                !spells(&contents) && !spells(&raw) && !forged_int && !forged_raw,
                "tensor {} reached the model with a client value: {}",
                t.name,
                ctx()
            );
        }
        for (k, v) in &got.parameters {
            if k.starts_with("ferry_") {
                if let Some(ParameterChoice::StringParam(s)) = &v.parameter_choice {
                    assert!(!spells(s.as_bytes()), "parameter {k} = {s:?}: {}", ctx());
                }
            }
        }
    }
}

fn check_v2(route: &Route, doc: &Json, ctx: &dyn Fn() -> String) {
    let owned = |n: &str| n == PACKED_TENSOR || route.output_names.iter().any(|o| o == n);
    for t in doc["inputs"].as_array().into_iter().flatten() {
        let name = t["name"].as_str().unwrap_or("");
        if owned(name) {
            assert!(
                !json_spells(t),
                "tensor {name} holds a client value: {t}; {}",
                ctx()
            );
        }
    }
    for (k, v) in doc["parameters"].as_object().into_iter().flatten() {
        if k.starts_with("ferry_") {
            assert!(
                !json_spells(v),
                "parameter {k} holds a client value: {v}; {}",
                ctx()
            );
        }
    }
}

/// One entity object of an enriched body: every output name present (in the inject pointer's
/// object when there is one), none holding a canary.
fn entity_names(route: &Route, e: &Json, inject: &str, degraded: bool, ctx: &dyn Fn() -> String) {
    let holder = if inject.is_empty() {
        Some(e)
    } else {
        e.pointer(inject)
    };
    let holder = holder.unwrap_or(&Json::Null);
    if !inject.is_empty() {
        assert!(
            !json_spells(holder),
            "{inject} holds a client value: {holder}; {}",
            ctx()
        );
    }
    for name in &route.output_names {
        let v = holder.get(name);
        assert!(
            v.is_some() || degraded,
            "entity without {name} in an enriched body: {e}; {}",
            ctx()
        );
        assert!(
            !v.is_some_and(json_spells),
            "{name} holds a client value: {e}; {}",
            ctx()
        );
    }
}
