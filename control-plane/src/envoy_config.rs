//! `ferry envoy-config`: the static Envoy bootstrap (envoy/static.yaml.tmpl) with the snapshot
//! inlined as the Wasm plugin configuration. Every `{{NAME}}` placeholder must be filled: a
//! template that grows a new placeholder fails here, not in Envoy.

use std::path::Path;

use base64::Engine as _;

use crate::repo::Registry;
use crate::snapshot;

/// The bootstrap template, embedded at build time.
pub const STATIC_TEMPLATE: &str = include_str!("../../envoy/static.yaml.tmpl");

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
    #[error("wasm path {0:?} cannot be written into the config (quotes, backslashes or control characters)")]
    WasmPath(String),
    #[error("{0} {1:?} may only hold letters, digits and - _ . :")]
    Field(&'static str, String),
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

/// The ports and paths of a static deployment.
#[derive(Clone, Debug)]
pub struct StaticOptions {
    /// Path of the filter's .wasm, as Envoy will open it (made absolute by the caller).
    pub wasm_path: String,
    pub listen_port: u16,
    pub admin_port: u16,
    pub reader_port: u16,
    pub model_port: u16,
    pub buffer_limit_bytes: u64,
    /// The reader cluster's protocol.
    pub reader_protocol: ReaderProtocol,
}

/// Fills `{{NAME}}` placeholders; an unknown or unclosed placeholder is an error. YAML comment
/// lines are documentation (the template's header mentions `{{NAME}}`) and are copied as is.
pub fn render_template(
    template: &str,
    values: &[(&str, String)],
) -> Result<String, EnvoyConfigError> {
    let mut out = String::with_capacity(template.len() + 1024);
    let mut offset = 0;
    for line in template.split_inclusive('\n') {
        if line.trim_start().starts_with('#') {
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
    // The path sits inside a YAML double-quoted string.
    if opts
        .wasm_path
        .chars()
        .any(|c| c == '"' || c == '\\' || c.is_control())
    {
        return Err(EnvoyConfigError::WasmPath(opts.wasm_path.clone()));
    }
    let snap = snapshot::build(reg);
    let b64 = base64::engine::general_purpose::STANDARD.encode(snapshot::encode(&snap));
    render_template(
        STATIC_TEMPLATE,
        &[
            ("ADMIN_PORT", opts.admin_port.to_string()),
            ("LISTEN_PORT", opts.listen_port.to_string()),
            ("BUFFER_LIMIT_BYTES", opts.buffer_limit_bytes.to_string()),
            ("WASM_PATH", opts.wasm_path.clone()),
            ("SNAPSHOT_BASE64", b64),
            ("READER_PORT", opts.reader_port.to_string()),
            (
                "READER_HTTP_OPTIONS",
                opts.reader_protocol.envoy_field().to_owned(),
            ),
            ("MODEL_PORT", opts.model_port.to_string()),
        ],
    )
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
        assert_eq!(
            EnvoyConfigError::Unfilled("C".into()).to_string(),
            "template placeholder {{C}} has no value"
        );
    }
}

#[cfg(test)]
pub(crate) mod render_tests {
    use super::*;
    use crate::test_support::{load_repo, ORDER_FILES, ORDER_YAML};
    use ferry_protos::v1::Snapshot;
    use prost::Message as _;

    fn opts() -> StaticOptions {
        StaticOptions {
            wasm_path: "/opt/ferry/ferry_filter.wasm".into(),
            listen_port: 10000,
            admin_port: 9901,
            reader_port: 8090,
            model_port: 8080,
            buffer_limit_bytes: 8 << 20,
            reader_protocol: ReaderProtocol::default(),
        }
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
            "expression: \"!('x-ferry-error' in response.headers)\"",
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

    /// The `explicit_http_config` of one cluster of a rendered bootstrap: the line after it.
    pub(crate) fn cluster_protocol(text: &str, cluster: &str) -> String {
        let start = text
            .find(&format!("  - name: {cluster}\n"))
            .unwrap_or_else(|| panic!("no cluster {cluster}"));
        let rest = &text[start..];
        let end = rest[4..].find("\n  - name: ").map_or(rest.len(), |e| e + 4);
        let mut lines = rest[..end].lines();
        lines.find(|l| l.trim() == "explicit_http_config:");
        lines.next().unwrap_or_default().trim().to_owned()
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
}
