//! The two builds of the filter a stack can run: the proxy-wasm filter (`filter/`) and the
//! Envoy dynamic module (`native/`), the latter also with its in-process reader. Enrichment
//! tests run against both builds: a test body takes the runtime as a parameter and
//! [`each_runtime!`](crate::each_runtime) makes one test per build;
//! [`also_in_process!`](crate::also_in_process) adds the in-process reader's run.

use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Runtime {
    /// proxy-wasm on Envoy's V8: target/wasm32-wasip1/release/ferry_filter.wasm.
    #[default]
    Wasm,
    /// The dynamic module: target/native/libferry_native.so (Cargo profile `native`).
    Native,
    /// The dynamic module answering reader calls in process (`FERRY_NATIVE_READER` in
    /// Envoy's environment, with the reader's Redis flags); the reader process runs but is not
    /// called for lookups.
    NativeInProcess,
}

impl Runtime {
    /// The `ferry envoy-config` / `ferry serve` flags that select this build and its file.
    pub fn flags(self) -> Vec<OsString> {
        match self {
            Runtime::Wasm => vec!["--wasm".into(), crate::wasm().into()],
            Runtime::Native | Runtime::NativeInProcess => vec![
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
            Runtime::Native | Runtime::NativeInProcess => "dynamicmodulescustom",
        }
    }

    /// A counter's line in `/stats/prometheus` (Envoy 1.40 drops the `envoy_` prefix and the
    /// namespace for Wasm stats, keeps both for dynamic-module stats).
    pub fn prometheus_name(self, stat: &str) -> String {
        match self {
            Runtime::Wasm => stat.to_owned(),
            Runtime::Native | Runtime::NativeInProcess => {
                format!("envoy_dynamicmodulescustom_{stat}")
            }
        }
    }

    /// What Envoy's environment needs for this build, given the reader's Redis flags.
    pub fn envoy_env(self, redis_flags: &[String]) -> Vec<(&'static str, String)> {
        match self {
            Runtime::NativeInProcess => {
                let words: Vec<String> = redis_flags.iter().map(|f| shell_quoted(f)).collect();
                vec![("FERRY_NATIVE_READER", words.join(" "))]
            }
            Runtime::Wasm | Runtime::Native => Vec::new(),
        }
    }
}

/// `word` as one shell word, as the module splits `FERRY_NATIVE_READER` (a path with a space
/// stays one flag value).
fn shell_quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The built native module.
pub fn native_module() -> PathBuf {
    crate::built(
        crate::root().join("target/native/libferry_native.so"),
        "run `make test` (it builds the native module)",
    )
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

/// More runs of bodies that [`each_runtime!`] already runs: `in_process::NAME`, on the native
/// module with its in-process reader ([`Runtime::NativeInProcess`]).
#[macro_export]
macro_rules! also_in_process {
    ($($name:ident),* $(,)?) => {
        mod in_process {$(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::$name($crate::Runtime::NativeInProcess).await
            }
        )*}
    };
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
