//! The sink's writer: rows grouped by (FeatureService, layout, day), each group written as one
//! Parquet file when its window closes or it reaches its row bound, to a temporary name then
//! renamed, so a reader never sees half a file. Memory is bounded: rows beyond
//! `max_buffered_rows` are dropped and counted; a file that cannot be written drops its rows,
//! counts an error, and says so in the log at most once per `error_log_interval`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use ferry_protos::v1::ServedLog;

use super::decode;
use super::metrics::{SinkMetrics, BUFFER_FULL, WRITE_ERROR};
use super::parquet_file::{self, day_of, Layout, Row};

#[derive(Debug, Clone)]
pub struct FileOptions {
    pub dir: PathBuf,
    /// A group is written at most this long after its first row.
    pub window: Duration,
    /// A group is written once it holds this many rows.
    pub max_rows: usize,
    /// Rows held over all groups; more are dropped.
    pub max_buffered_rows: usize,
    pub error_log_interval: Duration,
}

struct Group {
    rows: Vec<Row>,
    opened: Instant,
}

pub struct Files {
    opts: FileOptions,
    metrics: SinkMetrics,
    groups: HashMap<(Layout, i32), Group>,
    buffered: usize,
    /// Makes names unique within a microsecond.
    seq: u64,
    last_error_log: Option<Instant>,
    errors_unlogged: u64,
}

impl Files {
    pub fn new(opts: FileOptions, metrics: SinkMetrics) -> Files {
        Files {
            opts,
            metrics,
            groups: HashMap::new(),
            buffered: 0,
            seq: 0,
            last_error_log: None,
            errors_unlogged: 0,
        }
    }

    /// Takes records until the channel closes, writing groups as they come due; then writes
    /// every group left.
    pub fn run(mut self, records: Receiver<ServedLog>) {
        let tick = (self.opts.window / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            match records.recv_timeout(tick) {
                Ok(log) => self.add(log),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
            self.write_due(Instant::now());
        }
        let keys: Vec<_> = self.groups.keys().cloned().collect();
        for key in keys {
            self.write_group(&key);
        }
    }

    pub fn add(&mut self, log: ServedLog) {
        let day = day_of(log.time_us);
        for (layout, rows) in decode::rows(log) {
            if self.buffered + rows.len() > self.opts.max_buffered_rows {
                self.metrics.drop_rows(BUFFER_FULL, rows.len());
                continue;
            }
            self.buffered += rows.len();
            let key = (layout, day);
            let group = self.groups.entry(key.clone()).or_insert_with(|| Group {
                rows: Vec::new(),
                opened: Instant::now(),
            });
            group.rows.extend(rows);
            if group.rows.len() >= self.opts.max_rows {
                self.write_group(&key);
            }
        }
        self.metrics.buffered.set(self.buffered as i64);
    }

    /// Writes every group whose window has closed.
    pub fn write_due(&mut self, now: Instant) {
        let due: Vec<_> = self
            .groups
            .iter()
            .filter(|(_, g)| now.duration_since(g.opened) >= self.opts.window)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.write_group(&key);
        }
    }

    fn write_group(&mut self, key: &(Layout, i32)) {
        let Some(group) = self.groups.remove(key) else {
            return;
        };
        self.buffered -= group.rows.len();
        self.metrics.buffered.set(self.buffered as i64);
        self.seq += 1;
        match write_file(&self.opts.dir, &key.0, key.1, &group.rows, self.seq) {
            Ok(_) => {
                self.metrics.written.inc_by(group.rows.len() as u64);
                self.metrics.files.inc();
            }
            Err(e) => {
                self.metrics.errors.inc();
                self.metrics.drop_rows(WRITE_ERROR, group.rows.len());
                self.log_error(&key.0.service, group.rows.len(), &e);
            }
        }
    }

    /// An error line at most once per interval, with how many errors it stands for.
    fn log_error(&mut self, service: &str, rows: usize, e: &anyhow::Error) {
        let now = Instant::now();
        let quiet = self
            .last_error_log
            .is_some_and(|t| now.duration_since(t) < self.opts.error_log_interval);
        if quiet {
            self.errors_unlogged += 1;
            return;
        }
        tracing::error!(
            dir = %self.opts.dir.display(),
            service,
            rows_dropped = rows,
            errors_since_last_line = self.errors_unlogged,
            "cannot write a served-feature log file: {e:#}"
        );
        self.last_error_log = Some(now);
        self.errors_unlogged = 0;
    }
}

/// Keeps a path segment to letters, digits and `_ - .` (a service name always is one).
fn segment(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_-.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.starts_with('.') {
        format!("_{s}")
    } else {
        s
    }
}

/// `D/<service>/log_date=YYYY-MM-DD/`.
pub fn partition(dir: &Path, service: &str, day: i32) -> PathBuf {
    let (y, m, d) = ferry_core::civil::from_days(i64::from(day));
    dir.join(segment(service))
        .join(format!("log_date={y:04}-{m:02}-{d:02}"))
}

/// Writes one file: `<fingerprint>-<first log time>-<seq>.parquet`, via a hidden temporary name.
fn write_file(
    dir: &Path,
    layout: &Layout,
    day: i32,
    rows: &[Row],
    seq: u64,
) -> anyhow::Result<PathBuf> {
    use anyhow::Context as _;
    let folder = partition(dir, &layout.service, day);
    std::fs::create_dir_all(&folder).with_context(|| format!("creating {}", folder.display()))?;
    let first = rows.iter().map(|r| r.log_time_us).min().unwrap_or_default();
    let name = format!("{:016x}-{first}-{seq}.parquet", layout.fingerprint);
    let tmp = folder.join(format!(".{name}.tmp"));
    let done = folder.join(&name);
    let written = (|| -> anyhow::Result<()> {
        let file =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut out = std::io::BufWriter::new(file);
        parquet_file::write(&mut out, layout, rows).context("writing Parquet")?;
        let file = out.into_inner().context("flushing")?;
        file.sync_all().context("syncing")?;
        std::fs::rename(&tmp, &done).context("renaming into place")?;
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|()| done)
}
