//! How long the sink's files stay: complete files older than `--retain-secs` are removed, and
//! while the files under `--dir` hold more than `--max-bytes` the oldest are removed first, so
//! served-feature logs never fill the disk. Removals and what is held are counted in metrics.
//!
//! The files are indexed once at start (a walk of `--dir`) and then kept up to date by the writer,
//! which is the only one to add files; the walk is redone every [`RESCAN`] so that files
//! removed or added by hand are counted as they are. Only the sink's own layout is looked at
//! (`DIR/<service>/log_date=…/*.parquet`, no symbolic link followed); leftover temporary files
//! (a crash mid-write) are removed by the first walk.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::metrics::{SinkMetrics, AGE, BYTES};

/// How often the index is rebuilt from the directory.
pub const RESCAN: Duration = Duration::from_secs(300);

/// The bounds on what stays on disk; `None`: no bound of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionOptions {
    /// Files are removed once they are this old (by modification time: when they were completed).
    pub max_age: Option<Duration>,
    /// The files' total size; past it, the oldest are removed.
    pub max_bytes: Option<u64>,
}

/// The complete files under the directory, oldest first.
pub struct Retention {
    dir: PathBuf,
    opts: RetentionOptions,
    metrics: SinkMetrics,
    /// (completion time, path) → size in bytes.
    files: BTreeMap<(SystemTime, PathBuf), u64>,
    bytes: u64,
    scanned: Instant,
    /// A file over `--max-bytes` on its own has been said once.
    warned_oversize: bool,
}

impl Retention {
    /// The index of what `dir` holds now, with the bounds enforced.
    pub fn new(dir: &Path, opts: RetentionOptions, metrics: SinkMetrics) -> Retention {
        let mut r = Retention {
            dir: dir.to_path_buf(),
            opts,
            metrics,
            files: BTreeMap::new(),
            bytes: 0,
            scanned: Instant::now(),
            warned_oversize: false,
        };
        r.rescan(true);
        r.enforce(SystemTime::now());
        r
    }

    /// A file the writer just completed.
    pub fn added(&mut self, path: PathBuf, bytes: u64, at: SystemTime) {
        if let Some(max) = self.opts.max_bytes.filter(|max| bytes > *max) {
            if !std::mem::replace(&mut self.warned_oversize, true) {
                tracing::warn!(
                    bytes,
                    max,
                    "a served-feature log file is larger than --max-bytes on its own: it is \
                     removed at once; raise --max-bytes or lower --max-rows / --window-secs"
                );
            }
        }
        if let Some(old) = self.files.insert((at, path), bytes) {
            self.bytes -= old;
        }
        self.bytes += bytes;
        self.enforce(SystemTime::now());
    }

    /// Between writes: the age bound, and the periodic walk.
    pub fn tick(&mut self, now: Instant) {
        if now.duration_since(self.scanned) >= RESCAN {
            self.rescan(false);
        }
        self.enforce(SystemTime::now());
    }

    /// Removes what is too old, then the oldest while over the byte bound.
    pub fn enforce(&mut self, now: SystemTime) {
        if let Some(age) = self.opts.max_age {
            let cutoff = now.checked_sub(age).unwrap_or(SystemTime::UNIX_EPOCH);
            while let Some(key) = self.oldest().filter(|(at, _)| *at < cutoff) {
                self.remove(key, AGE);
            }
        }
        if let Some(max) = self.opts.max_bytes {
            while self.bytes > max {
                let Some(key) = self.oldest() else { break };
                self.remove(key, BYTES);
            }
        }
        self.publish();
    }

    fn oldest(&self) -> Option<(SystemTime, PathBuf)> {
        self.files.keys().next().cloned()
    }

    fn remove(&mut self, key: (SystemTime, PathBuf), reason: &str) {
        let Some(bytes) = self.files.remove(&key) else {
            return;
        };
        self.bytes -= bytes;
        match std::fs::remove_file(&key.1) {
            Ok(()) => {
                self.metrics.removed_file(reason, bytes);
                self.remove_empty_folders(&key.1);
            }
            // Removed by someone else: no longer held, and not ours to count.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(file = %key.1.display(), error = %e, "cannot remove an old served-feature log file");
            }
        }
    }

    /// The file's partition folder and service folder, when removing it left them empty.
    fn remove_empty_folders(&self, file: &Path) {
        let mut folder = file.parent();
        while let Some(f) = folder.filter(|f| *f != self.dir && f.starts_with(&self.dir)) {
            // Fails (and stops) on a folder that still holds something.
            if std::fs::remove_dir(f).is_err() {
                return;
            }
            folder = f.parent();
        }
    }

    /// Rebuilds the index from the directory; at start, also removes leftover temporary files.
    fn rescan(&mut self, first: bool) {
        self.files.clear();
        self.bytes = 0;
        for (path, meta) in walk(&self.dir, 2) {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if name.starts_with('.') && name.ends_with(".parquet.tmp") {
                if first {
                    let _ = std::fs::remove_file(&path);
                }
                continue;
            }
            if name.starts_with('.') || !name.ends_with(".parquet") {
                continue;
            }
            let at = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            self.bytes += meta.len();
            self.files.insert((at, path), meta.len());
        }
        self.scanned = Instant::now();
        self.publish();
    }

    fn publish(&self) {
        self.metrics
            .bytes_held
            .set(i64::try_from(self.bytes).unwrap_or(i64::MAX));
        self.metrics
            .files_held
            .set(i64::try_from(self.files.len()).unwrap_or(i64::MAX));
    }
}

/// The regular files under `dir`, down `depth` folders (the sink's layout: service, then
/// partition); symbolic links are neither followed nor listed.
fn walk(dir: &Path, depth: usize) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() && depth > 0 {
            out.extend(walk(&entry.path(), depth - 1));
        } else if meta.is_file() && depth == 0 {
            out.push((entry.path(), meta));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `bytes` under `dir/svc/log_date=2026-11-26/`, completed `age` ago.
    fn file(dir: &Path, name: &str, bytes: usize, age: Duration) -> PathBuf {
        let folder = dir.join("svc").join("log_date=2026-11-26");
        std::fs::create_dir_all(&folder).unwrap();
        let path = folder.join(name);
        std::fs::write(&path, vec![0u8; bytes]).unwrap();
        let at = SystemTime::now() - age;
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(at)
            .unwrap();
        path
    }

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn past_the_byte_bound_the_oldest_files_go_first_and_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let old = file(dir.path(), "a.parquet", 400, 3 * HOUR);
        let mid = file(dir.path(), "b.parquet", 400, 2 * HOUR);
        let metrics = SinkMetrics::new();
        let opts = RetentionOptions {
            max_age: None,
            max_bytes: Some(1000),
        };
        let mut r = Retention::new(dir.path(), opts, metrics.clone());
        assert_eq!(metrics.bytes_held.get(), 800, "indexed at start");
        let new = file(dir.path(), "c.parquet", 400, Duration::ZERO);
        r.added(new.clone(), 400, SystemTime::now());
        assert!(!old.exists() && mid.exists() && new.exists());
        assert_eq!(metrics.removed(BYTES), 1);
        assert_eq!(metrics.bytes_removed.get(), 400);
        assert_eq!(metrics.bytes_held.get(), 800);
        assert_eq!(metrics.files_held.get(), 2);
        let text = metrics.text();
        assert!(
            text.contains(r#"ferry_log_sink_files_removed_total{reason="bytes"} 1"#)
                && text.contains("ferry_log_sink_held_bytes 800")
                && text.contains("ferry_log_sink_removed_bytes_total 400"),
            "{text}"
        );
    }

    #[test]
    fn files_older_than_the_age_bound_go_and_empty_folders_with_them() {
        let dir = tempfile::tempdir().unwrap();
        let old = file(dir.path(), "a.parquet", 10, 3 * HOUR);
        let metrics = SinkMetrics::new();
        let opts = RetentionOptions {
            max_age: Some(2 * HOUR),
            max_bytes: None,
        };
        let mut r = Retention::new(dir.path(), opts, metrics.clone());
        assert!(!old.exists(), "removed at start");
        assert!(!dir.path().join("svc").exists(), "its empty folders too");
        assert!(dir.path().exists(), "never the directory itself");
        let young = file(dir.path(), "b.parquet", 10, HOUR);
        r.added(young.clone(), 10, SystemTime::now() - HOUR);
        r.enforce(SystemTime::now() + 2 * HOUR);
        assert!(!young.exists());
        assert_eq!(metrics.removed(AGE), 2);
        assert_eq!(metrics.files_held.get(), 0);
    }

    #[test]
    fn the_walk_skips_what_is_not_the_sinks_and_clears_leftover_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let kept = file(dir.path(), "a.parquet", 10, HOUR);
        let tmp = file(dir.path(), ".b.parquet.tmp", 10, HOUR);
        let other = file(dir.path(), "notes.txt", 10, HOUR);
        std::fs::write(dir.path().join("top.parquet"), b"not in a partition").unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = file(outside.path(), "x.parquet", 10, 3 * HOUR);
        std::os::unix::fs::symlink(outside.path().join("svc"), dir.path().join("linked")).unwrap();
        let metrics = SinkMetrics::new();
        let opts = RetentionOptions {
            max_age: Some(2 * HOUR),
            max_bytes: Some(1),
        };
        let _r = Retention::new(dir.path(), opts, metrics.clone());
        assert!(!tmp.exists(), "a crash's temporary file");
        assert!(!kept.exists(), "over 1 byte: removed");
        assert!(other.exists() && dir.path().join("top.parquet").exists());
        assert!(target.exists(), "a link is not followed");
        assert_eq!(metrics.removed(BYTES), 1);
    }
}
