#!/usr/bin/env bash
# `make test`: every test. Installs what is missing, builds the binaries, the .wasm and the
# native module (libferry_native.so) the integration tests drive, then runs unit tests and
# integration tests (real Envoy, real Redis, the reader and the demo model, all started by the
# tests on free loopback ports; the enrichment tests once per build of the filter).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Feast 0.67, which the Feast-compatibility tests run beside Ferry on the same Redis.
bash scripts/feast_venv.sh .venv-feast
# kubectl-validate and helm, built from their Go modules once (cached), and the CRDs of Envoy
# Gateway, Gateway API, Istio and cert-manager, for tests/integration/tests/deploy_schemas.rs.
FERRY_K8S_TOOLS=$(bash scripts/k8s-tools-build.sh)
export FERRY_K8S_TOOLS
echo "== building binaries (debug) and the filter (.wasm: release; native module: profile native)"
cargo build --workspace --bins --quiet
cargo build --release -p ferry-filter --target wasm32-wasip1 --quiet
cargo build --profile native -p ferry-native --quiet
# The same module whose hooks panic on request, for tests/integration/tests/native_panic.rs.
cargo build --profile native-faults -p ferry-native --features fault-injection --quiet
# The filter whose VM traps on request, for tests/integration/tests/istio/crash.rs.
cargo build --profile wasm-faults -p ferry-filter --features fault-injection --target wasm32-wasip1 --quiet
echo "== cargo test"
FERRY_ENVOY="$PWD/.venv/bin/envoy" FERRY_FEAST_VENV="$PWD/.venv-feast" cargo test --workspace -- --test-threads 4
