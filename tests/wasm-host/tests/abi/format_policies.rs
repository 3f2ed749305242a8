//! The route policies on the KServe v2, generic JSON and header formats, each through the wasm
//! module: `on_missing_entity` (reject / null / default), `on_stale` (null / reject),
//! `on_reader_error` (reject with a JSON 5xx, or forward with `x-ferry-status: degraded`), the
//! body and batch limits, and the `x-ferry-*` headers the client sees on the response.

use ferry_protos::v1 as pb;
use ferry_wasm_host::{Action, Host, Stream};
use serde_json::{json, Map, Value as Json};

use super::header_mode::{get_headers, header_route, HEADER_PATH};
use super::json_body::{json_route, JSON_PATH};
use super::kserve_v2::{ids_tensor, v2_route, V2_PATH};
use super::support::*;

const NAMES: [&str; 3] = ["profile__age", "profile__score", "txn__count"];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fmt {
    V2,
    Json,
    Header,
}

const ALL: [Fmt; 3] = [Fmt::V2, Fmt::Json, Fmt::Header];
const BODY_FORMATS: [Fmt; 2] = [Fmt::V2, Fmt::Json];

impl Fmt {
    fn snapshot(self, f: impl FnOnce(&mut pb::Route)) -> pb::Snapshot {
        snapshot_with(|r| {
            match self {
                Fmt::V2 => v2_route(r),
                Fmt::Json => json_route("/users", "/features")(r),
                Fmt::Header => header_route(r),
            }
            f(r)
        })
    }

    fn path(self) -> &'static str {
        match self {
            Fmt::V2 => V2_PATH,
            Fmt::Json => JSON_PATH,
            Fmt::Header => HEADER_PATH,
        }
    }

    /// A batch whose last entity is `last` (header mode carries one entity only).
    fn batch(self, last: &'static str) -> Vec<&'static str> {
        match self {
            Fmt::Header => vec![last],
            _ => vec!["u1", last],
        }
    }

    fn body(self, ids: &[&str]) -> Vec<u8> {
        match self {
            Fmt::V2 => json!({"id": "r", "inputs": [ids_tensor(ids)]}),
            Fmt::Json => {
                let users: Vec<Json> = ids
                    .iter()
                    .map(|id| json!({"user_id": id, "features": {"forged": 1}}))
                    .collect();
                json!({"users": users, "ferry": "forged"})
            }
            Fmt::Header => return Vec::new(),
        }
        .to_string()
        .into_bytes()
    }

    /// Sends the request for `ids` with a forged `x-ferry-features` header; returns the stream
    /// and the action of the callback that took the decision (headers or last body chunk).
    fn start(self, host: &Host, ids: &[&str]) -> (Stream, Action) {
        let s = host.stream();
        let forged: &[u8] = br#"{"profile__age":999}"#;
        if self == Fmt::Header {
            assert_eq!(ids.len(), 1);
            let h = get_headers(&[
                ("x-user-id", ids[0].as_bytes()),
                ("x-ferry-features", forged),
            ]);
            let a = s.request_headers(&h, true);
            return (s, a);
        }
        let body = self.body(ids);
        let mut h = post_headers(self.path(), body.len());
        h.push((
            "x-ferry-features",
            String::from_utf8(forged.to_vec()).unwrap(),
        ));
        assert_eq!(s.request_headers(&h, false), Action::Pause);
        let a = s.request_body(&body, true);
        (s, a)
    }

    /// Sends the request and checks it waits for the reader.
    fn send(self, host: &Host, ids: &[&str]) -> Stream {
        let (s, a) = self.start(host, ids);
        assert_eq!(a, Action::Pause, "{self:?}: log:\n{}", host.log_text());
        assert_eq!(asked_keys(host, &s), ids, "{self:?}");
        s
    }

    /// Sends a batch ending in `last` and answers it with [`vectors_for`] it.
    fn answered(self, host: &Host, last: &'static str) -> (Vec<&'static str>, Stream) {
        let ids = self.batch(last);
        let s = self.send(host, &ids);
        answer(host, &s, vectors_for(&ids));
        (ids, s)
    }

    /// The request went on: its [`features`](Self::features).
    fn forwarded(self, host: &Host, s: &Stream) -> Vec<(Json, Json)> {
        assert!(s.resumed(), "{self:?}: log:\n{}", host.log_text());
        self.features(s)
    }

    /// Per entity: its features and the statuses of those not PRESENT, as forwarded.
    fn features(self, s: &Stream) -> Vec<(Json, Json)> {
        match self {
            Fmt::V2 => {
                let v = body_json(s);
                let statuses: Json = serde_json::from_str(
                    v["parameters"]["ferry_statuses"]
                        .as_str()
                        .expect("statuses"),
                )
                .unwrap();
                let inputs = v["inputs"].as_array().unwrap();
                let data = |name: &str| {
                    let t = inputs.iter().find(|t| t["name"] == name).unwrap();
                    t["data"].as_array().unwrap().clone()
                };
                let columns: Vec<Vec<Json>> = NAMES.iter().map(|n| data(n)).collect();
                (0..columns[0].len())
                    .map(|i| {
                        let f: Map<String, Json> = NAMES
                            .iter()
                            .zip(&columns)
                            .map(|(n, c)| (n.to_string(), c[i].clone()))
                            .collect();
                        (Json::Object(f), statuses[i].clone())
                    })
                    .collect()
            }
            Fmt::Json => {
                let v = body_json(s);
                v["users"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .zip(v["ferry"]["statuses"].as_array().unwrap())
                    .map(|(u, st)| (u["features"].clone(), st.clone()))
                    .collect()
            }
            Fmt::Header => {
                let f = s
                    .request_header("x-ferry-features")
                    .expect("features header");
                let st = s
                    .request_header("x-ferry-feature-status")
                    .map_or(json!({}), |h| serde_json::from_str(&h).unwrap());
                vec![(serde_json::from_str(&f).unwrap(), st)]
            }
        }
    }

    /// What a null feature of a numeric type is sent as (tensors cannot hold null).
    fn assert_null(self, v: &Json, what: &str) {
        match self {
            Fmt::V2 => assert_eq!(v.as_f64(), Some(0.0), "{self:?} {what}: {v}"),
            _ => assert_eq!(v, &Json::Null, "{self:?} {what}"),
        }
    }

    /// The request went on degraded (`on_reader_error: forward`): every entity's every
    /// feature null with status NOT_FOUND, so nothing a client sent under Ferry's names goes on.
    fn assert_degraded(self, s: &Stream, ids: &[&str]) {
        let features = self.features(s);
        assert_eq!(features.len(), ids.len(), "{self:?}: one per entity");
        for (values, statuses) in &features {
            for name in NAMES {
                self.assert_null(&values[name], name);
                assert_eq!(statuses[name], "NOT_FOUND", "{self:?} {name}");
            }
        }
        if self != Fmt::Header {
            assert_eq!(
                s.request_header("content-length"),
                Some(s.request_body_bytes().len().to_string())
            );
        }
    }
}

/// `on_missing_entity: null`.
fn missing_null(r: &mut pb::Route) {
    r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
}

/// `on_reader_error: forward`.
fn fail_open(r: &mut pb::Route) {
    r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32;
}

/// The reader's answer for `ids`: `ghost` has no vector, others a fresh one (age = index).
fn vectors_for(ids: &[&str]) -> Vec<Vec<u8>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            if *id == "ghost" {
                vec![]
            } else {
                good_vector(i as i64 + 10, NOW_US)
            }
        })
        .collect()
}

#[test]
fn missing_entity_reject_is_a_json_404_in_every_format() {
    for fmt in ALL {
        let host = host_with(&fmt.snapshot(|_| {}));
        let (_, s) = fmt.answered(&host, "ghost");
        let err = assert_error(&s, 404, "entity_not_found", "fraud");
        assert_says(&err, "'ghost'");
        assert_clean(&host);
    }
}

#[test]
fn missing_entity_null_forwards_nulls_with_not_found_statuses() {
    for fmt in ALL {
        let host = host_with(&fmt.snapshot(missing_null));
        let (ids, s) = fmt.answered(&host, "ghost");
        let got = fmt.forwarded(&host, &s);
        assert_eq!(got.len(), ids.len(), "{fmt:?}");
        let (ghost, statuses) = got.last().unwrap();
        for name in NAMES {
            fmt.assert_null(&ghost[name], name);
        }
        assert_eq!(
            statuses,
            &json!({"profile__age": "NOT_FOUND", "profile__score": "NOT_FOUND", "txn__count": "NOT_FOUND"}),
            "{fmt:?}"
        );
        if ids.len() == 2 {
            assert_eq!(got[0].0["profile__age"], 10, "{fmt:?}");
            assert_eq!(got[0].1, json!({}), "{fmt:?}");
        }
        assert_summary(&s, ids.len(), 1, 0, "partial");
        assert_clean(&host);
    }
}

#[test]
fn missing_entity_default_sends_the_repos_defaults() {
    for fmt in ALL {
        let host =
            host_with(&fmt.snapshot(|r| {
                r.on_missing_entity = pb::MissingEntityPolicy::MissingDefault as i32
            }));
        let (ids, s) = fmt.answered(&host, "ghost");
        let got = fmt.forwarded(&host, &s);
        let (ghost, statuses) = got.last().unwrap();
        assert_eq!(ghost["profile__age"], -1, "{fmt:?}: the repo's default");
        fmt.assert_null(&ghost["profile__score"], "no default");
        fmt.assert_null(&ghost["txn__count"], "no default");
        assert_eq!(
            statuses["profile__age"], "NOT_FOUND",
            "{fmt:?}: a default is still reported as not found"
        );
        assert_summary(&s, ids.len(), 1, 0, "partial");
        assert_clean(&host);
    }
}

#[test]
fn stale_views_are_null_or_rejected_per_on_stale() {
    for fmt in ALL {
        let host = host_with(&fmt.snapshot(|_| {}));
        let ids = fmt.batch("u9");
        let s = fmt.send(&host, &ids);
        let mut vectors = vectors_for(&ids);
        *vectors.last_mut().unwrap() = stale_vector(5);
        answer(&host, &s, vectors);
        let got = fmt.forwarded(&host, &s);
        let (stale, statuses) = got.last().unwrap();
        assert_eq!(stale["profile__age"], 5, "{fmt:?}: a view without ttl");
        fmt.assert_null(&stale["txn__count"], "stale");
        assert_eq!(
            statuses,
            &json!({"txn__count": "OUTSIDE_MAX_AGE"}),
            "{fmt:?}"
        );
        assert_summary(&s, ids.len(), 0, 1, "partial");

        let host = host_with(&fmt.snapshot(|r| r.on_stale = pb::StalePolicy::StaleReject as i32));
        let s = fmt.send(&host, &ids);
        let mut vectors = vectors_for(&ids);
        *vectors.last_mut().unwrap() = stale_vector(5);
        answer(&host, &s, vectors);
        let err = assert_error(&s, 422, "stale_features", "fraud");
        assert_says(&err, "'u9'");
        assert_clean(&host);
    }
}

#[test]
fn reader_errors_are_answered_with_json_5xx_when_failing_closed() {
    for fmt in ALL {
        let host = host_with(&fmt.snapshot(|_| {}));
        let ids = fmt.batch("u2");
        let s = fmt.send(&host, &ids);
        s.call_failure(the_call(&host).token);
        assert_error(&s, 503, "reader_unavailable", "fraud");
        for (status, body, want, code) in READER_ERRORS {
            let s = fmt.send(&host, &ids);
            let token = host.dispatched_calls().pop().unwrap().token;
            s.call_response(token, &[(":status", status)], body);
            assert_error(&s, want, code, "fraud");
        }
        assert_clean(&host);
    }
}

#[test]
fn reader_errors_forward_degraded_with_null_features_when_failing_open() {
    for fmt in ALL {
        let host = host_with(&fmt.snapshot(fail_open));
        let ids = fmt.batch("u2");
        let s = fmt.send(&host, &ids);
        s.call_failure(the_call(&host).token);
        assert!(s.resumed(), "{fmt:?}: log:\n{}", host.log_text());
        assert!(s.local_reply().is_none());
        fmt.assert_degraded(&s, &ids);
        assert_degraded_by(&s, "reader_unavailable");
        assert_eq!(
            s.request_header("x-ferry-service").as_deref(),
            Some("scoring")
        );
        assert_eq!(s.request_header("x-ferry-fingerprint"), None, "{fmt:?}");
        s.response_headers(&[(":status", "200")], false);
        assert_eq!(
            s.response_header("x-ferry-status").as_deref(),
            Some("degraded")
        );
        assert_eq!(
            s.response_header("x-ferry-error").as_deref(),
            Some("reader_unavailable")
        );

        let s = fmt.send(&host, &ids);
        let token = host.dispatched_calls().pop().unwrap().token;
        s.call_response(
            token,
            &[(":status", "503")],
            br#"{"error":"redis_unavailable","message":"down"}"#,
        );
        assert!(s.resumed());
        fmt.assert_degraded(&s, &ids);
        assert_eq!(
            s.request_header("x-ferry-error").as_deref(),
            Some("redis_unavailable")
        );

        // A vector the filter cannot trust is never forwarded, whatever the policy.
        let s = fmt.send(&host, &ids);
        let token = host.dispatched_calls().pop().unwrap().token;
        let foreign = vector(
            FP ^ 1,
            vec![(NOW_US, vec![None, None]), (NOW_US, vec![None])],
        );
        let mut vectors = vectors_for(&ids);
        *vectors.last_mut().unwrap() = foreign;
        s.call_response(token, &[(":status", "200")], &reader_response(vectors));
        assert_error(&s, 502, "fingerprint_mismatch", "fraud");
        assert_clean(&host);
    }
}

#[test]
fn a_reader_call_that_cannot_be_dispatched_fails_closed_or_open() {
    for fmt in ALL {
        let host = host_with(&fmt.snapshot(|_| {}));
        host.set_clusters(&["some_other_cluster"]);
        let ids = fmt.batch("u2");
        let (s, a) = fmt.start(&host, &ids);
        assert_eq!(a, Action::Pause, "{fmt:?}");
        assert!(host.dispatched_calls().is_empty());
        assert_error(&s, 500, "dispatch_failed", "fraud");

        let host = host_with(&fmt.snapshot(fail_open));
        host.set_clusters(&["some_other_cluster"]);
        let (s, a) = fmt.start(&host, &ids);
        assert_eq!(
            a,
            Action::Continue,
            "{fmt:?}: goes on from the callback itself"
        );
        assert!(s.forwarded() && !s.resumed());
        fmt.assert_degraded(&s, &ids);
        assert_degraded_by(&s, "dispatch_failed");
        assert_clean(&host);
    }
}

#[test]
fn body_and_batch_limits_are_json_413s() {
    for fmt in BODY_FORMATS {
        let host = host_with(&fmt.snapshot(|r| r.max_entities = 3));
        // Declared too large: answered from the headers, before any body.
        let s = host.stream();
        assert_eq!(
            s.request_headers(&post_headers(fmt.path(), MAX_BODY + 1), false),
            Action::Pause
        );
        let err = assert_error(&s, 413, "body_too_large", "fraud");
        assert_says(&err, "4096");

        // Chunked: answered once the buffered body passes the limit.
        let s = host.stream();
        let mut h = post_headers(fmt.path(), 0);
        h.retain(|(n, _)| *n != "content-length");
        assert_eq!(s.request_headers(&h, false), Action::Pause);
        let chunk = vec![b' '; MAX_BODY / 2];
        assert_eq!(s.request_body(&chunk, false), Action::Pause);
        assert_eq!(s.request_body(&chunk, false), Action::Pause);
        assert!(
            s.local_reply().is_none(),
            "{fmt:?}: exactly the limit is fine"
        );
        s.request_body(b" ", false);
        assert_error(&s, 413, "body_too_large", "fraud");

        // Batches: the route's limit is fine, one more is not.
        let s = fmt.send(&host, &["a", "b", "c"]);
        answer(&host, &s, vectors_for(&["a", "b", "c"]));
        assert!(s.resumed(), "{fmt:?}");
        let calls = host.dispatched_calls().len();
        let (s, _) = fmt.start(&host, &["a", "b", "c", "d"]);
        let err = assert_error(&s, 413, "too_many_entities", "fraud");
        assert_says(&err, "limit of 3");
        assert_eq!(host.dispatched_calls().len(), calls, "no reader call");
        assert_clean(&host);
    }
}

#[test]
fn the_client_sees_the_summary_headers_on_the_response() {
    for fmt in ALL {
        let host = host_with(&fmt.snapshot(missing_null));
        let (ids, s) = fmt.answered(&host, "ghost");
        assert!(s.resumed());
        let response = [
            (":status", "200"),
            ("content-type", "application/json"),
            ("x-ferry-status", "set-by-the-model"),
        ];
        assert_eq!(s.response_headers(&response, false), Action::Continue);
        for (name, want) in [
            ("x-ferry-service", "scoring".to_string()),
            ("x-ferry-fingerprint", FP_HEX.to_string()),
            ("x-ferry-entities", ids.len().to_string()),
            ("x-ferry-missing", "1".to_string()),
            ("x-ferry-stale", "0".to_string()),
            ("x-ferry-status", "partial".to_string()), // the model's own value replaced
        ] {
            assert_eq!(
                s.response_header(name).as_deref(),
                Some(want.as_str()),
                "{fmt:?}: {name}"
            );
        }
        assert_clean(&host);
    }
}
