//! The two builds of the filter a stack can run: the proxy-wasm filter (`filter/`) and the
//! Envoy dynamic module (`native/`). Enrichment tests run against both: a test body takes the
//! runtime as a parameter and [`each_runtime!`](crate::each_runtime) makes one test per build.

use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Runtime {
    /// proxy-wasm on Envoy's V8: target/wasm32-wasip1/release/ferry_filter.wasm.
    #[default]
    Wasm,
    /// The dynamic module: target/release/libferry_native.so.
    Native,
}

impl Runtime {
    /// The `ferry envoy-config` / `ferry serve` flags that select this build and its file.
    pub fn flags(self) -> Vec<OsString> {
        match self {
            Runtime::Wasm => vec!["--wasm".into(), crate::wasm().into()],
            Runtime::Native => vec![
                "--runtime".into(),
                "native".into(),
                "--native-module".into(),
                native_module().into(),
            ],
        }
    }

    /// The prefix of the filter's stats in Envoy's `/stats` (`PREFIX.ferry_cache_hits`).
    pub fn stats_namespace(self) -> &'static str {
        match self {
            Runtime::Wasm => "wasmcustom",
            Runtime::Native => "dynamicmodulescustom",
        }
    }

    /// A counter's line in `/stats/prometheus` (Envoy 1.40 drops the `envoy_` prefix and the
    /// namespace for Wasm stats, keeps both for dynamic-module stats).
    pub fn prometheus_name(self, stat: &str) -> String {
        match self {
            Runtime::Wasm => stat.to_owned(),
            Runtime::Native => format!("envoy_dynamicmodulescustom_{stat}"),
        }
    }
}

/// The built native module.
pub fn native_module() -> PathBuf {
    let p = crate::root().join("target/release/libferry_native.so");
    assert!(
        p.exists(),
        "{} is missing: run `make test` (it builds the native module)",
        p.display()
    );
    p
}

/// One test per runtime from one async body `async fn NAME(runtime: Runtime)`: the tests are
/// `NAME::wasm` and `NAME::native`.
#[macro_export]
macro_rules! each_runtime {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn wasm() {
                super::$name($crate::Runtime::Wasm).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn native() {
                super::$name($crate::Runtime::Native).await
            }
        }
    )*};
}

/// [`each_runtime!`] for a blocking body `fn NAME(runtime: Runtime)`.
#[macro_export]
macro_rules! each_runtime_blocking {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn wasm() {
                super::$name($crate::Runtime::Wasm)
            }
            #[test]
            fn native() {
                super::$name($crate::Runtime::Native)
            }
        }
    )*};
}
