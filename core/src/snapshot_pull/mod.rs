//! Pulling the snapshot from `ferry serve` (the JSON plugin configuration's `snapshot_url`):
//! which GET to send, and what its answer does. Host-agnostic: the root context dispatches the
//! request on configure and on every tick, and hands the answer back here.
//!
//! The GET carries `if-none-match` with the last version seen, so an unchanged snapshot costs
//! a 304 and no decoding. A new snapshot is validated like any other; a bad one is refused,
//! the last good one kept and its version remembered, so it is refused (and logged) once, not
//! at every poll. Failures to reach the control plane are logged when they start and stop.
//!
//! With `snapshot_keys` configured an answer must be a signed snapshot ([`crate::signature`])
//! whose signature verifies, and whose sequence is not lower than the held one's (a replay),
//! nor equal to it with other bytes. Such a refusal keeps the last good snapshot and the last
//! ETag (the header is not signed: a replay must not decide what is asked for next), and is
//! logged once while it repeats. Every answer over `snapshot_max_bytes` is refused unread.
//! The held sequence lives in the root context and, where the host has it, in Envoy's shared
//! data ([`HeldStore`], keyed by the snapshot URL): a worker VM that crashed and was reloaded
//! starts with the highest sequence any VM of its plugin loaded, so a replay is refused after a
//! crash too. Shared data lives in the Envoy process: a restart of Envoy forgets it, and the
//! first signed snapshot pulled after a restart is taken at any sequence (see
//! `docs/security.md`, "What a restart forgets").

use std::rc::Rc;

use ferry_protos::signed::{CONTENT_TYPE, UNSIGNED_CONTENT_TYPE};
use sha2::{Digest, Sha512};

use crate::config::Config;
use crate::plugin_config::Pull;

/// The pulled snapshot's version, as `ferry serve` sends it (the ETag's value, unquoted).
pub const VERSION_HEADER: &str = "x-ferry-snapshot-version";

/// The pull's state in one root context.
#[derive(Debug)]
pub struct Puller {
    pull: Pull,
    /// The ETag of the last snapshot received (loaded or refused): sent as `if-none-match`.
    etag: Option<String>,
    /// A GET is on its way: the next tick sends none.
    in_flight: bool,
    /// The last failure logged; a new message is logged only when this changes.
    failing: Option<String>,
    /// The signed snapshot loaded last: nothing older is taken after it.
    held: Option<Held>,
    /// Where the held sequence outlives this VM (Envoy's shared data), if the host has it.
    store: Option<Box<dyn HeldStore>>,
}

/// A store shared by every VM of the plugin and kept across a VM's crash and reload: Envoy's
/// shared data. `get` gives a value and its compare-and-swap token; `set` with that token fails
/// when another VM wrote the key in between.
pub trait HeldStore: std::fmt::Debug + Send {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool;
}

/// How many times a compare-and-swap of the shared held sequence is tried before giving up
/// (another VM writing the same key at each attempt): the local one still holds.
const CAS_ATTEMPTS: usize = 8;

/// A loaded signed snapshot's sequence, and the digest of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    sequence: u64,
    digest: Vec<u8>,
}

impl Held {
    /// As the shared store keeps it: the sequence (8 bytes, big-endian), then the digest.
    fn encode(&self) -> Vec<u8> {
        let mut out = self.sequence.to_be_bytes().to_vec();
        out.extend_from_slice(&self.digest);
        out
    }

    /// A value of the shared store; one whose sequence no signed envelope may carry (over
    /// `MAX_SEQUENCE`) is not a sequence any VM loaded, and is ignored.
    fn decode(v: &[u8]) -> Option<Held> {
        let (seq, digest) = v.split_first_chunk::<8>()?;
        let sequence = u64::from_be_bytes(*seq);
        (sequence <= ferry_protos::signed::MAX_SEQUENCE).then(|| Held {
            sequence,
            digest: digest.to_vec(),
        })
    }
}

/// An answer to the GET, without its body: read only once its size is known to fit.
#[derive(Debug, Default, Clone)]
pub struct Answer {
    /// None when the call failed (reset, timeout, unknown cluster).
    pub status: Option<u16>,
    pub etag: Option<String>,
    pub content_type: Option<String>,
    pub body_size: usize,
}

/// What an answer to the GET changed.
#[derive(Debug)]
pub enum Pulled {
    /// A new snapshot validated: serve it from now on. `raw` is its protobuf, for a host
    /// that parses it again where the config is used (the native module, once per worker
    /// thread, with the pull's `overrides`).
    Loaded { config: Rc<Config>, raw: Vec<u8> },
    /// 304: the same version as before.
    Unchanged,
    /// Nothing to swap; `log` says why when it should be logged (warning level).
    Kept { log: Option<String> },
}

impl Puller {
    pub fn new(pull: Pull) -> Puller {
        Puller {
            pull,
            etag: None,
            in_flight: false,
            failing: None,
            held: None,
            store: None,
        }
    }

    /// Keeps the held sequence in `store` too (Envoy's shared data), so that a reloaded VM
    /// still refuses what this one would.
    pub fn with_store(mut self, store: Box<dyn HeldStore>) -> Puller {
        self.store = Some(store);
        self
    }

    /// A puller for `pull` replacing `previous` (the plugin configuration changed, e.g. a key
    /// was added for rotation): the held sequence carries over when the URL is the same.
    pub fn replacing(pull: Pull, previous: Option<Puller>) -> Puller {
        let mut p = Puller::new(pull);
        if let Some(prev) = previous {
            if prev.pull.url == p.pull.url {
                p.held = prev.held;
            }
            p.store = prev.store;
        }
        p
    }

    /// The sequence of the signed snapshot held, if any: this VM's, or a higher one another VM
    /// of the plugin (or this one before a reload) left in the shared store.
    pub fn held_sequence(&self) -> Option<u64> {
        self.floor().map(|h| h.sequence)
    }

    /// The key of this URL's held sequence in the shared store.
    fn store_key(&self) -> String {
        format!("ferry.snapshot_pull.held.{}", self.pull.url)
    }

    /// The highest of the local and the shared held snapshots.
    fn floor(&self) -> Option<Held> {
        let shared = self
            .store
            .as_ref()
            .and_then(|s| s.get(&self.store_key()).0)
            .and_then(|v| Held::decode(&v));
        match (self.held.clone(), shared) {
            (Some(a), Some(b)) => Some(if b.sequence > a.sequence { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    /// Raises the shared held sequence to `held`, unless a VM already put one as high there.
    fn share(&self, held: &Held) {
        let Some(store) = &self.store else {
            return;
        };
        let key = self.store_key();
        for _ in 0..CAS_ATTEMPTS {
            let (value, cas) = store.get(&key);
            if value
                .and_then(|v| Held::decode(&v))
                .is_some_and(|h| h.sequence >= held.sequence)
            {
                return;
            }
            if store.set(&key, &held.encode(), cas) {
                return;
            }
        }
    }

    pub fn pull(&self) -> &Pull {
        &self.pull
    }

    /// The headers of the next GET, or None while one is on its way. Call [`Self::sent`] or
    /// [`Self::not_sent`] after dispatching them.
    pub fn next_request(&self) -> Option<Vec<(String, String)>> {
        if self.in_flight {
            return None;
        }
        let mut h = vec![
            (":method".to_owned(), "GET".to_owned()),
            (":path".to_owned(), self.pull.path.clone()),
            (":authority".to_owned(), self.pull.authority.clone()),
            ("accept".to_owned(), self.accept().to_owned()),
        ];
        if let Some(etag) = &self.etag {
            h.push(("if-none-match".to_owned(), etag.clone()));
        }
        if let Some(token) = &self.pull.token {
            h.push(("authorization".to_owned(), format!("Bearer {}", token.0)));
        }
        Some(h)
    }

    pub fn sent(&mut self) {
        self.in_flight = true;
    }

    /// The dispatch itself failed (e.g. no such cluster): the message to log, if it is new.
    pub fn not_sent(&mut self, why: &str) -> Option<String> {
        self.fail(format!(
            "could not request {} through cluster '{}': {why}",
            self.pull.url, self.pull.cluster
        ))
    }

    fn accept(&self) -> &'static str {
        if self.pull.keys.is_some() {
            CONTENT_TYPE
        } else {
            UNSIGNED_CONTENT_TYPE
        }
    }

    /// The answer; `read_body(n)` reads its first `n` bytes, called only when they fit.
    pub fn answered(
        &mut self,
        answer: &Answer,
        read_body: impl FnOnce(usize) -> Vec<u8>,
    ) -> Pulled {
        self.in_flight = false;
        match answer.status {
            Some(200) => self.received(answer, read_body),
            Some(304) => {
                self.recovered();
                Pulled::Unchanged
            }
            Some(s) => {
                let body = read_body(answer.body_size.min(200));
                let text = String::from_utf8_lossy(&body);
                let log = self.fail(format!("{} answered {s}: {}", self.pull.url, text.trim()));
                Pulled::Kept { log }
            }
            None => {
                let log = self.fail(format!(
                    "no answer from {} (cluster '{}'): unreachable, reset or timed out",
                    self.pull.url, self.pull.cluster
                ));
                Pulled::Kept { log }
            }
        }
    }

    fn received(&mut self, answer: &Answer, read_body: impl FnOnce(usize) -> Vec<u8>) -> Pulled {
        if answer.body_size > self.pull.max_bytes {
            return self.refuse(format!(
                "the answer is {} bytes, over snapshot_max_bytes {}",
                answer.body_size, self.pull.max_bytes
            ));
        }
        let body = read_body(answer.body_size);
        let (raw, sequence) = match self.unwrap_envelope(answer.content_type.as_deref(), body) {
            Ok(opened) => opened,
            Err(why) => return self.refuse(why),
        };
        let digest = sequence.map(|_| Sha512::digest(&raw).to_vec());
        if let (Some(seq), Some(held)) = (sequence, &self.floor()) {
            if seq < held.sequence {
                return self.refuse(format!(
                    "its sequence {seq} is lower than the held snapshot's {}: a replay of an \
                     older snapshot (a rollback is published as a new, higher sequence)",
                    held.sequence
                ));
            }
            if seq == held.sequence {
                if digest.as_ref() != Some(&held.digest) {
                    return self.refuse(format!(
                        "its sequence {seq} is the held snapshot's, with other bytes"
                    ));
                }
                // Held by this VM: nothing to load. Held only in the shared store (this VM
                // was reloaded): the same snapshot, loaded below.
                if self.held.as_ref() == Some(held) {
                    self.recovered();
                    self.etag = answer.etag.clone();
                    return Pulled::Unchanged;
                }
            }
        }
        self.recovered();
        self.etag = answer.etag.clone();
        match self.pull.overrides.apply(&raw) {
            Ok(config) => {
                if let (Some(sequence), Some(digest)) = (sequence, digest) {
                    let held = Held { sequence, digest };
                    self.share(&held);
                    self.held = Some(held);
                }
                Pulled::Loaded {
                    config: Rc::new(config),
                    raw,
                }
            }
            Err(e) => Pulled::Kept {
                log: Some(format!(
                    "snapshot pulled from {} refused, the last good one stays: {e}",
                    self.pull.url
                )),
            },
        }
    }

    /// The snapshot's bytes in `body`, and its sequence when it came signed: verified under
    /// the configured keys, or (`insecure`, no keys) taken as it is.
    fn unwrap_envelope(
        &self,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> Result<(Vec<u8>, Option<u64>), String> {
        let essence = content_type
            .and_then(|c| c.split(';').next())
            .map(|c| c.trim().to_ascii_lowercase());
        let signed = essence.as_deref() == Some(CONTENT_TYPE);
        match (&self.pull.keys, signed) {
            (Some(keys), true) => keys
                .open(&body)
                .map(|o| (o.snapshot, Some(o.sequence)))
                .map_err(|e| e.to_string()),
            (Some(_), false) => Err(format!(
                "it is not signed (content-type {}) and snapshot_keys are configured; is \
                 `ferry serve` run with --signing-key?",
                content_type.unwrap_or("none")
            )),
            (None, true) => <ferry_protos::v1::SignedSnapshot as prost::Message>::decode(&*body)
                .map(|s| (s.snapshot, Some(s.sequence)))
                .map_err(|e| format!("not a ferry.v1.SignedSnapshot: {e}")),
            (None, false) => Ok((body, None)),
        }
    }

    /// A refusal of what was received: the last good snapshot and ETag stay; logged once
    /// while the same refusal repeats.
    fn refuse(&mut self, why: String) -> Pulled {
        let log = self.fail(format!(
            "snapshot pulled from {} refused, the last good one stays: {why}",
            self.pull.url
        ));
        Pulled::Kept { log }
    }

    fn fail(&mut self, message: String) -> Option<String> {
        if self.failing.as_deref() == Some(message.as_str()) {
            return None;
        }
        self.failing = Some(message.clone());
        Some(message)
    }

    fn recovered(&mut self) {
        self.failing = None;
    }
}

#[cfg(test)]
#[path = "snapshot_pull_tests.rs"]
mod tests;
