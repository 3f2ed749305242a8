use super::*;
use crate::plugin_config::{parse_plugin, Plugin};
use ed25519_dalek::SigningKey;
use ferry_protos::v1::SignedSnapshot;
use ferry_test_support::signed::{key, key_json, sign};
use ferry_test_support::snapshot::snapshot;
use prost::Message;

fn puller_of(json: &str) -> Puller {
    match parse_plugin(json.as_bytes()).unwrap() {
        Plugin::Pull(p) => Puller::new(p),
        Plugin::Snapshot(_) => panic!("a pull"),
    }
}

/// An unsigned pull (`insecure`), as before signing.
fn puller() -> Puller {
    puller_of(
        r#"{"snapshot_url":"http://cp:8091/v1/snapshot","snapshot_cluster":"cp",
            "reader_cluster":"istio-reader","insecure":true}"#,
    )
}

/// A pull whose snapshots must be signed by k1 or k2.
fn signed_puller() -> Puller {
    puller_of(&format!(
        r#"{{"snapshot_url":"https://cp:8091/v1/snapshot","snapshot_cluster":"cp",
             "snapshot_keys":[{},{}],"snapshot_max_bytes":65536}}"#,
        key_json("k1", &key(1)),
        key_json("k2", &key(2))
    ))
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// `p`'s answer to a 200 with `body`, of content type `ctype`.
fn got(p: &mut Puller, etag: &str, ctype: &str, body: &[u8]) -> Pulled {
    let answer = Answer {
        status: Some(200),
        etag: Some(etag.into()),
        content_type: Some(ctype.into()),
        body_size: body.len(),
    };
    p.answered(&answer, |n| body[..n].to_vec())
}

fn status(p: &mut Puller, status: Option<u16>, body: &[u8]) -> Pulled {
    let answer = Answer {
        status,
        body_size: body.len(),
        ..Answer::default()
    };
    p.answered(&answer, |n| body[..n].to_vec())
}

/// A signed snapshot of `project`, as `ferry serve --signing-key` answers it.
fn envelope(k: &SigningKey, id: &str, seq: u64, project: &str) -> Vec<u8> {
    let mut s = snapshot();
    s.project = project.into();
    sign(k, id, seq, &s.encode_to_vec()).encode_to_vec()
}

fn signed(p: &mut Puller, etag: &str, body: &[u8]) -> Pulled {
    got(p, etag, CONTENT_TYPE, body)
}

/// The refusal's log line, asserting it is one.
fn refused(pulled: Pulled) -> String {
    match pulled {
        Pulled::Kept { log: Some(log) } => {
            assert!(log.contains("refused, the last good one stays"), "{log}");
            log
        }
        other => panic!("not refused: {other:?}"),
    }
}

fn loaded_project(pulled: Pulled) -> String {
    match pulled {
        Pulled::Loaded { config: c, .. } => c.project.clone(),
        other => panic!("not loaded: {other:?}"),
    }
}

#[test]
fn a_snapshot_loads_then_its_version_is_asked_for_again() {
    let mut p = puller();
    let h = p.next_request().unwrap();
    assert_eq!(header(&h, ":path"), Some("/v1/snapshot"));
    assert_eq!(header(&h, ":authority"), Some("cp:8091"));
    assert_eq!(header(&h, "if-none-match"), None);
    assert_eq!(header(&h, "accept"), Some(UNSIGNED_CONTENT_TYPE));
    p.sent();
    assert!(p.next_request().is_none(), "one GET at a time");

    let bytes = snapshot().encode_to_vec();
    let Pulled::Loaded { config: c, .. } = got(&mut p, "\"v1\"", UNSIGNED_CONTENT_TYPE, &bytes)
    else {
        panic!("loaded")
    };
    assert_eq!(
        c.reader_cluster, "istio-reader",
        "the JSON's overrides apply"
    );
    let h = p.next_request().unwrap();
    assert_eq!(header(&h, "if-none-match"), Some("\"v1\""));
    p.sent();
    assert!(matches!(status(&mut p, Some(304), b""), Pulled::Unchanged));
}

#[test]
fn a_snapshot_token_is_sent_as_a_bearer_and_never_shown_in_debug() {
    let json = r#"{"snapshot_url":"http://cp:8091/v1/snapshot","snapshot_cluster":"cp",
                   "snapshot_token":"read-s3cret","insecure":true}"#;
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
            r#"{{"snapshot_url":"http://cp/v1/snapshot","snapshot_cluster":"cp","insecure":true,"snapshot_token":{bad}}}"#
        );
        let e = parse_plugin(json.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("'snapshot_token'"), "{bad}: {e}");
    }
}

#[test]
fn a_bad_snapshot_is_refused_once_and_failures_are_logged_on_the_flip() {
    let mut p = puller();
    p.sent();
    let log = refused(got(&mut p, "\"bad\"", UNSIGNED_CONTENT_TYPE, b"\xff"));
    assert!(log.contains("not a ferry.v1.Snapshot"), "{log}");
    // Its version is not fetched again until it changes.
    let h = p.next_request().unwrap();
    assert_eq!(header(&h, "if-none-match"), Some("\"bad\""));

    let down = |p: &mut Puller| match status(p, None, b"") {
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
    let Pulled::Kept { log: Some(log) } = status(&mut p, Some(503), br#"{"error":"no_snapshot"}"#)
    else {
        panic!("kept")
    };
    assert!(
        log.contains("answered 503: {\"error\":\"no_snapshot\"}"),
        "{log}"
    );
    assert!(matches!(status(&mut p, Some(304), b""), Pulled::Unchanged));
    assert!(down(&mut p).is_some(), "logged again after a recovery");
    assert!(p
        .not_sent("status BadArgument")
        .unwrap()
        .contains("cluster 'cp'"));
}

#[test]
fn a_signed_snapshot_loads_under_either_configured_key() {
    let mut p = signed_puller();
    let h = p.next_request().unwrap();
    assert_eq!(header(&h, "accept"), Some(CONTENT_TYPE));
    assert_eq!(
        loaded_project(signed(&mut p, "\"a\"", &envelope(&key(1), "k1", 5, "a"))),
        "a"
    );
    assert_eq!(p.held_sequence(), Some(5));
    // Rotated: the next one is signed by the second key, at a higher sequence.
    let ctype = "Application/X-Ferry-Signed-Snapshot; charset=binary";
    let body = envelope(&key(2), "k2", 6, "b");
    assert_eq!(loaded_project(got(&mut p, "\"b\"", ctype, &body)), "b");
    assert_eq!(p.held_sequence(), Some(6));
    // The same sequence and bytes again (e.g. its ETag was lost): nothing to do.
    assert!(matches!(signed(&mut p, "\"b\"", &body), Pulled::Unchanged));
}

#[test]
fn tampered_unknown_or_unsigned_snapshots_are_refused_and_the_etag_kept() {
    let mut p = signed_puller();
    let good = envelope(&key(1), "k1", 5, "a");
    loaded_project(signed(&mut p, "\"a\"", &good));

    let mut payload = SignedSnapshot::decode(&*good).unwrap();
    payload.snapshot[3] ^= 1;
    let mut signature = SignedSnapshot::decode(&*good).unwrap();
    signature.signature[0] ^= 1;
    let wrong_key = sign(&key(3), "k1", 7, &snapshot().encode_to_vec());
    let unknown = sign(&key(3), "k3", 7, &snapshot().encode_to_vec());
    let cases = [
        (payload.encode_to_vec(), "does not verify under key 'k1'"),
        (signature.encode_to_vec(), "does not verify under key 'k1'"),
        (wrong_key.encode_to_vec(), "does not verify under key 'k1'"),
        (unknown.encode_to_vec(), "key 'k3', which is not configured"),
    ];
    for (body, why) in cases {
        let log = refused(signed(&mut p, "\"evil\"", &body));
        assert!(log.contains(why), "{why}: {log}");
        // The same refusal again is not logged again, until something else happened.
        assert!(matches!(
            signed(&mut p, "\"evil\"", &body),
            Pulled::Kept { log: None }
        ));
        assert!(matches!(status(&mut p, Some(304), b""), Pulled::Unchanged));
    }
    let log = refused(got(
        &mut p,
        "\"evil\"",
        UNSIGNED_CONTENT_TYPE,
        &snapshot().encode_to_vec(),
    ));
    assert!(log.contains("it is not signed (content-type application/x-protobuf)"));
    assert!(log.contains("--signing-key"), "{log}");
    // None of them changed what is asked for next, or what is held.
    let h = p.next_request().unwrap();
    assert_eq!(header(&h, "if-none-match"), Some("\"a\""));
    assert_eq!(p.held_sequence(), Some(5));
}

#[test]
fn a_lower_sequence_is_a_replay_and_an_equal_one_must_be_the_same_bytes() {
    let mut p = signed_puller();
    loaded_project(signed(&mut p, "\"b\"", &envelope(&key(1), "k1", 6, "b")));
    let older = envelope(&key(1), "k1", 5, "a");
    let log = refused(signed(&mut p, "\"a\"", &older));
    assert!(
        log.contains("sequence 5 is lower than the held snapshot's 6"),
        "{log}"
    );
    // Logged once while the replay repeats.
    assert!(matches!(
        signed(&mut p, "\"a\"", &older),
        Pulled::Kept { log: None }
    ));
    let log = refused(signed(&mut p, "\"c\"", &envelope(&key(1), "k1", 6, "c")));
    assert!(
        log.contains("sequence 6 is the held snapshot's, with other bytes"),
        "{log}"
    );
    // An intended rollback: the old content, as a new, higher sequence.
    assert_eq!(
        loaded_project(signed(&mut p, "\"a\"", &envelope(&key(1), "k1", 7, "a"))),
        "a"
    );
    // A new configuration of the same URL (a key added) keeps the held sequence; another
    // URL (another control plane) starts afresh.
    let same = Puller::replacing(signed_puller().pull.clone(), Some(p));
    assert_eq!(same.held_sequence(), Some(7));
    let mut other = signed_puller().pull.clone();
    other.url = "https://elsewhere/v1/snapshot".into();
    assert_eq!(Puller::replacing(other, Some(same)).held_sequence(), None);
}

#[test]
fn an_oversize_answer_is_refused_unread() {
    let mut p = signed_puller();
    let answer = Answer {
        status: Some(200),
        content_type: Some(CONTENT_TYPE.into()),
        body_size: 65537,
        ..Answer::default()
    };
    let log = refused(p.answered(&answer, |_| panic!("read")));
    assert!(
        log.contains("the answer is 65537 bytes, over snapshot_max_bytes 65536"),
        "{log}"
    );
    // An error answer's body is read up to 200 bytes, whatever its size.
    let answer = Answer {
        status: Some(500),
        body_size: 1 << 30,
        ..Answer::default()
    };
    p.answered(&answer, |n| {
        assert_eq!(n, 200);
        vec![b'x'; n]
    });
}

#[test]
fn without_keys_a_signed_answer_is_taken_unverified() {
    let mut p = puller();
    let body = envelope(&key(9), "whatever", 3, "a");
    assert_eq!(loaded_project(signed(&mut p, "\"a\"", &body)), "a");
    assert_eq!(p.held_sequence(), Some(3));
}

/// Envoy's shared data as a test sees it: one map for every VM of the plugin, with a
/// compare-and-swap token per key; `contended` makes the next sets fail as if another VM wrote.
#[derive(Debug, Default, Clone)]
struct Shared(
    std::sync::Arc<std::sync::Mutex<Entries>>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
);

/// Each key's value and compare-and-swap token.
type Entries = std::collections::HashMap<String, (Vec<u8>, u32)>;

impl HeldStore for Shared {
    fn get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        match self.0.lock().unwrap().get(key) {
            Some((v, cas)) => (Some(v.clone()), Some(*cas)),
            None => (None, None),
        }
    }

    fn set(&self, key: &str, value: &[u8], cas: Option<u32>) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        if self.1.load(SeqCst) > 0 {
            self.1.fetch_sub(1, SeqCst);
            return false;
        }
        let mut map = self.0.lock().unwrap();
        let now = map.get(key).map(|(_, c)| *c);
        if cas.is_some() && cas != now {
            return false;
        }
        map.insert(key.into(), (value.to_vec(), now.unwrap_or(0) + 1));
        true
    }
}

#[test]
fn a_reloaded_vm_still_refuses_a_replay_through_the_shared_store() {
    let shared = Shared::default();
    let mut first = signed_puller().with_store(Box::new(shared.clone()));
    loaded_project(signed(
        &mut first,
        "\"b\"",
        &envelope(&key(1), "k1", 6, "b"),
    ));
    drop(first);
    // The VM crashed and was reloaded: a new root context, a new puller, nothing held locally.
    let mut reloaded = signed_puller().with_store(Box::new(shared.clone()));
    assert_eq!(reloaded.held_sequence(), Some(6));
    let log = refused(signed(
        &mut reloaded,
        "\"a\"",
        &envelope(&key(1), "k1", 5, "a"),
    ));
    assert!(
        log.contains("sequence 5 is lower than the held snapshot's 6"),
        "{log}"
    );
    let log = refused(signed(
        &mut reloaded,
        "\"c\"",
        &envelope(&key(1), "k1", 6, "c"),
    ));
    assert!(log.contains("with other bytes"), "{log}");
    // The held snapshot itself loads in the reloaded VM (which holds no configuration yet),
    // then is unchanged; a higher one loads.
    let held = envelope(&key(1), "k1", 6, "b");
    assert_eq!(loaded_project(signed(&mut reloaded, "\"b\"", &held)), "b");
    assert!(matches!(
        signed(&mut reloaded, "\"b\"", &held),
        Pulled::Unchanged
    ));
    loaded_project(signed(
        &mut reloaded,
        "\"d\"",
        &envelope(&key(1), "k1", 8, "d"),
    ));
    // Without the store (a puller of another host, or before the fix) the replay was taken.
    let mut forgetful = signed_puller();
    loaded_project(signed(
        &mut forgetful,
        "\"a\"",
        &envelope(&key(1), "k1", 5, "a"),
    ));
}

#[test]
fn the_shared_sequence_only_rises_and_survives_contention() {
    let shared = Shared::default();
    let mut a = signed_puller().with_store(Box::new(shared.clone()));
    let mut b = signed_puller().with_store(Box::new(shared.clone()));
    // Another VM writes between each read and set, three times: the fourth attempt lands.
    shared.1.store(3, std::sync::atomic::Ordering::SeqCst);
    loaded_project(signed(&mut a, "\"x\"", &envelope(&key(1), "k1", 9, "x")));
    assert_eq!(b.held_sequence(), Some(9));
    // A VM that loaded a lower sequence earlier never lowers the shared one.
    let mut c = signed_puller();
    loaded_project(signed(&mut c, "\"w\"", &envelope(&key(1), "k1", 4, "w")));
    let c = Puller::replacing(c.pull.clone(), Some(c)).with_store(Box::new(shared.clone()));
    assert_eq!(c.held_sequence(), Some(9));
    assert!(refused(signed(&mut b, "\"w\"", &envelope(&key(1), "k1", 4, "w"))).contains("lower"));
    // Another URL's sequence is its own.
    let mut other = signed_puller().pull.clone();
    other.url = "https://elsewhere/v1/snapshot".into();
    let fresh = Puller::new(other).with_store(Box::new(shared));
    assert_eq!(fresh.held_sequence(), None);
}
