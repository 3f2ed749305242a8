//! `ferry envoy-config`: the static Envoy bootstrap (envoy/static.yaml.tmpl) with the snapshot
//! inlined as the filter's configuration (Wasm plugin or native module, [`filter_build`]). Every
//! `{{NAME}}` placeholder must be filled: a template that grows a new placeholder fails here,
//! not in Envoy.
//!
//! - [`xds_bootstrap`]: the other bootstrap, `--xds` (the filter's configuration over ECDS).
//! - [`plugin_pull`]: the filter's JSON configuration that pulls its snapshot (`ferry
//!   plugin-config`, for Istio and Envoy Gateway).
//! - [`filter_build`], [`upstream`], [`tls`], [`stats`], [`redis_proxy`], [`write_routes`],
//!   [`log_sink`]: the bootstraps' parts, one flag or group of flags each.

use std::path::Path;

use base64::Engine as _;

use ferry_repo::snapshot;
use ferry_repo::Registry;

pub mod filter_build;
pub mod log_sink;
pub mod plugin_pull;
pub mod redis_proxy;
pub mod stats;
pub mod tls;
pub mod upstream;
pub mod write_routes;
pub mod xds_bootstrap;

pub use filter_build::{Runtime, RuntimeKind};
pub use redis_proxy::RedisProxyOptions;
pub use tls::{ClientTls, UpstreamTls};
pub use upstream::{Discovery, Upstream};

/// The bootstrap template, embedded at build time.
pub const STATIC_TEMPLATE: &str = include_str!("../../../envoy/static.yaml.tmpl");

/// The reader cluster the static template defines.
pub const TEMPLATE_READER_CLUSTER: &str = "ferry_reader";

#[derive(Debug, thiserror::Error)]
pub enum EnvoyConfigError {
    #[error("template placeholder {{{{{0}}}}} has no value")]
    Unfilled(String),
    #[error("template has an unclosed '{{{{' at byte {0}")]
    Unclosed(usize),
    #[error(
        "route '{route}': max_body_bytes {max_body_bytes} exceeds the Envoy buffer limit \
         {buffer_limit} (raise --buffer-limit-bytes or lower max_body_bytes)"
    )]
    BodyOverBuffer {
        route: String,
        max_body_bytes: u32,
        buffer_limit: u64,
    },
    #[error(
        "reader.cluster is '{0}' but the static bootstrap defines the reader cluster \
         '{TEMPLATE_READER_CLUSTER}'; use the default reader section"
    )]
    ReaderCluster(String),
    #[error("filter path {0:?} cannot be written into the config (quotes, backslashes or control characters)")]
    WasmPath(String),
    #[error("{0} {1:?} may only hold letters, digits and - _ . :")]
    Field(&'static str, String),
    #[error("--redis-proxy-port needs at least one --redis-upstream")]
    NoRedisUpstream,
}

/// The HTTP protocol of the `ferry_reader` cluster, i.e. of the filter's dispatched calls. The
/// reader serves both on one port (HTTP/1.1 keep-alive, h2c with prior knowledge). The default
/// is the measured one (bench/README.md, "Reader cluster protocol"): HTTP/1.1 had the lower
/// latency at one connection, HTTP/2 no clear gain at eight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReaderProtocol {
    /// HTTP/1.1 keep-alive: Envoy pools connections, one request at a time on each.
    #[default]
    #[value(name = "http1")]
    Http1,
    /// HTTP/2 over cleartext (h2c, prior knowledge): calls multiplexed on pooled connections.
    #[value(name = "http2")]
    Http2,
}

impl ReaderProtocol {
    /// The `explicit_http_config` field that selects this protocol in Envoy's
    /// `HttpProtocolOptions`.
    pub fn envoy_field(self) -> &'static str {
        match self {
            ReaderProtocol::Http1 => "http_protocol_options",
            ReaderProtocol::Http2 => "http2_protocol_options",
        }
    }
}

/// The ports, upstreams and paths of a deployment (static or xDS).
#[derive(Clone, Debug)]
pub struct StaticOptions {
    /// Path of the filter's .wasm, as Envoy will open it (made absolute by the caller).
    pub wasm_path: String,
    /// The filter's build (Wasm, or the native module and its path).
    pub runtime: Runtime,
    pub listen_port: u16,
    pub admin_port: u16,
    /// The reader: an IP (STATIC) or a host name (STRICT_DNS).
    pub reader: Upstream,
    /// The model: an IP (STATIC) or a host name (LOGICAL_DNS).
    pub model: Upstream,
    pub buffer_limit_bytes: u64,
    /// The reader cluster's protocol.
    pub reader_protocol: ReaderProtocol,
    /// An extra listener proxying Redis (`--redis-proxy-port`), if wanted.
    pub redis_proxy: Option<RedisProxyOptions>,
    /// mTLS toward the reader (`--reader-server-san`), if wanted.
    pub reader_tls: Option<UpstreamTls>,
    /// `ferry serve`'s HTTP API, where Feast's write endpoints are routed (`--write-address`).
    pub write: Option<Upstream>,
    /// mTLS toward it (`--write-server-san`), if wanted.
    pub write_tls: Option<UpstreamTls>,
    /// Writes Envoy forwards to it at once (`--write-max-requests`): the write cluster's
    /// circuit breakers.
    pub write_max_requests: u32,
    /// `ferry log-sink`'s access-log gRPC service (`--log-sink`), and mTLS toward it.
    pub log_sink: Option<Upstream>,
    pub log_sink_tls: Option<UpstreamTls>,
}

impl StaticOptions {
    /// The placeholders both bootstraps share: the listener, the reader and model clusters, and
    /// the optional Redis proxy.
    pub(crate) fn common_values(&self) -> Result<Vec<(&'static str, String)>, EnvoyConfigError> {
        let (listeners, clusters) = match &self.redis_proxy {
            Some(r) => redis_proxy::render(r)?,
            None => (String::new(), String::new()),
        };
        let (write_routes, write_cluster) = write_routes::render(
            self.write.as_ref(),
            self.write_tls.as_ref(),
            self.write_max_requests,
            "ferry",
        )?;
        let (access_log, log_cluster) =
            log_sink::render(self.log_sink.as_ref(), self.log_sink_tls.as_ref())?;
        Ok(vec![
            ("ADMIN_PORT", self.admin_port.to_string()),
            ("LISTEN_PORT", self.listen_port.to_string()),
            ("BUFFER_LIMIT_BYTES", self.buffer_limit_bytes.to_string()),
            (
                "READER_CLUSTER_TYPE",
                self.reader.cluster_type(Discovery::Strict).to_owned(),
            ),
            ("READER_HOST", self.reader.yaml_host()),
            ("READER_PORT", self.reader.port.to_string()),
            (
                "READER_HTTP_OPTIONS",
                self.reader_protocol.envoy_field().to_owned(),
            ),
            (
                "MODEL_CLUSTER_TYPE",
                self.model.cluster_type(Discovery::Logical).to_owned(),
            ),
            ("MODEL_HOST", self.model.yaml_host()),
            ("MODEL_PORT", self.model.port.to_string()),
            (
                "READER_TRANSPORT_SOCKET",
                tls::transport_socket(
                    self.reader_tls.as_ref(),
                    self.reader_protocol == ReaderProtocol::Http2,
                )?,
            ),
            ("EXTRA_LISTENERS", listeners),
            ("EXTRA_CLUSTERS", clusters),
            ("WRITE_ROUTES", write_routes),
            ("WRITE_CLUSTER", write_cluster),
            (
                "STATS_CONFIG",
                stats::render().trim_end_matches('\n').to_owned(),
            ),
            ("ACCESS_LOG", access_log),
            ("LOG_SINK_CLUSTER", log_cluster),
        ])
    }
}

/// Fills `{{NAME}}` placeholders; an unknown or unclosed placeholder is an error. YAML comment
/// lines are documentation (the template's header mentions `{{NAME}}`) and are copied as is. A
/// line that is only a placeholder whose value is empty (an optional block left out) is dropped.
pub fn render_template(
    template: &str,
    values: &[(&str, String)],
) -> Result<String, EnvoyConfigError> {
    let mut out = String::with_capacity(template.len() + 1024);
    let mut offset = 0;
    for line in template.split_inclusive('\n') {
        let empty_block = line
            .trim_end()
            .strip_prefix("{{")
            .and_then(|l| l.strip_suffix("}}"))
            .is_some_and(|name| values.iter().any(|(n, v)| *n == name && v.is_empty()));
        if empty_block {
            // An optional block left out: no blank line in its place.
        } else if line.trim_start().starts_with('#') {
            out.push_str(line);
        } else {
            render_line(line, offset, values, &mut out)?;
        }
        offset += line.len();
    }
    Ok(out)
}

fn render_line(
    line: &str,
    mut offset: usize,
    values: &[(&str, String)],
    out: &mut String,
) -> Result<(), EnvoyConfigError> {
    let mut rest = line;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or(EnvoyConfigError::Unclosed(offset + start))?;
        let name = &after[..end];
        let value = values
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| EnvoyConfigError::Unfilled(name.to_owned()))?;
        out.push_str(&value.1);
        let consumed = start + 2 + end + 2;
        rest = &rest[consumed..];
        offset += consumed;
    }
    out.push_str(rest);
    Ok(())
}

/// What every bootstrap needs of the repo: the template's reader cluster name, and route body
/// limits that fit in Envoy's buffer.
pub(crate) fn check_repo_fits(
    reg: &Registry,
    buffer_limit_bytes: u64,
) -> Result<(), EnvoyConfigError> {
    if reg.reader.cluster != TEMPLATE_READER_CLUSTER {
        return Err(EnvoyConfigError::ReaderCluster(reg.reader.cluster.clone()));
    }
    for r in &reg.routes {
        if u64::from(r.max_body_bytes) > buffer_limit_bytes {
            return Err(EnvoyConfigError::BodyOverBuffer {
                route: r.name.clone(),
                max_body_bytes: r.max_body_bytes,
                buffer_limit: buffer_limit_bytes,
            });
        }
    }
    Ok(())
}

/// Renders the static bootstrap for this repo.
pub fn render_static(reg: &Registry, opts: &StaticOptions) -> Result<String, EnvoyConfigError> {
    check_repo_fits(reg, opts.buffer_limit_bytes)?;
    let snap = snapshot::build(reg);
    let b64 = base64::engine::general_purpose::STANDARD.encode(snapshot::encode(&snap));
    let filter = opts.runtime.static_filter(&opts.wasm_path, &b64)?;
    let mut values = opts.common_values()?;
    values.push(("FERRY_HTTP_FILTER", filter));
    // Envoy's SDS subscriptions, file-based ones too, need a node id and cluster.
    let node = match opts.reader_tls {
        Some(_) => "node: {id: ferry-envoy, cluster: ferry}".to_owned(),
        None => String::new(),
    };
    values.push(("STATIC_NODE", node));
    render_template(STATIC_TEMPLATE, &values)
}

/// The filter's configuration in its JSON form, for Istio's WasmPlugin and Envoy Gateway's
/// EnvoyExtensionPolicy (`pluginConfig`): the snapshot inline, and the reader cluster's name as
/// that Envoy knows it (Istio: `outbound|PORT||HOST`), overriding the repo's. Checked with the
/// filter's own parser, so what is printed is what the filter accepts.
pub fn plugin_config_json(
    reg: &Registry,
    reader_cluster: Option<&str>,
) -> Result<String, ferry_core::config::ConfigError> {
    let snap = snapshot::build(reg);
    let b64 = base64::engine::general_purpose::STANDARD.encode(snapshot::encode(&snap));
    let mut config = serde_json::json!({ "snapshot_base64": b64 });
    if let Some(cluster) = reader_cluster {
        config["reader_cluster"] = cluster.into();
    }
    let text = config.to_string();
    ferry_core::plugin_config::parse(text.as_bytes())?;
    Ok(text)
}

/// Makes a wasm path absolute without requiring it to exist yet (Envoy opens it relative to its
/// own working directory otherwise).
pub fn absolute_wasm_path(path: &Path) -> std::io::Result<String> {
    Ok(std::path::absolute(path)?.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_unknown_ones_refused() {
        let vals = [("A", "1".to_owned()), ("B", "two".to_owned())];
        assert_eq!(
            render_template("x{{A}}y{{B}}{{A}}", &vals).unwrap(),
            "x1ytwo1"
        );
        assert_eq!(render_template("plain", &vals).unwrap(), "plain");
        assert!(matches!(
            render_template("{{A}} {{C}}", &vals),
            Err(EnvoyConfigError::Unfilled(n)) if n == "C"
        ));
        assert!(matches!(
            render_template("a\nok {{A", &vals),
            Err(EnvoyConfigError::Unclosed(5))
        ));
        assert_eq!(
            render_template("# about {{NAME}}\nv: {{A}}\n", &vals).unwrap(),
            "# about {{NAME}}\nv: 1\n"
        );
        // A line holding only a placeholder whose value is empty disappears with it.
        let vals = [("A", "1".to_owned()), ("OPT", String::new())];
        assert_eq!(
            render_template("a: {{A}}\n{{OPT}}\nb: {{OPT}}x\n", &vals).unwrap(),
            "a: 1\nb: x\n"
        );
        assert_eq!(
            EnvoyConfigError::Unfilled("C".into()).to_string(),
            "template placeholder {{C}} has no value"
        );
    }
}

#[cfg(test)]
pub(crate) mod render_tests;
