//! The verdict on one run: what the client got, or what reached the model, against what the
//! scenario and the reader's answer say Ferry must have done.

use ferry_core::config::{Format, HeaderEncoding, OnReaderError, Route};
use ferry_core::format::header::STATUS_HEADER;
use serde_json::Value as Json;

use super::check::{self, assert_owned_headers, owned_header, Headers};
use super::expected;
use super::path::Expect;
use super::reader::Answer;
use super::scenario::ReaderPlan;
use super::{Delivered, Run, BODY_METHODS, READER_FAILURES};

impl Run<'_> {
    pub(super) fn check(&self) {
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
        let header = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.as_str())
        };
        let feast = match self.sc.expect {
            Expect::Route(r) => self.config.routes[r].format == Format::FeastRest,
            _ => false,
        };
        if header("content-type") == Some("application/grpc") {
            return self.check_grpc_reply(status, &headers, &body);
        }
        if feast && status == 200 && header("x-ferry-error").is_none() {
            return check_feast_answer(&body);
        }
        assert!((400..600).contains(&status), "local reply {status}");
        let json: Json = serde_json::from_slice(&body).unwrap_or(Json::Null);
        // Feast's refusals have Feast's bodies (JSON); Ferry's code is in x-ferry-error.
        let feast_code = header("x-ferry-error").filter(|c| feast && c.starts_with("feast_"));
        let code = json["error"].as_str().or(feast_code).unwrap_or_else(|| {
            panic!(
                "local reply without a JSON error: {}",
                String::from_utf8_lossy(&body)
            )
        });
        assert_eq!(header("content-type"), Some("application/json"));
        assert_eq!(header("x-ferry-error"), Some(code));
        if feast_code.is_some() {
            assert!(
                serde_json::from_slice::<Json>(&body).is_ok(),
                "a Feast refusal whose body is not JSON"
            );
            return;
        }
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
                let route = &self.config.routes[r];
                assert_eq!(json["route"], route.name.as_str(), "{json}");
                if code == "invalid_request_field" {
                    let named = route.derived.fields.iter().any(|f| {
                        json["message"]
                            .as_str()
                            .is_some_and(|m| m.contains(&format!("request field '{}'", f.field)))
                    });
                    assert!(
                        named,
                        "a request field refusal naming none of the route's: {json}"
                    );
                }
            }
        }
    }

    /// A gRPC client's refusal: a gRPC status (HTTP 200, `grpc-status` ≠ 0, `grpc-message`
    /// starting with the code in `x-ferry-error`, no message).
    fn check_grpc_reply(&self, status: u16, headers: &Headers, body: &[u8]) {
        let header = |n: &str| {
            headers
                .iter()
                .find(|(k, _)| k == n)
                .map_or("", |(_, v)| v.as_str())
        };
        assert_eq!(status, 200, "a gRPC status is sent with HTTP 200");
        assert!(body.is_empty(), "a gRPC refusal with a message");
        let grpc: u32 = header("grpc-status").parse().unwrap_or(0);
        let code = header("x-ferry-error");
        assert!(
            grpc != 0 && !code.is_empty(),
            "gRPC status {grpc}, x-ferry-error {code:?}"
        );
        assert!(
            header("grpc-message").starts_with(&format!("{code}: ")),
            "grpc-message {:?} for {code}",
            header("grpc-message")
        );
        match self.sc.expect {
            Expect::Pass => panic!("an unmatched path outside the protected prefix was refused"),
            Expect::NoRoute => assert_eq!((grpc, code), (5, "no_route")),
            Expect::Route(r) => assert_ne!(code, "no_route", "route {r}'s path found no route"),
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
        assert!(
            route.format != Format::FeastRest,
            "a feast_rest request went upstream"
        );
        match &self.delivered {
            None => panic!("the request went upstream before the reader answered"),
            Some(Delivered::Vectors(answer)) => match expected::expected(route, answer) {
                Err(why) => panic!("the request went upstream although {why}"),
                Ok(want) => self.check_enriched(r, &want, answer),
            },
            Some(Delivered::Failure(plan)) => {
                assert!(
                    plan.may_fail_open(),
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
        let grpc = match route.format {
            Format::KserveV2Grpc { .. } => Some(super::grpc::decode(&self.up.body)),
            _ => None,
        };
        let doc = match (&grpc, header_mode) {
            (Some(r), _) => super::grpc::as_v2_document(r),
            (None, true) => Json::Null,
            (None, false) => check::parse_body(&self.up.body),
        };
        let asked: Vec<String> = (0..want.entities.len())
            .flat_map(|j| answer.asked.iter().map(move |(_, keys)| keys[j].clone()))
            .collect();
        let seen = check::model_keys(route, &self.up.headers, &doc);
        assert_eq!(
            seen, asked,
            "the model sees other entities than Ferry looked up"
        );
        self.check_features(route, want, &summary, || match &grpc {
            Some(r) => super::grpc::check_enriched(route, want, r),
            None => check::check_enriched_body(route, want, &doc),
        });
    }

    /// Where the features went: in header mode, the features header holds `in_header`
    /// ([`Self::check_header_mode`]); otherwise Ferry's owned headers are `summary` alone, the
    /// content-length is the body's, and `body` checks the body.
    fn check_features(
        &self,
        route: &Route,
        in_header: &expected::Expected,
        summary: &[(String, String)],
        body: impl FnOnce(),
    ) {
        let Format::Header {
            features_header,
            encoding,
            ..
        } = &route.format
        else {
            assert_owned_headers(self.config, &self.up.headers, summary, &[]);
            self.assert_content_length();
            return body();
        };
        self.check_header_mode(route, in_header, summary, features_header, *encoding);
    }

    /// Header mode: the features header holds `want`, and so does the status header when some
    /// feature is not PRESENT (JSON encoding); every other owned header is `summary`.
    fn check_header_mode(
        &self,
        route: &Route,
        want: &expected::Expected,
        summary: &[(String, String)],
        features_header: &str,
        encoding: HeaderEncoding,
    ) {
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
        if encoding == HeaderEncoding::Json && some_not_present {
            checked.push((STATUS_HEADER, &status));
        }
        assert_owned_headers(self.config, &self.up.headers, summary, &checked);
    }

    /// Forwarded under `on_reader_error: forward` after a reader failure: every feature null
    /// (or its default) with NOT_FOUND, never what the client sent under Ferry's names.
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
        let summary = vec![
            ("x-ferry-service".to_string(), route.services_label.clone()),
            ("x-ferry-status".to_string(), "degraded".to_string()),
            ("x-ferry-error".to_string(), code),
        ];
        // Header mode has one entity; a body is degraded for as many as the model sees.
        self.check_features(route, &expected::degraded(route, 1), &summary, || {
            let doc = check::parse_body(&self.up.body);
            let seen = check::model_keys(route, &self.up.headers, &doc);
            let want = expected::degraded(route, seen.len() / route.keys_per_entity());
            check::check_enriched_body(route, &want, &doc);
        });
    }

    pub(super) fn outcome(&self) -> String {
        let what = if let Some((status, headers, _)) = self.host().sent.borrow().as_ref() {
            let code = headers
                .iter()
                .find(|(n, _)| n == "x-ferry-error")
                .map_or("", |(_, v)| v.as_str());
            let grpc = headers
                .iter()
                .find(|(n, _)| n == "grpc-status")
                .map_or(String::new(), |(_, v)| format!(" (gRPC status {v})"));
            format!("answered {status}{grpc} {code}")
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

/// The filter's own answer to a `feast_rest` request: Feast's shape, one name per column, each
/// column one value, status and event time per entity.
fn check_feast_answer(body: &[u8]) {
    let json: Json = serde_json::from_slice(body).unwrap_or(Json::Null);
    let results = json["results"].as_array().map_or(&[][..], Vec::as_slice);
    let names = json["metadata"]["feature_names"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(
        !results.is_empty() && names == results.len(),
        "a feast_rest answer of {} columns and {names} names: {json}",
        results.len()
    );
    let n = results[0]["values"].as_array().map_or(0, Vec::len);
    for c in results {
        for field in ["values", "statuses", "event_timestamps"] {
            assert_eq!(
                c[field].as_array().map(Vec::len),
                Some(n),
                "{field} in {json}"
            );
        }
    }
}
