//! Envoy's side of the control links' mTLS: an `UpstreamTlsContext` (`transport_socket`) on the
//! xDS cluster and on the reader cluster, with Envoy's client certificate and key, the CA it
//! validates the server with, and the SAN the server's certificate must carry. File
//! certificates: Envoy reads them when it loads the cluster (at start), not again on change.

use super::EnvoyConfigError;

/// Envoy's client certificate and the CA of the servers it calls (paths as Envoy sees them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTls {
    pub cert: String,
    pub key: String,
    pub ca: String,
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

/// The cluster's `transport_socket` block (4-space indent, a cluster's fields), or an empty
/// string without TLS. `h2`: offer ALPN h2 (gRPC, an HTTP/2 reader cluster).
pub fn transport_socket(tls: Option<&UpstreamTls>, h2: bool) -> Result<String, EnvoyConfigError> {
    let Some(tls) = tls else {
        return Ok(String::new());
    };
    let san = plain("server SAN", &tls.server_san)?;
    let (cert, key, ca) = (
        plain("certificate path", &tls.client.cert)?,
        plain("key path", &tls.client.key)?,
        plain("CA path", &tls.client.ca)?,
    );
    let san_type = if san.contains("://") { "URI" } else { "DNS" };
    // SNI is a host name: a URI SAN sends none.
    let sni = match san_type {
        "DNS" => format!("\n        sni: \"{san}\""),
        _ => String::new(),
    };
    let alpn = ["", "\n          alpn_protocols: [\"h2\"]"][usize::from(h2)];
    Ok(format!(
        "    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext{sni}
        common_tls_context:{alpn}
          tls_certificates:
          - certificate_chain: {{filename: \"{cert}\"}}
            private_key: {{filename: \"{key}\"}}
          validation_context:
            trusted_ca: {{filename: \"{ca}\"}}
            match_typed_subject_alt_names:
            - san_type: {san_type}
              matcher: {{exact: \"{san}\"}}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tls(san: &str) -> UpstreamTls {
        UpstreamTls {
            client: ClientTls {
                cert: "/certs/tls.crt".into(),
                key: "/certs/tls.key".into(),
                ca: "/certs/ca.crt".into(),
            },
            server_san: san.into(),
        }
    }

    #[test]
    fn the_block_names_the_files_and_the_expected_server_name() {
        assert_eq!(transport_socket(None, true).unwrap(), "");
        let dns = transport_socket(Some(&tls("ferry-control-plane.ml.svc")), true).unwrap();
        assert!(dns.contains("sni: \"ferry-control-plane.ml.svc\""), "{dns}");
        assert!(dns.contains("san_type: DNS") && dns.contains("alpn_protocols: [\"h2\"]"));
        assert!(dns.contains("certificate_chain: {filename: \"/certs/tls.crt\"}"));
        assert!(dns.contains("trusted_ca: {filename: \"/certs/ca.crt\"}"));
        let uri =
            transport_socket(Some(&tls("spiffe://cluster.local/ns/ml/sa/reader")), false).unwrap();
        assert!(uri.contains("san_type: URI") && !uri.contains("sni:") && !uri.contains("alpn"));
        let mut odd = tls("x");
        odd.client.key = "/a\"b".into();
        assert!(transport_socket(Some(&odd), false).is_err());
    }
}
