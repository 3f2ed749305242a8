//! From a registry snapshot to the xDS resources Envoy receives: the ferry filter's
//! `TypedExtensionConfig` (ECDS), an `envoy.extensions.filters.http.wasm.v3.Wasm` whose
//! `configuration` is the snapshot, or (`--runtime native`) a `DynamicModuleFilter` whose
//! `filter_config` is. Everything but the snapshot is fixed for the life of the server, so Envoy
//! keeps the same VM (or loaded module) and only re-reads the configuration.

use std::collections::BTreeMap;

use envoy_types::pb::envoy::config::core::v3::{
    async_data_source, data_source, AsyncDataSource, DataSource, TypedExtensionConfig,
};
use envoy_types::pb::envoy::extensions::dynamic_modules::v3::DynamicModuleConfig;
use envoy_types::pb::envoy::extensions::filters::http::dynamic_modules::v3::DynamicModuleFilter;
use envoy_types::pb::envoy::extensions::filters::http::wasm::v3::Wasm;
use envoy_types::pb::envoy::extensions::wasm::v3::{
    plugin_config, FailurePolicy, PluginConfig, VmConfig,
};
use envoy_types::pb::google::protobuf::{BoolValue, BytesValue};
use envoy_types::util::pack_any;
use ferry_protos::v1;
use prost::Message as _;

use crate::envoy_config::filter_build::NATIVE_MODULE_NAME;
use crate::envoy_config::Runtime;
use ferry_xds::{Resource, ResourceType, XdsSnapshot};

/// The one type ferry serves: its filter's config, over ECDS.
pub const RESOURCE_TYPE: ResourceType = ResourceType::ExtensionConfig;

/// What stays the same across snapshots.
#[derive(Clone, Debug)]
pub struct FilterOptions {
    /// ECDS resource name: the HTTP filter's name in the bootstrap.
    pub filter_name: String,
    /// Absolute path of the .wasm as Envoy opens it.
    pub wasm_path: String,
    /// The filter's build: Wasm, or the native module (and its path).
    pub runtime: Runtime,
}

/// The Wasm filter config carrying `snapshot` (same fields as envoy/static.yaml.tmpl).
pub fn wasm_filter(snapshot: &v1::Snapshot, opts: &FilterOptions) -> Wasm {
    let configuration = BytesValue {
        value: snapshot.encode_to_vec(),
    };
    // Packed with the messages' own type URLs (`prost::Name`).
    Wasm {
        config: Some(PluginConfig {
            name: opts.filter_name.clone(),
            root_id: "ferry".into(),
            configuration: Some(pack_any(configuration)),
            // A crashed VM is reloaded (~1 s) instead of failing every request forever.
            failure_policy: FailurePolicy::FailReload as i32,
            // The filter replaces headers after reading the body.
            allow_on_headers_stop_iteration: Some(BoolValue { value: true }),
            vm: Some(plugin_config::Vm::VmConfig(VmConfig {
                vm_id: "ferry".into(),
                runtime: "envoy.wasm.runtime.v8".into(),
                code: Some(AsyncDataSource {
                    specifier: Some(async_data_source::Specifier::Local(DataSource {
                        specifier: Some(data_source::Specifier::Filename(opts.wasm_path.clone())),
                        ..Default::default()
                    })),
                }),
                ..Default::default()
            })),
            ..Default::default()
        }),
    }
}

/// The dynamic-module filter config carrying `snapshot` (same fields as
/// envoy/filter_native.yaml.tmpl).
pub fn native_filter(snapshot: &v1::Snapshot, module_path: &str) -> DynamicModuleFilter {
    let config = BytesValue {
        value: snapshot.encode_to_vec(),
    };
    DynamicModuleFilter {
        dynamic_module_config: Some(DynamicModuleConfig {
            name: NATIVE_MODULE_NAME.into(),
            // The near cache lives in the module's memory: never unloaded.
            do_not_close: true,
            module: Some(AsyncDataSource {
                specifier: Some(async_data_source::Specifier::Local(DataSource {
                    specifier: Some(data_source::Specifier::Filename(module_path.to_owned())),
                    ..Default::default()
                })),
            }),
            ..Default::default()
        }),
        filter_name: "ferry".into(),
        filter_config: Some(pack_any(config)),
        ..Default::default()
    }
}

/// The xDS snapshot for one registry snapshot; its version is the registry snapshot's.
pub fn build(snapshot: &v1::Snapshot, opts: &FilterOptions) -> XdsSnapshot {
    let typed_config = match &opts.runtime {
        Runtime::Wasm => pack_any(wasm_filter(snapshot, opts)),
        Runtime::Native { module_path } => pack_any(native_filter(snapshot, module_path)),
    };
    let ext = TypedExtensionConfig {
        name: opts.filter_name.clone(),
        typed_config: Some(typed_config),
    };
    let mut resources = BTreeMap::new();
    resources.insert(
        RESOURCE_TYPE,
        vec![Resource {
            name: opts.filter_name.clone(),
            body: pack_any(ext),
        }],
    );
    XdsSnapshot::new(snapshot.version.clone(), resources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_repo::test_support::{load_repo, ORDER_FILES, ORDER_YAML};

    #[test]
    fn ecds_resource_wraps_the_snapshot_in_a_fixed_wasm_config() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let snap = ferry_repo::snapshot::build(&reg.unwrap());
        let opts = FilterOptions {
            filter_name: "ferry".into(),
            wasm_path: "/opt/ferry.wasm".into(),
            runtime: Runtime::Wasm,
        };
        let x = build(&snap, &opts);
        assert_eq!(x.version, snap.version);
        let r = &x.resources[&RESOURCE_TYPE][0];
        assert_eq!(r.name, "ferry");
        assert_eq!(r.body.type_url, RESOURCE_TYPE.type_url());
        let ext = TypedExtensionConfig::decode(r.body.value.as_slice()).unwrap();
        let any = ext.typed_config.unwrap();
        // What the bootstrap's `config_discovery.type_urls` names.
        assert_eq!(any.type_url, opts.runtime.type_url());
        let cfg = Wasm::decode(any.value.as_slice()).unwrap().config.unwrap();
        assert_eq!(cfg.failure_policy, FailurePolicy::FailReload as i32);
        assert_eq!(
            cfg.allow_on_headers_stop_iteration,
            Some(BoolValue { value: true })
        );
        let bytes = BytesValue::decode(cfg.configuration.unwrap().value.as_slice()).unwrap();
        assert_eq!(v1::Snapshot::decode(bytes.value.as_slice()).unwrap(), snap);

        // Another snapshot changes only `configuration`: same VM.
        let mut other = snap.clone();
        other.version = "other".into();
        let a = wasm_filter(&snap, &opts).config.unwrap();
        let b = wasm_filter(&other, &opts).config.unwrap();
        assert_eq!(a.vm, b.vm);
        assert_ne!(a.configuration, b.configuration);
    }

    #[test]
    fn native_runtime_serves_a_dynamic_module_filter_with_the_snapshot() {
        let (_dir, reg) = load_repo(ORDER_YAML, &ORDER_FILES);
        let snap = ferry_repo::snapshot::build(&reg.unwrap());
        let opts = FilterOptions {
            filter_name: "ferry".into(),
            wasm_path: String::new(),
            runtime: Runtime::Native {
                module_path: "/opt/libferry_native.so".into(),
            },
        };
        let x = build(&snap, &opts);
        let ext =
            TypedExtensionConfig::decode(x.resources[&RESOURCE_TYPE][0].body.value.as_slice())
                .unwrap();
        let any = ext.typed_config.unwrap();
        assert_eq!(any.type_url, opts.runtime.type_url());
        let f = DynamicModuleFilter::decode(any.value.as_slice()).unwrap();
        let m = f.dynamic_module_config.unwrap();
        assert_eq!(m.name, NATIVE_MODULE_NAME);
        assert!(m.do_not_close);
        let Some(async_data_source::Specifier::Local(DataSource {
            specifier: Some(data_source::Specifier::Filename(path)),
            ..
        })) = m.module.and_then(|s| s.specifier)
        else {
            panic!("the module is a local file");
        };
        assert_eq!(path, "/opt/libferry_native.so");
        let bytes = BytesValue::decode(f.filter_config.unwrap().value.as_slice()).unwrap();
        assert_eq!(v1::Snapshot::decode(bytes.value.as_slice()).unwrap(), snap);
    }
}
