//! `--write-address`: Envoy routes for Feast's write endpoints (`POST /push`, `POST
//! /write-to-online-store`) to `ferry serve`'s HTTP API, beside the enrichment routes, so a
//! Feast client pointed at Envoy writes unchanged. The ferry filter is disabled on them: no
//! enrichment route can match a write, and the filter never sees (or forwards) the write
//! credential, which goes only to the control plane. With `--write-server-san` the cluster
//! speaks mTLS (Envoy's client certificate, the API's certificate checked for that SAN), so
//! the write credential never crosses a network in clear; `ferry serve` then grants Envoy's
//! identity the `write` role (`--grant write=IDENTITY`) or checks the client's token over TLS.
//!
//! The cluster's circuit breakers bound what reaches the API whatever the clients do
//! (`--write-max-requests`, default [`DEFAULT_MAX_REQUESTS`], `ferry serve
//! --max-concurrent-writes`' default): that many writes at the API, as many more waiting in
//! Envoy for a connection, and every further write answered by Envoy at its headers, before
//! its body is forwarded: `503` with `x-envoy-overloaded: true`, `Retry-After: 1` and the
//! bootstrap's JSON local reply (`"error": "upstream_reset_before_response_started{overflow}"`),
//! then the connection is closed. A client that ignores `Retry-After` (or `ferry serve`'s own
//! `429`) therefore costs the API nothing: its bodies are read and dropped by Envoy, never
//! proxied (Envoy's workers still read them: `bench/README.md`, "Enrichment under a write
//! flood"). The requests' bound is exact; the connections' is per worker pool (a worker with
//! no connection opens one over it, and its write is then refused for the requests' bound).

use super::{tls, EnvoyConfigError, Upstream, UpstreamTls};

/// The write paths, matched exactly (Envoy normalises the path first).
pub const WRITE_PATHS: [&str; 2] = ["/push", "/write-to-online-store"];

/// The cluster name of the control plane's HTTP API.
pub const WRITE_CLUSTER: &str = "ferry_write";

/// Writes Envoy lets reach the API at once by default (`--write-max-requests`): `ferry serve`'s
/// default `--max-concurrent-writes`.
pub const DEFAULT_MAX_REQUESTS: u32 = 4;

/// The routes (indented for the template's route list) and the cluster, or two empty blocks.
pub fn render(
    write: Option<&Upstream>,
    tls: Option<&UpstreamTls>,
    max_requests: u32,
    filter_name: &str,
) -> Result<(String, String), EnvoyConfigError> {
    let Some(up) = write else {
        return Ok((String::new(), String::new()));
    };
    let mut routes = String::new();
    for path in WRITE_PATHS {
        routes.push_str(&format!(
            "              - match: {{path: \"{path}\"}}\n\
             \x20               route: {{cluster: {WRITE_CLUSTER}, timeout: 30s}}\n\
             \x20               response_headers_to_add:\n\
             \x20               - header: {{key: retry-after, value: \"1\"}}\n\
             \x20                 append_action: ADD_IF_ABSENT\n\
             \x20               typed_per_filter_config:\n\
             \x20                 {filter_name}:\n\
             \x20                   \"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\n\
             \x20                   disabled: true\n"
        ));
    }
    // One request per connection (HTTP/1.1): connections, requests and requests waiting for
    // a connection all at the bound.
    let n = max_requests.max(1);
    let mut options = format!(
        "    circuit_breakers:\n\
         \x20     thresholds:\n\
         \x20     - {{max_connections: {n}, max_pending_requests: {n}, max_requests: {n}}}\n"
    );
    let socket = tls::transport_socket(tls, false)?;
    if !socket.is_empty() {
        options.push_str(&format!("{socket}\n"));
    }
    let cluster = up.cluster(
        WRITE_CLUSTER,
        "Feature writes (`--write-address`): ferry serve's HTTP API.",
        &options,
    );
    Ok((routes.trim_end().to_owned(), cluster.trim_end().to_owned()))
}
