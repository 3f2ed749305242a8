//! Ferry as Istio's WasmPlugin and Envoy Gateway's EnvoyExtensionPolicy load it, through real
//! Envoy: the wasm filter without `allow_on_headers_stop_iteration` (neither can set it), its
//! configuration the JSON form in a `google.protobuf.StringValue` (their `pluginConfig`), and
//! the reader cluster named the way Istio names clusters (so only the JSON's `reader_cluster`
//! reaches it). Every format and the route policies, values checked against the source.
//!
//! Without the flag, a body route's headers go upstream before the body is read: the model
//! gets the rewritten body without a `content-length` (chunked) and without `x-ferry-*`
//! request headers; the client still gets `x-ferry-*` on the response. Header mode holds the
//! whole request from the headers and is unchanged.

use std::process::Command;

use ferry_integration_tests::data::{same, VIEWS};
use ferry_integration_tests::expected::{Entity, Service, Store};
use ferry_integration_tests::http::{Conn, Response};
use ferry_integration_tests::{bin, run, Options, Stack};
use serde_json::{json, Value as Json};

const ISTIO_CLUSTER: &str = "outbound|8090||ferry-reader.ferry.svc.cluster.local";

const ROUTES: &str = r#"
  - name: stale-reject
    match: {path_prefix: /t/stale-reject}
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
    on_stale: reject
  - name: small
    match: {path_prefix: /t/small}
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
    max_body_bytes: 2048
  - name: fail-open
    match: {path_prefix: /t/fail-open}
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
    on_reader_error: forward
  - name: cached
    match: {path_prefix: /t/cached}
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
    cache_max_age_ms: 60000
"#;

/// `ferry envoy-config`'s static bootstrap as Istio / Envoy Gateway would run the filter: the
/// flag dropped, the configuration `ferry plugin-config`'s JSON (checked to carry the same
/// snapshot) in a StringValue, the reader cluster renamed.
fn as_istio(yaml: String, plugin_config: &str) -> String {
    let flag = "                # The filter replaces headers after reading the body.\n                allow_on_headers_stop_iteration: true\n";
    assert!(
        yaml.contains(flag),
        "the generated config changed shape:\n{yaml}"
    );
    let yaml = yaml.replacen(flag, "", 1);
    let start = "                  \"@type\": type.googleapis.com/google.protobuf.BytesValue\n                  value: \"";
    let at = yaml.find(start).expect("the snapshot as a BytesValue") + start.len();
    let end = at + yaml[at..].find('"').expect("end of the snapshot");
    let json: Json = serde_json::from_str(plugin_config).expect("ferry plugin-config prints JSON");
    assert_eq!(json["snapshot_base64"], yaml[at..end], "the same snapshot");
    assert_eq!(json["reader_cluster"], ISTIO_CLUSTER);
    assert!(
        !plugin_config.contains('\''),
        "fits a YAML single-quoted string"
    );
    let replaced = format!(
        "{}                  \"@type\": type.googleapis.com/google.protobuf.StringValue\n                  value: '{}'{}",
        &yaml[..at - start.len()],
        plugin_config.trim(),
        &yaml[end + 1..]
    );
    let renamed = replaced
        .replace(
            "  - name: ferry_reader\n",
            &format!("  - name: \"{ISTIO_CLUSTER}\"\n"),
        )
        .replace(
            "cluster_name: ferry_reader\n",
            &format!("cluster_name: \"{ISTIO_CLUSTER}\"\n"),
        );
    assert!(!renamed.contains("allow_on_headers_stop_iteration: true"));
    assert!(!renamed.contains("ferry_reader\n"), "{renamed}");
    renamed
}

fn instances(users: &[&str]) -> String {
    let v: Vec<Json> = users
        .iter()
        .map(|u| json!({"user_id": u, "amount": 10.5}))
        .collect();
    json!({ "instances": v }).to_string()
}

/// One request on its own connection (Envoy closes one after a filter's own reply).
async fn send(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: String,
) -> Response {
    Conn::open(port)
        .await
        .send(method, path, headers, body)
        .await
}

async fn post(port: u16, path: &str, body: String) -> Response {
    send(port, "POST", path, &[], body).await
}

fn error_of(resp: &Response) -> (u16, String) {
    assert!(
        resp.header("x-echo-headers").is_none(),
        "Ferry's answer, not the model's: {} {:?}",
        resp.status,
        resp.headers
    );
    (
        resp.status,
        resp.json()["error"].as_str().unwrap_or("").to_string(),
    )
}

/// What a body route's model got without the flag: the rewritten body, chunked, no
/// `x-ferry-*`; the client is told on the response.
fn check_unheld(resp: &Response, status: Option<&str>) {
    assert_eq!(resp.status, 200, "{}", String::from_utf8_lossy(&resp.body));
    let up = resp.upstream_headers();
    assert!(up.get("content-length").is_none(), "{up}");
    assert_eq!(up["transfer-encoding"], "chunked", "{up}");
    assert!(
        up.as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("x-ferry-")),
        "{up}"
    );
    match status {
        Some(s) => assert_eq!(resp.header("x-ferry-status"), Some(s)),
        None => assert!(resp.header("x-ferry-status").is_some()),
    }
}

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
