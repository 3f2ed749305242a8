#!/usr/bin/env bash
# Builds the Kubernetes tools the deploy/ tests use, from their Go modules, once per version,
# and gathers the CRDs they validate against, so that the tests themselves run offline:
#   $FERRY_CACHE/k8s-tools/bin/kubectl-validate-$KV_VERSION   (sigs.k8s.io/kubectl-validate)
#   $FERRY_CACHE/k8s-tools/bin/helm-$HELM_VERSION             (helm.sh/helm/v3)
#   $FERRY_CACHE/k8s-tools/crds/<module>@<version>/*.yaml     (flat: kubectl-validate reads
#     one level of a --local-crds directory)
# and points the stable names at this run's versions: bin/kubectl-validate, bin/helm, and
# crds/current/<n> (one link per CRD directory, each a --local-crds argument).
# The versions are the ones Envoy Gateway v1.9.1's go.mod requires (most of their modules are
# then shared with scripts/envoy-gateway-build.sh's); kubectl-validate has no release newer than
# v0.0.4 (2024, Kubernetes 1.30 schemas at most), the commit Envoy Gateway pins embeds up to 1.32.
# CRDs: Envoy Gateway's and Gateway API's from github.com/envoyproxy/gateway's chart, Istio's
# from istio.io/api, cert-manager's from github.com/cert-manager/cert-manager (all fetched with
# `go mod download`). Only the Go module proxy is used; no prebuilt binary is downloaded.
# Prints the k8s-tools directory on stdout, progress on stderr; a second run finds everything
# and does nothing. The first build, from empty Go caches, costs ~6 CPU-minutes (10 min wall on
# this busy 2-core machine; docs/kubernetes.md, "Schemas").
set -euo pipefail
KV_VERSION="${KV_VERSION:-v0.0.5-0.20250915070809-d2f2d68fba09}"
HELM_VERSION="${HELM_VERSION:-v3.21.4}"
EG_VERSION="${EG_VERSION:-v1.9.1}"
ISTIO_API_VERSION="${ISTIO_API_VERSION:-v1.32.0}"
CERT_MANAGER_VERSION="${CERT_MANAGER_VERSION:-v1.21.2}"
FERRY_CACHE="${FERRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferry}"
out="$FERRY_CACHE/k8s-tools"
# module@version | path of its CRDs in the module | the files there
crd_sets=("github.com/envoyproxy/gateway@$EG_VERSION|charts/gateway-helm/charts/crds/crds/generated|*.yaml"
          "github.com/envoyproxy/gateway@$EG_VERSION|charts/gateway-helm/charts/crds/crds|gatewayapi-crds.yaml"
          "istio.io/api@$ISTIO_API_VERSION|kubernetes|customresourcedefinitions.gen.yaml"
          "github.com/cert-manager/cert-manager@$CERT_MANAGER_VERSION|deploy/crds|*.yaml")
want=("sigs.k8s.io/kubectl-validate@$KV_VERSION:kubectl-validate-$KV_VERSION"
      "helm.sh/helm/v3/cmd/helm@$HELM_VERSION:helm-$HELM_VERSION")
missing=()
for w in "${want[@]}"; do
  [ -x "$out/bin/${w##*:}" ] || missing+=("$w")
done
crds_missing=()
for s in "${crd_sets[@]}"; do
  IFS='|' read -r mv_ sub _ <<<"$s"
  [ -e "$out/crds/$mv_/.complete-${sub//\//_}" ] || crds_missing+=("$s")
done
# The stable names, pointed at this run's versions (cheap: done on every run).
link_current() {
  ln -sfn "kubectl-validate-$KV_VERSION" "$out/bin/kubectl-validate"
  ln -sfn "helm-$HELM_VERSION" "$out/bin/helm"
  rm -rf "$out/crds/current.new" && mkdir -p "$out/crds/current.new"
  local i=0 s mv_ seen=" "
  for s in "${crd_sets[@]}"; do
    mv_="${s%%|*}"
    case "$seen" in *" $mv_ "*) continue ;; esac
    seen+="$mv_ "; i=$((i + 1))
    ln -s "../$mv_" "$out/crds/current.new/$i"
  done
  rm -rf "$out/crds/current" && mv "$out/crds/current.new" "$out/crds/current"
}
if [ ${#missing[@]} -eq 0 ] && [ ${#crds_missing[@]} -eq 0 ]; then
  link_current
  echo "k8s-tools: cached in $out" >&2
  echo "$out"; exit 0
fi
command -v go >/dev/null || { echo "k8s-tools: Go is needed to build them (helm's go.mod says 1.26)" >&2; exit 1; }
mkdir -p "$out/bin" "$out/crds"
start=$(date +%s)
for s in "${crds_missing[@]}"; do
  IFS='|' read -r mv_ sub glob <<<"$s"
  echo "k8s-tools: CRDs of $mv_ ($sub/$glob)" >&2
  dir=$(cd /tmp && GOTOOLCHAIN=local go mod download -json "$mv_" \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$out/crds/$mv_"
  # shellcheck disable=SC2086 # the glob is meant to expand
  cp "$dir/$sub/"$glob "$out/crds/$mv_/"
  chmod u+w "$out/crds/$mv_/"*
  touch "$out/crds/$mv_/.complete-${sub//\//_}"
done
# GOTOOLCHAIN=local: never fetch another Go toolchain. A staging GOBIN, renamed in only once
# built, so that a half-built install is never taken for a cached one.
tmp=$(mktemp -d "$out/bin.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for w in "${missing[@]}"; do
  m="${w%:*}"; name="${w##*:}"
  echo "k8s-tools: building $m from the Go module proxy (first time only)..." >&2
  t=$(date +%s)
  GOTOOLCHAIN=local GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -trimpath" go install "$m" >&2
  base="${m%@*}"; base="${base##*/}"
  mv "$tmp/$base" "$out/bin/$name"
  echo "$name $(( $(date +%s) - t )) s" >> "$out/build-seconds"
done
link_current
echo "k8s-tools: ready in $(( $(date +%s) - start )) s in $out" >&2
echo "$out"
