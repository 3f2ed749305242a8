//! Feature writes (issue #23): `POST /push` and `POST /write-to-online-store` in Feast's
//! shapes, executed by `ferry serve`, the one process that knows every fingerprint a view is
//! stored under (the served snapshot's and a held-back one's).
//!
//! - [`request`]: the request bodies; [`answer`]: the answers and the error table.
//! - [`model`]: what a write touches, compiled from the snapshots.
//! - [`bounded`]: the body read with its bounds (rows, cells, lists) checked as it is read.
//! - [`rows`]: `df` checked against the views' schemas (every problem, nothing written).
//! - [`store`]: each key read, merged and compare-and-set (the rule and the script are
//!   `ferry_vector_store`'s, shared with `ferry materialize`).
//! - [`feast`]: a Feast-backed repo's writes, in Feast's layout and with Feast's skip rule.
//! - [`metrics`]: the write series of `/metrics`.
//! - [`parse`]: the thread bodies are parsed on, at a lower CPU priority.
//! - [`pace`]: the keys a second every write's Redis work may take.
//! - [`backfill`]: a file's rows written through the same path (`ferry backfill`).

pub mod answer;
pub mod backfill;
pub mod bounded;
pub mod feast;
pub mod metrics;
pub mod model;
pub mod pace;
pub mod parse;
pub mod request;
pub mod rows;
pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use ferry_protos::v1;
use ferry_redis::Connection;
use http_body_util::Full;
use hyper::Response;

use answer::{Counts, WriteError};
use model::WriteModel;
use request::{Endpoint, Target};
use rows::ViewRows;
use store::KeyWork;

use ferry_repo::sources::TimestampRules;
use ferry_vector_store::merge::Outcome;

/// Largest write request body: 8 MiB (about 50,000 rows of a few features as JSON columns).
pub const MAX_BODY_BYTES: usize = 8 << 20;
/// Write requests answered at once by default (`ferry serve --max-concurrent-writes`): each
/// holds its body (up to [`MAX_BODY_BYTES`]) and its parsed rows.
pub const DEFAULT_MAX_WRITES: usize = 4;
/// Bodies parsed and checked at once, off the async runtime (on [`parse`]'s thread, at a lower
/// CPU priority): what a write flood may take of the machine's CPU (the readers and Envoy
/// share it). Waiting writes wait here, so the thread's queue holds at most this many.
const PARSE_SLOTS: usize = 1;

/// The write service of `ferry serve`.
pub struct Writer {
    /// Redis (one server or a Cluster); connects on first use.
    conn: Connection,
    pub metrics: metrics::WriteMetrics,
    /// The model of the last (current, held-back) pair, rebuilt when either changes.
    model: Mutex<Option<Arc<WriteModel>>>,
    /// One permit per write request being answered; none left: 429.
    slots: Arc<tokio::sync::Semaphore>,
    max_writes: usize,
    /// Permits to parse a body (CPU work, on the parse thread).
    parsing: tokio::sync::Semaphore,
    parser: parse::Parser,
    /// Permits for Redis round trips in flight, shared by every write: the readers' Redis sees
    /// at most [`store::IN_FLIGHT`] of the writes' round trips at once (chunks of
    /// [`store::CHUNK`] keys; single keys in Feast's layout), however many writes run.
    redis: Arc<tokio::sync::Semaphore>,
    /// Keys a second over every write (`--max-write-keys-per-second`); None: no bound.
    pace: Option<Arc<pace::Pacer>>,
}

/// A taken write slot, released (and uncounted) when the answer is sent.
pub struct Slot {
    _permit: tokio::sync::OwnedSemaphorePermit,
    in_flight: prometheus_client::metrics::gauge::Gauge,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.in_flight.dec();
    }
}

impl Writer {
    /// A writer answering at most `max_writes` write requests at once, their Redis work at
    /// most `keys_per_second` keys a second (0: no bound).
    pub fn new(
        conn: Connection,
        metrics: metrics::WriteMetrics,
        max_writes: usize,
        keys_per_second: u32,
    ) -> Writer {
        let pace = pace::Pacer::new(keys_per_second, metrics.paced_seconds.clone()).map(Arc::new);
        Writer {
            conn,
            metrics,
            model: Mutex::new(None),
            slots: Arc::new(tokio::sync::Semaphore::new(max_writes)),
            max_writes,
            parsing: tokio::sync::Semaphore::new(PARSE_SLOTS),
            parser: parse::Parser::start(),
            redis: Arc::new(tokio::sync::Semaphore::new(store::IN_FLIGHT)),
            pace,
        }
    }

    /// A write slot, taken before the body is read; or the 429 refusal (counted).
    pub fn slot(&self) -> Result<Slot, WriteError> {
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => {
                self.metrics.in_flight.inc();
                Ok(Slot {
                    _permit: permit,
                    in_flight: self.metrics.in_flight.clone(),
                })
            }
            Err(_) => {
                let e = WriteError::Busy(self.max_writes);
                self.refused(&e);
                Err(e)
            }
        }
    }

    fn model(&self, current: &v1::Snapshot, held: Option<&v1::Snapshot>) -> Arc<WriteModel> {
        let mut cached = self.model.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = cached.as_ref().is_some_and(|m| {
            m.versions.0 == current.version
                && m.versions.1.as_deref() == held.map(|h| h.version.as_str())
        });
        if !fresh {
            *cached = Some(Arc::new(WriteModel::build(current, held)));
        }
        cached.clone().unwrap_or_default()
    }

    /// Answers one authorized write request whose body was read (under a [`Slot`]).
    pub async fn handle(
        &self,
        endpoint: Endpoint,
        body: Bytes,
        current: Option<&v1::Snapshot>,
        held_back: Option<&v1::Snapshot>,
    ) -> Response<Full<Bytes>> {
        let start = Instant::now();
        let answer = match self.write(endpoint, body, current, held_back).await {
            Ok(counts) => answer::success(endpoint == Endpoint::WriteToOnlineStore, counts),
            Err(e) => {
                self.refused(&e);
                e.response()
            }
        };
        self.metrics.latency.observe(start.elapsed().as_secs_f64());
        answer
    }

    /// Counts a refused request.
    pub fn refused(&self, e: &WriteError) {
        self.metrics.refused(e.code());
        if e.before_writing() {
            tracing::debug!(code = e.code(), "write refused");
        } else {
            tracing::warn!(code = e.code(), error = ?e, "write failed");
        }
    }

    async fn write(
        &self,
        endpoint: Endpoint,
        body: Bytes,
        current: Option<&v1::Snapshot>,
        held_back: Option<&v1::Snapshot>,
    ) -> Result<Counts, WriteError> {
        let model = current.map(|c| self.model(c, held_back));
        let checked = {
            let _parsing = self.parsing.acquire().await.map_err(internal)?;
            // Not parsed at all while the writes already admitted fill the pace's queue.
            if let Some(backlog) = self.pace.as_ref().and_then(|p| p.full()) {
                return Err(WriteError::Paced(backlog));
            }
            let model = model.clone();
            self.parser
                .run(move || check(endpoint, &body, model.as_deref()))
                .await
                .ok_or_else(|| internal("the parse of the body panicked"))?
        };
        let rows = checked?;
        let model = model.ok_or(WriteError::NoSnapshot)?;
        self.store(&model, &rows).await
    }

    /// Writes checked rows under the merge rule (Ferry's layout) or Feast's skip rule (a
    /// Feast-backed repo): what `/push` does after validation, and what `ferry backfill` does
    /// per batch.
    pub async fn store(&self, model: &WriteModel, rows: &[ViewRows]) -> Result<Counts, WriteError> {
        if model.feast_backed {
            return self.write_feast(&model.project, rows).await;
        }
        let (work, ids) = key_work(&model.project, rows);
        let admitted = self.admit(work.len())?;
        let (applied, error) = store::apply(&self.conn, &self.redis, admitted.as_ref(), work).await;
        self.metrics.conflicts_total.inc_by(applied.conflicts);
        let counts = count(&ids, &applied.outcomes, rows);
        self.metrics.rows(metrics::WRITTEN, counts.written);
        self.metrics
            .rows(metrics::SKIPPED_OLDER, counts.skipped_older);
        self.metrics.rows(metrics::REFUSED, counts.refused);
        for (_, o) in &applied.outcomes {
            if let Outcome::Refused(r) = o {
                self.metrics.refused(r.label());
            }
        }
        match error {
            None => Ok(counts),
            Some(store::StoreError::Contended { key }) => Err(WriteError::Contended(format!(
                "the vector {key} changed under {} attempts in a row; {} row(s) were written \
                 before this, retry the request (re-pushing is idempotent)",
                ferry_vector_store::cas::MAX_ATTEMPTS,
                counts.written
            ))),
            Some(e) => Err(WriteError::Redis(format!(
                "{e}; {} row(s) were written before the failure, retry the request (re-pushing \
                 is idempotent)",
                counts.written
            ))),
        }
    }
}

impl Writer {
    /// A write of `keys` keys admitted under the pace (None: no pace), or refused while the
    /// keys already admitted take over [`pace::MAX_BACKLOG`] at it.
    fn admit(&self, keys: usize) -> Result<Option<Arc<pace::Admitted>>, WriteError> {
        let Some(pace) = &self.pace else {
            return Ok(None);
        };
        match pace.admit(keys) {
            Ok(admitted) => Ok(Some(Arc::new(admitted))),
            Err(backlog) => Err(WriteError::Paced(backlog)),
        }
    }

    /// A Feast-backed repo's rows, in Feast's layout ([`feast`]).
    async fn write_feast(&self, project: &str, rows: &[ViewRows]) -> Result<Counts, WriteError> {
        // One key per row of each view (Feast's layout: a hash per entity and view).
        let admitted = self.admit(rows.iter().map(|r| r.rows.len()).sum())?;
        let (outcomes, error) =
            feast::apply(&self.conn, &self.redis, admitted.as_ref(), project, rows).await;
        let mut counts = Counts {
            skipped_older: rows.iter().map(|r| r.superseded).sum(),
            ..Counts::default()
        };
        for (_, o) in &outcomes {
            match o {
                Outcome::Written => counts.written += 1,
                _ => counts.skipped_older += 1,
            }
        }
        self.metrics.rows(metrics::WRITTEN, counts.written);
        self.metrics
            .rows(metrics::SKIPPED_OLDER, counts.skipped_older);
        match error {
            None => Ok(counts),
            Some(e) => Err(WriteError::Redis(format!(
                "{e}; {} row(s) were written before the failure, retry the request",
                counts.written
            ))),
        }
    }
}

/// Parses and checks a body (CPU work, run on the parse thread): its rows, or why not.
fn check(
    endpoint: Endpoint,
    body: &[u8],
    model: Option<&WriteModel>,
) -> Result<Vec<ViewRows>, WriteError> {
    let req = request::parse(endpoint, body)?;
    let model = model.ok_or(WriteError::NoSnapshot)?;
    let views = resolve(model, &req.target)?;
    let rules = TimestampRules::now(None);
    rows::rows(&req.df, &views, &rules).map_err(WriteError::rows)
}

fn internal(e: impl std::fmt::Display) -> WriteError {
    WriteError::Internal(e.to_string())
}

/// The views a request writes.
fn resolve(model: &WriteModel, target: &Target) -> Result<Vec<Arc<model::ViewModel>>, WriteError> {
    let unknown_view = |view: &str| WriteError::UnknownView {
        view: view.to_owned(),
        project: model.project.clone(),
    };
    match target {
        Target::View(name) => Ok(vec![model
            .views
            .get(name)
            .cloned()
            .ok_or_else(|| unknown_view(name))?]),
        Target::PushSource(name) => model
            .push_sources
            .get(name)
            .ok_or_else(|| WriteError::UnknownPushSource(name.clone()))?
            .iter()
            .map(|v| model.views.get(v).cloned().ok_or_else(|| unknown_view(v)))
            .collect(),
    }
}

/// One work item per Redis key, and for each request row id (view index, row index).
fn key_work(project: &str, rows: &[ViewRows]) -> (Vec<KeyWork>, Vec<(usize, usize)>) {
    let mut by_key: HashMap<String, KeyWork> = HashMap::new();
    let mut ids = Vec::new();
    for (vi, vr) in rows.iter().enumerate() {
        for (ri, row) in vr.rows.iter().enumerate() {
            let id = ids.len();
            ids.push((vi, ri));
            for t in &vr.view.targets {
                let key =
                    ferry_protos::redis_key(project, &t.service, t.fingerprint, &row.entity_key);
                by_key
                    .entry(key.clone())
                    .or_insert_with(|| KeyWork {
                        key,
                        fingerprint: t.fingerprint,
                        views: t.views,
                        updates: Vec::new(),
                    })
                    .updates
                    .push((t.clone(), row.clone(), id));
            }
        }
    }
    let mut work: Vec<KeyWork> = by_key.into_values().collect();
    work.sort_by(|a, b| a.key.cmp(&b.key));
    (work, ids)
}

/// Each row's result: refused if a vector refused it, else written if a vector took it (or
/// no vector holds its view), else skipped as older. Rows superseded inside the request count
/// as skipped.
fn count(ids: &[(usize, usize)], outcomes: &[(usize, Outcome)], rows: &[ViewRows]) -> Counts {
    let mut per_row: Vec<Option<Outcome>> = vec![None; ids.len()];
    for &(id, o) in outcomes {
        let slot = &mut per_row[id];
        *slot = Some(match (*slot, o) {
            (Some(Outcome::Refused(r)), _) | (_, Outcome::Refused(r)) => Outcome::Refused(r),
            (Some(Outcome::Written), _) | (_, Outcome::Written) => Outcome::Written,
            _ => Outcome::SkippedOlder,
        });
    }
    let mut c = Counts {
        skipped_older: rows.iter().map(|r| r.superseded).sum(),
        ..Counts::default()
    };
    for (o, &(vi, _)) in per_row.into_iter().zip(ids) {
        match o {
            Some(Outcome::Refused(_)) => c.refused += 1,
            Some(Outcome::SkippedOlder) => c.skipped_older += 1,
            Some(Outcome::Written) => c.written += 1,
            // No vector holds the view: nothing to write, nothing refused.
            None if rows[vi].view.targets.is_empty() => c.written += 1,
            // Not reached before a failure.
            None => {}
        }
    }
    c
}
