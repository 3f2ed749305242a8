//! Where a cluster's hosts are: `HOST:PORT` as the operator writes it (`--reader-address`,
//! `--model-address`, `--xds-address`, `--redis-upstream`). An IP literal renders a STATIC
//! cluster; a host name (a Kubernetes or compose service) makes Envoy resolve it, with the DNS
//! discovery type the cluster's role calls for ([`Discovery`]).

use std::net::IpAddr;
use std::str::FromStr;

/// One `HOST:PORT`, checked: an IPv4 literal, a bracketed IPv6 literal or an RFC 1123 host name,
/// and a port from 1 to 65535. Anything else is refused before it reaches a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    pub host: Host,
    pub port: u16,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Host {
    Ip(IpAddr),
    Name(String),
}

/// How Envoy turns a host name into endpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discovery {
    /// Every address the name resolves to is an endpoint, health-checked and ejected on its
    /// own: a Kubernetes headless service (one A record per pod) or a scaled compose service.
    Strict,
    /// One connection target, the first address of the latest answer: a name that already
    /// load-balances (a Kubernetes ClusterIP service, a cloud load balancer). STRICT_DNS on such
    /// a name would give one endpoint for the whole service anyway, and would churn the pool
    /// whenever round-robin DNS reorders its answer.
    Logical,
}

impl Upstream {
    /// `127.0.0.1:port`, what the `--*-port` options mean.
    pub fn loopback(port: u16) -> Upstream {
        Upstream {
            host: Host::Ip(IpAddr::from([127, 0, 0, 1])),
            port,
        }
    }

    /// The Envoy cluster `type` for this address.
    pub fn cluster_type(&self, discovery: Discovery) -> &'static str {
        match (&self.host, discovery) {
            (Host::Ip(_), _) => "STATIC",
            (Host::Name(_), Discovery::Strict) => "STRICT_DNS",
            (Host::Name(_), Discovery::Logical) => "LOGICAL_DNS",
        }
    }

    pub fn is_name(&self) -> bool {
        matches!(self.host, Host::Name(_))
    }

    /// The host as the value of a YAML flow mapping's `address:` (IPv6 quoted: it has colons).
    pub fn yaml_host(&self) -> String {
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => format!("\"{ip}\""),
            Host::Ip(ip) => ip.to_string(),
            Host::Name(name) => name.clone(),
        }
    }

    /// A one-endpoint cluster item of `static_resources.clusters` (LOGICAL_DNS for a name, as
    /// [`Discovery::Logical`] says why), after a `# comment` line; `options` are more lines of
    /// the cluster (indented by four spaces, each ending in a newline) between its connect
    /// timeout and its load assignment.
    pub fn cluster(&self, name: &str, comment: &str, options: &str) -> String {
        format!(
            "  # {comment}\n\
             \x20 - name: {name}\n\
             \x20   type: {}\n\
             \x20   dns_lookup_family: V4_PREFERRED\n\
             \x20   connect_timeout: 1s\n\
             {options}\
             \x20   load_assignment:\n\
             \x20     cluster_name: {name}\n\
             \x20     endpoints:\n\
             \x20     - lb_endpoints:\n{}",
            self.cluster_type(Discovery::Logical),
            self.lb_endpoint(8)
        )
    }

    /// One `- endpoint:` list item of a `load_assignment`, indented by `indent` spaces.
    pub fn lb_endpoint(&self, indent: usize) -> String {
        let pad = " ".repeat(indent);
        format!(
            "{pad}- endpoint:\n{pad}    address:\n{pad}      socket_address: {{address: {}, port_value: {}}}\n",
            self.yaml_host(),
            self.port
        )
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            Host::Ip(ip) => write!(f, "{ip}:{}", self.port),
            Host::Name(name) => write!(f, "{name}:{}", self.port),
        }
    }
}

impl FromStr for Upstream {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let usage =
            || format!("'{s}' is not HOST:PORT (e.g. reader:8090, 10.0.0.5:8090, [::1]:8090)");
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (ip, port) = rest.split_once("]:").ok_or_else(usage)?;
            let ip: std::net::Ipv6Addr = ip
                .parse()
                .map_err(|_| format!("'{ip}' in '{s}' is not an IPv6 address"))?;
            (Host::Ip(IpAddr::V6(ip)), port)
        } else {
            let (host, port) = s.rsplit_once(':').ok_or_else(usage)?;
            if host.contains(':') {
                return Err(format!("{}; write an IPv6 address in brackets", usage()));
            }
            (
                parse_host(host).map_err(|why| format!("'{s}': {why}"))?,
                port,
            )
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(format!(
                    "'{s}': port '{port}' is not a number from 1 to 65535"
                ))
            }
        };
        Ok(Upstream { host, port })
    }
}

/// An IPv4 literal or an RFC 1123 host name: dot-separated labels of 1-63 letters, digits and
/// '-', not starting or ending with '-', 253 characters at most, the last label not all digits
/// (so that a mistyped IP such as 10.0.0.256 is refused rather than looked up in DNS).
fn parse_host(host: &str) -> Result<Host, String> {
    if let Ok(ip) = host.parse::<std::net::Ipv4Addr>() {
        return Ok(Host::Ip(IpAddr::V4(ip)));
    }
    let name = host.strip_suffix('.').unwrap_or(host);
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let last_numeric = name
        .rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()));
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) || last_numeric {
        return Err(format!(
            "'{host}' is neither an IPv4 address nor a host name (letters, digits and '-' in \
             dot-separated labels)"
        ));
    }
    Ok(Host::Name(name.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(s: &str) -> Upstream {
        s.parse().unwrap()
    }

    #[test]
    fn ips_render_static_clusters_and_names_dns_ones() {
        let ip = up("10.0.0.5:8090");
        assert_eq!(ip.host, Host::Ip(IpAddr::from([10, 0, 0, 5])));
        assert_eq!(ip.cluster_type(Discovery::Strict), "STATIC");
        assert_eq!(ip.cluster_type(Discovery::Logical), "STATIC");
        let name = up("ferry-reader.ml.svc.cluster.local:8090");
        assert_eq!(name.cluster_type(Discovery::Strict), "STRICT_DNS");
        assert_eq!(name.cluster_type(Discovery::Logical), "LOGICAL_DNS");
        assert_eq!(name.yaml_host(), "ferry-reader.ml.svc.cluster.local");
        assert_eq!(up("Reader:1").host, Host::Name("reader".into()));
        assert_eq!(up("localhost.:65535").to_string(), "localhost:65535");
        let v6 = up("[::1]:8090");
        assert_eq!(v6.yaml_host(), "\"::1\"");
        assert_eq!(v6.to_string(), "[::1]:8090");
        assert_eq!(Upstream::loopback(8080), up("127.0.0.1:8080"));
        assert_eq!(
            up("reader:8090").lb_endpoint(2),
            "  - endpoint:\n      address:\n        socket_address: {address: reader, port_value: 8090}\n"
        );
    }

    #[test]
    fn garbage_is_refused_with_the_reason() {
        let err = |s: &str| s.parse::<Upstream>().unwrap_err();
        assert_eq!(
            err("reader"),
            "'reader' is not HOST:PORT (e.g. reader:8090, 10.0.0.5:8090, [::1]:8090)"
        );
        assert_eq!(
            err("reader:0"),
            "'reader:0': port '0' is not a number from 1 to 65535"
        );
        assert_eq!(
            err("reader:http"),
            "'reader:http': port 'http' is not a number from 1 to 65535"
        );
        assert_eq!(
            err("10.0.0.256:80"),
            "'10.0.0.256:80': '10.0.0.256' is neither an IPv4 address nor a host name (letters, \
             digits and '-' in dot-separated labels)"
        );
        for bad in [
            ":80", "a_b:80", "-a:80", "a..b:80", "a b:80", "a\"b:80", "a}:80", "::1:80", "[::1]80",
            "[zz]:80", "x:70000",
        ] {
            assert!(bad.parse::<Upstream>().is_err(), "{bad}");
        }
        let long = format!("{}:80", "a".repeat(64));
        assert!(long.parse::<Upstream>().is_err());
    }
}
