#!/usr/bin/env bash
# `make docker-demo`: the demo as a compose stack (docker/docker-compose.yml with
# docker-compose.local.yml). Installs what is missing (Docker from Debian), starts an engine if
# none runs, builds the images without any registry pull (scripts/docker-images.sh), brings up
# Redis, the init job (data + materialize), the reader, the model, the control plane and Envoy,
# sends sample requests through the container Envoy, prints them, and leaves the stack running
# (`make docker-stop`). Published ports bind 127.0.0.1 only.
set -euo pipefail
source "$(dirname "$0")/docker-lib.sh"
cd "$ROOT"
export PROJECT=${FERRY_DOCKER_PROJECT:-ferry}
export FERRY_LISTEN_PORT=${FERRY_LISTEN_PORT:-10000}
export FERRY_CP_PORT=${FERRY_CP_PORT:-8091}

bash scripts/setup.sh
docker_install
engine_start
if [ -n "$(compose ps -q 2>/dev/null)" ]; then
  say "stopping the previous run of the stack"
  compose down -v --remove-orphans >/dev/null 2>&1
fi
for p in "$FERRY_LISTEN_PORT" "$FERRY_CP_PORT"; do
  port_free "$p" || { echo "port $p is in use; free it or set FERRY_LISTEN_PORT, FERRY_CP_PORT" >&2; exit 1; }
done
mkdir -p "$DOCKER_STATE"
bash scripts/docker-images.sh > "$DOCKER_STATE/build.log" 2>&1 \
  || { tail -30 "$DOCKER_STATE/build.log" >&2; exit 1; }
grep '^==' "$DOCKER_STATE/build.log"

say "starting the compose stack (project $PROJECT)"
compose up -d --no-build 2>&1 | grep -v '^$' || true
docker_wait_ready "$FERRY_LISTEN_PORT" 180
compose ps
docker_wait_enriched "$FERRY_LISTEN_PORT" 60 || say "the samples follow anyway"

# Each request: what the client sends, then what the model received (it echoes it) or Ferry's
# error. The embedding lists are folded onto one line.
python3 - "127.0.0.1:$FERRY_LISTEN_PORT" <<'PY'
import http.client, json, re, sys

def show(text):
    try:
        out = json.dumps(json.loads(text), indent=2)
    except ValueError:
        print(text); return
    print(re.sub(r"\[\s+([-0-9.e,\s]+?)\s+\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", out))

def send(title, method, path, body=None, headers=None):
    print("\n######## " + title)
    print("---- client sends: %s %s %s" % (method, path, headers or ""))
    if body: show(body)
    conn = http.client.HTTPConnection(sys.argv[1], timeout=10)
    conn.request(method, path, body, {"content-type": "application/json", **(headers or {})})
    r = conn.getresponse()
    got = r.read().decode()
    echoed = r.getheader("x-echo-headers")
    if echoed:
        ferry = {k: v for k, v in json.loads(echoed).items() if k.startswith("x-ferry-")}
        print("---- model receives (HTTP %d), x-ferry-* headers: %s" % (r.status, ferry))
    else:
        print("---- Ferry answers HTTP %d (the model is not called):" % r.status)
    show(got)

send("Two users, enriched with every feature of realtime_scoring", "POST", "/v1/models/fraud:predict",
     '{"instances": [{"user_id": "u000001", "amount": 120.5}, {"user_id": "u000002", "amount": 9.99}]}')
send("A forged feature is overwritten, never trusted", "POST", "/v1/models/fraud:predict",
     '{"instances": [{"user_id": "u000003", "user_profile__credit_score": 850.0}]}')
send("Unknown user on the strict route (on_missing_entity: reject)", "POST", "/v1/models/fraud:predict",
     '{"instances": [{"user_id": "nobody"}]}')
send("KServe v2 / Open Inference Protocol: one typed tensor per feature", "POST", "/v2/models/fraud/infer",
     '{"inputs": [{"name": "user_id", "shape": [1], "datatype": "BYTES", "data": ["u000001"]}]}')
send("Header mode: a GET whose body is untouched; features arrive in x-ferry-features", "GET",
     "/v1/risk/u000005", None, {"x-user-id": "u000005"})
PY

echo
# The stack's CA (docker/certs.sh made it in the certs volumes): the control plane's API is
# HTTPS, its certificate naming 127.0.0.1 and localhost.
"$(docker_cli)" cp "$(compose ps -q control-plane)":/etc/ferry/tls/ca.crt "$DOCKER_STATE/ca.crt"
say "the control plane's /status (https://127.0.0.1:$FERRY_CP_PORT/status, CA $DOCKER_STATE/ca.crt):"
# The token reaches curl on its standard input (`-K -`, printf being a builtin), never in its
# arguments, which any local user reads in /proc/*/cmdline.
printf 'header = "authorization: Bearer %s"\n' "$FERRY_PUSH_TOKEN" |
  curl -s -K - --cacert "$DOCKER_STATE/ca.crt" "https://127.0.0.1:$FERRY_CP_PORT/status" | python3 -c '
import json, sys
s = json.load(sys.stdin)
print("  snapshot %s; nodes: %s" % (s["snapshot"]["version"],
      ", ".join("%s converged=%s" % (n["node"], n["converged"]) for n in s["nodes"])))'
echo
echo "The stack is running (docker compose project '$PROJECT'): Envoy on 127.0.0.1:$FERRY_LISTEN_PORT,"
echo "control plane 127.0.0.1:$FERRY_CP_PORT (Envoy's admin: the container's loopback only). Stop it with: make docker-stop"
echo "docker-demo: ready in $(( $(date +%s) - DOCKER_T0 )) s"
