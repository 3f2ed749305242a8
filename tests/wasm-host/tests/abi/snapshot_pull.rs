//! ABI tests of the snapshot pulled from a URL (`snapshot_url` in the JSON plugin
//! configuration): the root context's GET on configure and on each tick, its `if-none-match`,
//! the JSON 503 before the first snapshot, a refused snapshot keeping the last good one, and
//! failures logged once. Pulls are signed: a tampered, replayed or unsigned answer is refused
//! and a validly signed newer one taken; a configuration without keys or with plain http is
//! refused unless `insecure`.

use ferry_protos::signed::{CONTENT_TYPE, UNSIGNED_CONTENT_TYPE};
use ferry_protos::v1::SignedSnapshot;
use ferry_test_support::signed::{key, key_json, sign};
use ferry_wasm_host::{Action, Host, Stream};
use prost::Message;

use super::plugin_config::{json_config, ISTIO_CLUSTER};
use super::support::*;

const CP: &str = "ferry_control_plane";
const URL: &str = "https://ferry-control-plane.ferry.svc:8091/v1/snapshot";
const READER: &str = ISTIO_CLUSTER;

fn pull_config() -> String {
    format!(
        r#"{{"snapshot_url":"{URL}","snapshot_cluster":"{CP}","snapshot_poll_ms":250,
            "reader_cluster":"{READER}","snapshot_keys":[{}]}}"#,
        key_json("k1", &key(1))
    )
}

/// The standard snapshot signed by k1 at `sequence`, as `ferry serve --signing-key` serves it.
fn signed_at(sequence: u64) -> Vec<u8> {
    sign(&key(1), "k1", sequence, &snapshot().encode_to_vec()).encode_to_vec()
}

fn pulling_host() -> Host {
    let host = Host::load_filter();
    assert!(
        host.configure(pull_config().as_bytes()),
        "{}",
        host.log_text()
    );
    host
}

/// The root's calls so far.
fn pulls(host: &Host) -> Vec<ferry_wasm_host::DispatchedCall> {
    host.dispatched_calls()
        .into_iter()
        .filter(|c| c.cluster == CP)
        .collect()
}

/// Answers the last pull with `status`, `etag` and `body`, a signed snapshot's content type.
fn answer_pull(host: &Host, status: &str, etag: &str, body: &[u8]) {
    answer_typed(host, status, etag, CONTENT_TYPE, body);
}

fn answer_typed(host: &Host, status: &str, etag: &str, content_type: &str, body: &[u8]) {
    let call = pulls(host).pop().expect("a pull");
    let headers = [
        (":status", status),
        ("etag", etag),
        ("content-type", content_type),
    ];
    host.root_caller().call_response(call.token, &headers, body);
}

fn warned(h: &Host, text: &str) -> usize {
    h.logs().iter().filter(|l| l.message.contains(text)).count()
}

/// A body request that is enriched with the reader's answer, through the JSON's cluster.
fn enriched(host: &Host) {
    let s: Stream = host.stream();
    let (h, b) = post(&s, PATH, kserve_body(&["u1"]).as_bytes());
    assert_eq!(
        (h, b),
        (Action::Continue, Action::Pause),
        "{}",
        host.log_text()
    );
    let call = host
        .dispatched_calls()
        .into_iter()
        .rfind(|c| c.context_id == s.id())
        .expect("a reader call");
    assert_eq!(call.cluster, READER);
    answer(host, &s, vec![good_vector(30, NOW_US)]);
    assert!(s.resumed(), "{}", host.log_text());
}

#[test]
fn the_snapshot_is_pulled_polled_and_a_bad_one_is_refused() {
    let host = pulling_host();
    assert_eq!(
        host.tick_period(),
        Some(std::time::Duration::from_millis(250))
    );
    let first = the_call(&host);
    assert_eq!(first.context_id, host.root_caller().id(), "the root pulls");
    assert_eq!(
        (
            first.cluster.as_str(),
            first.header(":method"),
            first.header(":path")
        ),
        (CP, Some("GET"), Some("/v1/snapshot"))
    );
    assert_eq!(
        first.header(":authority"),
        Some("ferry-control-plane.ferry.svc:8091")
    );
    assert_eq!(first.header("if-none-match"), None);

    // Before it arrives: a JSON 503 naming the URL, for every request.
    let s = host.stream();
    assert_eq!(
        s.request_headers(&post_headers("/any", 2), false),
        Action::Pause
    );
    let (status, json) = reply_json(&s);
    assert_eq!(
        (status, json["error"].as_str()),
        (503, Some("snapshot_not_loaded"))
    );
    assert_says(&json, URL);
    let reply = s.local_reply().unwrap();
    assert_eq!(reply.header("x-ferry-error"), Some("snapshot_not_loaded"));

    host.tick();
    assert_eq!(
        pulls(&host).len(),
        1,
        "no second GET while one is on its way"
    );
    answer_pull(&host, "200", "\"v1\"", &signed_at(1));
    assert!(host.log_text().contains(URL), "{}", host.log_text());
    enriched(&host);

    // Polls ask for a new version only; 304 costs nothing.
    host.tick();
    assert_eq!(
        pulls(&host).last().unwrap().header("if-none-match"),
        Some("\"v1\"")
    );
    answer_pull(&host, "304", "\"v1\"", b"");
    enriched(&host);

    // An answer the filter refuses: warned once, the last good one serves on, and what it
    // asks for next is still the last good one's version (the ETag is not signed).
    host.tick();
    answer_pull(&host, "200", "\"v2\"", b"\xff\xff");
    assert_eq!(warned(&host, "refused, the last good one stays"), 1);
    enriched(&host);
    host.tick();
    assert_eq!(
        pulls(&host).last().unwrap().header("if-none-match"),
        Some("\"v1\"")
    );

    // The control plane away: logged when it starts, not at every poll; still serving.
    host.root_caller()
        .call_failure(pulls(&host).last().unwrap().token);
    host.tick();
    host.root_caller()
        .call_failure(pulls(&host).last().unwrap().token);
    assert_eq!(warned(&host, "no answer from"), 1, "{}", host.log_text());
    enriched(&host);
    assert_clean(&host);
}

#[test]
fn an_undispatchable_pull_is_logged_and_requests_get_the_503() {
    let host = Host::load_filter();
    host.set_clusters(&[READER]);
    assert!(host.configure(pull_config().as_bytes()));
    assert!(pulls(&host).is_empty());
    assert!(
        host.log_text().contains("could not request"),
        "{}",
        host.log_text()
    );
    let s = host.stream();
    s.request_headers(&post_headers(PATH, 2), false);
    assert_eq!(reply_json(&s).0, 503);
    assert_clean(&host);
}

#[test]
fn reconfiguring_keeps_the_pull_and_an_inline_snapshot_stops_it() {
    let host = pulling_host();
    answer_pull(&host, "200", "\"v1\"", &signed_at(1));
    // on_configure runs again with the same config (each worker, each update): no new GET.
    assert!(host.configure(pull_config().as_bytes()));
    assert_eq!(pulls(&host).len(), 1);
    enriched(&host);
    assert!(host.configure(json_config(&snapshot()).as_bytes()));
    assert_eq!(host.tick_period(), None, "no more polls");
    host.tick();
    assert_eq!(pulls(&host).len(), 1);
    enriched(&host);
    assert_clean(&host);
}

#[test]
fn a_tampered_replayed_or_unsigned_pull_is_refused_and_a_newer_signed_one_taken() {
    let host = pulling_host();
    assert_eq!(the_call(&host).header("accept"), Some(CONTENT_TYPE));
    answer_pull(&host, "200", "\"v5\"", &signed_at(5));
    enriched(&host);

    let mut tampered = SignedSnapshot::decode(&*signed_at(6)).unwrap();
    tampered.signature[10] ^= 1;
    let unknown = sign(&key(2), "k2", 7, &snapshot().encode_to_vec());
    let refusals: [(&str, Vec<u8>, &str); 4] = [
        (
            CONTENT_TYPE,
            tampered.encode_to_vec(),
            "does not verify under key 'k1'",
        ),
        (
            CONTENT_TYPE,
            unknown.encode_to_vec(),
            "key 'k2', which is not configured",
        ),
        (
            CONTENT_TYPE,
            signed_at(4),
            "sequence 4 is lower than the held snapshot's 5",
        ),
        (
            UNSIGNED_CONTENT_TYPE,
            snapshot().encode_to_vec(),
            "it is not signed (content-type application/x-protobuf)",
        ),
    ];
    for (content_type, body, why) in refusals {
        host.tick();
        answer_typed(&host, "200", "\"evil\"", content_type, &body);
        assert_eq!(warned(&host, why), 1, "{why}: {}", host.log_text());
        enriched(&host);
    }
    // Oversize: refused before the body is read into the VM.
    host.tick();
    let huge = vec![0u8; ferry_protos::limits::MAX_SIGNED_SNAPSHOT_BYTES + 1];
    answer_pull(&host, "200", "\"huge\"", &huge);
    assert_eq!(
        warned(&host, "over snapshot_max_bytes"),
        1,
        "{}",
        host.log_text()
    );
    enriched(&host);
    assert_eq!(
        pulls(&host).last().unwrap().header("if-none-match"),
        Some("\"v5\""),
        "the refusals did not change what is asked for"
    );

    // The control plane's next snapshot, signed at a higher sequence: taken.
    host.tick();
    let mut next = snapshot();
    next.version = "v8".into();
    let body = sign(&key(1), "k1", 8, &next.encode_to_vec()).encode_to_vec();
    answer_pull(&host, "200", "\"v8\"", &body);
    assert!(
        host.log_text().contains("snapshot v8 of project"),
        "{}",
        host.log_text()
    );
    enriched(&host);
    assert_clean(&host);
}

#[test]
fn a_pull_without_keys_or_over_plain_http_is_refused_unless_insecure() {
    let host = Host::load_filter();
    let no_keys = format!(r#"{{"snapshot_url":"{URL}","snapshot_cluster":"{CP}"}}"#);
    assert!(!host.configure(no_keys.as_bytes()));
    assert!(
        host.log_text().contains("needs 'snapshot_keys'"),
        "{}",
        host.log_text()
    );
    let plain = pull_config().replace("https://", "http://");
    assert!(!host.configure(plain.as_bytes()));
    assert!(
        host.log_text().contains("is plain http"),
        "{}",
        host.log_text()
    );
    // `insecure`: plain http and unsigned snapshots.
    let insecure = format!(
        r#"{{"snapshot_url":"http://cp/v1/snapshot","snapshot_cluster":"{CP}",
            "reader_cluster":"{READER}","insecure":true}}"#
    );
    assert!(host.configure(insecure.as_bytes()), "{}", host.log_text());
    answer_typed(
        &host,
        "200",
        "\"v1\"",
        UNSIGNED_CONTENT_TYPE,
        &snapshot().encode_to_vec(),
    );
    enriched(&host);
}
