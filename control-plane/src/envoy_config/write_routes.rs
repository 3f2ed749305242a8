//! `--write-address`: Envoy routes for Feast's write endpoints (`POST /push`, `POST
//! /write-to-online-store`) to `ferry serve`'s HTTP API, beside the enrichment routes, so a
//! Feast client pointed at Envoy writes unchanged. The ferry filter is disabled on them: no
//! enrichment route can match a write, and the filter never sees (or forwards) the write
//! credential, which goes only to the control plane. With `--write-server-san` the cluster
//! speaks mTLS (Envoy's client certificate, the API's certificate checked for that SAN), so
//! the write credential never crosses a network in clear; `ferry serve` then grants Envoy's
//! identity the `write` role (`--grant write=IDENTITY`) or checks the client's token over TLS.

use super::{tls, EnvoyConfigError, Upstream, UpstreamTls};

/// The write paths, matched exactly (Envoy normalises the path first).
pub const WRITE_PATHS: [&str; 2] = ["/push", "/write-to-online-store"];

/// The cluster name of the control plane's HTTP API.
pub const WRITE_CLUSTER: &str = "ferry_write";

/// The routes (indented for the template's route list) and the cluster, or two empty blocks.
pub fn render(
    write: Option<&Upstream>,
    tls: Option<&UpstreamTls>,
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
             \x20               typed_per_filter_config:\n\
             \x20                 {filter_name}:\n\
             \x20                   \"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\n\
             \x20                   disabled: true\n"
        ));
    }
    let socket = tls::transport_socket(tls, false)?;
    let options = if socket.is_empty() {
        String::new()
    } else {
        format!("{socket}\n")
    };
    let cluster = up.cluster(
        WRITE_CLUSTER,
        "Feature writes (`--write-address`): ferry serve's HTTP API.",
        &options,
    );
    Ok((routes.trim_end().to_owned(), cluster.trim_end().to_owned()))
}
