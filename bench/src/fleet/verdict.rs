//! What a simulated Envoy makes of an ECDS response, as Envoy and the filter do: the resource
//! must be the filter's `TypedExtensionConfig` holding a Wasm filter whose `configuration` is a
//! `BytesValue`, and those bytes go through `ferry_core::plugin_config::parse_plugin`, the
//! function the filter's `on_configure` calls (true = ACK, false = NACK).
//!
//! Decoding and validating a 1 MB snapshot 10,000 times would make the simulator, not the
//! control plane, the thing measured (every Envoy validates on its own CPU). So a verdict is
//! computed once per distinct resource payload and shared: every stream compares its payload
//! byte for byte with the one validated under that version, and validates in full whatever
//! differs. `Verdicts::every` validates every payload in full instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use envoy_types::pb::envoy::config::core::v3::TypedExtensionConfig;
use envoy_types::pb::envoy::extensions::filters::http::wasm::v3::Wasm;
use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use envoy_types::pb::google::protobuf::BytesValue;
use ferry_core::plugin_config::{parse_plugin, Plugin};
use prost::{Message as _, Name as _};

/// The type URL of ECDS requests and responses.
pub const ECDS_TYPE_URL: &str = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig";

/// Decodes and validates one response in full: Ok, or the error Envoy would NACK with.
pub fn validate(resp: &DiscoveryResponse, filter_name: &str) -> Result<(), String> {
    if resp.type_url != ECDS_TYPE_URL {
        return Err(format!("unexpected type URL {}", resp.type_url));
    }
    let [any] = resp.resources.as_slice() else {
        return Err(format!("{} resources, expected 1", resp.resources.len()));
    };
    let ext = TypedExtensionConfig::decode(any.value.as_slice()).map_err(|e| e.to_string())?;
    if ext.name != filter_name {
        return Err(format!(
            "resource '{}', subscribed to '{filter_name}'",
            ext.name
        ));
    }
    let typed = ext.typed_config.ok_or("no typed_config")?;
    if typed.type_url != Wasm::type_url() {
        return Err(format!(
            "typed_config is {}, the bootstrap allows {}",
            typed.type_url,
            Wasm::type_url()
        ));
    }
    let wasm = Wasm::decode(typed.value.as_slice()).map_err(|e| e.to_string())?;
    let configuration = wasm
        .config
        .and_then(|c| c.configuration)
        .ok_or("no plugin configuration")?;
    let bytes = BytesValue::decode(configuration.value.as_slice()).map_err(|e| e.to_string())?;
    match parse_plugin(&bytes.value) {
        Ok(Plugin::Snapshot(_)) | Ok(Plugin::Pull(_)) => Ok(()),
        Err(e) => Err(format!("ferry: {e}")),
    }
}

/// A payload validated under a version, and its verdict.
type Judged = (Arc<Vec<u8>>, Result<(), String>);

/// Verdicts shared by every simulated Envoy of a run.
#[derive(Clone, Default)]
pub struct Verdicts {
    /// version → (the payload validated, its verdict).
    seen: Arc<Mutex<HashMap<String, Judged>>>,
    /// Validate every payload in full.
    pub every: bool,
    /// Full validations done (a measure of what `every` would cost).
    pub full: Arc<std::sync::atomic::AtomicU64>,
}

impl Verdicts {
    /// Verdicts shared (`every` false) or computed for every payload.
    pub fn new(every: bool) -> Verdicts {
        Verdicts {
            every,
            ..Default::default()
        }
    }

    /// The verdict on `resp`: shared when its payload is byte for byte the one validated under
    /// its version, else computed in full.
    pub fn judge(&self, resp: &DiscoveryResponse, filter_name: &str) -> Result<(), String> {
        let payload = resp.resources.first().map(|a| a.value.as_slice());
        if !self.every {
            let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if let (Some((validated, verdict)), Some(p)) = (seen.get(&resp.version_info), payload) {
                if validated.as_slice() == p {
                    return verdict.clone();
                }
            }
        }
        self.full.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let verdict = validate(resp, filter_name);
        if let Some(p) = payload {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.entry(resp.version_info.clone())
                .or_insert_with(|| (Arc::new(p.to_vec()), verdict.clone()));
        }
        verdict
    }
}
