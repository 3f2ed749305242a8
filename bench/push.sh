#!/usr/bin/env bash
# bench/push.sh: push throughput and push-to-served latency (issue #23), in one sitting.
# One Redis (db 0: Ferry's vectors, db 1: Feast's hashes), `ferry serve` with a write token
# behind Envoy (`envoy-config --write-address`, the Wasm filter, near cache off on the route
# polled), the reader and the demo model, and `feast serve` (Feast 0.67) over bench/push/'s
# repo, whose user_stats is fed by a PushSource. All release builds.
#   1. Redis's own limit for one read-modify-write per key: redis-benchmark of GET and of the
#      write path's compare-and-set EVAL (same key, value unchanged), 1 and 8 connections.
#   2. Push throughput: Feast /push bodies of PUSH_ROWS rows of user_stats (10 float32),
#      distinct users, 1 and 8 connections, into Ferry through Envoy and into feast serve.
#   3. Push-to-served: push one row through Envoy, poll the predict route until the model is
#      given the new value; PUSH_SAMPLES samples.
# Prints JSON lines; logs in bench/.run/push/.
# Knobs: PUSH_SECONDS (10), PUSH_ROWS (100), PUSH_ENTITIES (10000), PUSH_SAMPLES (300),
# PUSH_PORT_BASE (19400), BENCH_NO_BUILD=1, FEAST_VENV (default .venv-feast), FERRY_ENVOY.
set -euo pipefail
source "$(dirname "$0")/lib.sh" push feast
# Private copies of the binaries (the shared target/ may be rebuilt meanwhile): PUSH_BIN, PUSH_WASM.
BIN=${PUSH_BIN:-$BIN}; WASM=${PUSH_WASM:-$WASM}; ENVOY=${FERRY_ENVOY:-$ENVOY}
SECONDS_EACH=${PUSH_SECONDS:-10}
ROWS=${PUSH_ROWS:-100}
ENTITIES=${PUSH_ENTITIES:-10000}
SAMPLES=${PUSH_SAMPLES:-300}
BASE=${PUSH_PORT_BASE:-19400}
REDIS_PORT=$((BASE + 1)); READER_PORT=$((BASE + 2)); MODEL_PORT=$((BASE + 3))
LISTEN_PORT=$((BASE + 4)); ADMIN_PORT=$((BASE + 5)); FEAST_PORT=$((BASE + 6))
XDS_PORT=$((BASE + 7)); CP_PORT=$((BASE + 8))
TOKEN=bench-write-token-0123456789abcdef
PROCS="feast envoy cp model reader redis"

stop_at_exit push $PROCS
say() { echo "== $(date +%H:%M:%S) $*" >&2; }

bench_build
stop_all $PROCS
ports_free push PUSH_PORT_BASE $REDIS_PORT $READER_PORT $MODEL_PORT $LISTEN_PORT $ADMIN_PORT $FEAST_PORT $XDS_PORT $CP_PORT
rm -rf "$RUN_DIR"; mkdir -p "$RUN_DIR/repo"
say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# The benchmark repo with a push source for user_stats, its data in the run folder.
"$PY" "$BENCH/repo/generate_data.py" --entities "$ENTITIES" --out "$RUN_DIR/repo/data" >/dev/null
{ cat "$BENCH/repo/ferry.yaml"; printf '\npush_sources:\n  - {name: stats_push, views: [user_stats]}\n'; } \
  > "$RUN_DIR/repo/ferry.yaml"
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
REDIS="redis://127.0.0.1:$REDIS_PORT/0"
"$BIN/ferry" materialize "$RUN_DIR/repo" --redis "$REDIS" >/dev/null 2>"$RUN_DIR/materialize.err"

say "1. Redis's limit: GET and the compare-and-set EVAL, same key"
CAS=$(sed -n '/^pub const CAS: &str = r"/,/^";/p' control-plane/vector-store/src/cas.rs | sed '1d;$d')
redis-cli -p "$REDIS_PORT" -n 2 set k v >/dev/null
for c in 1 8; do
  for cmd in GET EVAL; do
    if [ $cmd = GET ]; then args=(GET k); else args=(EVAL "$CAS" 1 k 1 v v); fi
    rps=$(redis-benchmark -p "$REDIS_PORT" --dbnum 2 -c "$c" -n $((c * 20000)) -q "${args[@]}" \
      | tr '\r' '\n' | awk '/requests per second/ {for (i = 1; i < NF; i++) if ($(i + 1) == "requests") print $i}' | tail -1)
    echo "{\"redis\": \"$cmd\", \"conns\": $c, \"per_s\": $rps}"
  done
done

say "starting ferry serve, the reader, the model, Envoy and feast serve"
start cp "$BIN/ferry" serve "$RUN_DIR/repo" --wasm "$WASM" --xds-listen "127.0.0.1:$XDS_PORT" \
  --http-listen "127.0.0.1:$CP_PORT" --token bench-push-token-0123456789abcdef --write-token "$TOKEN" --redis "$REDIS"
start reader "$BIN/ferry-reader" --listen "127.0.0.1:$READER_PORT" --redis "$REDIS"
start model "$BIN/ferry-demo-model" --listen "127.0.0.1:$MODEL_PORT"
"$BIN/ferry" envoy-config "$RUN_DIR/repo" --wasm "$WASM" --listen-port "$LISTEN_PORT" \
  --admin-port "$ADMIN_PORT" --reader-port "$READER_PORT" --model-port "$MODEL_PORT" \
  --write-address "127.0.0.1:$CP_PORT" -o "$RUN_DIR/envoy.yaml"
start envoy "$ENVOY" -c "$RUN_DIR/envoy.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2 --base-id 401
export FEAST_BENCH_REGISTRY="$RUN_DIR/feast-registry.db"
export FEAST_BENCH_REDIS="127.0.0.1:$REDIS_PORT,db=1"
export FEAST_BENCH_DATA="$RUN_DIR/repo/data"
("$VENV/bin/feast" -c "$BENCH/push" apply >"$RUN_DIR/feast-apply.log" 2>&1) \
  || { tail -20 "$RUN_DIR/feast-apply.log"; exit 1; }
start feast "$VENV/bin/feast" -c "$BENCH/push" serve --host 127.0.0.1 --port "$FEAST_PORT" \
  --workers -1 --worker-connections 1000 --registry_ttl_sec 60 --keep-alive-timeout 30 \
  --no-access-log
wait_for cp "http://127.0.0.1:$CP_PORT/healthz"
wait_for reader "http://127.0.0.1:$READER_PORT/healthz"
wait_for envoy "http://127.0.0.1:$ADMIN_PORT/ready"
for _ in $(seq 600); do curl -fsS -o /dev/null "http://127.0.0.1:$FEAST_PORT/health" 2>/dev/null && break; sleep 0.1; done

say "2. push throughput, $ROWS rows/request, ${SECONDS_EACH}s per case"
for c in 1 8; do
  "$PY" "$BENCH/push/load.py" throughput "http://127.0.0.1:$LISTEN_PORT/push" stats_push "$c" \
    "$SECONDS_EACH" "$ROWS" "$ENTITIES" "$TOKEN"
  "$PY" "$BENCH/push/load.py" throughput "http://127.0.0.1:$FEAST_PORT/push" stats_push "$c" \
    "$SECONDS_EACH" "$ROWS" "$ENTITIES"
done

say "3. push-to-served through Envoy (near cache off), $SAMPLES samples"
"$PY" "$BENCH/push/load.py" latency "http://127.0.0.1:$LISTEN_PORT/push" \
  "http://127.0.0.1:$LISTEN_PORT/v1/models/scoring:predict" stats_push "$SAMPLES" "$TOKEN"
say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
