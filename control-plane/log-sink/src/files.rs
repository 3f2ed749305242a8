//! The sink's writer: rows grouped by (FeatureService, layout, day), each group written as one
//! Parquet file when its window closes or it reaches its row bound, to a temporary name then
//! renamed, so a reader never sees half a file. Memory is bounded: rows beyond
//! `max_buffered_rows` are dropped and counted; a file that cannot be written drops its rows,
//! counts an error, and says so in the log at most once per `error_log_interval`. Files are
//! created 0640 and folders 0750 (a umask can only narrow them): the rows hold entity ids and
//! feature values, which other users of the host have no reason to read. What stays on disk is
//! [`retention`](super::retention)'s.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use ferry_protos::v1::ServedLog;

use super::decode;
use super::metrics::{SinkMetrics, BUFFER_FULL, WRITE_ERROR};
use super::parquet_file::{self, day_of, Layout, Row};
use super::retention::{Retention, RetentionOptions};

/// Modes of what the sink creates.
pub const FILE_MODE: u32 = 0o640;
pub const DIR_MODE: u32 = 0o750;

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
    /// What stays on disk (`--retain-secs`, `--max-bytes`).
    pub retention: RetentionOptions,
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
    retention: Retention,
}

impl Files {
    /// The writer of `opts.dir`; indexes (and trims to its retention) what the folder holds.
    pub fn new(opts: FileOptions, metrics: SinkMetrics) -> Files {
        let retention = Retention::new(&opts.dir, opts.retention, metrics.clone());
        Files {
            retention,
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
            self.retention.tick(Instant::now());
        }
        let keys: Vec<_> = self.groups.keys().cloned().collect();
        for key in keys {
            self.write_group(&key);
        }
    }

    pub fn add(&mut self, log: ServedLog) {
        let day = day_of(log.time_us);
        for (layout, rows) in decode::rows(log) {
            // A service with no instance has nothing to write: no group, no file, no folder.
            if rows.is_empty() {
                continue;
            }
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
            Ok((path, bytes)) => {
                self.metrics.written.inc_by(group.rows.len() as u64);
                self.metrics.files.inc();
                self.retention.added(path, bytes, SystemTime::now());
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

/// Creates `folder` and what is missing above it, each [`DIR_MODE`].
pub fn create_folder(folder: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(folder)
}

/// Writes one file, [`FILE_MODE`]: `<fingerprint>-<first log time>-<seq>.parquet`, via a hidden
/// temporary name; its path and size.
fn write_file(
    dir: &Path,
    layout: &Layout,
    day: i32,
    rows: &[Row],
    seq: u64,
) -> anyhow::Result<(PathBuf, u64)> {
    use anyhow::Context as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let folder = partition(dir, &layout.service, day);
    create_folder(&folder).with_context(|| format!("creating {}", folder.display()))?;
    let first = rows.iter().map(|r| r.log_time_us).min().unwrap_or_default();
    let name = format!("{:016x}-{first}-{seq}.parquet", layout.fingerprint);
    let tmp = folder.join(format!(".{name}.tmp"));
    let done = folder.join(&name);
    let written = (|| -> anyhow::Result<u64> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(FILE_MODE)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        let mut out = std::io::BufWriter::new(file);
        parquet_file::write(&mut out, layout, rows).context("writing Parquet")?;
        let file = out.into_inner().context("flushing")?;
        file.sync_all().context("syncing")?;
        let bytes = file.metadata().context("its size")?.len();
        std::fs::rename(&tmp, &done).context("renaming into place")?;
        Ok(bytes)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map(|bytes| (done, bytes))
}
