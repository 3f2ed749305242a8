#!/usr/bin/env bash
# Builds Envoy Gateway from its Go module, and go-containerregistry's small registry (the
# version Envoy Gateway itself requires) that the gateway test serves the filter's OCI image
# from, once per version: the binaries land in $FERRY_CACHE/envoy-gateway-$EG_VERSION/bin and a
# second run finds them and does nothing. Only the Go module proxy is used (`go install
# MODULE@VERSION`); no prebuilt binary is downloaded. Prints the bin directory on stdout,
# progress on stderr. The first build costs ~6.5 CPU-minutes on this 2-core machine (empty
# module and build caches); its wall time depends on the load (docs/kubernetes.md).
set -euo pipefail
EG_VERSION="${EG_VERSION:-v1.9.1}"
# github.com/google/go-containerregistry's version in Envoy Gateway v1.9.1's go.mod.
GGCR_VERSION="${GGCR_VERSION:-v0.21.9}"
FERRY_CACHE="${FERRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry}"
out="$FERRY_CACHE/envoy-gateway-$EG_VERSION"
want=("github.com/envoyproxy/gateway/cmd/envoy-gateway@$EG_VERSION:envoy-gateway"
      "github.com/google/go-containerregistry/cmd/registry@$GGCR_VERSION:registry")
missing=()
for w in "${want[@]}"; do
  [ -x "$out/bin/${w##*:}" ] || missing+=("${w%:*}")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "envoy-gateway $EG_VERSION: cached in $out/bin" >&2
  echo "$out/bin"; exit 0
fi
command -v go >/dev/null || { echo "envoy-gateway: Go is needed to build it (its go.mod says 1.26.7)" >&2; exit 1; }
mkdir -p "$out/bin"
start=$(date +%s)
echo "envoy-gateway $EG_VERSION: building ${missing[*]} from the Go module proxy (first time only)..." >&2
# GOTOOLCHAIN=local: never fetch another Go toolchain. A staging GOBIN, moved in only once
# built, so that a half-built install is never taken for a cached one.
tmp=$(mktemp -d "$out/bin.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# (One `go install` per module: it takes one module@version at a time.)
for m in "${missing[@]}"; do
  GOTOOLCHAIN=local GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -trimpath" go install "$m" >&2
done
mv "$tmp"/* "$out/bin/"
secs=$(( $(date +%s) - start ))
echo "$secs" > "$out/build-seconds"
echo "envoy-gateway $EG_VERSION: built in ${secs} s into $out/bin" >&2
echo "$out/bin"
