//! The served-feature log step: whether the route's policy picks this request (a hash of
//! Envoy's `x-request-id`, read with the headers), and, once enrichment succeeded, the record
//! of what the model received handed to the host (Envoy filter state), before the request is
//! forwarded or answered. Nothing here can fail, delay or change the request: a record over
//! its bound, or one the host refuses, is dropped and counted.

use crate::config::log_policy::ServedStatus;
use crate::config::{Config, Route};
use crate::host::Host;
use crate::log::record::{self, Served, Stamp};
use crate::metrics::{Metric, Metrics};

/// The request header Envoy's connection manager sets to the request's id.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// The request id, read with the headers (they may be gone by the time of the record), only
/// when the selected route logs.
pub fn request_id<H: Host>(host: &H, config: &Config, route: usize) -> Option<String> {
    let logs = config.routes.get(route).is_some_and(|r| r.log.is_some());
    if !logs {
        return None;
    }
    host.request_header(REQUEST_ID_HEADER)
        .filter(|id| !id.is_empty())
}

/// Whether `route` logs a request with this id and outcome (never without an id).
pub fn picks(route: &Route, request_id: Option<&str>, status: ServedStatus) -> bool {
    match (&route.log, request_id) {
        (Some(policy), Some(id)) => policy.picks(id, status),
        _ => false,
    }
}

/// Encodes the record and hands it to the host; too large or refused = dropped and counted.
pub fn hand_out<H: Host>(
    host: &H,
    metrics: &Metrics,
    route: &Route,
    stamp: Stamp<'_>,
    served: &Served,
) {
    let stored = match record::encode(route, stamp, served) {
        Ok(bytes) => host.store_log_record(&bytes),
        Err(record::Dropped::TooLarge { .. }) => false,
    };
    let metric = if stored {
        Metric::LogsHanded
    } else {
        Metric::LogsDropped
    };
    metrics.count(host, metric, 1);
}
