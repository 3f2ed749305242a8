//! The filter's plugin configuration, in either of two forms:
//! - the bytes of a `ferry.v1.Snapshot` (what `ferry envoy-config` and `ferry serve` put in
//!   Envoy's `configuration`, a `google.protobuf.BytesValue`);
//! - a JSON object (what Istio's WasmPlugin and Envoy Gateway's EnvoyExtensionPolicy pass, their
//!   `pluginConfig` being a JSON string):
//!   `{"snapshot_base64": "...", "reader_cluster": "outbound|8090||ferry-reader.ferry.svc.cluster.local",
//!   "allow_on_headers_stop_iteration": false}`.
//!   `reader_cluster` (optional) overrides the snapshot's, since Istio names clusters its own
//!   way; `allow_on_headers_stop_iteration` (default false, as neither Istio nor Envoy Gateway
//!   can set it) tells whether Envoy holds the request headers while the body is read.

use base64::Engine;
use serde_json::{Map, Value};

use crate::config::{Config, ConfigError};

/// Keys of the JSON form; any other key is refused (a typo must not pass silently).
const KEYS: [&str; 3] = [
    "snapshot_base64",
    "reader_cluster",
    "allow_on_headers_stop_iteration",
];

/// Decodes and validates the plugin configuration, whichever its form.
pub fn parse(bytes: &[u8]) -> Result<Config, ConfigError> {
    if looks_like_json(bytes) {
        from_json(bytes)
    } else {
        Config::from_bytes(bytes)
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

fn from_json(bytes: &[u8]) -> Result<Config, ConfigError> {
    let bad = |reason: String| ConfigError::Invalid {
        part: "JSON plugin configuration".into(),
        reason,
    };
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
    let snapshot = string(&obj, "snapshot_base64")
        .map_err(bad)?
        .ok_or_else(|| bad("'snapshot_base64' is required".into()))?;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(snapshot.trim())
        .map_err(|e| bad(format!("'snapshot_base64' is not base64: {e}")))?;
    let mut snap = <ferry_protos::v1::Snapshot as prost::Message>::decode(raw.as_slice())
        .map_err(|e| ConfigError::Undecodable(e.to_string()))?;
    if let Some(cluster) = string(&obj, "reader_cluster").map_err(bad)? {
        if cluster.is_empty() {
            return Err(bad("'reader_cluster' is empty".into()));
        }
        // The authority stays the snapshot's (the reader's name), unless it was derived from
        // the cluster name, which Istio's cluster names are not fit for.
        if snap.reader_authority.is_empty() {
            snap.reader_authority = snap.reader_cluster.clone();
        }
        snap.reader_cluster = cluster.to_string();
    }
    let held = match obj.get("allow_on_headers_stop_iteration") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(bad(
                "'allow_on_headers_stop_iteration' must be true or false".into(),
            ))
        }
    };
    let mut config = Config::from_snapshot(snap)?;
    config.headers_held = held;
    Ok(config)
}

fn string<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("'{key}' must be a string")),
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
            ("{}".to_string(), "'snapshot_base64' is required"),
            (
                r#"{"snapshot_base64":"%%%"}"#.to_string(),
                "'snapshot_base64' is not base64",
            ),
            (
                format!(r#"{{"snapshot_base64":"{snap}","snapshot_url":"http://x"}}"#),
                "unknown key 'snapshot_url'",
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
