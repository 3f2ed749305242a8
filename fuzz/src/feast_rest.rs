//! The `feast_rest` target: Feast `POST /get-online-features` bodies to `feast_rest::parse`
//! (a request names its own services and features, among those the route lists), then the
//! answer rendered through the format dispatcher with synthesized features and event times, as
//! the filter does.
//!
//! Properties:
//! - a refusal is a named error: a code, a 4xx/5xx status, and a JSON body;
//! - a parsed request has the keys every format keeps (`check_keys`, on the route it is served
//!   by: the services it names);
//! - the answer is Feast's shape: a JSON object with `results` (one column per join key, then
//!   one per requested feature: as many as the request names, or the named service holds) and
//!   `metadata.feature_names` naming them, unique; every column holds one value, status and
//!   event time per entity; the join key columns echo the ids as sent; a status is one of
//!   Feast's, an event time an RFC 3339 UTC text.

use std::collections::HashSet;

use ferry_core::config::{Config, Route};
use ferry_core::error::FerryError;
use ferry_core::format::{self, feast_rest, ParsedRequest};
use serde_json::Value as Json;

use super::{check_keys, features, seed};

const STATUSES: [&str; 4] = ["PRESENT", "NOT_FOUND", "NULL_VALUE", "OUTSIDE_MAX_AGE"];

/// Event times the synthesized answer reports: none, ordinary ones, and the extremes.
const TIMES_US: [i64; 6] = [0, 1_768_464_000_123_456, 1_000, -1, i64::MAX, i64::MIN];

pub fn check(data: &[u8], route: &Route, config: &Config) {
    let mut req = match feast_rest::parse(data, route, config) {
        Ok(r) => r,
        Err(e) => return named(&e, route),
    };
    let served = req.route.clone();
    let ids = req.keys.clone();
    let entities = check_keys(&served, &ids);
    let mut s = seed(data);
    req.event_times_us = (0..entities)
        .map(|_| {
            (0..served.feature_count)
                .map(|_| {
                    s = s.rotate_left(7) ^ 0x9e37_79b9;
                    TIMES_US[(s % TIMES_US.len() as u64) as usize]
                })
                .collect()
        })
        .collect();
    let f = features(&served, entities, seed(data));
    let out = match format::rewrite(ParsedRequest::FeastRest(Box::new(req)), &served, f) {
        Ok(out) => out,
        Err(e) => return named(&e, &served),
    };
    let body = out.body.unwrap_or_default();
    let answer: Json = match serde_json::from_slice(&body) {
        Ok(j) => j,
        Err(e) => panic!(
            "the answer is not JSON ({e}): {}",
            String::from_utf8_lossy(&body)
        ),
    };
    // `parse` took the body, so it is a JSON object.
    let request: Json = serde_json::from_slice(data).unwrap_or_default();
    check_answer(&answer, &request, &served, route, entities);
}

/// A refusal names its problem: a code, an error status, a JSON body.
fn named(e: &FerryError, route: &Route) {
    assert!(!e.code().is_empty(), "an error without a code: {e:?}");
    assert!(
        (400..600).contains(&e.status()),
        "{}: status {}",
        e.code(),
        e.status()
    );
    let body = e.body(&route.name);
    assert!(
        serde_json::from_slice::<Json>(&body).is_ok(),
        "{}: the body is not JSON: {}",
        e.code(),
        String::from_utf8_lossy(&body)
    );
}

/// The feature columns the request asks for: the named service's features, or the list's.
fn requested(request: &Json, route: &Route) -> usize {
    match request["feature_service"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        Some(name) => route
            .feast_services
            .iter()
            .find(|s| s.name == name)
            .map_or(0, |s| s.feature_count),
        None => request["features"].as_array().map_or(0, Vec::len),
    }
}

fn check_answer(answer: &Json, request: &Json, served: &Route, route: &Route, entities: usize) {
    let mut join_keys: Vec<&str> = Vec::new();
    for k in served.parts.iter().flat_map(|p| &p.service.entity_keys) {
        if !join_keys.contains(&k.join_key.as_str()) {
            join_keys.push(&k.join_key);
        }
    }
    let results = answer["results"].as_array().map_or(&[][..], Vec::as_slice);
    let names = answer["metadata"]["feature_names"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let columns = join_keys.len() + requested(request, route);
    assert_eq!(results.len(), columns, "columns in {answer}");
    assert_eq!(names.len(), columns, "feature_names in {answer}");
    let unique: HashSet<&str> = names.iter().filter_map(Json::as_str).collect();
    assert_eq!(unique.len(), columns, "names not unique strings: {names:?}");
    for (i, column) in results.iter().enumerate() {
        for field in ["values", "statuses", "event_timestamps"] {
            let n = column[field].as_array().map(Vec::len);
            assert_eq!(n, Some(entities), "results[{i}].{field}");
        }
        for s in column["statuses"].as_array().into_iter().flatten() {
            assert!(
                s.as_str().is_some_and(|s| STATUSES.contains(&s)),
                "status {s}"
            );
        }
        for t in column["event_timestamps"].as_array().into_iter().flatten() {
            assert!(rfc3339_utc(t.as_str().unwrap_or("")), "event time {t}");
        }
    }
    // The join key columns first (in the request's order), echoing the ids as sent.
    for i in 0..join_keys.len() {
        let key = names[i].as_str().unwrap_or("");
        assert!(
            join_keys.contains(&key),
            "column {i} is {key}, not a join key"
        );
        assert_eq!(
            results[i]["values"], request["entities"][key],
            "the ids of {key}"
        );
    }
}

/// `[-]YYYY...-MM-DDTHH:MM:SS[.fraction]Z`.
fn rfc3339_utc(t: &str) -> bool {
    let Some(rest) = t.strip_suffix('Z') else {
        return false;
    };
    let Some((date, time)) = rest.split_once('T') else {
        return false;
    };
    let (clock, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = date.trim_start_matches('-').split('-').collect();
    parts.len() == 3
        && parts.iter().all(|p| digits(p))
        && clock.split(':').count() == 3
        && clock.split(':').all(|p| p.len() == 2 && digits(p))
        && digits(fraction)
}
