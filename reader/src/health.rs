//! `GET /healthz` (is Redis reachable?) and `GET /readyz` (is Redis reachable, and are the
//! vectors of the asked services at the asked fingerprints all written?). Health answers are
//! cached for a moment so that a flood of probes costs Redis one `PING` per `HEALTH_CACHE`.

use std::time::Duration;

use bytes::Bytes;
use ferry_protos::{fingerprint_hex, is_valid_name, reader_error, ready_key};
use http_body_util::Full;
use hyper::{Response, StatusCode};
use redis::Value;
use serde_json::{json, Value as Json};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::{json_response, ReaderError};
use crate::store::Store;

/// How long one `PING`'s outcome answers `/healthz`.
const HEALTH_CACHE: Duration = Duration::from_secs(1);

/// Most (service, fingerprint) pairs one `/readyz` may ask about.
const MAX_READY_CHECKS: usize = 64;

/// The last `PING` outcome: `None` = Redis answered, else the error's code and message.
type Outcome = Option<(&'static str, String)>;

/// The cached reachability of Redis.
#[derive(Debug, Default)]
pub struct Health {
    /// When the last `PING` finished and how it went. A `tokio` mutex held across the `PING`: the
    /// probes that arrive meanwhile wait for its outcome instead of sending their own.
    last: Mutex<Option<(Instant, Outcome)>>,
}

impl Health {
    /// Whether Redis answers a `PING` (within the call budget), at most `HEALTH_CACHE` old and
    /// not contradicted since by a request's call (Redis came back, or went away).
    async fn reachable(&self, store: &Store) -> Outcome {
        let mut last = self.last.lock().await;
        if let Some((at, outcome)) = last.as_ref() {
            if at.elapsed() < HEALTH_CACHE && outcome.is_none() == store.is_up() {
                return outcome.clone();
            }
        }
        let outcome = store.ping().await.err().map(|e| (e.code(), e.to_string()));
        *last = Some((Instant::now(), outcome.clone()));
        outcome
    }

    /// `GET /healthz`: 200 if Redis answers, else 503 naming the problem.
    pub async fn healthz(&self, store: &Store) -> Response<Full<Bytes>> {
        match self.reachable(store).await {
            None => json_response(StatusCode::OK, &json!({ "status": "ok", "redis": "up" })),
            Some(problem) => redis_down(problem),
        }
    }

    /// `GET /readyz[?project=P&service=S&fingerprint=F...]`: without a query, ready when Redis
    /// answers; with one, also when every named (service, fingerprint) has its completion marker.
    pub async fn readyz(
        &self,
        store: &Store,
        query: Option<&str>,
    ) -> Result<Response<Full<Bytes>>, ReaderError> {
        let checks = parse_query(query.unwrap_or(""))?;
        if let Some(problem) = self.reachable(store).await {
            return Ok(redis_down(problem));
        }
        if checks.is_empty() {
            return Ok(json_response(
                StatusCode::OK,
                &json!({ "status": "ready", "redis": "up" }),
            ));
        }
        let mut mget = redis::cmd("MGET");
        for c in &checks {
            mget.arg(ready_key(&c.project, &c.service, c.fingerprint));
        }
        let markers = store.mget(&mget).await?;
        let mut missing = Vec::new();
        let mut vectors = Vec::with_capacity(checks.len());
        for (c, marker) in checks.iter().zip(markers) {
            let fingerprint = fingerprint_hex(c.fingerprint);
            let mut entry = json!({
                "project": c.project, "service": c.service, "fingerprint": fingerprint,
            });
            match marker {
                Value::BulkString(bytes) => {
                    entry["ready"] = Json::Bool(true);
                    // What materialize recorded (entity count, time), shown as it is.
                    if let Ok(recorded) = serde_json::from_slice::<Json>(&bytes) {
                        entry["materialized"] = recorded;
                    }
                }
                _ => {
                    entry["ready"] = Json::Bool(false);
                    missing.push(format!("{}/{} at {fingerprint}", c.project, c.service));
                }
            }
            vectors.push(entry);
        }
        Ok(if missing.is_empty() {
            json_response(
                StatusCode::OK,
                &json!({ "status": "ready", "redis": "up", "vectors": vectors }),
            )
        } else {
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({
                    "status": "not_ready",
                    "redis": "up",
                    "error": reader_error::NOT_READY,
                    "message": format!(
                        "no completed `ferry materialize` for {}", missing.join(", ")
                    ),
                    "vectors": vectors,
                }),
            )
        })
    }
}

fn redis_down((code, message): (&'static str, String)) -> Response<Full<Bytes>> {
    json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({ "status": "unavailable", "redis": "down", "error": code, "message": message }),
    )
}

/// One (project, service, fingerprint) whose vectors `/readyz` is asked about.
#[derive(Debug, PartialEq)]
struct Check {
    project: String,
    service: String,
    fingerprint: u64,
}

/// `project=P` once, then `service=S&fingerprint=F` pairs: the n-th service goes with the n-th
/// fingerprint. Names are checked as the reader checks them in keys, so no decoding is needed.
fn parse_query(query: &str) -> Result<Vec<Check>, ReaderError> {
    let bad = |why: String| ReaderError::BadRequest(format!("/readyz: {why}"));
    let (mut project, mut services, mut fingerprints) = (None, Vec::new(), Vec::new());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "project" if project.is_none() => project = Some(value),
            "project" => return Err(bad("project given twice".into())),
            "service" => services.push(value),
            "fingerprint" => fingerprints.push(value),
            other => {
                return Err(bad(format!(
                    "unknown parameter {other:?} (project, service, fingerprint)"
                )))
            }
        }
    }
    if services.len() != fingerprints.len() {
        return Err(bad(format!(
            "{} service(s) but {} fingerprint(s): give one fingerprint per service",
            services.len(),
            fingerprints.len()
        )));
    }
    if services.len() > MAX_READY_CHECKS {
        return Err(bad(format!("at most {MAX_READY_CHECKS} services per call")));
    }
    if services.is_empty() {
        return match project {
            Some(_) => Err(bad("project without service and fingerprint".into())),
            None => Ok(Vec::new()),
        };
    }
    let project = project.ok_or_else(|| bad("service given without project".into()))?;
    for name in std::iter::once(&project).chain(&services) {
        if !is_valid_name(name) {
            return Err(bad(format!("{name:?} is not a valid name ([A-Za-z0-9_-])")));
        }
    }
    services
        .into_iter()
        .zip(fingerprints)
        .map(|(service, f)| {
            let fingerprint = (!f.is_empty() && f.len() <= 16)
                .then(|| u64::from_str_radix(f, 16).ok())
                .flatten()
                .ok_or_else(|| bad(format!("fingerprint {f:?} is not 1 to 16 hex digits")))?;
            Ok(Check {
                project: project.to_owned(),
                service: service.to_owned(),
                fingerprint,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_go_together_in_order() {
        let checks =
            parse_query("project=bank&service=a&fingerprint=00ff&service=b&fingerprint=1").unwrap();
        assert_eq!(
            checks,
            vec![
                Check {
                    project: "bank".into(),
                    service: "a".into(),
                    fingerprint: 0xff
                },
                Check {
                    project: "bank".into(),
                    service: "b".into(),
                    fingerprint: 1
                },
            ]
        );
        assert!(parse_query("").unwrap().is_empty());
    }

    #[test]
    fn bad_queries_say_what_is_wrong() {
        let cases = [
            ("project=p&service=a", "1 service(s) but 0 fingerprint(s)"),
            ("service=a&fingerprint=1", "service given without project"),
            (
                "project=p&service=a:b&fingerprint=1",
                "\"a:b\" is not a valid name",
            ),
            ("project=p&service=a&fingerprint=xyz", "fingerprint \"xyz\""),
            (
                "project=p&service=a&fingerprint=00000000000000001",
                "1 to 16 hex digits",
            ),
            ("project=p&project=q", "project given twice"),
            ("svc=a", "unknown parameter \"svc\""),
            ("project=p", "project without service"),
        ];
        for (query, expected) in cases {
            let err = parse_query(query).unwrap_err();
            assert_eq!(err.code(), "bad_request");
            assert!(err.to_string().contains(expected), "{query}: {err}");
        }
    }
}
