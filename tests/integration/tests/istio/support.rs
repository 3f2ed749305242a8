//! What the Istio / Envoy Gateway tests share: the bootstrap as they would run the filter,
//! requests on their own connections, and the checks of an unheld body route.

use ferry_integration_tests::http::{Conn, Response};
use serde_json::{json, Value as Json};

pub const ISTIO_CLUSTER: &str = "outbound|8090||ferry-reader.ferry.svc.cluster.local";

/// `ferry envoy-config`'s static bootstrap as Istio / Envoy Gateway would run the filter: the
/// flag dropped, the configuration a JSON plugin config (checked to carry the same snapshot
/// when it carries one) in a StringValue, the reader cluster renamed.
pub fn as_istio(yaml: String, plugin_config: &str) -> String {
    let flag = "                # The filter replaces headers after reading the body.\n                allow_on_headers_stop_iteration: true\n";
    assert!(
        yaml.contains(flag),
        "the generated config changed shape:\n{yaml}"
    );
    let yaml = yaml.replacen(flag, "", 1);
    let start = "                  \"@type\": type.googleapis.com/google.protobuf.BytesValue\n                  value: \"";
    let at = yaml.find(start).expect("the snapshot as a BytesValue") + start.len();
    let end = at + yaml[at..].find('"').expect("end of the snapshot");
    let json: Json = serde_json::from_str(plugin_config).expect("the plugin config is JSON");
    if let Some(inline) = json.get("snapshot_base64") {
        assert_eq!(inline, &yaml[at..end], "the same snapshot");
    }
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

pub fn instances(users: &[&str]) -> String {
    let v: Vec<Json> = users
        .iter()
        .map(|u| json!({"user_id": u, "amount": 10.5}))
        .collect();
    json!({ "instances": v }).to_string()
}

/// One request on its own connection (Envoy closes one after a filter's own reply).
pub async fn send(
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

pub async fn post(port: u16, path: &str, body: String) -> Response {
    send(port, "POST", path, &[], body).await
}

pub fn error_of(resp: &Response) -> (u16, String) {
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
pub fn check_unheld(resp: &Response, status: Option<&str>) {
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
