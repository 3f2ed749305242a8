//! The state directory: the current snapshot survives a restart of `ferry serve`. Every
//! snapshot made current (pushed, or read from the repo) is written here before it is served,
//! atomically (a temporary file of its own, fsync, rename, fsync of the directory), so the file
//! is always either the previous snapshot or the new one, never a mix. The temporary file's name
//! is unique (process id and a counter), so two saves never write the same one even when their
//! callers are not serialised ([`super::state::State`] serialises its installs anyway).
//!
//! One file, `current.snapshot`: a JSON header line (what the snapshot is, its sequence, where
//! it came from, when it was accepted, which `ferry.yaml` content was on disk then, its length
//! and SHA-256), then the `ferry.v1.Snapshot` protobuf bytes. The sequence (what a signed
//! snapshot carries, [`super::signing`]) is saved with the snapshot in the same atomic write,
//! before the snapshot is served, so a restart continues above it. A file that does not check out (truncated,
//! altered, another format) is refused with an error naming it: starting from the repo instead
//! would silently roll back a pushed snapshot.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ferry_protos::v1;
use prost::Message as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The state directory under the repo when `--state-dir` is not given.
pub const DEFAULT_STATE_DIR: &str = ".ferry";
/// The file holding the current snapshot, inside the state directory.
pub const STATE_FILE: &str = "current.snapshot";
/// The header's `format`: bumped if the layout ever changes.
const FORMAT: &str = "ferry.state.v1";

/// A snapshot as accepted, with what a restart needs to decide what to serve.
#[derive(Clone, Debug, PartialEq)]
pub struct Saved {
    pub snapshot: v1::Snapshot,
    /// Its sequence number: every snapshot made current gets a higher one. 0 in a file saved
    /// before sequences existed.
    pub sequence: u64,
    /// `file` or `push`: where it came from originally.
    pub source: String,
    /// When it was made current (ms since the epoch).
    pub accepted_ms: u64,
    /// SHA-256 (hex) of the `ferry.yaml` content on disk when it was accepted; None when the
    /// file could not be read. A restart that finds other content applies the file as a change.
    pub repo_sha256: Option<String>,
}

/// The header line before the snapshot's bytes.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    version: String,
    /// Absent in files written before sequences existed: 0.
    #[serde(default)]
    sequence: u64,
    source: String,
    accepted_ms: u64,
    repo_sha256: Option<String>,
    snapshot_len: usize,
    snapshot_sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error(
        "state directory {path}: {reason} (choose another with --state-dir or FERRY_STATE_DIR)"
    )]
    Dir { path: String, reason: String },
    #[error("writing the state file {path}: {reason}")]
    Write { path: String, reason: String },
    #[error("reading the state file {path}: {reason}")]
    Read { path: String, reason: String },
    #[error(
        "the state file {path} is corrupt ({reason}); refusing to start, since serving the repo \
         instead could roll back a pushed snapshot. Envoys keep serving their last snapshot \
         meanwhile. Remove the file to start from the repo's ferry.yaml (then push again if needed)"
    )]
    Corrupt { path: String, reason: String },
}

/// The state directory, created if needed.
#[derive(Clone, Debug)]
pub struct StateDir {
    dir: PathBuf,
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl StateDir {
    pub fn open(dir: &Path) -> Result<StateDir, PersistError> {
        let err = |e: std::io::Error| PersistError::Dir {
            path: dir.display().to_string(),
            reason: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(err)?;
        Ok(StateDir {
            dir: std::path::absolute(dir).map_err(err)?,
        })
    }

    pub fn file(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    /// The saved snapshot; None when there is none yet.
    pub fn load(&self) -> Result<Option<Saved>, PersistError> {
        let path = self.file();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(PersistError::Read {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })
            }
        };
        decode(&bytes)
            .map(Some)
            .map_err(|reason| PersistError::Corrupt {
                path: path.display().to_string(),
                reason,
            })
    }

    /// Replaces the saved snapshot atomically and durably.
    pub fn save(&self, saved: &Saved) -> Result<(), PersistError> {
        let path = self.file();
        let tmp = self.dir.join(temporary_name());
        let err = |e: std::io::Error| PersistError::Write {
            path: path.display().to_string(),
            reason: e.to_string(),
        };
        let written =
            write_synced(&tmp, &encode(saved)).and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            // Best effort: a failed save leaves no file of its own behind.
            let _ = std::fs::remove_file(&tmp);
            return Err(err(e));
        }
        // The rename itself is durable only once the directory is.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(err)
    }
}

/// A temporary file name no other save uses: this process's id and a per-process counter. A
/// file of that name can only be the leftover of a dead process that had the same id (pid 1 in
/// a container), so it is overwritten.
fn temporary_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{STATE_FILE}.tmp.{}.{n}", std::process::id())
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn encode(saved: &Saved) -> Vec<u8> {
    let body = saved.snapshot.encode_to_vec();
    let header = Header {
        format: FORMAT.to_owned(),
        version: saved.snapshot.version.clone(),
        sequence: saved.sequence,
        source: saved.source.clone(),
        accepted_ms: saved.accepted_ms,
        repo_sha256: saved.repo_sha256.clone(),
        snapshot_len: body.len(),
        snapshot_sha256: hex(&Sha256::digest(&body)),
    };
    // serde_json writes no newline inside a compact document: the first '\n' ends the header.
    let mut out = serde_json::to_vec(&header).unwrap_or_default();
    out.push(b'\n');
    out.extend_from_slice(&body);
    out
}

fn decode(bytes: &[u8]) -> Result<Saved, String> {
    let nl = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or("no header line")?;
    let header: Header =
        serde_json::from_slice(&bytes[..nl]).map_err(|e| format!("header: {e}"))?;
    if header.format != FORMAT {
        return Err(format!("format '{}', expected '{FORMAT}'", header.format));
    }
    let body = &bytes[nl + 1..];
    if body.len() != header.snapshot_len {
        return Err(format!(
            "{} snapshot bytes, the header says {}",
            body.len(),
            header.snapshot_len
        ));
    }
    if hex(&Sha256::digest(body)) != header.snapshot_sha256 {
        return Err("the snapshot's SHA-256 does not match its header".into());
    }
    let snapshot = v1::Snapshot::decode(body).map_err(|e| format!("snapshot: {e}"))?;
    if snapshot.version != header.version {
        return Err(format!(
            "the snapshot's version {} is not the header's {}",
            snapshot.version, header.version
        ));
    }
    if !matches!(header.source.as_str(), "file" | "push") {
        return Err(format!("unknown source '{}'", header.source));
    }
    Ok(Saved {
        snapshot,
        sequence: header.sequence,
        source: header.source,
        accepted_ms: header.accepted_ms,
        repo_sha256: header.repo_sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(version: &str) -> Saved {
        Saved {
            snapshot: v1::Snapshot {
                project: "banking".into(),
                version: version.into(),
                reader_cluster: "ferry_reader".into(),
                ..Default::default()
            },
            sequence: 41,
            source: "push".into(),
            accepted_ms: 1_700_000_000_000,
            repo_sha256: Some("ab".repeat(32)),
        }
    }

    #[test]
    fn a_saved_snapshot_is_read_back_and_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(&dir.path().join("nested/state")).unwrap();
        assert_eq!(state.load().unwrap(), None, "nothing saved yet");
        state.save(&saved("v1")).unwrap();
        assert_eq!(state.load().unwrap(), Some(saved("v1")));
        state.save(&saved("v2")).unwrap();
        assert_eq!(state.load().unwrap(), Some(saved("v2")));
        // Only the state file is left: the temporary one was renamed over it.
        let names: Vec<_> = std::fs::read_dir(dir.path().join("nested/state"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [STATE_FILE]);
    }

    #[test]
    fn a_leftover_temporary_file_is_ignored_and_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        state.save(&saved("v1")).unwrap();
        // A crash in the middle of a save leaves the temporary file, never a partial state file.
        std::fs::write(dir.path().join(format!("{STATE_FILE}.tmp")), b"{\"form").unwrap();
        std::fs::write(dir.path().join(temporary_name()), b"{\"form").unwrap();
        std::fs::write(dir.path().join(temporary_name()), b"{\"form").unwrap();
        assert_eq!(state.load().unwrap(), Some(saved("v1")));
        state.save(&saved("v2")).unwrap();
        assert_eq!(state.load().unwrap(), Some(saved("v2")));
    }

    #[test]
    fn a_corrupt_or_partial_state_file_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        state.save(&saved("v1")).unwrap();
        let good = std::fs::read(state.file()).unwrap();
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let mut other = good.clone();
        other.splice(0..0, b"x".iter().copied());
        let cases: [(&[u8], &str); 6] = [
            (&good[..good.len() - 3], "snapshot bytes"),
            (&good[..20], "no header line"),
            (b"", "no header line"),
            (&flipped, "SHA-256"),
            (&other, "header"),
            (b"{\"format\":\"ferry.state.v9\",\"version\":\"v\",\"source\":\"push\",\"accepted_ms\":1,\"repo_sha256\":null,\"snapshot_len\":0,\"snapshot_sha256\":\"\"}\n", "format"),
        ];
        for (bytes, why) in cases {
            std::fs::write(state.file(), bytes).unwrap();
            let e = state.load().unwrap_err().to_string();
            assert!(e.contains(STATE_FILE) && e.contains("corrupt"), "{e}");
            assert!(e.contains(why), "{why}: {e}");
            assert!(e.contains("Remove the file"), "{e}");
        }
    }

    #[test]
    fn the_sequence_is_saved_with_the_snapshot_and_absent_reads_as_zero() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        state.save(&saved("v1")).unwrap();
        let text = std::fs::read(state.file()).unwrap();
        assert_eq!(state.load().unwrap().unwrap().sequence, 41);
        // A file written before sequences existed.
        let field = b"\"sequence\":41,";
        let at = text.windows(field.len()).position(|w| w == field).unwrap();
        let old = [&text[..at], &text[at + field.len()..]].concat();
        std::fs::write(state.file(), old).unwrap();
        assert_eq!(state.load().unwrap().unwrap().sequence, 0);
    }

    #[test]
    fn an_unusable_state_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let e = StateDir::open(&file.join("state")).unwrap_err().to_string();
        assert!(
            e.contains("a-file/state") && e.contains("--state-dir"),
            "{e}"
        );
    }
}
