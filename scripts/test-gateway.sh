#!/usr/bin/env bash
# `make test-gateway`: Ferry at a real Envoy Gateway. Builds Envoy Gateway from its Go module
# once (cached, scripts/envoy-gateway-build.sh), the binaries, the .wasm and the native module,
# then runs tests/integration/tests/gateway.rs, which runs Envoy Gateway in standalone mode
# inside network, mount and PID namespaces of its own (root needed: unshare).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/setup.sh
if [ "$(id -u)" -ne 0 ]; then
  echo "test-gateway: run as root (the test makes network, mount and PID namespaces with unshare)" >&2
  exit 1
fi
# ip (iproute2) brings the namespace's loopback up; unshare and mount are util-linux's.
if ! command -v ip >/dev/null; then
  echo "test-gateway: installing iproute2 from Debian"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
fi
t0=$(date +%s)
egbin=$(bash scripts/envoy-gateway-build.sh)
built=$(date +%s)
echo "== building binaries (debug), the filter (.wasm) and the native module"
cargo build --workspace --bins --quiet
cargo build --release -p ferry-filter --target wasm32-wasip1 --quiet
cargo build --profile native -p ferry-native --quiet
echo "== the gateway test"
FERRY_ENVOY_GATEWAY="$egbin/envoy-gateway" FERRY_ENVOY="$PWD/.venv/bin/envoy" \
  cargo test -p ferry-integration-tests --test gateway -- --ignored --nocapture
echo "test-gateway: done in $(( $(date +%s) - start )) s (Envoy Gateway build or cache check: $(( built - t0 )) s)"
