//! Which build of the ferry filter Envoy runs (`--runtime`): the proxy-wasm filter on Envoy's
//! V8 runtime (the default), or the same core as an Envoy dynamic module (`native/`,
//! libferry_native.so) loaded into Envoy's process. Both take the snapshot as their config.

use super::{render_template, EnvoyConfigError};

const WASM_FILTER: &str = include_str!("../../../envoy/filter_wasm.yaml.tmpl");
const NATIVE_FILTER: &str = include_str!("../../../envoy/filter_native.yaml.tmpl");

/// The filter's build and the file Envoy loads for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Runtime {
    /// proxy-wasm on V8: the `.wasm` is `StaticOptions::wasm_path` / `FilterOptions::wasm_path`.
    #[default]
    Wasm,
    /// An Envoy dynamic module: the absolute path of libferry_native.so.
    Native { module_path: String },
}

/// `--runtime` on the command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    #[default]
    Wasm,
    Native,
}

/// The `http_filters` type URL of each build (ECDS `type_urls`).
pub const WASM_TYPE_URL: &str = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm";
pub const NATIVE_TYPE_URL: &str =
    "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter";

/// The name Envoy's dynamic-module loader knows the module by (`lib<name>.so`).
pub const NATIVE_MODULE_NAME: &str = "ferry_native";

impl Runtime {
    pub fn type_url(&self) -> &'static str {
        match self {
            Runtime::Wasm => WASM_TYPE_URL,
            Runtime::Native { .. } => NATIVE_TYPE_URL,
        }
    }

    /// The ferry entry of `http_filters` for the static bootstrap, the snapshot inlined.
    pub fn static_filter(
        &self,
        wasm_path: &str,
        snapshot_base64: &str,
    ) -> Result<String, EnvoyConfigError> {
        let (template, path_name, path) = match self {
            Runtime::Wasm => (WASM_FILTER, "WASM_PATH", wasm_path),
            Runtime::Native { module_path } => (NATIVE_FILTER, "MODULE_PATH", module_path.as_str()),
        };
        // The path sits inside a YAML double-quoted string.
        if path
            .chars()
            .any(|c| c == '"' || c == '\\' || c.is_control())
        {
            return Err(EnvoyConfigError::WasmPath(path.to_owned()));
        }
        // The template's leading comment lines document the file, not the bootstrap.
        let body: String = template
            .split_inclusive('\n')
            .skip_while(|l| l.starts_with('#'))
            .collect();
        let values = [
            (path_name, path.to_owned()),
            ("SNAPSHOT_BASE64", snapshot_base64.to_owned()),
        ];
        Ok(render_template(&body, &values)?.trim_end().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_runtime_renders_its_filter_with_the_snapshot() {
        let wasm = Runtime::Wasm.static_filter("/f.wasm", "U05BUA==").unwrap();
        assert!(wasm.contains("envoy.extensions.filters.http.wasm.v3.Wasm"));
        assert!(wasm.contains("filename: \"/f.wasm\""));
        assert!(wasm.contains("value: \"U05BUA==\""));
        let native = Runtime::Native {
            module_path: "/m/libferry_native.so".into(),
        };
        let text = native.static_filter("", "U05BUA==").unwrap();
        assert!(text.contains(NATIVE_TYPE_URL.trim_start_matches("type.googleapis.com/")));
        assert!(text.contains("filename: \"/m/libferry_native.so\""));
        assert!(text.contains("value: \"U05BUA==\""));
        assert!(
            !text.contains('{') || !text.contains("{{"),
            "no placeholder left"
        );
        assert!(
            !text.starts_with('#'),
            "the template's header is not copied"
        );
    }

    #[test]
    fn a_module_path_that_breaks_the_yaml_is_refused() {
        let native = Runtime::Native {
            module_path: "/tmp/a\"b.so".into(),
        };
        assert!(matches!(
            native.static_filter("", "x"),
            Err(EnvoyConfigError::WasmPath(_))
        ));
    }
}
