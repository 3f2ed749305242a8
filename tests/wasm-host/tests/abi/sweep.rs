//! The no-panic sweep: thousands of seeded random and mutated requests and reader answers, over
//! several policies, through one VM per policy (as an Envoy worker reuses its VM). A trap fails
//! the test with the case that caused it; every case must also end the way Envoy needs (answered
//! once, or forwarded with a right content-length), with no hostcall Envoy would refuse.

use ferry_protos::v1::{self as pb, value::Kind, VectorRequest};
use ferry_wasm_host::{Host, Stream};
use prost::Message;
use serde_json::Value as Json;

use super::support::*;

/// Cases per policy; five policies.
const CASES: usize = 1000;
const SEED: u64 = 0x5eed_f0e7_7e11_0001;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = self.below(max + 1);
        (0..n).map(|_| self.next() as u8).collect()
    }
}

const IDS: &[&str] = &[
    "u1",
    "u2",
    "",
    " ",
    "ü",
    "\\u0000",
    "a\\nb",
    "\\ud800",
    "😀",
    "ghost",
    "u1",
    "9999999999",
];
const JSON_BITS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "null",
    "true",
    "-0",
    "1e999",
    "\"instances\"",
    "\"user_id\"",
    "\"ferry\"",
    "\"profile__age\"",
    "{}",
    "[]",
    "\"\\ud800\"",
    " ",
    "0.5",
];

fn id_value(rng: &mut Rng, int_keys: bool) -> String {
    if rng.chance(85) {
        let n = rng.below(50);
        return if int_keys {
            n.to_string()
        } else {
            format!("\"u{n}\"")
        };
    }
    match rng.below(6) {
        0 => rng.below(100_000).to_string(),
        1 => format!("-{}", rng.next()),
        2 => "1.5".into(),
        3 => "null".into(),
        4 => {
            let n = rng.below(300);
            format!("\"{}\"", "x".repeat(n))
        }
        _ => {
            let id = rng.pick(IDS);
            format!("\"{id}\"")
        }
    }
}

fn valid_body(rng: &mut Rng, int_keys: bool) -> Vec<u8> {
    let max = if rng.chance(5) { 14 } else { 4 };
    let n = 1 + rng.below(max);
    let instances: Vec<String> = (0..n)
        .map(|_| {
            let mut fields = vec![format!("\"user_id\":{}", id_value(rng, int_keys))];
            if rng.chance(30) {
                fields.push("\"profile__age\":\"forged\"".into());
            }
            if rng.chance(20) {
                fields.push(format!("\"amount\":{}", rng.next() as i64));
            }
            format!("{{{}}}", fields.join(","))
        })
        .collect();
    let mut body = format!("{{\"instances\":[{}]", instances.join(","));
    if rng.chance(20) {
        body += ",\"ferry\":{\"statuses\":7}";
    }
    body += "}";
    body.into_bytes()
}

fn mutate(rng: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() + 1);
        match rng.below(5) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 => {
                let bit = rng.pick(JSON_BITS).as_bytes().to_vec();
                b.splice(at..at, bit);
            }
            2 if at < b.len() => {
                let end = (at + 1 + rng.below(8)).min(b.len());
                b.drain(at..end);
            }
            3 => b.truncate(at),
            _ => {
                let end = (at + rng.below(16)).min(b.len());
                let copy = b[at..end].to_vec();
                b.splice(at..at, copy);
            }
        }
    }
    b
}

fn body(rng: &mut Rng, int_keys: bool) -> Vec<u8> {
    match rng.below(10) {
        0..=4 => valid_body(rng, int_keys),
        5..=7 => {
            let b = valid_body(rng, int_keys);
            mutate(rng, b)
        }
        8 => (0..rng.below(40))
            .flat_map(|_| rng.pick(JSON_BITS).as_bytes().to_vec())
            .collect(),
        _ => rng.bytes(64),
    }
}

fn stored_vector(rng: &mut Rng) -> Vec<u8> {
    let t = *rng.pick(&[NOW_US, NOW_US - 3 * DAY_US, i64::MIN, i64::MAX, 0]);
    match rng.below(12) {
        0..=4 => good_vector(rng.next() as i64, t),
        5 => Vec::new(),
        6 => vector(FP ^ 1, vec![(t, vec![None, None]), (t, vec![None])]),
        7 => vector(FP, vec![(t, vec![None])]),
        8 => vector(
            FP,
            vec![
                (t, vec![Some(Kind::StringVal("x".into())), None]),
                (t, vec![Some(Kind::FloatVal(f32::NAN))]),
            ],
        ),
        9 => vector(
            FP,
            vec![
                (
                    t,
                    vec![Some(Kind::Int64Val(1)), Some(Kind::FloatVal(f32::INFINITY))],
                ),
                (t, vec![]),
            ],
        ),
        10 => mutate(rng, good_vector(1, t)),
        _ => rng.bytes(40),
    }
}

/// Answers (or fails) the stream's pending reader call, if it made one.
fn answer(rng: &mut Rng, host: &Host, s: &Stream) -> String {
    let Some(call) = host
        .dispatched_calls()
        .into_iter()
        .find(|c| c.context_id == s.id() && host.pending_calls().contains(&c.token))
    else {
        return "no call".into();
    };
    if rng.chance(20) {
        host.advance_time(std::time::Duration::from_millis(rng.below(5000) as u64));
    }
    let entities = VectorRequest::decode(call.body.as_slice())
        .map(|r| r.lookups.iter().map(|l| l.entity_keys.len()).sum::<usize>())
        .unwrap_or(1);
    match rng.below(10) {
        0 => {
            s.call_failure(call.token);
            "failure".into()
        }
        1..=6 => {
            let right = rng.chance(90);
            let n = if right { entities } else { rng.below(4) };
            let vectors = (0..n).map(|_| stored_vector(rng)).collect();
            let mut resp = reader_response(vectors);
            if rng.chance(10) {
                resp = mutate(rng, resp);
            }
            s.call_response(call.token, &[(":status", "200")], &resp);
            format!("200 with {n} vectors: {resp:?}")
        }
        7 => {
            let status = rng.pick(&["400", "404", "413", "500", "502", "503", "504", "abc"]);
            let body = match rng.below(3) {
                0 => br#"{"error":"redis_unavailable","message":"down"}"#.to_vec(),
                1 => br#"{"error":"redis_timeout","message":7}"#.to_vec(),
                _ => rng.bytes(30),
            };
            s.call_response(call.token, &[(":status", *status)], &body);
            format!("{status}: {body:?}")
        }
        8 => {
            let b = rng.bytes(60);
            s.call_response(call.token, &[(":status", "200")], &b);
            format!("200 with garbage {b:?}")
        }
        _ => {
            // Headers without :status.
            s.call_response(call.token, &[("content-type", "x")], &[]);
            "no :status".into()
        }
    }
}

fn run_case(rng: &mut Rng, host: &Host, case: usize, int_keys: bool) {
    let body = body(rng, int_keys);
    let method = *rng.pick(&[
        "POST", "POST", "POST", "POST", "PUT", "PATCH", "GET", "DELETE",
    ]);
    let path = *rng.pick(&[
        PATH,
        PATH,
        PATH,
        "/v1/models/fraud",
        "/other",
        "/v1/models/fraud?x=1",
    ]);
    let mut headers: Vec<(&str, String)> = vec![
        (":method", method.into()),
        (":path", path.into()),
        (":authority", "m".into()),
    ];
    match rng.below(10) {
        0 => {}
        1 => headers.push(("content-length", "abc".into())),
        2 => headers.push(("content-length", rng.next().to_string())),
        _ => headers.push(("content-length", body.len().to_string())),
    }
    if rng.chance(20) {
        headers.push(("x-ferry-status", "forged".into()));
        headers.push(("X-Ferry-Entities", "999".into()));
    }
    host.note(format!(
        "sweep case {case}: {method} {path} headers {headers:?} body {:?}",
        String::from_utf8_lossy(&body)
    ));
    let s = host.stream();
    let empty = body.is_empty() && rng.chance(50);
    s.request_headers(&headers, empty);
    if !empty {
        let mut rest = body.as_slice();
        while !rest.is_empty() {
            let whole = rng.chance(70);
            let n = if whole {
                rest.len()
            } else {
                1 + rng.below(rest.len())
            };
            let (chunk, tail) = rest.split_at(n);
            s.request_body(chunk, tail.is_empty());
            rest = tail;
        }
        if body.is_empty() {
            s.request_body(&[], true);
        }
    }
    let answered = answer(rng, host, &s);
    let what = || {
        format!(
            "case {case} ({method} {path}, reader: {answered}), body {:?}",
            String::from_utf8_lossy(&body)
        )
    };
    assert!(
        host.abi_errors().is_empty(),
        "{}: {:?}",
        what(),
        host.abi_errors()
    );
    assert!(!s.paused(), "{}: left paused", what());
    let replies = s.local_replies();
    assert!(replies.len() <= 1, "{}: {replies:?}", what());
    if let Some(r) = replies.first() {
        assert!(
            [400, 404, 405, 413, 422, 500, 502, 503, 504].contains(&r.status),
            "{}: {r:?}",
            what()
        );
        let json: Json =
            serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{}: {e}", what()));
        assert_eq!(
            json["error"].as_str(),
            r.header("x-ferry-error"),
            "{}",
            what()
        );
        assert!(!s.resumed(), "{}: answered and resumed", what());
    } else if !["POST", "PUT", "PATCH"].contains(&method) || path == "/other" {
        // Not the filter's business: untouched.
        assert!(
            host.dispatched_calls()
                .iter()
                .all(|c| c.context_id != s.id()),
            "{}",
            what()
        );
        assert_eq!(s.request_body_bytes(), body, "{}", what());
    } else if let Some(status) = s.request_header("x-ferry-status") {
        let out = s.request_body_bytes();
        assert_eq!(
            s.request_header("content-length"),
            Some(out.len().to_string()),
            "{}",
            what()
        );
        // Enriched or degraded, the body Ferry forwards is its own rewrite.
        let v: Json = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{}: {e}", what()));
        assert!(
            v["ferry"]["statuses"].is_array(),
            "{status}: {}: {v}",
            what()
        );
    }
    s.finish();
}

fn sweep(name: &str, snapshot: pb::Snapshot, seed: u64) {
    let int_keys = snapshot.services[0].entity_keys[0].r#type == pb::ValueType::Int64 as i32;
    let host = host_with(&snapshot);
    let mut rng = Rng(seed);
    for case in 0..CASES {
        run_case(&mut rng, &host, case, int_keys);
    }
    let calls = host.dispatched_calls().len();
    eprintln!("sweep {name}: {CASES} cases, {calls} reader calls");
    assert!(
        calls > CASES / 8,
        "{name}: too few cases reach the reader ({calls})"
    );
}

#[test]
fn no_input_traps_the_vm_strict() {
    sweep("strict", snapshot(), SEED);
}

#[test]
fn no_input_traps_the_vm_lenient_short_names() {
    let s = snapshot_with(|r| {
        r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
        r.on_reader_error = pb::ReaderErrorPolicy::ReaderErrorForward as i32;
        r.feature_names = pb::FeatureNames::Short as i32;
    });
    sweep("lenient", s, SEED + 1);
}

#[test]
fn no_input_traps_the_vm_defaults_and_stale_reject() {
    let s = snapshot_with(|r| {
        r.on_missing_entity = pb::MissingEntityPolicy::MissingDefault as i32;
        r.on_stale = pb::StalePolicy::StaleReject as i32;
    });
    sweep("defaults", s, SEED + 2);
}

#[test]
fn no_input_traps_the_vm_int64_keys() {
    let mut s = snapshot();
    s.services[0].entity_keys[0].r#type = pb::ValueType::Int64 as i32;
    sweep("int64", s, SEED + 3);
}

#[test]
fn no_input_traps_the_vm_near_cache() {
    let mut s = snapshot_with(|r| {
        r.cache_max_age_ms = 10_000;
        r.on_missing_entity = pb::MissingEntityPolicy::MissingNull as i32;
    });
    s.near_cache_max_bytes = 16 * 2048;
    sweep("near cache", s, SEED + 4);
}
