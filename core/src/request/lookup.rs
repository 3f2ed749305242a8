//! The stored vectors of a request's entity keys: the near cache first, then one reader call
//! for the misses; the reader's answer judged, and what it fetched put into the near cache.

use std::time::Duration;

use crate::config::{Config, Route};
use crate::error::FerryError;
use crate::format::ParsedRequest;
use crate::host::{Host, HttpCall};
use crate::metrics::{Metric, Metrics};
use crate::near_cache;
use crate::request::reader::{self, ReaderCall};

/// A request waiting for the reader.
pub(super) struct Pending {
    pub route: usize,
    pub token: u32,
    pub request: ParsedRequest,
    pub body_size: usize,
    /// One per entity key (per route part for each entity): the cached vector, or empty
    /// until the reader answers.
    pub vectors: Vec<Vec<u8>>,
    /// Indices of the keys asked of the reader, in the order of its answer.
    pub misses: Vec<usize>,
    /// Vectors per lookup in the reader's answer.
    pub lookup_sizes: Vec<usize>,
    pub sent_at_us: i64,
}

/// Per entity key: the near cache's vector when the route uses it and holds a fresh one, else
/// empty (to fetch).
pub(super) fn cached(
    host: &impl Host,
    metrics: &Metrics,
    config: &Config,
    route: &Route,
    keys: &[String],
) -> Vec<Vec<u8>> {
    if route.cache_max_age_ms == 0 {
        return vec![Vec::new(); keys.len()];
    }
    let now_ms = u64::try_from(host.now_us() / 1000).unwrap_or(0);
    let out: Vec<Vec<u8>> = keys
        .iter()
        .enumerate()
        .map(|(j, k)| {
            let service = route.service_of_key(j);
            if service.feature_count == 0 {
                return Vec::new();
            }
            let id = near_cache::entry_id(service.fingerprint, &service.name, k);
            let (set, _) = host.shared_get(&near_cache::set_key(&id, config.near_cache_sets));
            set.and_then(|s| {
                near_cache::lookup(&s, &id, now_ms, route.cache_max_age_ms).map(<[u8]>::to_vec)
            })
            .unwrap_or_default()
        })
        .collect();
    let hits = out.iter().filter(|v| !v.is_empty()).count();
    let stored = (0..keys.len())
        .filter(|j| route.service_of_key(*j).feature_count > 0)
        .count();
    metrics.count(host, Metric::CacheHits, hits);
    metrics.count(host, Metric::CacheMisses, stored - hits);
    out
}

/// Dispatches the one reader call for the keys at `misses`: its token, and the call (what
/// its answer will hold).
pub(super) fn ask_reader(
    host: &impl Host,
    config: &Config,
    route: &Route,
    keys: &[String],
    misses: &[usize],
) -> Result<(u32, ReaderCall), FerryError> {
    let call = reader::reader_request(config, route, keys, misses);
    let headers = vec![
        (":method", "POST"),
        (":path", ferry_protos::READER_PATH),
        (":authority", config.reader_authority.as_str()),
        ("content-type", ferry_protos::PROTOBUF_CONTENT_TYPE),
    ];
    let timeout = Duration::from_millis(u64::from(route.reader_timeout_ms));
    let dispatched = host.dispatch(HttpCall {
        cluster: &config.reader_cluster,
        headers,
        body: &call.body,
        timeout,
    });
    match dispatched {
        Ok(token) => Ok((token, call)),
        Err(detail) => Err(FerryError::DispatchFailed { detail }),
    }
}

/// Reads the reader's answer to `p`'s call (`num_headers` 0: no response) into `p.vectors`,
/// or says why it is refused.
pub(super) fn answered(
    host: &impl Host,
    metrics: &Metrics,
    route: &Route,
    p: &mut Pending,
    num_headers: usize,
    body_size: usize,
) -> Result<(), FerryError> {
    if let Some(id) = metrics.id(Metric::ReaderLatencyUs) {
        let took = host.now_us().saturating_sub(p.sent_at_us);
        host.metric_record(id, u64::try_from(took).unwrap_or(0));
    }
    let status = if num_headers == 0 {
        None
    } else {
        host.call_response_status()
    };
    let body = host.call_response_body(body_size).unwrap_or_default();
    reader::check_reader_status(status, &body, route.reader_timeout_ms)?;
    let fetched = reader::reader_vectors(&body, &p.lookup_sizes)?;
    for (i, v) in p.misses.iter().zip(fetched) {
        p.vectors[*i] = v;
    }
    Ok(())
}

/// Puts the vectors the reader just returned into the near cache (best effort: a set
/// changed by another worker meanwhile is left alone).
pub(super) fn cache_fetched(
    host: &impl Host,
    metrics: &Metrics,
    config: &Config,
    route: &Route,
    p: &Pending,
) {
    if route.cache_max_age_ms == 0 {
        return;
    }
    let now_ms = u64::try_from(host.now_us() / 1000).unwrap_or(0);
    let mut evictions = 0;
    for i in &p.misses {
        let vector = &p.vectors[*i];
        if vector.is_empty() {
            continue;
        }
        let service = route.service_of_key(*i);
        let id = near_cache::entry_id(service.fingerprint, &service.name, &p.request.keys()[*i]);
        let key = near_cache::set_key(&id, config.near_cache_sets);
        let (set, cas) = host.shared_get(&key);
        if let near_cache::Insert::Write { set, evicted } =
            near_cache::insert(set.as_deref(), &id, vector, now_ms)
        {
            if host.shared_set(&key, &set, cas) && evicted {
                evictions += 1;
            }
        }
    }
    metrics.count(host, Metric::CacheEvictions, evictions);
}

/// Counts a reader-side failure; true when the route may fail open on it (forward with every
/// feature null). Only failures of the reader path may: a bad vector is never forwarded.
pub(super) fn failed(host: &impl Host, metrics: &Metrics, route: &Route, err: &FerryError) -> bool {
    host.log_warn(&format!("route '{}': {}", route.name, err.message()));
    let reader_failure = err.is_reader_failure();
    if reader_failure {
        metrics.count(host, Metric::ReaderErrors, 1);
    }
    if matches!(
        err,
        FerryError::ReaderTimeout { .. } | FerryError::RedisTimeout { .. }
    ) {
        metrics.count(host, Metric::ReaderTimeouts, 1);
    }
    route.on_reader_error == crate::config::OnReaderError::Forward && reader_failure
}
