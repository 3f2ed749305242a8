//! The filter's plugin configuration, in either of two forms:
//! - the bytes of a `ferry.v1.Snapshot` (what `ferry envoy-config` and `ferry serve` put in
//!   Envoy's `configuration`, a `google.protobuf.BytesValue`);
//! - a JSON object (what Istio's WasmPlugin and Envoy Gateway's EnvoyExtensionPolicy pass, their
//!   `pluginConfig` being a JSON string), carrying the snapshot inline or saying where to pull it:
//!   `{"snapshot_base64": "...", "reader_cluster": "outbound|8090||ferry-reader.ferry.svc.cluster.local",
//!   "allow_on_headers_stop_iteration": false}`, or
//!   `{"snapshot_url": "http://ferry-control-plane.ferry.svc.cluster.local:8091/v1/snapshot",
//!   "snapshot_cluster": "outbound|8091||ferry-control-plane.ferry.svc.cluster.local",
//!   "snapshot_poll_ms": 5000, "reader_cluster": "...",
//!   "snapshot_keys": [{"id": "k1", "ed25519": "BASE64"}]}`.
//!   `reader_cluster` (optional) overrides the snapshot's, since Istio names clusters its own
//!   way; `allow_on_headers_stop_iteration` (default false, as neither Istio nor Envoy Gateway
//!   can set it) tells whether Envoy holds the request headers while the body is read.
//!   A proxy-wasm HTTP call goes to a named cluster, so `snapshot_url` needs `snapshot_cluster`
//!   (the cluster reaching `ferry serve`'s HTTP port); the URL gives the path and authority.
//!   A pull is signed: `snapshot_keys` are the public keys its snapshots must verify under
//!   (several, for rotation; [`crate::signature`]), and the URL is `https://` (the cluster's
//!   TLS is the mesh's: the scheme declares it is set). `"insecure": true` allows `http://`,
//!   and no keys (unsigned snapshots); without it, both are refused. `snapshot_max_bytes` caps
//!   the answer, checked before it is read.

use std::time::Duration;

use base64::Engine;
use serde_json::{Map, Value};

use crate::config::{Config, ConfigError};
use crate::signature::Keys;

/// Keys of the JSON form; any other key is refused (a typo must not pass silently). The seven
/// after the first two are a pull's settings ([`PULL_KEYS`]).
const KEYS: [&str; 11] = [
    "snapshot_base64",
    "snapshot_url",
    "snapshot_cluster",
    "snapshot_token",
    "snapshot_poll_ms",
    "snapshot_timeout_ms",
    "snapshot_keys",
    "snapshot_max_bytes",
    "insecure",
    "reader_cluster",
    "allow_on_headers_stop_iteration",
];

/// The keys that go with `snapshot_url` only: `KEYS[2..9]`.
const PULL_KEYS: &[&str] = KEYS.split_at(2).1.split_at(7).0;

/// How often a pulled snapshot is checked for a new version, unless configured.
pub const DEFAULT_POLL: Duration = Duration::from_secs(5);
/// How long one pull may take, unless configured.
pub const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(5);
/// Bounds of `snapshot_poll_ms` and `snapshot_timeout_ms`: a tighter poll would load the
/// control plane with every Envoy worker's requests, a looser one delays every change.
const MIN_MS: u64 = 100;
const MAX_MS: u64 = 3_600_000;
/// The answer size cap, unless configured: the largest snapshot `ferry serve` accepts, signed.
pub const DEFAULT_MAX_BYTES: usize = ferry_protos::limits::MAX_SIGNED_SNAPSHOT_BYTES;
/// Bounds of `snapshot_max_bytes`.
const MIN_MAX_BYTES: u64 = 1024;
const MAX_MAX_BYTES: u64 = 64 << 20;

/// What the plugin configuration asks the filter to run on.
#[derive(Debug)]
pub enum Plugin {
    /// The snapshot itself (binary, or the JSON form's `snapshot_base64`).
    Snapshot(Config),
    /// The JSON form's `snapshot_url`: pulled by the filter, see `snapshot_pull/`.
    Pull(Pull),
}

/// What the JSON form changes in every snapshot it is given, inline or pulled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overrides {
    /// Istio / Envoy Gateway's name for the reader cluster; None keeps the snapshot's.
    pub reader_cluster: Option<String>,
    /// `allow_on_headers_stop_iteration`.
    pub headers_held: bool,
}

/// Where the filter pulls its snapshot from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pull {
    /// As written, for messages.
    pub url: String,
    /// The Envoy cluster the GET goes to.
    pub cluster: String,
    /// The URL's host (and port): the GET's `:authority`.
    pub authority: String,
    /// The URL's path and query: the GET's `:path`.
    pub path: String,
    pub poll: Duration,
    pub timeout: Duration,
    pub overrides: Overrides,
    /// `snapshot_token`: sent as `authorization: Bearer` when `ferry serve` gates its reads.
    pub token: Option<Token>,
    /// `snapshot_keys`: every answer must be a snapshot signed by one of them. None only with
    /// `insecure`: unsigned answers are taken.
    pub keys: Option<Keys>,
    /// `insecure`: an `http://` URL, or no keys, were allowed.
    pub insecure: bool,
    /// `snapshot_max_bytes`: a larger answer is refused before it is read.
    pub max_bytes: usize,
}

/// A bearer token: never shown by `Debug` (configurations are logged).
#[derive(Clone, PartialEq, Eq)]
pub struct Token(pub String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Decodes and validates the plugin configuration, whichever its form.
pub fn parse_plugin(bytes: &[u8]) -> Result<Plugin, ConfigError> {
    if looks_like_json(bytes) {
        from_json(bytes)
    } else {
        Config::from_bytes(bytes).map(Plugin::Snapshot)
    }
}

/// The snapshot the plugin configuration carries, for readers that do not pull one (the control
/// plane checking what it renders): a `snapshot_url` form is refused by name. The filters
/// (Wasm and native) take either form through [`parse_plugin`].
pub fn parse(bytes: &[u8]) -> Result<Config, ConfigError> {
    match parse_plugin(bytes)? {
        Plugin::Snapshot(c) => Ok(c),
        Plugin::Pull(p) => Err(bad(format!(
            "names 'snapshot_url' {}: the filter pulls that snapshot, the configuration does \
             not carry one",
            p.url
        ))),
    }
}

impl Overrides {
    /// The snapshot in `raw` (protobuf bytes) with these overrides, validated.
    pub fn apply(&self, raw: &[u8]) -> Result<Config, ConfigError> {
        let mut snap = <ferry_protos::v1::Snapshot as prost::Message>::decode(raw)
            .map_err(|e| ConfigError::Undecodable(e.to_string()))?;
        if let Some(cluster) = &self.reader_cluster {
            // The authority stays the snapshot's (the reader's name), unless it was derived
            // from the cluster name, which Istio's cluster names are not fit for.
            if snap.reader_authority.is_empty() {
                snap.reader_authority = snap.reader_cluster.clone();
            }
            snap.reader_cluster = cluster.clone();
        }
        let mut config = Config::from_snapshot(snap)?;
        config.headers_held = self.headers_held;
        Ok(config)
    }
}

fn bad(reason: String) -> ConfigError {
    ConfigError::Invalid {
        part: "JSON plugin configuration".into(),
        reason,
    }
}

/// Whether the bytes are the JSON form: `{` then `"` or `}`, with optional ASCII whitespace
/// before and between. A valid snapshot never reads so: its first tag is field 1 (`project`,
/// byte 0x0A, also a JSON whitespace) with the name's length next, and a length byte that
/// reads as whitespace or `{` (9, 10, 13, 32, 123) is followed by the name's first character,
/// a letter, digit, `_` or `-`, never `"` or `}` (tested below). Any other first tag (any
/// field order) is none of whitespace and `{`.
fn looks_like_json(bytes: &[u8]) -> bool {
    let mut rest = bytes
        .iter()
        .skip_while(|b| b.is_ascii_whitespace())
        .copied();
    if rest.next() != Some(b'{') {
        return false;
    }
    matches!(
        rest.find(|b| !b.is_ascii_whitespace()),
        Some(b'"') | Some(b'}')
    )
}

fn from_json(bytes: &[u8]) -> Result<Plugin, ConfigError> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(bad("expected a JSON object".into()));
    };
    if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(bad(format!(
            "unknown key '{k}' (known: {})",
            KEYS.join(", ")
        )));
    }
    let overrides = overrides(&obj)?;
    let inline = string(&obj, "snapshot_base64")?;
    let url = string(&obj, "snapshot_url")?;
    match (inline, url) {
        (Some(snapshot), None) => {
            if let Some(k) = PULL_KEYS.iter().find(|k| obj.contains_key(**k)) {
                return Err(bad(format!("'{k}' goes with 'snapshot_url' only")));
            }
            let raw = base64::engine::general_purpose::STANDARD
                .decode(snapshot.trim())
                .map_err(|e| bad(format!("'snapshot_base64' is not base64: {e}")))?;
            overrides.apply(&raw).map(Plugin::Snapshot)
        }
        (None, Some(url)) => pull(&obj, url, overrides).map(Plugin::Pull),
        (Some(_), Some(_)) => Err(bad(
            "give either 'snapshot_base64' or 'snapshot_url', not both".into(),
        )),
        (None, None) => Err(bad("'snapshot_base64' or 'snapshot_url' is required".into())),
    }
}

fn overrides(obj: &Map<String, Value>) -> Result<Overrides, ConfigError> {
    let reader_cluster = string(obj, "reader_cluster")?;
    if reader_cluster == Some("") {
        return Err(bad("'reader_cluster' is empty".into()));
    }
    let headers_held = match obj.get("allow_on_headers_stop_iteration") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(bad(
                "'allow_on_headers_stop_iteration' must be true or false".into(),
            ))
        }
    };
    Ok(Overrides {
        reader_cluster: reader_cluster.map(str::to_owned),
        headers_held,
    })
}

fn pull(obj: &Map<String, Value>, url: &str, overrides: Overrides) -> Result<Pull, ConfigError> {
    let (authority, path) = split_url(url).map_err(|e| bad(format!("'snapshot_url' {e}")))?;
    let cluster = string(obj, "snapshot_cluster")?.ok_or_else(|| {
        bad("'snapshot_url' needs 'snapshot_cluster', the Envoy cluster that reaches it".into())
    })?;
    if cluster.is_empty() {
        return Err(bad("'snapshot_cluster' is empty".into()));
    }
    let token = string(obj, "snapshot_token")?;
    if token.is_some_and(|t| t.is_empty() || t.chars().any(|c| c.is_control())) {
        return Err(bad(
            "'snapshot_token' is empty or has control characters".into()
        ));
    }
    let (keys, insecure) = trust(obj, url)?;
    Ok(Pull {
        url: url.to_owned(),
        cluster: cluster.to_owned(),
        authority: authority.to_owned(),
        path: path.to_owned(),
        poll: millis(obj, "snapshot_poll_ms", DEFAULT_POLL)?,
        timeout: millis(obj, "snapshot_timeout_ms", DEFAULT_PULL_TIMEOUT)?,
        overrides,
        token: token.map(|t| Token(t.to_owned())),
        keys,
        insecure,
        max_bytes: max_bytes(obj)?,
    })
}

/// `snapshot_keys` and `insecure`, with the rules between them and the URL's scheme.
fn trust(obj: &Map<String, Value>, url: &str) -> Result<(Option<Keys>, bool), ConfigError> {
    let insecure = match obj.get("insecure") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("'insecure' must be true or false".into())),
    };
    let keys = obj
        .get("snapshot_keys")
        .map(Keys::from_json)
        .transpose()
        .map_err(|e| bad(format!("'snapshot_keys' {e}")))?;
    if url.starts_with("http://") && !insecure {
        return Err(bad(format!(
            "'snapshot_url' {url} is plain http: use https:// with the cluster's TLS set (Istio's \
             mTLS, a DestinationRule or a BackendTLSPolicy), or set \"insecure\": true"
        )));
    }
    if keys.is_none() && !insecure {
        return Err(bad(
            "'snapshot_url' needs 'snapshot_keys', the public keys its snapshots are signed with: \
             \"snapshot_keys\": [{\"id\": \"k1\", \"ed25519\": \"BASE64\"}] (`ferry keygen` makes \
             a key pair and prints this entry; `ferry plugin-config --snapshot-key` renders them), \
             or \"insecure\": true to take unsigned snapshots"
                .into(),
        ));
    }
    Ok((keys, insecure))
}

fn max_bytes(obj: &Map<String, Value>) -> Result<usize, ConfigError> {
    match obj.get("snapshot_max_bytes") {
        None => Ok(DEFAULT_MAX_BYTES),
        Some(v) => v
            .as_u64()
            .filter(|n| (MIN_MAX_BYTES..=MAX_MAX_BYTES).contains(n))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                bad(format!(
                    "'snapshot_max_bytes' must be a whole number from {MIN_MAX_BYTES} to \
                     {MAX_MAX_BYTES}"
                ))
            }),
    }
}

/// `http://host[:port][/path]` (or https, which the cluster's TLS settings decide anyway) into
/// its authority and path.
fn split_url(url: &str) -> Result<(&str, &str), String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| format!("'{url}' is not an http:// or https:// URL"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(format!("'{url}' has no host"));
    }
    let invalid = |c: char| c.is_whitespace() || c.is_control() || matches!(c, '@' | '#');
    if url.chars().any(invalid) {
        return Err(format!("'{url}' has whitespace, a user name or a fragment"));
    }
    Ok((authority, path))
}

fn millis(obj: &Map<String, Value>, key: &str, default: Duration) -> Result<Duration, ConfigError> {
    match obj.get(key) {
        None => Ok(default),
        Some(v) => match v.as_u64() {
            Some(ms) if (MIN_MS..=MAX_MS).contains(&ms) => Ok(Duration::from_millis(ms)),
            _ => Err(bad(format!(
                "'{key}' must be a whole number of milliseconds from {MIN_MS} to {MAX_MS}"
            ))),
        },
    }
}

fn string<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, ConfigError> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(bad(format!("'{key}' must be a string"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_test_support::snapshot::snapshot;
    use prost::Message;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn a_binary_snapshot_holds_headers_and_keeps_its_cluster() {
        let s = snapshot();
        let c = parse(&s.encode_to_vec()).unwrap();
        assert_eq!(c.reader_cluster, s.reader_cluster);
        assert!(c.headers_held);
    }

    #[test]
    fn json_carries_the_snapshot_and_overrides_the_reader_cluster() {
        let s = snapshot();
        let istio = "outbound|8090||ferry-reader.ferry.svc.cluster.local";
        let json = format!(
            "\n  {{\"snapshot_base64\": \"{}\", \"reader_cluster\": \"{istio}\"}}",
            b64(&s.encode_to_vec())
        );
        let c = parse(json.as_bytes()).unwrap();
        assert_eq!(c.reader_cluster, istio);
        assert_eq!(c.project, s.project);
        assert_eq!(c.routes.len(), s.routes.len());
        assert!(
            !c.headers_held,
            "neither Istio nor Envoy Gateway set the flag"
        );
        let expected_authority = if s.reader_authority.is_empty() {
            s.reader_cluster.clone()
        } else {
            s.reader_authority.clone()
        };
        assert_eq!(c.reader_authority, expected_authority);

        let json = format!(
            r#"{{"snapshot_base64":"{}","allow_on_headers_stop_iteration":true}}"#,
            b64(&s.encode_to_vec())
        );
        let c = parse(json.as_bytes()).unwrap();
        assert!(c.headers_held);
        assert_eq!(c.reader_cluster, s.reader_cluster);
    }

    #[test]
    fn bad_json_configurations_are_refused_by_name() {
        let snap = b64(&snapshot().encode_to_vec());
        let cases = [
            (
                "{}".to_string(),
                "'snapshot_base64' or 'snapshot_url' is required",
            ),
            (
                r#"{"snapshot_base64":"%%%"}"#.to_string(),
                "'snapshot_base64' is not base64",
            ),
            (
                format!(r#"{{"snapshot_base64":"{snap}","snapshot_uri":"http://x"}}"#),
                "unknown key 'snapshot_uri'",
            ),
            (
                format!(r#"{{"snapshot_base64":"{snap}","reader_cluster":""}}"#),
                "'reader_cluster' is empty",
            ),
            (
                format!(r#"{{"snapshot_base64":"{snap}","reader_cluster":7}}"#),
                "'reader_cluster' must be a string",
            ),
            (
                format!(r#"{{"snapshot_base64":"{snap}","allow_on_headers_stop_iteration":"no"}}"#),
                "must be true or false",
            ),
            ("{\"snapshot_base64\": ".to_string(), "not valid JSON"),
        ];
        for (json, expected) in cases {
            let err = parse(json.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "{json}: {err}");
            assert!(err.contains("JSON plugin configuration"), "{err}");
        }
        // A snapshot that does not validate is refused as the binary form would be.
        let mut s = snapshot();
        s.reader_cluster.clear();
        let json = format!(r#"{{"snapshot_base64":"{}"}}"#, b64(&s.encode_to_vec()));
        let err = parse(json.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("reader_cluster is empty"), "{err}");
    }

    const URL: &str = "https://ferry-control-plane.ferry.svc:8091/v1/snapshot";

    fn keys() -> String {
        use ferry_test_support::signed::{key, key_json};
        format!("[{},{}]", key_json("k1", &key(1)), key_json("k2", &key(2)))
    }

    #[test]
    fn json_may_name_a_url_to_pull_the_snapshot_from() {
        let json = format!(
            r#"{{"snapshot_url":"{URL}","snapshot_cluster":"cp","snapshot_poll_ms":250,
                "reader_cluster":"r","snapshot_keys":{}}}"#,
            keys()
        );
        let Plugin::Pull(p) = parse_plugin(json.as_bytes()).unwrap() else {
            panic!("a pull")
        };
        assert_eq!(
            (p.cluster.as_str(), p.authority.as_str(), p.path.as_str()),
            ("cp", "ferry-control-plane.ferry.svc:8091", "/v1/snapshot")
        );
        assert_eq!(p.poll, Duration::from_millis(250));
        assert_eq!(p.timeout, DEFAULT_PULL_TIMEOUT);
        assert_eq!(p.keys.as_ref().map(Keys::ids).as_deref(), Some("k1, k2"));
        assert_eq!((p.insecure, p.max_bytes), (false, DEFAULT_MAX_BYTES));
        assert_eq!(p.overrides.reader_cluster.as_deref(), Some("r"));
        assert!(!p.overrides.headers_held);
        // The pulled bytes get the same overrides as an inline snapshot.
        let c = p.overrides.apply(&snapshot().encode_to_vec()).unwrap();
        assert_eq!(c.reader_cluster, "r");
        // A reader that wants the snapshot itself (the control plane) refuses it by name.
        let err = parse(json.as_bytes()).unwrap_err().to_string();
        assert!(err.contains("the filter pulls that snapshot"), "{err}");

        // `insecure`: plain http and unsigned snapshots; keys may still be required.
        let bare = r#"{"snapshot_url":"http://cp","snapshot_cluster":"c","insecure":true,
                       "snapshot_max_bytes":1024}"#;
        let Plugin::Pull(p) = parse_plugin(bare.as_bytes()).unwrap() else {
            panic!("a pull")
        };
        assert_eq!((p.authority.as_str(), p.path.as_str()), ("cp", "/"));
        assert_eq!(p.poll, DEFAULT_POLL);
        assert_eq!((p.keys, p.insecure, p.max_bytes), (None, true, 1024));
    }

    #[test]
    fn bad_pull_configurations_are_refused_by_name() {
        let snap = b64(&snapshot().encode_to_vec());
        let cases = [
            (
                format!(r#"{{"snapshot_url":"{URL}"}}"#),
                "needs 'snapshot_cluster'",
            ),
            (
                format!(r#"{{"snapshot_url":"{URL}","snapshot_cluster":""}}"#),
                "'snapshot_cluster' is empty",
            ),
            (
                r#"{"snapshot_url":"ftp://x/s","snapshot_cluster":"c"}"#.into(),
                "not an http:// or https:// URL",
            ),
            (
                r#"{"snapshot_url":"http:///s","snapshot_cluster":"c"}"#.into(),
                "has no host",
            ),
            (
                r#"{"snapshot_url":"http://u@h/s","snapshot_cluster":"c"}"#.into(),
                "a user name",
            ),
            (
                format!(
                    r#"{{"snapshot_url":"{URL}","snapshot_cluster":"c","insecure":true,"snapshot_poll_ms":5}}"#
                ),
                "'snapshot_poll_ms' must be a whole number of milliseconds from 100",
            ),
            (
                format!(
                    r#"{{"snapshot_url":"{URL}","snapshot_cluster":"c","insecure":true,"snapshot_timeout_ms":"1s"}}"#
                ),
                "'snapshot_timeout_ms' must be",
            ),
            (
                format!(
                    r#"{{"snapshot_url":"{URL}","snapshot_cluster":"c","snapshot_base64":"{snap}"}}"#
                ),
                "not both",
            ),
            (
                format!(r#"{{"snapshot_base64":"{snap}","snapshot_cluster":"c"}}"#),
                "'snapshot_cluster' goes with 'snapshot_url' only",
            ),
        ];
        all_refused(&cases);
    }

    /// Every plugin configuration of `cases` is refused, its error saying what the case expects.
    fn all_refused(cases: &[(String, &str)]) {
        for (json, expected) in cases {
            let err = parse_plugin(json.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "{json}: {err}");
        }
    }

    #[test]
    fn an_unsigned_or_plain_http_pull_is_refused_unless_insecure() {
        let snap = b64(&snapshot().encode_to_vec());
        let k = keys();
        let cases = [
            (
                format!(r#"{{"snapshot_url":"{URL}","snapshot_cluster":"c"}}"#),
                "'snapshot_url' needs 'snapshot_keys', the public keys its snapshots are signed with",
            ),
            (
                format!(r#"{{"snapshot_url":"http://cp/s","snapshot_cluster":"c","snapshot_keys":{k}}}"#),
                "'snapshot_url' http://cp/s is plain http: use https://",
            ),
            (
                format!(r#"{{"snapshot_url":"{URL}","snapshot_cluster":"c","insecure":"yes"}}"#),
                "'insecure' must be true or false",
            ),
            (
                format!(r#"{{"snapshot_url":"{URL}","snapshot_cluster":"c","snapshot_keys":[]}}"#),
                "'snapshot_keys' must be a non-empty array",
            ),
            (
                format!(
                    r#"{{"snapshot_url":"{URL}","snapshot_cluster":"c","snapshot_keys":{k},"snapshot_max_bytes":100}}"#
                ),
                "'snapshot_max_bytes' must be a whole number from 1024",
            ),
            (
                format!(r#"{{"snapshot_base64":"{snap}","snapshot_keys":{k}}}"#),
                "'snapshot_keys' goes with 'snapshot_url' only",
            ),
        ];
        all_refused(&cases);
    }

    /// Project name lengths whose length byte reads as JSON whitespace or `{`: the snapshot
    /// is still taken as protobuf, whatever the name's first character.
    #[test]
    fn a_valid_snapshot_is_never_taken_for_json() {
        for len in [9usize, 10, 13, 32, 123] {
            for first in ['a', 'Z', '0', '_'] {
                let mut s = snapshot();
                s.project = std::iter::once(first)
                    .chain(std::iter::repeat('x'))
                    .take(len)
                    .collect();
                let bytes = s.encode_to_vec();
                assert!(bytes[0] == b'\n' && usize::from(bytes[1]) == len);
                assert!(!looks_like_json(&bytes), "len {len}");
                let c = parse(&bytes).unwrap();
                assert_eq!(c.project, s.project);
            }
        }
        assert!(looks_like_json(b" \r\n\t{ \"a\": 1}"));
        assert!(looks_like_json(b"{}"));
        assert!(!looks_like_json(b"[1]"));
        assert!(!looks_like_json(b""));
    }
}
