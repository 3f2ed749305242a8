//! `--log-sink`: served-feature logs leave Envoy through its gRPC access-log service. Rendered
//! into the connection manager: an early header mutation that removes a client's
//! `x-request-id` (so Envoy assigns every request a fresh UUID and a client cannot choose
//! which requests are sampled, or collide with another's id), and an `http_grpc` access log
//! that sends only the requests the filter left a record for (filter state `wasm.ferry.log` or
//! `ferry.log`) to the `ferry_log_sink` cluster, HTTP/2, mTLS with `--log-sink-server-san`.
//!
//! Envoy's logger buffers up to `buffer_size_bytes` and flushes every `buffer_flush_interval`;
//! the request never waits for the sink. A sink that is away loses what was sent into the dead
//! stream. A sink that stops reading does not make the logger drop (Envoy keeps writing into
//! the stream and holds what the sink does not read, measured without a bound); HTTP/2 PINGs
//! (`connection_keepalive`) cut such a sink after at most `interval + timeout`, which bounds what
//! Envoy holds and loses it.

use super::{tls, EnvoyConfigError, Upstream, UpstreamTls};

/// The cluster of the sink.
pub const LOG_SINK_CLUSTER: &str = "ferry_log_sink";

/// Envoy's logger sends a batch once this many bytes are buffered (or every second).
pub const BUFFER_BYTES: u32 = 64 * 1024;

/// HTTP/2 PINGs to the sink: a sink that stops reading (hung, stopped, its host gone) does not
/// answer them, and Envoy closes the connection. Envoy's logger does not see back-pressure from
/// a stream that stopped moving (measured: 23 MB held after 6 s at ~2 MB/s, `logs_dropped` 0),
/// so this is what bounds what it holds: at most `interval + timeout` of records.
pub const KEEPALIVE_INTERVAL: &str = "5s";
pub const KEEPALIVE_TIMEOUT: &str = "3s";

/// The connection-manager block (access log and request-id rule) and the cluster, or two empty
/// blocks without a sink.
pub fn render(
    sink: Option<&Upstream>,
    tls: Option<&UpstreamTls>,
) -> Result<(String, String), EnvoyConfigError> {
    let Some(up) = sink else {
        return Ok((String::new(), String::new()));
    };
    let keys = "[\"wasm.ferry.log\", \"ferry.log\"]";
    let hcm = format!(
        "          # Served-feature logs (`--log-sink`): a client's x-request-id is removed before\n\
         \x20         # Envoy assigns one (sampling is decided on it), and the requests the filter left\n\
         \x20         # a record for go to `ferry log-sink` over the gRPC access-log service.\n\
         \x20         early_header_mutation_extensions:\n\
         \x20         - name: envoy.http.early_header_mutation.header_mutation\n\
         \x20           typed_config:\n\
         \x20             \"@type\": type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation\n\
         \x20             mutations:\n\
         \x20             - remove: x-request-id\n\
         \x20         access_log:\n\
         \x20         - name: envoy.access_loggers.http_grpc\n\
         \x20           filter:\n\
         \x20             extension_filter:\n\
         \x20               name: envoy.access_loggers.extension_filters.cel\n\
         \x20               typed_config:\n\
         \x20                 \"@type\": type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter\n\
         \x20                 expression: \"'wasm.ferry.log' in filter_state || 'ferry.log' in filter_state\"\n\
         \x20           typed_config:\n\
         \x20             \"@type\": type.googleapis.com/envoy.extensions.access_loggers.grpc.v3.HttpGrpcAccessLogConfig\n\
         \x20             common_config:\n\
         \x20               log_name: ferry_served_features\n\
         \x20               transport_api_version: V3\n\
         \x20               grpc_service:\n\
         \x20                 envoy_grpc: {{cluster_name: {LOG_SINK_CLUSTER}}}\n\
         \x20               buffer_size_bytes: {BUFFER_BYTES}\n\
         \x20               buffer_flush_interval: 1s\n\
         \x20               filter_state_objects_to_log: {keys}\n"
    );
    let socket = tls::transport_socket(tls, true)?;
    let socket = if socket.is_empty() {
        String::new()
    } else {
        format!("\n{socket}")
    };
    let options = format!(
        "    typed_extension_protocol_options:\n\
         \x20     envoy.extensions.upstreams.http.v3.HttpProtocolOptions:\n\
         \x20       \"@type\": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions\n\
         \x20       explicit_http_config:\n\
         \x20         http2_protocol_options:\n\
         \x20           connection_keepalive: {{interval: {KEEPALIVE_INTERVAL}, timeout: {KEEPALIVE_TIMEOUT}}}{socket}\n"
    );
    let cluster = up.cluster(
        LOG_SINK_CLUSTER,
        "Served-feature logs (`--log-sink`): `ferry log-sink`'s access-log gRPC service.",
        &options,
    );
    Ok((hcm.trim_end().to_owned(), cluster.trim_end().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envoy_config::render_static;
    use crate::envoy_config::render_tests::opts;
    use crate::envoy_config::StaticOptions;
    use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};

    #[test]
    fn a_log_sink_renders_the_access_log_its_cluster_and_the_request_id_rule() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let reg = reg.unwrap();
        let plain = render_static(&reg, &opts()).unwrap();
        assert!(!plain.contains(LOG_SINK_CLUSTER) && !plain.contains("access_log:"));
        let o = StaticOptions {
            log_sink: Some(Upstream::loopback(18090)),
            ..opts()
        };
        let text = render_static(&reg, &o).unwrap();
        assert!(text.contains("envoy.access_loggers.http_grpc"));
        assert!(text.contains("envoy_grpc: {cluster_name: ferry_log_sink}"));
        assert!(text.contains("- remove: x-request-id"));
        assert!(text.contains("  - name: ferry_log_sink\n"));
        assert!(text.contains("socket_address: {address: 127.0.0.1, port_value: 18090}"));
        assert!(
            text.contains("connection_keepalive: {interval: 5s, timeout: 3s}"),
            "a sink that stops answering is cut: what Envoy holds for it is bounded"
        );
        assert!(
            text.find("access_log:").unwrap() < text.find("route_config:").unwrap(),
            "inside the connection manager"
        );
    }
}
