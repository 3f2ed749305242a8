//! ABI tests of the snapshot pulled from a URL (`snapshot_url` in the JSON plugin
//! configuration): the root context's GET on configure and on each tick, its `if-none-match`,
//! the JSON 503 before the first snapshot, a refused snapshot keeping the last good one, and
//! failures logged once.

use ferry_wasm_host::{Action, Host, Stream};
use prost::Message;

use super::plugin_config::{json_config, ISTIO_CLUSTER};
use super::support::*;

const CP: &str = "ferry_control_plane";
const URL: &str = "http://ferry-control-plane.ferry.svc:8091/v1/snapshot";
const READER: &str = ISTIO_CLUSTER;

fn pull_config() -> String {
    format!(
        r#"{{"snapshot_url":"{URL}","snapshot_cluster":"{CP}","snapshot_poll_ms":250,
            "reader_cluster":"{READER}"}}"#
    )
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

/// Answers the last pull with `status`, `etag` and `body`.
fn answer_pull(host: &Host, status: &str, etag: &str, body: &[u8]) {
    let call = pulls(host).pop().expect("a pull");
    let headers = [(":status", status), ("etag", etag)];
    host.root_caller().call_response(call.token, &headers, body);
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
    assert!(json["message"].as_str().unwrap().contains(URL), "{json}");
    let reply = s.local_reply().unwrap();
    assert_eq!(reply.header("x-ferry-error"), Some("snapshot_not_loaded"));

    host.tick();
    assert_eq!(
        pulls(&host).len(),
        1,
        "no second GET while one is on its way"
    );
    answer_pull(&host, "200", "\"v1\"", &snapshot().encode_to_vec());
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

    // A snapshot the filter refuses: warned once, the last good one serves on.
    host.tick();
    answer_pull(&host, "200", "\"v2\"", b"\xff\xff");
    let warned =
        |h: &Host, text: &str| h.logs().iter().filter(|l| l.message.contains(text)).count();
    assert_eq!(warned(&host, "refused, the last good one stays"), 1);
    enriched(&host);
    host.tick();
    assert_eq!(
        pulls(&host).last().unwrap().header("if-none-match"),
        Some("\"v2\"")
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
    answer_pull(&host, "200", "\"v1\"", &snapshot().encode_to_vec());
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
