#!/usr/bin/env bash
# bench/write_flood.sh: what a write flood does to enrichment (issue #37), in one run.
# One Redis, `ferry serve` with a write token behind Envoy (`envoy-config --write-address`, the
# Wasm filter), the reader and the demo model, release builds; the benchmark repo with a push
# source for user_stats. Enriched requests (KServe v1, batch 1, closed loop, 1 connection,
# `ferry-bench`) for FLOOD_SECONDS with no writes, then for FLOOD_SECONDS while FLOOD_CLIENTS
# clients push bodies of about 8 MiB (FLOOD_ROWS rows of user_stats, 10 float32 each, built once
# per client: bench/push/flood.py) through Envoy as fast as they can (a refusal, `ferry serve`'s
# 429 or Envoy's 503 at --write-max-requests, is sent again after its Retry-After), then once more
# with no writes.
# FLOOD_PIN=1: the arrangement of a deployment whose control plane has a pod of its own, on a
# 2-CPU machine: `ferry serve` and the writers pinned (taskset) to CPU 1; Envoy, the reader,
# the model and ferry-bench to CPU 0; Redis unpinned (shared by both sides, as a deployment's
# one Redis is). FLOOD_PIN_REDIS=1 (with FLOOD_PIN=1): Redis on CPU 0 too, beside Envoy (a
# deployment's Redis has a node of its own, not the control plane's CPU).
# Prints JSON lines (the enrichment rows of ferry-bench, the writers' counts); logs in
# bench/.run/write_flood/.
# Knobs: FLOOD_SECONDS (20), FLOOD_CLIENTS (8), FLOOD_ROWS (60000), FLOOD_ENTITIES (100000),
# FLOOD_PORT_BASE (19500), FLOOD_MAX_WRITES (ferry serve's default), FLOOD_ENVOY_MAX_WRITES
# (envoy-config --write-max-requests: its default), FLOOD_KEYS_PER_SECOND (ferry serve
# --max-write-keys-per-second: its default; 0 = no bound), FLOOD_PIN (0), FLOOD_PIN_REDIS (0), FLOOD_DIRECT (0), FLOOD_CONTROL (0), FLOOD_RATE (closed loop), FLOOD_IGNORE_RETRY_AFTER=1
# (the writers send again at once after a refusal), BENCH_NO_BUILD=1, FEAST_VENV (default
# .venv-feast: Python for the data generator and the writers), FERRY_ENVOY.
set -euo pipefail
source "$(dirname "$0")/lib.sh" write_flood feast
BIN=${FLOOD_BIN:-$BIN}; WASM=${FLOOD_WASM:-$WASM}; ENVOY=${FERRY_ENVOY:-$ENVOY}
SECONDS_EACH=${FLOOD_SECONDS:-20}
CLIENTS=${FLOOD_CLIENTS:-8}
ROWS=${FLOOD_ROWS:-60000}
ENTITIES=${FLOOD_ENTITIES:-100000}
BASE=${FLOOD_PORT_BASE:-19500}
REDIS_PORT=$((BASE + 1)); READER_PORT=$((BASE + 2)); MODEL_PORT=$((BASE + 3))
LISTEN_PORT=$((BASE + 4)); ADMIN_PORT=$((BASE + 5)); XDS_PORT=$((BASE + 7)); CP_PORT=$((BASE + 8))
TOKEN=bench-write-token-0123456789abcdef
PROCS="envoy cp model reader redis"
# FLOOD_PIN=1: the write side on CPU 1, the enrichment side on CPU 0 (empty: no pinning).
WRITE_CPU=(); READ_CPU=()
if [ "${FLOOD_PIN:-0}" = 1 ]; then
  [ "$(nproc)" -ge 2 ] || { echo "write_flood: FLOOD_PIN=1 needs 2 CPUs" >&2; exit 1; }
  WRITE_CPU=(taskset -c 1); READ_CPU=(taskset -c 0)
fi
# FLOOD_PIN_REDIS=1 (with FLOOD_PIN=1): Redis on the enrichment side's CPU too, as a deployment's
# Redis runs on a node of its own, not beside the control plane; every write's Redis work still
# lands on it, beside Envoy.
REDIS_CPU=()
[ "${FLOOD_PIN_REDIS:-0}" = 1 ] && REDIS_CPU=("${READ_CPU[@]}")
# FLOOD_PIN_REDIS=write: Redis on the write side's CPU instead, off the enrichment CPU.
[ "${FLOOD_PIN_REDIS:-0}" = write ] && REDIS_CPU=("${WRITE_CPU[@]}")

stop_at_exit write_flood $PROCS
say() { echo "== $(date +%H:%M:%S) $*" >&2; }

bench_build bench
stop_all $PROCS
ports_free write_flood FLOOD_PORT_BASE $REDIS_PORT $READER_PORT $MODEL_PORT $LISTEN_PORT $ADMIN_PORT $XDS_PORT $CP_PORT
rm -rf "$RUN_DIR"; mkdir -p "$RUN_DIR/repo"

"$PY" "$BENCH/repo/generate_data.py" --entities "$ENTITIES" --out "$RUN_DIR/repo/data" >/dev/null
{ cat "$BENCH/repo/ferry.yaml"; printf '\npush_sources:\n  - {name: stats_push, views: [user_stats]}\n'; } \
  > "$RUN_DIR/repo/ferry.yaml"
start redis "${REDIS_CPU[@]}" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
REDIS="redis://127.0.0.1:$REDIS_PORT/0"
"$BIN/ferry" materialize "$RUN_DIR/repo" --redis "$REDIS" >/dev/null 2>"$RUN_DIR/materialize.err"

max_writes=(); envoy_max_writes=()
[ -n "${FLOOD_MAX_WRITES:-}" ] && max_writes=(--max-concurrent-writes "$FLOOD_MAX_WRITES")
[ -n "${FLOOD_KEYS_PER_SECOND:-}" ] && max_writes+=(--max-write-keys-per-second "$FLOOD_KEYS_PER_SECOND")
[ -n "${FLOOD_ENVOY_MAX_WRITES:-}" ] && envoy_max_writes=(--write-max-requests "$FLOOD_ENVOY_MAX_WRITES")
start cp "${WRITE_CPU[@]}" "$BIN/ferry" serve "$RUN_DIR/repo" --wasm "$WASM" --xds-listen "127.0.0.1:$XDS_PORT" \
  --http-listen "127.0.0.1:$CP_PORT" --token bench-push-token-0123456789abcdef \
  --write-token "$TOKEN" --redis "$REDIS" "${max_writes[@]}"
start reader "${READ_CPU[@]}" "$BIN/ferry-reader" --listen "127.0.0.1:$READER_PORT" --redis "$REDIS"
start model "${READ_CPU[@]}" "$BIN/ferry-demo-model" --listen "127.0.0.1:$MODEL_PORT"
"$BIN/ferry" envoy-config "$RUN_DIR/repo" --wasm "$WASM" --listen-port "$LISTEN_PORT" \
  --admin-port "$ADMIN_PORT" --reader-port "$READER_PORT" --model-port "$MODEL_PORT" \
  --write-address "127.0.0.1:$CP_PORT" "${envoy_max_writes[@]}" -o "$RUN_DIR/envoy.yaml"
start envoy "${READ_CPU[@]}" "$ENVOY" -c "$RUN_DIR/envoy.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2 --base-id 402
wait_for cp "http://127.0.0.1:$CP_PORT/healthz"
wait_for reader "http://127.0.0.1:$READER_PORT/healthz"
wait_for envoy "http://127.0.0.1:$ADMIN_PORT/ready"

bytes=$("$PY" - "$ROWS" <<'EOF'
import sys
sys.path.insert(0, "bench/push")
from load import body
users = [f"u{j % 100000 + 1:06d}" for j in range(int(sys.argv[1]))]
print(len(body("stats_push", users, 1.8e9, 12345.0)))
EOF
)
say "load average: $(cut -d' ' -f1-3 /proc/loadavg); write bodies of $ROWS rows: $bytes bytes; pinned: ${FLOOD_PIN:-0}; writers ignore Retry-After: ${FLOOD_IGNORE_RETRY_AFTER:-0}"

# FLOOD_RATE=R: enrichment in open loop, R requests a second over 8 connections (latency from
# the intended send time), so that the enrichment side's CPU keeps headroom as an ingress does;
# else closed loop on one connection, which keeps that CPU saturated.
load=(--connections 1)
[ -n "${FLOOD_RATE:-}" ] && load=(--connections 8 --rate "$FLOOD_RATE")
enrich() {
  "${READ_CPU[@]}" "$BIN/ferry-bench" --url "http://127.0.0.1:$LISTEN_PORT/v1/models/scoring:predict" \
    --protocol kserve --scenario "$1" --batch 1 "${load[@]}" --duration "$SECONDS_EACH" \
    --warmup 2 --id-space "$ENTITIES"
}

say "1. enrichment, no writes, ${SECONDS_EACH}s"
enrich "flood_none_before"
# FLOOD_CONTROL=1 (with FLOOD_PIN=1): two controls with no writes at all, the write side's CPU
# kept busy instead, first by a busy loop (what a busy neighbour CPU costs enrichment on this
# machine: its two vCPUs may share a physical core), then by copying 32 MiB blocks (what a
# neighbour streaming through memory costs: the caches and memory bandwidth the CPUs share, as
# a write's bodies do).
if [ "${FLOOD_CONTROL:-0}" = 1 ]; then
  for control in "busy_loop:while :; do :; done" "memory:while :; do dd if=/dev/zero of=/dev/null bs=32M count=64 2>/dev/null; done"; do
    say "1b. enrichment, no writes, the write side's CPU running ${control%%:*}, ${SECONDS_EACH}s"
    "${WRITE_CPU[@]}" timeout "$((SECONDS_EACH + 4))" sh -c "${control#*:}" &
    burner=$!
    sleep 1
    enrich "flood_none_neighbour_${control%%:*}"
    wait "$burner" || true
  done
fi
say "2. enrichment while $CLIENTS clients push ~8 MiB bodies through Envoy"
# FLOOD_DIRECT=1: the writers post to `ferry serve`'s own port, around the enrichment Envoy (as
# in a deployment whose writes enter through a gateway of their own); else through Envoy.
write_port=$LISTEN_PORT; [ "${FLOOD_DIRECT:-0}" = 1 ] && write_port=$CP_PORT
"${WRITE_CPU[@]}" "$PY" "$BENCH/push/flood.py" "http://127.0.0.1:$write_port/push" stats_push \
  "$CLIENTS" "$((SECONDS_EACH + 4))" "$ROWS" "$ENTITIES" "$TOKEN" > "$RUN_DIR/writers.json" &
writers=$!
sleep 3
enrich "flood_${CLIENTS}_writers"
wait "$writers"
cat "$RUN_DIR/writers.json"
curl -fsS "http://127.0.0.1:$CP_PORT/metrics" | grep -E '^ferry_write_(refusals_total\{reason="(too_many_writes|body_too_large)"\}|rows_total\{result="written"\}|paced_seconds_total)' \
  | sed 's/^/# /' || true
{ curl -sS "http://127.0.0.1:$ADMIN_PORT/stats" || true; } | grep -E \
  '^(cluster\.ferry_write\.(upstream_rq_pending_overflow|upstream_cx_tx_bytes_total)|http\.ingress\.downstream_cx_rx_bytes_total):' \
  | sed 's/^/# envoy /' || true
# Redis's own time per command (the readers' MGET, the writes' GET and compare-and-set EVAL).
redis-cli -p "$REDIS_PORT" info commandstats | grep -E '^cmdstat_(mget|get|eval|evalsha):' \
  | sed 's/^/# redis /' || true
say "3. enrichment, no writes again, ${SECONDS_EACH}s"
enrich "flood_none_after"
say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
