//! Pulling the snapshot from `ferry serve` (the JSON plugin configuration's `snapshot_url`):
//! which GET to send, and what its answer does. Host-agnostic: the root context dispatches the
//! request on configure and on every tick, and hands the answer back here.
//!
//! The GET carries `if-none-match` with the last version seen, so an unchanged snapshot costs
//! a 304 and no decoding. A new snapshot is validated like any other; a bad one is refused,
//! the last good one kept and its version remembered, so it is refused (and logged) once, not
//! at every poll. Failures to reach the control plane are logged when they start and stop.

use std::rc::Rc;

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
}

/// What an answer to the GET changed.
#[derive(Debug)]
pub enum Pulled {
    /// A new snapshot validated: serve it from now on.
    Loaded(Rc<Config>),
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
            ("accept".to_owned(), "application/x-protobuf".to_owned()),
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

    /// The answer: `status` None when the call failed (reset, timeout, unknown cluster).
    pub fn answered(&mut self, status: Option<u16>, etag: Option<String>, body: &[u8]) -> Pulled {
        self.in_flight = false;
        match status {
            Some(200) => self.received(etag, body),
            Some(304) => {
                self.recovered();
                Pulled::Unchanged
            }
            Some(s) => {
                let text = String::from_utf8_lossy(body.get(..200).unwrap_or(body));
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

    fn received(&mut self, etag: Option<String>, body: &[u8]) -> Pulled {
        self.recovered();
        self.etag = etag;
        match self.pull.overrides.apply(body) {
            Ok(config) => Pulled::Loaded(Rc::new(config)),
            Err(e) => Pulled::Kept {
                log: Some(format!(
                    "snapshot pulled from {} refused, the last good one stays: {e}",
                    self.pull.url
                )),
            },
        }
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
mod tests {
    use super::*;
    use crate::plugin_config::{parse_plugin, Plugin};
    use ferry_test_support::snapshot::snapshot;
    use prost::Message;

    fn puller() -> Puller {
        let json = r#"{"snapshot_url":"http://cp:8091/v1/snapshot","snapshot_cluster":"cp",
                       "reader_cluster":"istio-reader"}"#;
        match parse_plugin(json.as_bytes()).unwrap() {
            Plugin::Pull(p) => Puller::new(p),
            Plugin::Snapshot(_) => panic!("a pull"),
        }
    }

    fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
        h.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_snapshot_loads_then_its_version_is_asked_for_again() {
        let mut p = puller();
        let h = p.next_request().unwrap();
        assert_eq!(header(&h, ":path"), Some("/v1/snapshot"));
        assert_eq!(header(&h, ":authority"), Some("cp:8091"));
        assert_eq!(header(&h, "if-none-match"), None);
        p.sent();
        assert!(p.next_request().is_none(), "one GET at a time");

        let bytes = snapshot().encode_to_vec();
        let Pulled::Loaded(c) = p.answered(Some(200), Some("\"v1\"".into()), &bytes) else {
            panic!("loaded")
        };
        assert_eq!(
            c.reader_cluster, "istio-reader",
            "the JSON's overrides apply"
        );
        let h = p.next_request().unwrap();
        assert_eq!(header(&h, "if-none-match"), Some("\"v1\""));
        p.sent();
        assert!(matches!(
            p.answered(Some(304), None, b""),
            Pulled::Unchanged
        ));
    }

    #[test]
    fn a_snapshot_token_is_sent_as_a_bearer_and_never_shown_in_debug() {
        let json = r#"{"snapshot_url":"http://cp:8091/v1/snapshot","snapshot_cluster":"cp",
                       "snapshot_token":"read-s3cret"}"#;
        let Plugin::Pull(pull) = parse_plugin(json.as_bytes()).unwrap() else {
            panic!("a pull")
        };
        assert!(!format!("{pull:?}").contains("read-s3cret"));
        let h = Puller::new(pull).next_request().unwrap();
        assert_eq!(header(&h, "authorization"), Some("Bearer read-s3cret"));
        assert_eq!(
            header(&puller().next_request().unwrap(), "authorization"),
            None
        );
        for bad in ["\"\"", "\"a\\nb\"", "7"] {
            let json = format!(
                r#"{{"snapshot_url":"http://cp/v1/snapshot","snapshot_cluster":"cp","snapshot_token":{bad}}}"#
            );
            let e = parse_plugin(json.as_bytes()).unwrap_err().to_string();
            assert!(e.contains("'snapshot_token'"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_bad_snapshot_is_refused_once_and_failures_are_logged_on_the_flip() {
        let mut p = puller();
        p.sent();
        let Pulled::Kept { log: Some(log) } =
            p.answered(Some(200), Some("\"bad\"".into()), b"\xff")
        else {
            panic!("refused")
        };
        assert!(log.contains("refused, the last good one stays"), "{log}");
        assert!(log.contains("not a ferry.v1.Snapshot"), "{log}");
        // Its version is not fetched again until it changes.
        let h = p.next_request().unwrap();
        assert_eq!(header(&h, "if-none-match"), Some("\"bad\""));

        let down = |p: &mut Puller| match p.answered(None, None, b"") {
            Pulled::Kept { log } => log,
            other => panic!("{other:?}"),
        };
        let first = down(&mut p).unwrap();
        assert!(
            first.contains("no answer from http://cp:8091/v1/snapshot"),
            "{first}"
        );
        assert_eq!(
            down(&mut p),
            None,
            "logged when it starts, not at every poll"
        );
        let Pulled::Kept { log: Some(log) } =
            p.answered(Some(503), None, br#"{"error":"no_snapshot"}"#)
        else {
            panic!("kept")
        };
        assert!(
            log.contains("answered 503: {\"error\":\"no_snapshot\"}"),
            "{log}"
        );
        assert!(matches!(
            p.answered(Some(304), None, b""),
            Pulled::Unchanged
        ));
        assert!(down(&mut p).is_some(), "logged again after a recovery");
        assert!(p
            .not_sent("status BadArgument")
            .unwrap()
            .contains("cluster 'cp'"));
    }
}
