#!/usr/bin/env bash
# Writes deploy/kubernetes/ferry.yaml from the Helm chart deploy/helm/ferry: its default
# rendering in the namespace `ferry`, with the Namespace object (namespace.create=true), under
# the header below. The chart is the one source: edit it, then run this (`--check` only
# compares, as tests/integration/tests/deploy_schemas.rs does). helm is built from its Go
# module by scripts/k8s-tools-build.sh (cached).
set -euo pipefail
cd "$(dirname "$0")/.."
tools="${FERRY_K8S_TOOLS:-$(bash scripts/k8s-tools-build.sh)}"
out=deploy/kubernetes/ferry.yaml
render() {
  cat <<'HEADER'
# GENERATED from the Helm chart deploy/helm/ferry by scripts/render-manifests.sh: edit the
# chart (its values.yaml documents each setting), then run the script. This is
#   helm template ferry deploy/helm/ferry --namespace ferry --set namespace.create=true
# Ferry's services in Kubernetes: the vector reader (HTTPS, 8090) and the control plane
# (`ferry serve`: HTTPS 8091, whose GET /v1/snapshot the filter pulls; xDS 18000 for plain
# Envoy). The image is docker/Dockerfile's `ferry` target (`docker build --target ferry -t
# REGISTRY/ferry:0.1.0 -f docker/Dockerfile .`), pushed to your registry. Redis is yours:
# point FERRY_REDIS at it. The feature repo (ferry.yaml and its sources) is a volume, the
# PersistentVolumeClaim below, written by your `ferry apply --materialize` job.
# Redis is reached with TLS (rediss://) and AUTH as two ACL users (the ferry-redis-acl
# ConfigMap): the readers' `ferry-reader` only reads feature keys, the control plane's
# `ferry-control-plane` owns ferry:cp:* and writes features; their passwords come from the
# secrets `ferry-redis-reader` and `ferry-redis-control-plane` (key `password`), the CA from
# `ferry-redis-ca` (key `ca.crt`, e.g. made by cert-manager).
# Nothing listens on 0.0.0.0: each server binds its pod's own address (the downward API's
# status.podIP). NetworkPolicies: only pods labelled `ferry.dev/role: envoy` (the Envoys that
# run the filter: label the workloads whose sidecars run it, or Envoy Gateway's proxies
# through its EnvoyProxy resource) reach the reader; only those and pods labelled
# `ferry.dev/role: operator` (the job running `ferry apply --push`) reach the control plane.
# TLS on every server (docs/security.md): each serves its own certificate, from a secret that
# cert-manager issues and renews (the Certificates, signed by the `ferry-ca` Issuer), mounted
# as files that the servers reload when the kubelet swaps them; each requires client
# certificates of that CA (mTLS). The Envoys that call the reader and the control plane hold a
# certificate of the same CA (`ferry-envoy-tls`, a URI SAN naming their service account), and
# so does the operator job pushing snapshots (`ferry-operator-tls`). `ferry serve` signs the
# snapshots it serves with the key in the `ferry-signing-key` secret (`ferry keygen`).
# Checked by tests/integration/tests/deploy_manifests.rs (parsed, fields checked, every
# server's TLS flags naming files of a mounted secret) and deploy_schemas.rs (Kubernetes' and
# cert-manager's schemas, through kubectl-validate; equal to the chart's rendering); never
# applied to a cluster here (no Kubernetes on the build machine).
HEADER
  HELM_CACHE_HOME="$tmp/cache" HELM_CONFIG_HOME="$tmp/config" HELM_DATA_HOME="$tmp/data" \
    "$tools/bin/helm" template ferry deploy/helm/ferry --namespace ferry --set namespace.create=true
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
render > "$tmp/ferry.yaml"
if [ "${1:-}" = "--check" ]; then
  diff -u "$out" "$tmp/ferry.yaml" || { echo "$out differs from the chart's rendering: run scripts/render-manifests.sh" >&2; exit 1; }
else
  cp "$tmp/ferry.yaml" "$out"
  echo "wrote $out" >&2
fi
