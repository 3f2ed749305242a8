//! Which client certificates may send served-feature logs (`--allow-identity`). mTLS alone
//! admits every certificate of the client CA, and in a mesh that is every workload; the sink
//! then also asks that one of the certificate's names (URI SANs such as SPIFFE ids, DNS SANs)
//! match an allowed pattern, with the pattern rule `--grant` and `--node-identity` use (`*`: any
//! run of characters but `/`). A connection whose certificate matches none is closed right
//! after its handshake, before it can open a stream, and counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ferry_http_serve::Peer;

use super::metrics::SinkMetrics;
use ferry_xds::identity::glob;

/// The allowed identity patterns; none: every client the TLS setup admits.
#[derive(Clone, Debug, Default)]
pub struct Allowed {
    patterns: Arc<Vec<String>>,
    /// Connections refused so far, so the log says so on the first and then ever more rarely.
    refused: Arc<AtomicU64>,
}

impl Allowed {
    pub fn new(patterns: Vec<String>) -> Allowed {
        Allowed {
            patterns: Arc::new(patterns),
            refused: Arc::default(),
        }
    }

    /// Whether a client with these certificate names may send logs. With patterns, a client
    /// without a verified certificate never may.
    pub fn admits(&self, identity: Option<&ferry_http_serve::PeerIdentity>) -> bool {
        if self.patterns.is_empty() {
            return true;
        }
        identity.is_some_and(|id| {
            id.names()
                .any(|name| self.patterns.iter().any(|p| glob(p, name)))
        })
    }

    /// [`Allowed::admits`] for a connection, counting and logging a refusal (the 1st, 2nd, 4th,
    /// 8th, ...: a flood of refused clients cannot flood the log).
    pub fn admit(&self, peer: &Peer, metrics: &SinkMetrics) -> bool {
        if self.admits(peer.identity.as_deref()) {
            return true;
        }
        metrics.identity_refused.inc();
        let n = self.refused.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            let names: Vec<&str> = peer.identity.iter().flat_map(|i| i.names()).collect();
            tracing::warn!(
                peer = %peer.addr,
                ?names,
                refused_so_far = n,
                "an access-log client whose certificate matches no --allow-identity: closed"
            );
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_http_serve::PeerIdentity;

    #[test]
    fn a_certificate_is_admitted_by_any_of_its_names_matching_a_pattern() {
        let envoy = PeerIdentity::new(
            &["spiffe://cluster.local/ns/ml/sa/envoy"],
            &["envoy.ml.svc"],
        );
        let web = PeerIdentity::new(&["spiffe://cluster.local/ns/ml/sa/web"], &[]);
        let by_uri = Allowed::new(vec!["spiffe://cluster.local/ns/*/sa/envoy".into()]);
        assert!(by_uri.admits(Some(&envoy)));
        assert!(!by_uri.admits(Some(&web)), "right CA, wrong SAN");
        assert!(!by_uri.admits(None), "no certificate");
        let by_dns = Allowed::new(vec!["*.ml.svc".into()]);
        assert!(by_dns.admits(Some(&envoy)) && !by_dns.admits(Some(&web)));
        // `*` stops at `/`, as in --grant and --node-identity.
        let across = PeerIdentity::new(&["spiffe://cluster.local/ns/x/sa/y/ns/ml/sa/envoy"], &[]);
        assert!(!by_uri.admits(Some(&across)));
    }

    #[test]
    fn without_patterns_every_client_of_the_tls_setup_is_admitted() {
        let open = Allowed::default();
        assert!(open.admits(None) && open.admits(Some(&PeerIdentity::new(&["spiffe://x/y"], &[]))));
    }

    #[test]
    fn a_refusal_is_counted() {
        let metrics = SinkMetrics::new();
        let allowed = Allowed::new(vec!["spiffe://cluster.local/ns/ml/sa/envoy".into()]);
        let peer = |identity: Option<PeerIdentity>| Peer {
            addr: ([127, 0, 0, 1], 1).into(),
            tls: true,
            identity: identity.map(Arc::new),
        };
        let web = PeerIdentity::new(&["spiffe://cluster.local/ns/ml/sa/web"], &[]);
        assert!(!allowed.admit(&peer(Some(web)), &metrics));
        assert!(!allowed.admit(&peer(None), &metrics));
        let envoy = PeerIdentity::new(&["spiffe://cluster.local/ns/ml/sa/envoy"], &[]);
        assert!(allowed.admit(&peer(Some(envoy)), &metrics));
        assert_eq!(metrics.identity_refused.get(), 2);
    }
}
