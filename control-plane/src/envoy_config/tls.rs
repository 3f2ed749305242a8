//! Envoy's side of the control links' mTLS: an `UpstreamTlsContext` (`transport_socket`) on the
//! xDS cluster and on the reader cluster, with Envoy's client certificate and key, the CA it
//! validates the server with, and the SAN the server's certificate must carry. The certificate
//! and the CA come through file-based SDS: each is a `Secret` in a small SDS file of its own
//! ([`sds_files`]), whose `path_config_source` and the secret itself watch the directory that
//! holds the PEM files, so a replaced file, or a Kubernetes secret volume's `..data` symlink
//! swap, reloads them without a restart (new connections use them; open ones keep theirs).

use super::EnvoyConfigError;

/// The SDS secret holding Envoy's client certificate and key.
pub const CLIENT_SECRET: &str = "ferry_client_certificate";
/// The SDS secret holding the CA bundle of the servers' certificates.
pub const CA_SECRET: &str = "ferry_server_ca";

/// Envoy's client certificate and the CA of the servers it calls (paths as Envoy sees them),
/// and the folder of the SDS files that name them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTls {
    pub cert: String,
    pub key: String,
    pub ca: String,
    /// Where the SDS files are (absolute, as Envoy opens them); `ferry envoy-config` writes
    /// them there.
    pub sds_dir: String,
}

/// TLS toward one upstream: whose certificate to expect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamTls {
    pub client: ClientTls,
    /// The server certificate's SAN: a `spiffe://` (or other) URI, else a DNS name; also the SNI.
    pub server_san: String,
}

/// A value that may go inside a double-quoted YAML string as is.
fn plain(what: &'static str, value: &str) -> Result<String, EnvoyConfigError> {
    if value.is_empty()
        || value
            .chars()
            .any(|c| c == '"' || c == '\\' || c.is_control())
    {
        return Err(EnvoyConfigError::Field(what, value.to_owned()));
    }
    Ok(value.to_owned())
}

/// The folder of a file path (`/` for a file at the root).
fn parent(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((dir, _)) => dir,
    }
}

/// The SDS file of a secret, in `sds_dir`.
fn sds_path(sds_dir: &str, secret: &str) -> String {
    format!("{}/{}.sds.yaml", sds_dir.trim_end_matches('/'), secret)
}

/// An `sds_config` reading `secret`'s SDS file, reloaded on a move in `watched` (a Kubernetes
/// secret volume swaps its `..data` symlink, never the files' own names).
fn sds_config(indent: &str, c: &ClientTls, secret: &str, watched: &str) -> String {
    let path = sds_path(&c.sds_dir, secret);
    let lines = [
        format!("name: {secret}"),
        "sds_config:".to_owned(),
        "  resource_api_version: V3".to_owned(),
        "  path_config_source:".to_owned(),
        format!("    path: \"{path}\""),
        format!("    watched_directory: {{path: \"{watched}\"}}"),
    ];
    lines
        .iter()
        .map(|l| format!("{indent}{l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The cluster's `transport_socket` block (4-space indent, a cluster's fields), or an empty
/// string without TLS. `h2`: offer ALPN h2 (gRPC, an HTTP/2 reader cluster).
pub fn transport_socket(tls: Option<&UpstreamTls>, h2: bool) -> Result<String, EnvoyConfigError> {
    let Some(tls) = tls else {
        return Ok(String::new());
    };
    let san = plain("server SAN", &tls.server_san)?;
    let c = checked(&tls.client)?;
    let san_type = if san.contains("://") { "URI" } else { "DNS" };
    // SNI is a host name: a URI SAN sends none.
    let sni = match san_type {
        "DNS" => format!("\n        sni: \"{san}\""),
        _ => String::new(),
    };
    let alpn = ["", "\n          alpn_protocols: [\"h2\"]"][usize::from(h2)];
    let cert = sds_config("            ", &c, CLIENT_SECRET, parent(&c.cert));
    let ca = sds_config("              ", &c, CA_SECRET, parent(&c.ca));
    Ok(format!(
        "    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext{sni}
        common_tls_context:{alpn}
          tls_certificate_sds_secret_configs:
          - {cert}
          combined_validation_context:
            default_validation_context:
              match_typed_subject_alt_names:
              - san_type: {san_type}
                matcher: {{exact: \"{san}\"}}
            validation_context_sds_secret_config:
{ca}",
        cert = cert.trim_start()
    ))
}

/// Every path of `c`, checked for what a YAML string may hold.
fn checked(c: &ClientTls) -> Result<ClientTls, EnvoyConfigError> {
    Ok(ClientTls {
        cert: plain("certificate path", &c.cert)?,
        key: plain("key path", &c.key)?,
        ca: plain("CA path", &c.ca)?,
        sds_dir: plain("SDS folder", &c.sds_dir)?,
    })
}

/// The SDS files the `transport_socket` blocks name: (path, content), one per secret. The
/// secrets watch their files' folder too (the key's only when it shares the certificate's:
/// Envoy reads both on one event, and checks they were not changed in between).
pub fn sds_files(client: &ClientTls) -> Result<Vec<(String, String)>, EnvoyConfigError> {
    let c = checked(client)?;
    let head = "resources:\n- \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret\n";
    let watched = |files: &[&str]| {
        let dir = parent(files[0]);
        match files.iter().all(|f| parent(f) == dir) {
            true => format!("    watched_directory: {{path: \"{dir}\"}}\n"),
            false => String::new(),
        }
    };
    let cert = [
        format!("  name: {CLIENT_SECRET}\n"),
        "  tls_certificate:\n".to_owned(),
        format!("    certificate_chain: {{filename: \"{}\"}}\n", c.cert),
        format!("    private_key: {{filename: \"{}\"}}\n", c.key),
        watched(&[&c.cert, &c.key]),
    ];
    let ca = [
        format!("  name: {CA_SECRET}\n"),
        "  validation_context:\n".to_owned(),
        format!("    trusted_ca: {{filename: \"{}\"}}\n", c.ca),
        watched(&[&c.ca]),
    ];
    Ok(vec![
        (
            sds_path(&c.sds_dir, CLIENT_SECRET),
            format!("{head}{}", cert.concat()),
        ),
        (
            sds_path(&c.sds_dir, CA_SECRET),
            format!("{head}{}", ca.concat()),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(san: &str) -> UpstreamTls {
        UpstreamTls {
            client: ClientTls {
                cert: "/certs/tls.crt".into(),
                key: "/certs/tls.key".into(),
                ca: "/ca/ca.crt".into(),
                sds_dir: "/etc/envoy/sds/".into(),
            },
            server_san: san.into(),
        }
    }

    #[test]
    fn the_block_names_the_sds_files_and_the_expected_server_name() {
        assert_eq!(transport_socket(None, true).unwrap(), "");
        let dns = transport_socket(Some(&tls("ferry-control-plane.ml.svc")), true).unwrap();
        assert!(dns.contains("sni: \"ferry-control-plane.ml.svc\""), "{dns}");
        assert!(dns.contains("san_type: DNS") && dns.contains("alpn_protocols: [\"h2\"]"));
        assert!(dns.contains(
            "          tls_certificate_sds_secret_configs:\n          - name: ferry_client_certificate\n            sds_config:"
        ), "{dns}");
        assert!(dns.contains("path: \"/etc/envoy/sds/ferry_client_certificate.sds.yaml\""));
        assert!(dns.contains("path: \"/etc/envoy/sds/ferry_server_ca.sds.yaml\""));
        assert!(
            dns.contains("watched_directory: {path: \"/certs\"}"),
            "{dns}"
        );
        assert!(dns.contains("watched_directory: {path: \"/ca\"}"), "{dns}");
        // No file certificates inline: those Envoy would never read again.
        assert!(!dns.contains("filename"), "{dns}");
        let uri =
            transport_socket(Some(&tls("spiffe://cluster.local/ns/ml/sa/reader")), false).unwrap();
        assert!(uri.contains("san_type: URI") && !uri.contains("sni:") && !uri.contains("alpn"));
        let mut odd = tls("x");
        odd.client.key = "/a\"b".into();
        assert!(transport_socket(Some(&odd), false).is_err());
        assert!(sds_files(&odd.client).is_err());
    }

    #[test]
    fn each_secret_is_a_file_naming_the_pem_files_and_watching_their_folder() {
        let mut c = tls("x").client;
        let files = sds_files(&c).unwrap();
        assert_eq!(
            files[0].0,
            "/etc/envoy/sds/ferry_client_certificate.sds.yaml"
        );
        let cert = &files[0].1;
        assert!(cert.contains("name: ferry_client_certificate"), "{cert}");
        assert!(cert.contains("certificate_chain: {filename: \"/certs/tls.crt\"}"));
        assert!(cert.contains("private_key: {filename: \"/certs/tls.key\"}"));
        assert!(cert.contains("watched_directory: {path: \"/certs\"}"));
        let ca = &files[1].1;
        assert!(ca.contains("name: ferry_server_ca") && ca.contains("validation_context:"));
        assert!(ca.contains("trusted_ca: {filename: \"/ca/ca.crt\"}"));
        assert!(ca.contains("watched_directory: {path: \"/ca\"}"));
        // A key in another folder: Envoy watches each file's own folder instead.
        c.key = "/keys/tls.key".into();
        assert!(!sds_files(&c).unwrap()[0].1.contains("watched_directory"));
        assert_eq!(parent("/tls.crt"), "/");
    }
}
