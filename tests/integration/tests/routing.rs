//! Route selection through real Envoy: by host and header conditions in the snapshot, and by
//! name from an Envoy route's `metadata.filter_metadata.ferry.route`.

use ferry_integration_tests::http::Conn;
use ferry_integration_tests::{each_runtime, Options, Runtime, Stack};
use serde_json::json;

const ROUTES: &str = r#"
  - name: meta-named
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
    feature_names: short
  - name: by-host
    match: {path_prefix: /t/r/, host: "*.models.test"}
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
  - name: by-header
    match:
      path_prefix: /t/r/
      headers: [{name: x-model, exact: fraud}]
    service: realtime_scoring
    format: kserve_v1
    entity: {field: user_id}
"#;

/// Envoy routes naming Ferry routes in their metadata, ahead of the generated catch-all.
fn add_metadata_routes(yaml: String) -> String {
    let catch_all = "              - match: {prefix: \"/\"}\n";
    assert!(
        yaml.contains(catch_all),
        "the generated config changed shape:\n{yaml}"
    );
    let named = "              - match: {prefix: \"/meta/\"}\n                \
                 metadata: {filter_metadata: {ferry: {route: meta-named}}}\n                \
                 route: {cluster: model, timeout: 30s}\n              \
                 - match: {prefix: \"/meta-gone/\"}\n                \
                 metadata: {filter_metadata: {ferry: {route: not-in-the-snapshot}}}\n                \
                 route: {cluster: model, timeout: 30s}\n";
    yaml.replacen(catch_all, &format!("{named}{catch_all}"), 1)
}

const BAD_BODY: &str = "{oops";

async fn routes_are_selected_by_host_header_and_envoy_route_metadata(runtime: Runtime) {
    let stack = Stack::start(Options {
        runtime,
        extra_routes: ROUTES,
        entities: Some(100),
    });
    let envoy = stack.static_envoy_edited(add_metadata_routes);
    let port = envoy.listen_port;
    // A fresh connection per request: Envoy closes the connection after a filter's own reply.
    let send = async |path: &str, headers: &[(&str, &str)], body: String| {
        Conn::open(port)
            .await
            .send("POST", path, headers, body)
            .await
    };

    // Which Ferry route took a request: its JSON error names it.
    let route_of = async |path: &str, headers: &[(&str, &str)]| {
        let r = send(path, headers, BAD_BODY.to_string()).await;
        if r.status == 200 {
            // Passed through: the model echoed the body untouched.
            assert_eq!(&r.body[..], BAD_BODY.as_bytes());
            return None;
        }
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
        Some(r.json()["route"].as_str().unwrap().to_string())
    };
    assert_eq!(
        route_of("/t/r/x", &[("host", "a.models.test:10000")])
            .await
            .as_deref(),
        Some("by-host")
    );
    assert_eq!(
        route_of("/t/r/x", &[("x-model", "fraud")]).await.as_deref(),
        Some("by-header")
    );
    assert_eq!(
        route_of("/t/r/x", &[("host", "models.test"), ("x-model", "other")]).await,
        None,
        "neither condition holds: passthrough"
    );
    assert_eq!(
        route_of("/meta/v1/models/anything:predict", &[])
            .await
            .as_deref(),
        Some("meta-named")
    );

    // Enriched for real through the metadata-named route (short feature names).
    let body = json!({"instances": [{"user_id": "u000001"}]}).to_string();
    let r = send("/meta/score", &[], body).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let echoed = r.json();
    let inst = &echoed["instances"][0];
    assert!(
        inst.get("age").is_some(),
        "short names on meta-named: {inst}"
    );
    assert_eq!(echoed["ferry"]["service"], "realtime_scoring");
    assert_eq!(r.header("x-ferry-status"), Some("ok"));

    // An Envoy route naming a Ferry route the snapshot lacks: a JSON 500, never forwarded.
    let r = send("/meta-gone/x", &[], "{}".to_string()).await;
    assert_eq!(r.status, 500);
    assert_eq!(r.json()["error"], "unknown_route");
    assert_eq!(r.json()["route"], "not-in-the-snapshot");
}

each_runtime!(routes_are_selected_by_host_header_and_envoy_route_metadata,);
