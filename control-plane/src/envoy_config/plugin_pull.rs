//! The filter's JSON configuration that has it pull its snapshot from `ferry serve`'s
//! `GET /v1/snapshot` (Istio's WasmPlugin, Envoy Gateway's EnvoyExtensionPolicy), with the
//! public keys the snapshots must verify under. Checked with the filter's own parser, so a
//! configuration it would refuse (plain http, no keys, without `insecure`) is refused here.

/// Everything of a pull configuration but the URL and cluster.
#[derive(Clone, Debug, Default)]
pub struct PullOptions {
    /// How often the filter checks for a new version (the filter's default when None).
    pub poll_ms: Option<u64>,
    /// `ferry serve`'s read token, sent as a bearer.
    pub token: Option<String>,
    /// `snapshot_keys` entries (`{"id", "ed25519"}`, `serve::signing::public_key`).
    pub keys: Vec<serde_json::Value>,
    /// Allow `http://` and unsigned snapshots.
    pub insecure: bool,
    /// Istio's name of the reader cluster, instead of the snapshot's.
    pub reader_cluster: Option<String>,
}

/// The JSON configuration pulling from `url` through the Envoy cluster `cluster` (Istio:
/// `outbound|8091||HOST`).
pub fn plugin_config_pull_json(
    url: &str,
    cluster: &str,
    opts: &PullOptions,
) -> Result<String, ferry_core::config::ConfigError> {
    let mut config = serde_json::json!({ "snapshot_url": url, "snapshot_cluster": cluster });
    if let Some(ms) = opts.poll_ms {
        config["snapshot_poll_ms"] = ms.into();
    }
    if let Some(token) = &opts.token {
        config["snapshot_token"] = token.as_str().into();
    }
    if !opts.keys.is_empty() {
        config["snapshot_keys"] = opts.keys.clone().into();
    }
    if opts.insecure {
        config["insecure"] = true.into();
    }
    if let Some(cluster) = &opts.reader_cluster {
        config["reader_cluster"] = cluster.as_str().into();
    }
    let text = config.to_string();
    ferry_core::plugin_config::parse_plugin(text.as_bytes())?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_core::plugin_config::{parse_plugin, Plugin};

    #[test]
    fn the_pull_plugin_config_is_what_the_filter_accepts_and_bad_values_are_refused() {
        let url = "https://ferry-control-plane.ferry.svc.cluster.local:8091/v1/snapshot";
        let cp = "outbound|8091||ferry-control-plane.ferry.svc.cluster.local";
        let key =
            crate::serve::signing::public_key("k1=Gb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=")
                .unwrap();
        let opts = PullOptions {
            poll_ms: Some(250),
            token: Some("t".into()),
            keys: vec![key],
            insecure: false,
            reader_cluster: Some("r".into()),
        };
        let text = plugin_config_pull_json(url, cp, &opts).unwrap();
        let Ok(Plugin::Pull(p)) = parse_plugin(text.as_bytes()) else {
            panic!("{text}")
        };
        assert_eq!((p.url.as_str(), p.cluster.as_str()), (url, cp));
        assert_eq!(p.poll.as_millis(), 250);
        assert_eq!(p.overrides.reader_cluster.as_deref(), Some("r"));
        assert_eq!(p.keys.map(|k| k.ids()).as_deref(), Some("k1"));
        assert!(!p.insecure);

        let err = plugin_config_pull_json("ftp://x", cp, &opts).unwrap_err();
        assert!(
            err.to_string().contains("not an http:// or https:// URL"),
            "{err}"
        );
        let short = PullOptions {
            poll_ms: Some(1),
            ..opts.clone()
        };
        let err = plugin_config_pull_json(url, cp, &short).unwrap_err();
        assert!(err.to_string().contains("snapshot_poll_ms"), "{err}");
        let plain = "http://cp:8091/v1/snapshot";
        let err = plugin_config_pull_json(plain, cp, &opts).unwrap_err();
        assert!(err.to_string().contains("plain http"), "{err}");
        let unsigned = PullOptions::default();
        let err = plugin_config_pull_json(url, cp, &unsigned).unwrap_err();
        assert!(err.to_string().contains("needs 'snapshot_keys'"), "{err}");
        let insecure = PullOptions {
            insecure: true,
            ..PullOptions::default()
        };
        let text = plugin_config_pull_json(plain, cp, &insecure).unwrap();
        assert!(text.contains("\"insecure\":true"), "{text}");
    }
}
