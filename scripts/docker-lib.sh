# Shared by the docker scripts (docker-demo.sh, docker-stop.sh, docker-test.sh): which Docker
# client and compose to use, installing Docker, and starting/stopping a Docker engine so that
# the host's network state (ip_forward, the nftables ruleset, network links) is put back exactly
# as it was before the engine started.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
DOCKER_DIR="$ROOT/docker"
DOCKER_STATE="$RUN_DIR/docker"        # engine pid, log, the network state recorded before start
DOCKER_T0=${DOCKER_T0:-$(date +%s)}; export DOCKER_T0
# secret VAR FILE: VAR from the environment, else a random token made once per checkout and
# kept in $DOCKER_STATE/FILE (mode 600); exported.
secret() {
  if [ -z "${!1:-}" ]; then
    if [ ! -s "$DOCKER_STATE/$2" ]; then
      mkdir -p "$DOCKER_STATE"
      (umask 077; python3 -c 'import secrets; print(secrets.token_hex(16))' > "$DOCKER_STATE/$2")
    fi
    printf -v "$1" '%s' "$(cat "$DOCKER_STATE/$2")"
  fi
  export "${1?}"
}
# The control plane's push token (it listens on the compose network, so it runs with one), for
# the compose file and for `ferry apply --push` / the tests on the host (FERRY_PUSH_TOKEN).
secret FERRY_PUSH_TOKEN push-token
# Redis's password in the stack (requirepass; the reader, the init job and the control plane
# AUTH with it).
secret FERRY_REDIS_PASSWORD redis-password
# say MESSAGE: a progress line with the seconds since the calling make target started.
say() { echo "== [$(( $(date +%s) - DOCKER_T0 )) s] $*"; }
sudo_if_needed() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# The client that talks to the engine: Debian's /usr/bin/docker (same version as the dockerd
# installed with it) before any other on PATH. A newer CLI elsewhere on PATH (e.g.
# /usr/local/bin/docker 28) needs the buildx plugin for BuildKit builds.
docker_cli() {
  if [ -x /usr/bin/docker ]; then echo /usr/bin/docker; else command -v docker; fi
}

# compose ARGS...: docker-compose (Debian's 1.29) or `docker compose`, on the demo's compose file
# plus docker-compose.local.yml (the local base images, see docker/README.md), with builds done
# by the Docker CLI with BuildKit (the Dockerfile's cache mounts and stage selection need it).
compose() {
  local files=(-f "$DOCKER_DIR/docker-compose.yml" -f "$DOCKER_DIR/docker-compose.local.yml")
  if command -v docker-compose >/dev/null 2>&1; then
    PATH="$(dirname "$(docker_cli)"):$PATH" COMPOSE_DOCKER_CLI_BUILD=1 DOCKER_BUILDKIT=1 \
      docker-compose "${files[@]}" -p "$PROJECT" "$@"
  else
    DOCKER_BUILDKIT=1 "$(docker_cli)" compose "${files[@]}" -p "$PROJECT" "$@"
  fi
}

# Installs from Debian what is missing: the engine and its client (docker.io), docker-compose,
# debootstrap (the local base image) and nftables (`nft`, to record and restore the ruleset).
docker_install() {
  local missing=()
  [ -x /usr/sbin/dockerd ] || command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
  command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  command -v nft >/dev/null 2>&1 || missing+=(nftables)
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]} from Debian"
  sudo_if_needed apt-get update -qq
  DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq "${missing[@]}" >/dev/null
}

# The host's network state that dockerd changes, one line per item, stable across runs.
net_state() {
  echo "ip_forward $(cat /proc/sys/net/ipv4/ip_forward)"
  local f
  for f in /proc/sys/net/bridge/bridge-nf-call-iptables /proc/sys/net/bridge/bridge-nf-call-ip6tables; do
    [ -r "$f" ] && echo "$(basename "$f") $(cat "$f")"
  done
  ip -o link show | awk -F': ' '{sub(/@.*/, "", $2); print "link " $2}' | sort
  sudo_if_needed nft -s list ruleset | sed 's/^/nft /'
}

engine_running() { "$(docker_cli)" info >/dev/null 2>&1; }

# Starts dockerd unless an engine already answers. Only an engine started here is recorded (and
# later stopped by engine_stop); before starting it, the network state is saved.
engine_start() {
  if engine_running; then
    say "a Docker engine is already running; using it (it is left running)"
    return 0
  fi
  if iptables --version 2>/dev/null | grep -q legacy; then
    echo "iptables uses the legacy backend; these scripts restore the nftables ruleset only" >&2
    return 1
  fi
  mkdir -p "$DOCKER_STATE"
  net_state > "$DOCKER_STATE/net-before"
  sudo_if_needed nft -s list ruleset > "$DOCKER_STATE/ruleset-before.nft"
  ls /sys/class/net > "$DOCKER_STATE/links-before"
  say "starting dockerd (log: .run/docker/dockerd.log)"
  setsid -f bash -c 'echo $$ > "$1"; exec dockerd' _ "$DOCKER_STATE/dockerd.pid" \
    > "$DOCKER_STATE/dockerd.log" 2>&1 < /dev/null
  for _ in $(seq 300); do engine_running && return 0; sleep 0.1; done
  echo "dockerd did not answer within 30 s; its log:" >&2
  tail -20 "$DOCKER_STATE/dockerd.log" >&2
  return 1
}

# Stops the dockerd engine_start started (none otherwise), then undoes what it changed in the
# network state and checks that the state equals the one recorded before it started.
engine_stop() {
  local f="$DOCKER_STATE/dockerd.pid" pid link
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    say "stopped dockerd (pid $pid)"
  fi
  rm -f "$f"
  net_restore
}

net_restore() {
  local before="$DOCKER_STATE/net-before" link value
  [ -f "$before" ] || return 0
  # Docker's links that appeared while the engine ran (docker0, a compose network's br-*, veths).
  for link in $(ls /sys/class/net | grep -E '^(docker0|br-[0-9a-f]+|veth[0-9a-f]+)$'); do
    grep -qx "$link" "$DOCKER_STATE/links-before" || sudo_if_needed ip link delete "$link"
  done
  value=$(awk '$1 == "ip_forward" {print $2}' "$before")
  echo "$value" | sudo_if_needed tee /proc/sys/net/ipv4/ip_forward >/dev/null
  for f in bridge-nf-call-iptables bridge-nf-call-ip6tables; do
    value=$(awk -v k="$f" '$1 == k {print $2}' "$before")
    [ -n "$value" ] && echo "$value" | sudo_if_needed tee "/proc/sys/net/bridge/$f" >/dev/null
  done
  sudo_if_needed nft flush ruleset
  sudo_if_needed nft -f "$DOCKER_STATE/ruleset-before.nft"
  if ! diff <(net_state) "$before" > "$DOCKER_STATE/net-diff"; then
    echo "the host's network state differs from before dockerd started:" >&2
    cat "$DOCKER_STATE/net-diff" >&2
    return 1
  fi
  rm -f "$before" "$DOCKER_STATE/ruleset-before.nft" "$DOCKER_STATE/links-before" "$DOCKER_STATE/net-diff"
  say "network state restored and checked: ip_forward, bridge sysctls, links, nftables ruleset as before"
}

# docker_wait_ready LISTEN_PORT SECONDS: until the compose Envoy answers on its published
# listener (it listens once its initialization, the control plane's snapshot included, is done;
# before that the published port's connections are reset), or fail showing the stack's recent
# logs. (Its admin /ready is on the container's loopback, not published.)
# docker_wait_enriched PORT SECONDS: until a known user comes back enriched through the compose
# Envoy (200). Envoy answering is not the reader serving: its first Redis call opens the
# connection (a TLS handshake) within the call's 50 ms budget, which a machine busy starting
# the stack can miss (504 redis_timeout until the reader's next connection answers).
docker_wait_enriched() {
  local i code=""
  for i in $(seq $(($2 * 4))); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -H 'content-type: application/json' \
      -d '{"instances": [{"user_id": "u000001"}]}' \
      "http://127.0.0.1:$1/v1/models/fraud:predict" 2>/dev/null || true)
    [ "$code" = 200 ] && { say "enriched through the compose Envoy"; return 0; }
    sleep 0.25
  done
  say "no enriched answer within $2 s (last HTTP $code)"
  return 1
}

docker_wait_ready() {
  local i code
  for i in $(seq $(($2 * 5))); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/" 2>/dev/null || true)
    [ -n "$code" ] && [ "$code" != 000 ] && return 0
    sleep 0.2
  done
  echo "the compose Envoy was not ready within $2 s; the stack's logs:" >&2
  compose ps >&2 || true
  compose logs --tail 20 >&2 || true
  return 1
}
