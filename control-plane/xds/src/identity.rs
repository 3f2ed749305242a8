//! Which node ids a verified client identity may use. Over mTLS each stream has the names of
//! its client certificate (URI SANs such as SPIFFE ids, DNS SANs); a node id it may not use
//! ends the stream with `PERMISSION_DENIED`, so one Envoy cannot act (ACK, NACK, hold streams)
//! under another's node id. Without a client certificate (plaintext on loopback, or TLS
//! without a client CA) node ids are trusted as sent.
//!
//! A node id is allowed when it equals one of the certificate's names, or is such a name
//! followed by `~` and anything (`spiffe://cluster.local/ns/ml/sa/envoy~pod-7f9c`: replicas
//! sharing a service account keep node ids of their own), or when a configured rule
//! (`--node-identity IDENTITY=NODE`, `*` matching any run of characters but `/`) matches one
//! of the names and the node id.

use std::fmt;
use std::str::FromStr;

use ferry_http_serve::PeerIdentity;

/// One `--node-identity IDENTITY=NODE` rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRule {
    identity: String,
    node: String,
}

impl FromStr for NodeRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.rsplit_once('=') {
            Some((identity, node)) if !identity.is_empty() && !node.is_empty() => Ok(NodeRule {
                identity: identity.to_owned(),
                node: node.to_owned(),
            }),
            _ => Err(format!(
                "'{s}' is not IDENTITY=NODE_ID (patterns, '*' matching anything but '/'), e.g. \
                 'spiffe://cluster.local/ns/ml/sa/envoy=envoy-*'"
            )),
        }
    }
}

impl fmt::Display for NodeRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.identity, self.node)
    }
}

/// The node ids each identity may use.
#[derive(Clone, Debug, Default)]
pub struct NodePolicy {
    rules: Vec<NodeRule>,
}

impl NodePolicy {
    pub fn new(rules: Vec<NodeRule>) -> NodePolicy {
        NodePolicy { rules }
    }

    /// Whether a stream whose client certificate names `identity` may use `node_id`.
    pub fn allows(&self, identity: Option<&PeerIdentity>, node_id: &str) -> bool {
        let Some(identity) = identity else {
            return true;
        };
        identity.names().any(|name| {
            node_id == name
                || node_id
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('~'))
                || self
                    .rules
                    .iter()
                    .any(|r| glob(&r.identity, name) && glob(&r.node, node_id))
        })
    }
}

/// `pattern` matches `text`, `*` standing for any run of characters other than `/` (none
/// included). `*` stops at `/` so that `spiffe://cluster.local/ns/*/sa/envoy` names one service
/// account per namespace and not `spiffe://cluster.local/ns/x/sa/y/ns/a/sa/envoy` (#35), as
/// path globs and SPIFFE id patterns elsewhere read.
pub fn glob(pattern: &str, text: &str) -> bool {
    // A `*` never matches `/` and a `/` only matches itself, so the pattern's `/`-separated
    // segments match the text's one to one.
    let (mut patterns, mut texts) = (pattern.split('/'), text.split('/'));
    loop {
        match (patterns.next(), texts.next()) {
            (Some(p), Some(t)) if segment(p, t) => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// One segment (no `/`): `*` standing for any run of characters.
fn segment(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_runs_of_anything() {
        assert!(glob("a*", "a") && glob("a*", "abc") && glob("*c", "abc") && glob("a*c", "abc"));
        assert!(glob("a", "a") && !glob("a", "ab") && !glob("a*c", "acb"));
        assert!(glob(
            "spiffe://cluster.local/ns/*/sa/envoy",
            "spiffe://cluster.local/ns/ml/sa/envoy"
        ));
        assert!(glob("*", "") && glob("a**b", "ab") && !glob("a*b*c", "abd"));
        assert!(glob("a*b*c", "axbyc") && glob("*.envoy.ml.svc", "a.envoy.ml.svc"));
    }

    #[test]
    fn a_star_stops_at_a_slash() {
        let ns = "spiffe://cluster.local/ns/*/sa/envoy";
        assert!(glob(ns, "spiffe://cluster.local/ns/ml/sa/envoy"));
        assert!(!glob(ns, "spiffe://cluster.local/ns/x/sa/y/ns/ml/sa/envoy"));
        assert!(!glob(ns, "spiffe://cluster.local/ns/a/b/sa/envoy"));
        assert!(!glob("envoy-*", "envoy-a/b") && glob("envoy-*", "envoy-a~b"));
        assert!(!glob("*", "a/b") && glob("*/*", "a/b") && !glob("spiffe://*", "spiffe://x/y"));
        assert!(glob("a*ab/c", "aaab/c") && !glob("a*b", "a/b") && glob("a/*/c", "a//c"));
    }

    #[test]
    fn by_default_a_node_id_is_one_of_the_names_or_a_name_and_a_tilde_suffix() {
        let spiffe = "spiffe://cluster.local/ns/ml/sa/envoy";
        let envoy = PeerIdentity::new(&[spiffe], &["envoy.ml.svc"]);
        let p = NodePolicy::default();
        assert!(p.allows(Some(&envoy), spiffe));
        assert!(p.allows(Some(&envoy), "envoy.ml.svc"));
        assert!(p.allows(Some(&envoy), &format!("{spiffe}~pod-7f9c")));
        assert!(!p.allows(Some(&envoy), &format!("{spiffe}x")));
        assert!(!p.allows(Some(&envoy), "envoy-b"));
        assert!(p.allows(None, "envoy-b"), "no certificate: trusted as sent");
    }

    #[test]
    fn rules_map_identity_patterns_to_node_id_patterns() {
        let rule: NodeRule = "spiffe://cluster.local/ns/*/sa/envoy=envoy-*"
            .parse()
            .unwrap();
        assert_eq!(
            rule.to_string(),
            "spiffe://cluster.local/ns/*/sa/envoy=envoy-*"
        );
        let p = NodePolicy::new(vec![rule]);
        let envoy = PeerIdentity::new(&["spiffe://cluster.local/ns/ml/sa/envoy"], &[]);
        let other = PeerIdentity::new(&["spiffe://cluster.local/ns/ml/sa/ci"], &[]);
        assert!(p.allows(Some(&envoy), "envoy-a"));
        assert!(!p.allows(Some(&envoy), "other-a"));
        assert!(!p.allows(Some(&other), "envoy-a"));
        // `*` in a node-id rule stops at `/` too: a node id with a slash is not `envoy-*`.
        assert!(!p.allows(Some(&envoy), "envoy-a/other"));
        assert!("no-equals".parse::<NodeRule>().is_err());
        assert!("=x".parse::<NodeRule>().is_err());
    }
}
