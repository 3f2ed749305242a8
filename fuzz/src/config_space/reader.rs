//! The reader's side: what the one call gets (vectors, a refusal, a failure, nothing), and per
//! key asked a vector that is present, missing, stale (past any ttl), of another fingerprint,
//! truncated, or not a vector at all. Values come from `bypass::reader::value`'s table, which
//! never spells a canary.

use ferry_core::config::{Config, Service};
use ferry_protos::v1 as pb;
use prost::Message;

use super::pick::Pick;
use crate::bypass::reader::value;
use crate::NOW_US;

/// What the reader does with the one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    Vectors,
    /// One vector too few.
    Short,
    /// An error status, with the reader's JSON error or a plain body.
    Status(u16, bool),
    /// Reset or timeout: no headers, no body.
    NoResponse,
    /// 200 whose body is not a VectorResponse.
    Garbage,
    /// Never answers: the request stays paused.
    Never,
    /// `dispatch_http_call` fails.
    DispatchFails,
}

pub fn plan(p: &mut Pick<'_>) -> Plan {
    match p.below(16) {
        8 => Plan::Short,
        9 => Plan::Status(400, true),
        10 => Plan::Status(413, false),
        11 => Plan::Status(503, true),
        12 => Plan::Status(500, false),
        13 => Plan::NoResponse,
        14 => Plan::Garbage,
        15 => p.of(&[Plan::Never, Plan::DispatchFails]),
        _ => Plan::Vectors,
    }
}

fn service<'c>(config: &'c Config, name: &str) -> Option<&'c Service> {
    config
        .routes
        .iter()
        .flat_map(|r| {
            r.parts
                .iter()
                .map(|x| &*x.service)
                .chain(r.feast_services.iter().map(|s| &**s))
        })
        .find(|s| s.name == name)
}

/// The reader's answer to the one call, which asked `asked` (a VectorRequest), as `plan`
/// says: `None` when none comes (never, or the call was never sent); else the `:status`
/// (`None`: a reset or timeout, no headers) and the body. Every driver of the target's inputs
/// (the `FakeHost` run, tests/wasm-host's differential test) answers through this.
pub fn answer(
    plan: &Plan,
    p: &mut Pick<'_>,
    config: &Config,
    asked: &[u8],
) -> Option<(Option<u16>, Vec<u8>)> {
    Some(match plan {
        Plan::Never | Plan::DispatchFails => return None,
        Plan::Vectors | Plan::Short => {
            let short = *plan == Plan::Short;
            (Some(200), vectors(p, config, asked, short))
        }
        Plan::Status(s, json) => {
            let body = if *json {
                br#"{"error":"redis_unavailable","message":"refused"}"#.to_vec()
            } else {
                b"upstream connect error".to_vec()
            };
            (Some(*s), body)
        }
        Plan::NoResponse => (None, Vec::new()),
        Plan::Garbage => (Some(200), b"\xff\xff\xff".to_vec()),
    })
}

/// One key's stored vector.
fn vector(p: &mut Pick<'_>, s: &Service) -> Vec<u8> {
    let choice = p.below(12);
    if choice == 8 {
        return Vec::new(); // missing
    }
    let mut fingerprint = s.fingerprint;
    if choice == 9 {
        fingerprint ^= 1;
    }
    if choice == 10 {
        return vec![0xff, 0x01];
    }
    let stale = choice == 11;
    let views = s
        .views
        .iter()
        .map(|v| pb::ViewValues {
            event_time_us: if stale || p.one_in(10) {
                NOW_US - 400 * 86_400_000_000
            } else {
                NOW_US - 1_000_000
            },
            values: if p.one_in(12) {
                Vec::new()
            } else {
                v.features
                    .iter()
                    .map(|f| pb::Value {
                        kind: if p.one_in(8) {
                            None
                        } else {
                            value(f.value_type, p.below(8))
                        },
                    })
                    .collect()
            },
        })
        .collect();
    let mut bytes = pb::StoredVector { fingerprint, views }.encode_to_vec();
    if p.one_in(12) && !bytes.is_empty() {
        let at = p.below(bytes.len());
        bytes.truncate(at); // truncated
    }
    bytes
}

/// The 200 body answering `request` (a VectorRequest).
pub fn vectors(p: &mut Pick<'_>, config: &Config, request: &[u8], short: bool) -> Vec<u8> {
    let req = pb::VectorRequest::decode(request).unwrap_or_default();
    let mut results = Vec::new();
    for lookup in &req.lookups {
        let s = service(config, &lookup.service);
        let vectors = lookup
            .entity_keys
            .iter()
            .map(|_| s.map_or_else(Vec::new, |s| vector(p, s)))
            .collect();
        results.push(pb::LookupResult { vectors });
    }
    if short {
        if let Some(r) = results.iter_mut().rev().find(|r| !r.vectors.is_empty()) {
            r.vectors.pop();
        }
    }
    pb::VectorResponse { results }.encode_to_vec()
}
