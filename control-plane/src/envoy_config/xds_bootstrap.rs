//! `ferry envoy-config --xds`: the bootstrap (envoy/xds.yaml.tmpl) in which Envoy takes the
//! ferry filter's configuration from the control plane (ECDS over ADS) instead of inlining it.
//! The repo is still read: its routes' body limits must fit Envoy's buffer, and its reader
//! cluster must be the one the bootstrap defines.

#[cfg(test)]
use crate::envoy_config::ReaderProtocol;
use crate::envoy_config::{render_template, Discovery, EnvoyConfigError, StaticOptions, Upstream};
use ferry_repo::Registry;

/// The xDS bootstrap template, embedded at build time.
pub const XDS_TEMPLATE: &str = include_str!("../../../envoy/xds.yaml.tmpl");

/// Where the control plane is and who this Envoy is.
#[derive(Clone, Debug)]
pub struct XdsOptions {
    /// Envoy's node id, shown in the control plane's /status; one per Envoy.
    pub node_id: String,
    /// The control plane's xDS address: an IP (STATIC) or a host name (LOGICAL_DNS).
    pub xds: Upstream,
    /// Seconds to wait for the first snapshot before answering 500 (0 = wait forever).
    pub initial_fetch_timeout_s: u32,
    /// mTLS toward the control plane (`--xds-server-san`), if wanted.
    pub tls: Option<crate::envoy_config::UpstreamTls>,
}

/// The node id of a bootstrap rendered without `--node-id`: `ferry-envoy-HOST-PORT-RANDOM`.
/// Unique per rendering, because the control plane remembers NACKs per node id: Envoys that
/// share one could not be told apart. The random part makes two renderings differ; an Envoy
/// run from a bootstrap file shared by several (replicas) needs Envoy's `--service-node` to
/// tell them apart, which overrides this id.
pub fn default_node_id(listen_port: u16) -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(48)
        .collect();
    // RandomState is seeded from the OS per process; the time and pid part it per call.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    let random = h.finish() & 0xffff_ffff;
    if host.is_empty() {
        format!("ferry-envoy-{listen_port}-{random:08x}")
    } else {
        format!("ferry-envoy-{host}-{listen_port}-{random:08x}")
    }
}

/// Renders the xDS bootstrap. `opts.wasm_path` is unused: the control plane names the .wasm.
pub fn render_xds(
    reg: &Registry,
    opts: &StaticOptions,
    xds: &XdsOptions,
) -> Result<String, EnvoyConfigError> {
    crate::envoy_config::check_repo_fits(reg, opts.buffer_limit_bytes)?;
    let plain = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.:/~".contains(&b))
    };
    if !plain(&xds.node_id) {
        return Err(EnvoyConfigError::Field("node id", xds.node_id.clone()));
    }
    let mut values = opts.common_values()?;
    values.extend([
        ("NODE_ID", xds.node_id.clone()),
        (
            "INITIAL_FETCH_TIMEOUT",
            format!("{}s", xds.initial_fetch_timeout_s),
        ),
        (
            "XDS_CLUSTER_TYPE",
            xds.xds.cluster_type(Discovery::Logical).to_owned(),
        ),
        ("XDS_HOST", xds.xds.yaml_host()),
        ("XDS_PORT", xds.xds.port.to_string()),
        ("FILTER_TYPE_URL", opts.runtime.type_url().to_owned()),
        (
            "XDS_TRANSPORT_SOCKET",
            crate::envoy_config::tls::transport_socket(xds.tls.as_ref(), true)?,
        ),
    ]);
    render_template(XDS_TEMPLATE, &values)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};

    fn opts() -> (StaticOptions, XdsOptions) {
        (
            StaticOptions {
                wasm_path: String::new(),
                ..crate::envoy_config::render_tests::opts()
            },
            XdsOptions {
                node_id: "ferry-envoy-10000".into(),
                xds: Upstream::loopback(18000),
                initial_fetch_timeout_s: 30,
                tls: None,
            },
        )
    }

    #[test]
    fn xds_bootstrap_points_the_filter_at_ads_and_inlines_no_snapshot() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let (s, x) = opts();
        let text = render_xds(&reg.unwrap(), &s, &x).unwrap();
        for l in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            assert!(!l.contains("{{"), "placeholder left: {l}");
        }
        assert!(text.contains("id: \"ferry-envoy-10000\""));
        assert!(text.contains("config_discovery:"));
        assert!(text.contains("initial_fetch_timeout: 30s"));
        assert!(text.contains("port_value: 18000"));
        assert!(!text.contains("BytesValue"), "no inlined snapshot");
    }

    #[test]
    fn the_xds_bootstrap_normalises_paths() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let (s, x) = opts();
        crate::envoy_config::render_tests::assert_path_hardening(
            &render_xds(&reg.unwrap(), &s, &x).unwrap(),
        );
    }

    #[test]
    fn the_reader_cluster_speaks_the_chosen_protocol() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let reg = reg.unwrap();
        let (mut s, x) = opts();
        for (protocol, line) in [
            (ReaderProtocol::Http1, "http_protocol_options: {}"),
            (ReaderProtocol::Http2, "http2_protocol_options: {}"),
        ] {
            s.reader_protocol = protocol;
            let text = render_xds(&reg, &s, &x).unwrap();
            assert_eq!(
                crate::envoy_config::render_tests::cluster_protocol(&text, "ferry_reader"),
                line
            );
            // The xDS cluster stays HTTP/2 whatever the reader speaks (gRPC needs it).
            assert!(
                crate::envoy_config::render_tests::cluster_protocol(&text, "ferry_xds")
                    .starts_with("http2_protocol_options:")
            );
        }
    }

    #[test]
    fn default_node_ids_differ_per_rendering_and_are_accepted() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let (s, mut x) = opts();
        let a = default_node_id(10000);
        let b = default_node_id(10000);
        assert_ne!(a, b, "two Envoys rendered by the same command");
        assert!(
            a.starts_with("ferry-envoy-") && a.contains("-10000-"),
            "{a}"
        );
        x.node_id = a.clone();
        let text = render_xds(&reg.unwrap(), &s, &x).unwrap();
        assert!(text.contains(&format!("id: \"{a}\"")));
    }

    #[test]
    fn a_control_plane_host_name_renders_a_logical_dns_cluster() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let (s, mut x) = opts();
        x.xds = "ferry-control-plane.ml.svc:18000".parse().unwrap();
        let text = render_xds(&reg.unwrap(), &s, &x).unwrap();
        let lines = crate::envoy_config::render_tests::cluster_lines(&text, "ferry_xds");
        assert!(lines.contains(&"type: LOGICAL_DNS"), "{lines:?}");
        assert!(lines
            .contains(&"socket_address: {address: ferry-control-plane.ml.svc, port_value: 18000}"));
    }

    #[test]
    fn odd_node_ids_are_refused() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let (s, mut x) = opts();
        x.node_id = "a\"b".into();
        assert!(render_xds(&reg.unwrap(), &s, &x).is_err());
    }
}
