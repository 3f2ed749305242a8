#!/usr/bin/env bash
# `make test-docker`: the compose stack run for real and checked, then torn down. Installs Docker
# if missing, starts an engine if none runs, builds the images (scripts/docker-images.sh, no
# registry), brings the stack up as compose project `ferry-test` on free 127.0.0.1 ports, copies
# the sources the init container generated out of its volume, and runs
# tests/integration/tests/docker_stack.rs against it (values against the sources, a hot push).
# Always (trap) removes the stack and its volumes and, if it started the engine, stops it and
# checks the host's network state is back to what it was. Bounded: FERRY_DOCKER_TEST_LIMIT
# seconds (default 1200) in all. The images carry the debug binaries `make test` builds (the
# release LTO build is left to the demo).
set -euo pipefail
if [ -z "${FERRY_DOCKER_TEST_BOUNDED:-}" ]; then
  export FERRY_DOCKER_TEST_BOUNDED=1
  exec timeout -k 120 "${FERRY_DOCKER_TEST_LIMIT:-1200}" bash "$0" "$@"
fi
source "$(dirname "$0")/docker-lib.sh"
cd "$ROOT"
export PROJECT=ferry-test
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export FERRY_LISTEN_PORT=$(free_port) FERRY_CP_PORT=$(free_port)
TMP=$(mktemp -d)

teardown() {
  local rc=$?
  set +e
  trap - EXIT TERM INT
  if engine_running; then
    [ "$rc" -ne 0 ] && compose logs --tail 30 > "$TMP/stack.log" 2>&1 && tail -60 "$TMP/stack.log" >&2
    compose down -v --remove-orphans > /dev/null 2>&1 || { echo "compose down failed" >&2; rc=1; }
  fi
  engine_stop || rc=1
  rm -rf "$TMP"
  echo "test-docker: $([ "$rc" -eq 0 ] && echo passed || echo FAILED) in $(( $(date +%s) - DOCKER_T0 )) s"
  exit "$rc"
}
trap teardown EXIT
trap 'exit 143' TERM INT

docker_install
engine_start
mkdir -p "$DOCKER_STATE"
FERRY_DOCKER_PROFILE=debug bash scripts/docker-images.sh > "$DOCKER_STATE/test-build.log" 2>&1 \
  || { tail -30 "$DOCKER_STATE/test-build.log" >&2; exit 1; }
grep '^==' "$DOCKER_STATE/test-build.log"
say "the stack up (project $PROJECT; Envoy 127.0.0.1:$FERRY_LISTEN_PORT, control plane 127.0.0.1:$FERRY_CP_PORT)"
compose up -d --no-build > "$TMP/up.log" 2>&1 || { cat "$TMP/up.log" >&2; exit 1; }
docker_wait_ready "$FERRY_LISTEN_PORT" 180
docker_wait_enriched "$FERRY_LISTEN_PORT" 60

# The sources as the init container generated them (anchored at its start), for the checks.
mkdir -p "$TMP/repo"
cp examples/banking/ferry.yaml "$TMP/repo/"
"$(docker_cli)" cp "$(compose ps -q control-plane)":/opt/ferry/examples/banking/data "$TMP/repo/data"
# The stack's CA (docker/certs.sh), which the control plane's certificate chains to.
"$(docker_cli)" cp "$(compose ps -q control-plane)":/etc/ferry/tls/ca.crt "$TMP/ca.crt"

say "tests/integration/tests/docker_stack.rs against the stack"
cargo build --quiet --workspace --bins
FERRY_DOCKER_REPO="$TMP/repo" FERRY_DOCKER_CA="$TMP/ca.crt" FERRY_DOCKER_LISTEN_PORT=$FERRY_LISTEN_PORT FERRY_DOCKER_CP_PORT=$FERRY_CP_PORT \
  cargo test --quiet -p ferry-integration-tests --test docker_stack -- --ignored
