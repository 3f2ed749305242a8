//! Ferry as Istio's WasmPlugin and Envoy Gateway's EnvoyExtensionPolicy load it, through real
//! Envoy: the wasm filter without `allow_on_headers_stop_iteration` (neither can set it), its
//! configuration the JSON form in a `google.protobuf.StringValue` (their `pluginConfig`), and
//! the reader cluster named the way Istio names clusters (so only the JSON's `reader_cluster`
//! reaches it). Every format and the route policies, values checked against the source
//! (`kserve_v2_grpc` without the flag: core's unheld-headers unit tests).
//!
//! Without the flag, a body route's headers go upstream before the body is read: the model
//! gets the rewritten body without a `content-length` (chunked) and without `x-ferry-*`
//! request headers; the client still gets `x-ferry-*` on the response. Header mode holds the
//! whole request from the headers and is unchanged.
//!
//! `istio/pull.rs`: the same filter pulling its snapshot from `ferry serve` (`snapshot_url`).
//! `istio/signed.rs`: a signed pull through a man in the middle that replays an older snapshot.
//! `istio/crash.rs`: the same replay after the VM crashed and was reloaded.
//! `istio/native_pull.rs`: the native module (Envoy Gateway's `dynamicModule`) pulling too.

use std::process::Command;

use ferry_integration_tests::data::{same, VIEWS};
use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::http::Conn;
use ferry_integration_tests::{bin, run, Options, Stack};
use ferry_integration_tests::{feast_route, user_route};
use serde_json::{json, Value as Json};

#[path = "istio/crash.rs"]
mod crash;
#[path = "istio/native_pull.rs"]
mod native_pull;
#[path = "istio/pull.rs"]
mod pull;
#[path = "istio/signed.rs"]
mod signed;
#[path = "istio/support.rs"]
mod support;

use support::{as_istio, check_unheld, error_of, instances, post, send, ISTIO_CLUSTER};

const ROUTES: &str = concat!(
    user_route!("stale-reject", "on_stale: reject"),
    user_route!("small", "max_body_bytes: 2048"),
    user_route!("fail-open", "on_reader_error: forward"),
    user_route!("cached", "cache_max_age_ms: 60000"),
    feast_route!(),
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_format_and_policy_without_the_flag_and_with_a_json_config() {
    let mut stack = Stack::start(Options {
        extra_routes: ROUTES,
        entities: Some(300),
        ..Options::default()
    });
    let plugin_config = run(Command::new(bin("ferry"))
        .arg("plugin-config")
        .arg(&stack.repo)
        .args(["--reader-cluster", ISTIO_CLUSTER]));
    let envoy = stack.static_envoy_edited(|y| as_istio(y, &plugin_config));
    let p = envoy.listen_port;
    let store = Store::load(&stack);
    let src = stack.source();

    // kserve_v1, values against the source; through the near cache twice.
    let users = ["u000001", "u000002"];
    for path in ["/v1/models/fraud:predict", "/t/cached", "/t/cached"] {
        let resp = post(p, path, instances(&users)).await;
        check_unheld(&resp, Some("ok"));
        let entities: Vec<Entity> = users.iter().map(|u| Entity::User(u.to_string())).collect();
        store.check_instances(Service::RealtimeScoring, &resp.json(), &entities);
        assert_eq!(resp.json()["instances"][0]["amount"], json!(10.5));
    }

    // Policies: unknown entity rejected or null, stale rejected, bad bodies answered.
    let two = instances(&["u000004", "nobody"]);
    assert_eq!(
        error_of(&post(p, "/v1/models/fraud:predict", two.clone()).await),
        (404, "entity_not_found".into())
    );
    let resp = post(p, "/v1/models/fraud-lenient:predict", two).await;
    check_unheld(&resp, Some("partial"));
    assert_eq!(resp.json()["instances"][1]["user_profile__age"], Json::Null);
    assert_eq!(
        error_of(&post(p, "/t/stale-reject", instances(&["u000007"])).await),
        (422, "stale_features".into())
    );
    assert_eq!(
        error_of(&post(p, "/v1/models/fraud:predict", "{oops".into()).await),
        (400, "malformed_json".into())
    );
    let big = instances(&["u000001"; 100]);
    assert_eq!(
        error_of(&post(p, "/t/small", big).await),
        (413, "body_too_large".into())
    );

    // kserve_v2: one tensor per feature.
    let body = json!({"inputs": [
        {"name": "user_id", "shape": [1], "datatype": "BYTES", "data": ["u000001"]}
    ]});
    let resp = post(p, "/v2/models/fraud/infer", body.to_string()).await;
    check_unheld(&resp, Some("ok"));
    let v = resp.json();
    let age = v["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "user_profile__age")
        .unwrap_or_else(|| panic!("{v}"));
    let want = src.value("user_profile", "age", "u000001").unwrap();
    assert_eq!(age["data"][0], want);

    // json: features injected at the pointer.
    let body = json!({"batch": {"users": [{"user_id": "u000003"}]}});
    let resp = post(p, "/score", body.to_string()).await;
    check_unheld(&resp, Some("ok"));
    let features = &resp.json()["batch"]["users"][0]["features"];
    for (view, fs) in VIEWS {
        for (feature, kind) in *fs {
            let got = &features[&format!("{view}__{feature}")];
            let want = src.value(view, feature, "u000003").unwrap();
            assert!(
                same(got, &want, *kind),
                "{view}__{feature}: {got} vs {want}"
            );
        }
    }

    // header: the whole request held from the headers, the features header written.
    let resp = send(
        p,
        "GET",
        "/v1/risk",
        &[("x-user-id", "u000001")],
        String::new(),
    )
    .await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let up = resp.upstream_headers();
    let features: Json = serde_json::from_str(up["x-ferry-features"].as_str().unwrap()).unwrap();
    assert_eq!(features["user_profile__age"], want);
    assert_eq!(up["x-ferry-status"], "ok");
    let resp = send(
        p,
        "POST",
        "/v1/risk",
        &[("x-user-id", "u000002")],
        "kept".into(),
    )
    .await;
    assert_eq!((resp.status, resp.body.as_ref()), (200, b"kept".as_ref()));
    assert!(resp.upstream_headers()["x-ferry-features"].is_string());

    // Three services in one reader call (a composite key among them).
    let body = json!({"instances": [{"merchant_id": 1013, "user_id": "u000001"}]});
    let resp = post(p, "/v1/models/full-fraud:predict", body.to_string()).await;
    check_unheld(&resp, None);
    let out = resp.json();
    assert_eq!(
        out["ferry"]["service"],
        "realtime_scoring,user_merchant_scoring,merchant_risk"
    );
    assert_eq!(out["instances"][0]["user_profile__age"], want);

    // HTTP/2 downstream, the body ending with trailers: the trailers callback completes it.
    let body = instances(&["u000001"]);
    let resp = Conn::open_h2c(p)
        .await
        .send_with_trailers(
            "POST",
            "/v1/models/fraud:predict",
            &[],
            body,
            &[("x-trace", "1")],
        )
        .await;
    check_unheld(&resp, Some("ok"));
    assert_eq!(resp.json()["instances"][0]["user_profile__age"], want);

    // feast_rest: the headers went upstream before the body was read; the answer is still the
    // filter's own local reply, in Feast's shape.
    let body = json!({"feature_service": "realtime_scoring", "full_feature_names": true,
                      "entities": {"user_id": ["u000001", "nobody"]}});
    let resp = post(p, "/get-online-features", body.to_string()).await;
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let out = resp.json();
    let names = out["metadata"]["feature_names"].as_array().unwrap();
    let col = names.iter().position(|n| n == "user_profile__age").unwrap();
    assert_eq!(out["results"][col]["values"], json!([want, null]), "{out}");
    assert_eq!(
        out["results"][col]["statuses"],
        json!(["PRESENT", "NOT_FOUND"])
    );
    assert!(
        resp.header("x-echo-headers").is_none(),
        "the model answered, not the filter: {out}"
    );

    // Reader down: fail closed, or open with null features.
    stack.reader.kill();
    assert_eq!(
        error_of(&post(p, "/v1/models/fraud:predict", instances(&["u000001"])).await),
        (503, "reader_unavailable".into())
    );
    let resp = post(p, "/t/fail-open", instances(&["u000001"])).await;
    check_unheld(&resp, Some("degraded"));
    assert_eq!(resp.json()["instances"][0]["user_profile__age"], Json::Null);
    assert_eq!(resp.header("x-ferry-error"), Some("reader_unavailable"));
}
