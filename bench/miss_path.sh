#!/usr/bin/env bash
# bench/miss_path.sh: where a near-cache miss's time and CPU go under the native module, measured
# in one sitting. One Redis, one reader and one model serve two Envoys running the native module:
# A calls the reader cluster (a dispatched call, as the Wasm build does), B answers reader calls
# in process (FERRY_NATIVE_READER). A also has bench.sh's passthrough listener (the floor). A
# third, D, runs the Wasm filter calling the same reader cluster (case `wasm_reader_cluster`).
# ferry-bench drives each case in turn, round after round (closed loop, 1 connection), and the
# CPU time (utime + stime from /proc) each process spent during the case is divided by the
# requests it served. Every Envoy runs its build's per-stage timers (FERRY_NATIVE_STAGES for the
# module, FERRY_WASM_STAGES in the Wasm VM's environment, issue #34): a second table splits each
# filtered case's request into stages.
# The floor is measured in the same run: redis-benchmark sends the same MGET (1 or 100 of the
# stored vector keys) straight to the same Redis over one connection, and ferry-floor sends
# MGETs of as many keys drawn at random from the same id space as ferry-bench draws them (the
# floor of a random batch, not flattered by keys hot in Redis's caches). Prints the tables
# (medians over rounds); rows stay in bench/.run/miss-path/ (git-ignored).
#
# Needs what `make bench` installs and builds (BENCH_NO_BUILD=1 skips the build).
# Knobs: MP_ROUNDS (3), MP_BATCHES ("1 100"), MP_DURATION (4 s), MP_ENTITIES (100000),
# MP_PORT_BASE (19300). MP_ALT_READER: more reader flags (e.g. "--threads 2") for a third Envoy,
# C, whose in-process case (`native_in_process_alt`) runs beside B's in each round: an A/B of
# the in-process reader's settings within one run. MP_ALT_NATIVE: another build of the module
# (a .so, e.g. the previous commit's) for Envoy C, for an A/B of a change within one run.
set -euo pipefail
source "$(dirname "$0")/lib.sh" miss-path

ROUNDS=${MP_ROUNDS:-3}
BATCHES=${MP_BATCHES:-"1 100"}
DURATION=${MP_DURATION:-4}
ENTITIES=${MP_ENTITIES:-100000}
BASE=${MP_PORT_BASE:-19300}
REDIS_PORT=$((BASE + 1)); READER_PORT=$((BASE + 2)); MODEL_PORT=$((BASE + 3))
PASS_PORT=$((BASE + 4)); A_PORT=$((BASE + 10)); B_PORT=$((BASE + 20)); C_PORT=$((BASE + 30))
D_PORT=$((BASE + 40))
ALT_FLAGS=${MP_ALT_READER:-}; ALT_NATIVE=${MP_ALT_NATIVE:-$NATIVE}
ALT=$([ -n "$ALT_FLAGS${MP_ALT_NATIVE:-}" ] && echo 1 || true)
PROCS="envoy-a envoy-b envoy-d model reader redis${ALT:+ envoy-c}"

stop_at_exit miss_path $PROCS
say() { echo "== $(date +%H:%M:%S) $*"; }

if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
  say "building (release)"
  cargo build --release --quiet -p ferry -p ferry-reader -p ferry-demo-model -p bench
  cargo build --profile native --quiet -p ferry-native
fi
[ -x "$PY" ] || { echo "miss_path: no bench/.venv; run make bench once" >&2; exit 1; }
stop_all $PROCS
ports_free miss_path MP_PORT_BASE $REDIS_PORT $READER_PORT $MODEL_PORT $PASS_PORT $A_PORT $((A_PORT + 1)) $B_PORT $((B_PORT + 1)) \
  $D_PORT $((D_PORT + 1))
rm -rf "$RUN_DIR"; mkdir -p "$RUN_DIR"

say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
say "generating $ENTITIES users, materializing into Redis :$REDIS_PORT"
"$PY" "$BENCH/repo/generate_data.py" --entities "$ENTITIES" --anchor "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >/dev/null
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
REDIS="redis://127.0.0.1:$REDIS_PORT/0"
FERRY_REDIS="$REDIS" "$BIN/ferry" materialize "$BENCH/repo" >/dev/null 2>"$RUN_DIR/materialize.err"
FINGERPRINT=$("$BIN/ferry" apply "$BENCH/repo" | awk '/^feature service scoring / {for (i=1;i<NF;i++) if ($i=="fingerprint") print $(i+1)}')

say "starting the reader, the model and three Envoys (A: reader cluster, B: in-process reader, D: Wasm)"
start reader "$BIN/ferry-reader" --listen "127.0.0.1:$READER_PORT" --redis "$REDIS"
start model "$BIN/ferry-demo-model" --listen "127.0.0.1:$MODEL_PORT"
for x in A B ${ALT:+C}; do
  port=$(case $x in A) echo "$A_PORT";; B) echo "$B_PORT";; C) echo "$C_PORT";; esac)
  module=$([ $x = C ] && echo "$ALT_NATIVE" || echo "$NATIVE")
  "$BIN/ferry" envoy-config "$BENCH/repo" --runtime native --native-module "$module" \
    --listen-port "$port" --admin-port $((port + 1)) --reader-port "$READER_PORT" \
    --model-port "$MODEL_PORT" -o "$RUN_DIR/envoy-$x.yaml"
done
"$BIN/ferry" envoy-config "$BENCH/repo" --wasm "$WASM" --listen-port "$D_PORT" \
  --admin-port $((D_PORT + 1)) --reader-port "$READER_PORT" --model-port "$MODEL_PORT" \
  -o "$RUN_DIR/envoy-D-plain.yaml"
# The Wasm VM's environment turns its stage timers on (they log to Envoy's log at warn).
"$PY" - "$RUN_DIR/envoy-D-plain.yaml" > "$RUN_DIR/envoy-D.yaml" <<'PY'
import sys, yaml
config = yaml.safe_load(open(sys.argv[1]))
found = 0
for listener in config["static_resources"]["listeners"]:
    for chain in listener["filter_chains"]:
        for f in chain["filters"]:
            for h in f.get("typed_config", {}).get("http_filters", []):
                if h.get("name") == "ferry":
                    vm = h["typed_config"]["config"]["vm_config"]
                    vm["environment_variables"] = {"key_values": {"FERRY_WASM_STAGES": "1"}}
                    found += 1
if not found:
    sys.exit("miss_path: no Wasm filter named 'ferry' in the rendered config")
yaml.safe_dump(config, sys.stdout, sort_keys=False)
PY
"$PY" "$BENCH/passthrough.py" "$RUN_DIR/envoy-A.yaml" "$PASS_PORT" > "$RUN_DIR/envoy-A-pass.yaml"
start envoy-a env FERRY_NATIVE_STAGES="$RUN_DIR/stages-a.txt" \
  "$ENVOY" -c "$RUN_DIR/envoy-A-pass.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2 --base-id 301
start envoy-d "$ENVOY" -c "$RUN_DIR/envoy-D.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2 --base-id 304
start envoy-b env FERRY_NATIVE_READER="--redis $REDIS" FERRY_NATIVE_STAGES="$RUN_DIR/stages-b.txt" \
  "$ENVOY" -c "$RUN_DIR/envoy-B.yaml" --disable-hot-restart --log-level warn --concurrency 2 --base-id 302
if [ -n "$ALT" ]; then
  start envoy-c env FERRY_NATIVE_READER="--redis $REDIS $ALT_FLAGS" FERRY_NATIVE_STAGES="$RUN_DIR/stages-c.txt" \
    "$ENVOY" -c "$RUN_DIR/envoy-C.yaml" --disable-hot-restart --log-level warn --concurrency 2 --base-id 303
  wait_for envoy-c "http://127.0.0.1:$((C_PORT + 1))/ready"
fi
wait_for reader "http://127.0.0.1:$READER_PORT/healthz"
wait_for envoy-a "http://127.0.0.1:$((A_PORT + 1))/ready"
wait_for envoy-b "http://127.0.0.1:$((B_PORT + 1))/ready"
wait_for envoy-d "http://127.0.0.1:$((D_PORT + 1))/ready"

PREDICT=/v1/models/scoring:predict
for port in $A_PORT $B_PORT $D_PORT ${ALT:+$C_PORT}; do
  h=$(curl -sS -D - -o /dev/null -H 'content-type: application/json' \
    --data-binary '{"instances":[{"user_id":"u000001","amount":1.5}]}' "http://127.0.0.1:$port$PREDICT")
  echo "$h" | grep -qi '^x-echo-headers:.*"x-ferry-status":"ok"' || {
    echo "miss_path: :$port was not enriched:"; echo "$h"; exit 1; }
done

ROWS="$RUN_DIR/rows.jsonl"; CPU="$RUN_DIR/cpu.txt"; STAGE_ROWS="$RUN_DIR/stages.rows"
FLOOR="$RUN_DIR/floor.csv"; FLOOR_RANDOM="$RUN_DIR/floor-random.csv"
FLOOR_CLIENTS="$RUN_DIR/floor-clients.csv"  # the same random MGETs through the reader's own store
mapfile -t KEYS < <(redis-cli -p "$REDIS_PORT" --scan --pattern 'ferry:*' | head -100)
KEY_PREFIX="${KEYS[0]%:*}:"  # ferry:PROJECT:SERVICE:FINGERPRINT: of the stored vectors
stages() { # stages ENVOY: its stage totals (the module's file is rewritten and the Wasm VMs log
  sleep 0.3  # every 100 ms)
  if [ "$1" = d ]; then "$PY" "$BENCH/wasm_stages.py" "$RUN_DIR/envoy-d.log"
  else cat "$RUN_DIR/stages-$1.txt" 2>/dev/null || true; fi
}
floor() { # floor BATCH: the same MGET straight to Redis, one connection, as many as a case sends
  local n=$((DURATION * 4000 / $1 + 1000))
  redis-benchmark -p "$REDIS_PORT" -c 1 -n "$n" --csv MGET "${KEYS[@]:0:$1}" 2>/dev/null \
    | tail -1 | sed "s/^/$1,/" >> "$FLOOR"
  "$BIN/ferry-floor" --redis "127.0.0.1:$REDIS_PORT" --prefix "$KEY_PREFIX" --batch "$1" \
    --id-space "$ENTITIES" --duration "$DURATION" --require-found | sed "s/^/$1,/" >> "$FLOOR_RANDOM"
  local client
  for client in store store-thread; do  # redis-rs as the in-process reader drives it, no Envoy
    "$BIN/ferry-floor" --redis "127.0.0.1:$REDIS_PORT" --prefix "$KEY_PREFIX" --batch "$1" \
      --id-space "$ENTITIES" --duration "$DURATION" --require-found --client "$client" \
      | sed "s/^/$1,/" >> "$FLOOR_CLIENTS"
  done
}
cpu() { awk '{print $14 + $15}' "/proc/$(cat "$RUN_DIR/$1.pid")/stat"; }
run() { # run CASE URL PROTOCOL BATCH: one measured case, and each process's CPU ticks during it
  local before=() after=() p s0 own=b timed=b
  case $1 in  # Envoy C's and D's CPU go in the column of Envoy B; timed: whose stages
    native_in_process_alt) own=c; timed=c ;;
    wasm_reader_cluster) own=d; timed=d ;;
    native_reader_cluster) timed=a ;;
  esac
  for p in envoy-a envoy-$own reader redis; do before+=("$(cpu $p)"); done
  s0=$(stages $timed)
  "$BIN/ferry-bench" --url "$2" --protocol "$3" --scenario "$1" --id-space "$ENTITIES" \
    --fingerprint "$FINGERPRINT" --batch "$4" --connections 1 --duration "$DURATION" \
    --warmup 0 --out "$ROWS" >/dev/null \
    || echo "miss_path: $1 batch $4 had errors (counted in its row); going on" >&2
  for p in envoy-a envoy-$own reader redis; do after+=("$(cpu $p)"); done
  paste -d' ' <(echo "$s0") <(stages $timed) | sed "s/^/$1 $4 /" >> "$STAGE_ROWS"
  echo "$1 $4 $((after[0] - before[0])) $((after[1] - before[1])) $((after[2] - before[2])) $((after[3] - before[3]))" >> "$CPU"
}
for port in $A_PORT $B_PORT $D_PORT ${ALT:+$C_PORT}; do  # warm the pools; not recorded
  "$BIN/ferry-bench" --url "http://127.0.0.1:$port$PREDICT" --protocol kserve --scenario warm \
    --id-space "$ENTITIES" --batch 10 --connections 2 --duration 1 --warmup 0 >/dev/null
done
for round in $(seq "$ROUNDS"); do
  say "round $round/$ROUNDS; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for b in $BATCHES; do
    run passthrough "http://127.0.0.1:$PASS_PORT$PREDICT" kserve "$b"
    run native_reader_cluster "http://127.0.0.1:$A_PORT$PREDICT" kserve "$b"
    run wasm_reader_cluster "http://127.0.0.1:$D_PORT$PREDICT" kserve "$b"
    run native_in_process "http://127.0.0.1:$B_PORT$PREDICT" kserve "$b"
    [ -z "$ALT" ] || run native_in_process_alt "http://127.0.0.1:$C_PORT$PREDICT" kserve "$b"
    floor "$b"
  done
  run reader_direct "http://127.0.0.1:$READER_PORT/v1/vectors" reader 1
done
say "done; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# The tables (bench/miss_path_report.py RUN_DIR prints them again from a kept run dir).
"$PY" "$BENCH/miss_path_report.py" "$RUN_DIR" "$(getconf CLK_TCK)"
