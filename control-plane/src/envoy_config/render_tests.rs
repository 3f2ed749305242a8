//! Rendered bootstraps checked line by line; the helpers are shared with `xds_bootstrap`'s tests.

use super::*;
use ferry_protos::v1::Snapshot;
use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};
use prost::Message as _;

/// The options every rendering test starts from.
pub(crate) fn opts() -> StaticOptions {
    StaticOptions {
        wasm_path: "/opt/ferry/ferry_filter.wasm".into(),
        runtime: crate::envoy_config::Runtime::Wasm,
        listen_port: 10000,
        admin_port: 9901,
        reader: Upstream::loopback(8090),
        model: Upstream::loopback(8080),
        buffer_limit_bytes: 8 << 20,
        reader_protocol: ReaderProtocol::default(),
        redis_proxy: None,
        reader_tls: None,
        write: None,
        write_tls: None,
        write_max_requests: write_routes::DEFAULT_MAX_REQUESTS,
        log_sink: None,
        log_sink_tls: None,
    }
}

#[test]
fn write_routes_go_to_the_control_plane_with_the_filter_disabled() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let reg = reg.unwrap();
    let plain = render_static(&reg, &opts()).unwrap();
    assert!(
        !plain.contains("ferry_write"),
        "no write routes unless asked"
    );
    let o = StaticOptions {
        write: Some(Upstream::loopback(8091)),
        ..opts()
    };
    let text = render_static(&reg, &o).unwrap();
    for path in ["/push", "/write-to-online-store"] {
        let at = text
            .find(&format!("- match: {{path: \"{path}\"}}"))
            .unwrap();
        let grpc = text.find("grpc: {}").unwrap();
        assert!(at < grpc, "{path} is routed before the catch-all routes");
    }
    assert_eq!(
        text.matches("route: {cluster: ferry_write, timeout: 30s}")
            .count(),
        2
    );
    assert_eq!(text.matches("disabled: true").count(), 2);
    let lines = cluster_lines(&text, "ferry_write");
    assert!(
        lines.contains(&"socket_address: {address: 127.0.0.1, port_value: 8091}"),
        "{lines:?}"
    );
    // Bounded in Envoy (issue #37): the API's default concurrency, Retry-After on Envoy's
    // overflow answer (and on the API's own refusals, which carry it already).
    assert!(
        lines.contains(&"- {max_connections: 4, max_pending_requests: 4, max_requests: 4}"),
        "{lines:?}"
    );
    assert_eq!(
        text.matches("- header: {key: retry-after, value: \"1\"}")
            .count(),
        2
    );
    let o = StaticOptions {
        write_max_requests: 2,
        ..o
    };
    let lines = cluster_lines(&render_static(&reg, &o).unwrap(), "ferry_write").join("\n");
    assert!(
        lines.contains("- {max_connections: 2, max_pending_requests: 2, max_requests: 2}"),
        "{lines}"
    );
}

#[test]
fn the_static_bootstrap_carries_the_snapshot() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let reg = reg.unwrap();
    let text = render_static(&reg, &opts()).unwrap();
    let config_lines = text.lines().filter(|l| !l.trim_start().starts_with('#'));
    for l in config_lines {
        assert!(
            !l.contains("{{") && !l.contains("}}"),
            "placeholder left: {l}"
        );
    }
    assert!(text.contains("port_value: 10000"));
    assert!(text.contains("per_connection_buffer_limit_bytes: 8388608"));
    assert!(text.contains("filename: \"/opt/ferry/ferry_filter.wasm\""));
    let b64 = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("value: \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    assert_eq!(
        Snapshot::decode(bytes.as_slice()).unwrap(),
        snapshot::build(&reg)
    );
}

/// Asserts the HttpConnectionManager of a rendered bootstrap normalises the path before
/// routing and filters (issue #9) and gives Envoy's own local replies a JSON body while
/// leaving the filter's (x-ferry-error) alone.
pub(crate) fn assert_path_hardening(text: &str) {
    let hcm: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("stat_prefix: ingress"))
        .take_while(|l| !l.contains("route_config:"))
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    for line in [
        "normalize_path: true",
        "merge_slashes: true",
        "path_with_escaped_slashes_action: REJECT_REQUEST",
        "local_reply_config:",
        "expression: \"!('x-ferry-error' in response.headers) && !('x-ferry-status' in response.headers)\"",
        "error: \"%RESPONSE_CODE_DETAILS%\"",
        "content_type: application/json",
    ] {
        assert!(hcm.contains(&line), "HCM lacks {line:?}: {hcm:#?}");
    }
}

#[test]
fn the_static_bootstrap_normalises_paths() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    assert_path_hardening(&render_static(&reg.unwrap(), &opts()).unwrap());
}

/// One cluster (or listener) of a rendered bootstrap, from its `- name:` line to the next.
pub(crate) fn cluster_block<'a>(text: &'a str, cluster: &str) -> &'a str {
    let start = text
        .find(&format!("  - name: {cluster}\n"))
        .unwrap_or_else(|| panic!("no cluster {cluster}"));
    let rest = &text[start..];
    let end = rest[4..]
        .find("\n  - name: ")
        .or_else(|| rest[4..].find("\n  clusters:"))
        .map_or(rest.len(), |e| e + 4);
    &rest[..end]
}

/// The `explicit_http_config` of one cluster of a rendered bootstrap: the line after it.
pub(crate) fn cluster_protocol(text: &str, cluster: &str) -> String {
    let mut lines = cluster_block(text, cluster).lines();
    lines.find(|l| l.trim() == "explicit_http_config:");
    lines.next().unwrap_or_default().trim().to_owned()
}

/// The config lines (comments left out) of one cluster, trimmed.
pub(crate) fn cluster_lines<'a>(text: &'a str, cluster: &str) -> Vec<&'a str> {
    cluster_block(text, cluster)
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect()
}

#[test]
fn ips_render_static_clusters_and_host_names_dns_ones() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let reg = reg.unwrap();
    let mut o = opts();
    let text = render_static(&reg, &o).unwrap();
    let reader = cluster_lines(&text, "ferry_reader");
    assert!(reader.contains(&"type: STATIC"), "{reader:?}");
    assert!(reader.contains(&"socket_address: {address: 127.0.0.1, port_value: 8090}"));
    assert!(cluster_lines(&text, "model").contains(&"type: STATIC"));
    assert!(
        !text.contains("\n\n"),
        "no blank line where the Redis proxy would go"
    );
    assert!(!text.contains("ferry_redis"));

    o.reader = "ferry-reader.ml.svc.cluster.local:8090".parse().unwrap();
    o.model = "model:9000".parse().unwrap();
    let text = render_static(&reg, &o).unwrap();
    let reader = cluster_lines(&text, "ferry_reader");
    assert!(reader.contains(&"type: STRICT_DNS"), "{reader:?}");
    assert!(reader.contains(
        &"socket_address: {address: ferry-reader.ml.svc.cluster.local, port_value: 8090}"
    ));
    let model = cluster_lines(&text, "model");
    assert!(model.contains(&"type: LOGICAL_DNS"), "{model:?}");
    assert!(model.contains(&"socket_address: {address: model, port_value: 9000}"));
}

#[test]
fn the_reader_is_health_checked_and_only_unseen_model_calls_are_retried() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let text = render_static(&reg.unwrap(), &opts()).unwrap();
    let reader = cluster_lines(&text, "ferry_reader");
    for line in [
        "health_checks:",
        "path: /healthz",
        "expected_statuses: [{start: 200, end: 201}]",
        "no_traffic_interval: 2s",
        "unhealthy_threshold: 3",
        "outlier_detection:",
        "consecutive_gateway_failure: 3",
        "enforcing_consecutive_gateway_failure: 100",
        "max_ejection_percent: 50",
    ] {
        assert!(
            reader.contains(&line),
            "reader cluster lacks {line:?}: {reader:#?}"
        );
    }
    // Envoy would not apply it to dispatch_http_call: none is rendered, none pretended.
    assert!(!text.contains("retry_budget"));
    let retries: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("retry_on:"))
        .collect();
    // The gRPC route and the catch-all one.
    assert_eq!(retries, ["retry_on: connect-failure,refused-stream"; 2]);
    // gRPC calls reach the model over HTTP/2.
    let grpc = cluster_lines(&text, "model_grpc");
    assert!(grpc.contains(&"http2_protocol_options: {}"), "{grpc:?}");
    assert!(text.contains("cluster: model_grpc"));
}

#[test]
fn the_redis_proxy_adds_a_listener_and_a_cluster() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let mut o = opts();
    o.redis_proxy = Some(RedisProxyOptions {
        listen_port: 6380,
        upstreams: vec![Upstream::loopback(6379)],
        redis_cluster: false,
    });
    let text = render_static(&reg.unwrap(), &o).unwrap();
    let listeners = &text[text.find("  listeners:").unwrap()..text.find("  clusters:").unwrap()];
    assert!(listeners.contains("  - name: ferry_redis\n"));
    assert!(listeners.contains("envoy.filters.network.redis_proxy"));
    let clusters = &text[text.find("  clusters:").unwrap()..];
    assert!(clusters.contains("  - name: ferry_redis\n"));
    assert!(clusters.ends_with("port_value: 6379}\n"), "{clusters}");
}

#[test]
fn the_reader_cluster_speaks_the_chosen_protocol() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let reg = reg.unwrap();
    let mut o = opts();
    o.reader_protocol = ReaderProtocol::Http1;
    let h1 = render_static(&reg, &o).unwrap();
    assert_eq!(
        cluster_protocol(&h1, "ferry_reader"),
        "http_protocol_options: {}"
    );
    o.reader_protocol = ReaderProtocol::Http2;
    let h2 = render_static(&reg, &o).unwrap();
    assert_eq!(
        cluster_protocol(&h2, "ferry_reader"),
        "http2_protocol_options: {}"
    );
    // Only that line differs; the default is the measured choice (bench/README.md).
    let diff: Vec<_> = h1.lines().zip(h2.lines()).filter(|(a, b)| a != b).collect();
    assert_eq!(diff.len(), 1, "{diff:?}");
    assert_eq!(h1.lines().count(), h2.lines().count());
    assert_eq!(ReaderProtocol::default(), ReaderProtocol::Http1);
}

#[test]
fn routes_over_the_buffer_limit_and_odd_paths_are_refused() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let reg = reg.unwrap();
    let mut o = opts();
    o.buffer_limit_bytes = 1024;
    assert_eq!(
        render_static(&reg, &o).unwrap_err().to_string(),
        "route 'route-0': max_body_bytes 2048 exceeds the Envoy buffer limit 1024 (raise \
         --buffer-limit-bytes or lower max_body_bytes)"
    );
    let mut o = opts();
    o.wasm_path = "/tmp/a\"b.wasm".into();
    assert!(matches!(
        render_static(&reg, &o),
        Err(EnvoyConfigError::WasmPath(_))
    ));
    let (_dir, reg) = load_repo(
        &format!("{ORDER_YAML}reader: {{cluster: other}}\n"),
        &ORDER_FILES,
    );
    assert!(matches!(
        render_static(&reg.unwrap(), &opts()),
        Err(EnvoyConfigError::ReaderCluster(_))
    ));
}

#[test]
fn the_json_plugin_config_is_what_the_filter_accepts() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let reg = reg.unwrap();
    let istio = "outbound|8090||ferry-reader.ferry.svc.cluster.local";
    let text = plugin_config_json(&reg, Some(istio)).unwrap();
    let c = ferry_core::plugin_config::parse(text.as_bytes()).unwrap();
    assert_eq!(c.reader_cluster, istio);
    assert!(!c.headers_held);
    // The same snapshot as the static bootstrap inlines.
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rendered = render_static(&reg, &opts()).unwrap();
    let b64 = json["snapshot_base64"].as_str().unwrap();
    assert!(rendered.contains(&format!("value: \"{b64}\"")));
    let c = ferry_core::plugin_config::parse(plugin_config_json(&reg, None).unwrap().as_bytes())
        .unwrap();
    assert_eq!(c.reader_cluster, TEMPLATE_READER_CLUSTER);
}

#[test]
fn mtls_to_the_reader_takes_its_files_through_sds_and_gives_envoy_a_node() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let reg = reg.unwrap();
    let plain = render_static(&reg, &opts()).unwrap();
    assert!(!plain.contains("\nnode:") && !plain.contains("transport_socket"));
    let mut o = opts();
    o.reader_tls = Some(UpstreamTls {
        client: ClientTls {
            cert: "/certs/tls.crt".into(),
            key: "/certs/tls.key".into(),
            ca: "/certs/ca.crt".into(),
            sds_dir: "/etc/envoy".into(),
        },
        server_san: "ferry-reader.ferry.svc".into(),
    });
    let text = render_static(&reg, &o).unwrap();
    assert!(
        text.contains("\nnode: {id: ferry-envoy, cluster: ferry}\n"),
        "{text}"
    );
    let reader = cluster_block(&text, "ferry_reader");
    assert!(
        reader.contains("tls_certificate_sds_secret_configs:"),
        "{reader}"
    );
    assert!(
        reader.contains("path: \"/etc/envoy/ferry_server_ca.sds.yaml\""),
        "{reader}"
    );
}

#[test]
fn mtls_to_the_write_address_checks_the_apis_san_and_speaks_http1() {
    let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
    let reg = reg.unwrap();
    let mut o = opts();
    o.write = Some(Upstream::loopback(8091));
    let plain = render_static(&reg, &o).unwrap();
    assert!(!cluster_block(&plain, "ferry_write").contains("transport_socket"));
    o.write_tls = Some(UpstreamTls {
        client: ClientTls {
            cert: "/certs/tls.crt".into(),
            key: "/certs/tls.key".into(),
            ca: "/certs/ca.crt".into(),
            sds_dir: "/etc/envoy".into(),
        },
        server_san: "ferry-control-plane.ferry.svc".into(),
    });
    let text = render_static(&reg, &o).unwrap();
    let write = cluster_block(&text, "ferry_write");
    for want in [
        "transport_socket:",
        "tls_certificate_sds_secret_configs:",
        "sni: \"ferry-control-plane.ferry.svc\"",
        "exact: \"ferry-control-plane.ferry.svc\"",
    ] {
        assert!(write.contains(want), "{want}: {write}");
    }
    assert!(
        !write.contains("alpn_protocols"),
        "the API is HTTP/1.1: {write}"
    );
    assert!(
        write.find("transport_socket:").unwrap() < write.find("load_assignment:").unwrap(),
        "{write}"
    );
}
