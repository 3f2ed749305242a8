#!/usr/bin/env bash
# bench/miss_path.sh: where a near-cache miss's time and CPU go under the native module, measured
# in one sitting. One Redis, one reader and one model serve two Envoys running the native module:
# A calls the reader cluster (a dispatched call, as the Wasm build does), B answers reader calls
# in process (FERRY_NATIVE_READER). A also has bench.sh's passthrough listener (the floor).
# ferry-bench drives each case in turn, round after round (closed loop, 1 connection), and the
# CPU time (utime + stime from /proc) each process spent during the case is divided by the
# requests it served. Envoy B also runs the module's per-stage timers (FERRY_NATIVE_STAGES,
# issue #34): a second table splits its in-process request into stages (mean µs per request).
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
ALT_FLAGS=${MP_ALT_READER:-}; ALT_NATIVE=${MP_ALT_NATIVE:-$NATIVE}
ALT=$([ -n "$ALT_FLAGS${MP_ALT_NATIVE:-}" ] && echo 1 || true)
PROCS="envoy-a envoy-b model reader redis${ALT:+ envoy-c}"

stop_at_exit miss_path $PROCS
say() { echo "== $(date +%H:%M:%S) $*"; }

if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
  say "building (release)"
  cargo build --release --quiet -p ferry -p ferry-reader -p ferry-demo-model -p bench
  cargo build --profile native --quiet -p ferry-native
fi
[ -x "$PY" ] || { echo "miss_path: no bench/.venv; run make bench once" >&2; exit 1; }
stop_all $PROCS
ports_free miss_path MP_PORT_BASE $REDIS_PORT $READER_PORT $MODEL_PORT $PASS_PORT $A_PORT $((A_PORT + 1)) $B_PORT $((B_PORT + 1))
rm -rf "$RUN_DIR"; mkdir -p "$RUN_DIR"

say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
say "generating $ENTITIES users, materializing into Redis :$REDIS_PORT"
"$PY" "$BENCH/repo/generate_data.py" --entities "$ENTITIES" --anchor "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >/dev/null
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
REDIS="redis://127.0.0.1:$REDIS_PORT/0"
FERRY_REDIS="$REDIS" "$BIN/ferry" materialize "$BENCH/repo" >/dev/null 2>"$RUN_DIR/materialize.err"
FINGERPRINT=$("$BIN/ferry" apply "$BENCH/repo" | awk '/^feature service scoring / {for (i=1;i<NF;i++) if ($i=="fingerprint") print $(i+1)}')

say "starting the reader, the model and two Envoys (A: reader cluster, B: in-process reader)"
start reader "$BIN/ferry-reader" --listen "127.0.0.1:$READER_PORT" --redis "$REDIS"
start model "$BIN/ferry-demo-model" --listen "127.0.0.1:$MODEL_PORT"
for x in A B ${ALT:+C}; do
  port=$(case $x in A) echo "$A_PORT";; B) echo "$B_PORT";; C) echo "$C_PORT";; esac)
  module=$([ $x = C ] && echo "$ALT_NATIVE" || echo "$NATIVE")
  "$BIN/ferry" envoy-config "$BENCH/repo" --runtime native --native-module "$module" \
    --listen-port "$port" --admin-port $((port + 1)) --reader-port "$READER_PORT" \
    --model-port "$MODEL_PORT" -o "$RUN_DIR/envoy-$x.yaml"
done
"$PY" "$BENCH/passthrough.py" "$RUN_DIR/envoy-A.yaml" "$PASS_PORT" > "$RUN_DIR/envoy-A-pass.yaml"
start envoy-a "$ENVOY" -c "$RUN_DIR/envoy-A-pass.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2 --base-id 301
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

PREDICT=/v1/models/scoring:predict
for port in $A_PORT $B_PORT ${ALT:+$C_PORT}; do
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
stages() { sleep 0.3; cat "$1" 2>/dev/null || true; }  # the file is rewritten every 100 ms
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
  local before=() after=() p s0 own=b
  [ "$1" = native_in_process_alt ] && own=c  # its Envoy's CPU goes in the column of Envoy B
  for p in envoy-a envoy-$own reader redis; do before+=("$(cpu $p)"); done
  s0=$(stages "$RUN_DIR/stages-$own.txt")
  "$BIN/ferry-bench" --url "$2" --protocol "$3" --scenario "$1" --id-space "$ENTITIES" \
    --fingerprint "$FINGERPRINT" --batch "$4" --connections 1 --duration "$DURATION" \
    --warmup 0 --out "$ROWS" >/dev/null \
    || echo "miss_path: $1 batch $4 had errors (counted in its row); going on" >&2
  for p in envoy-a envoy-$own reader redis; do after+=("$(cpu $p)"); done
  paste -d' ' <(echo "$s0") <(stages "$RUN_DIR/stages-$own.txt") | sed "s/^/$1 $4 /" >> "$STAGE_ROWS"
  echo "$1 $4 $((after[0] - before[0])) $((after[1] - before[1])) $((after[2] - before[2])) $((after[3] - before[3]))" >> "$CPU"
}
for port in $A_PORT $B_PORT ${ALT:+$C_PORT}; do  # warm the pools; not recorded
  "$BIN/ferry-bench" --url "http://127.0.0.1:$port$PREDICT" --protocol kserve --scenario warm \
    --id-space "$ENTITIES" --batch 10 --connections 2 --duration 1 --warmup 0 >/dev/null
done
for round in $(seq "$ROUNDS"); do
  say "round $round/$ROUNDS; load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for b in $BATCHES; do
    run passthrough "http://127.0.0.1:$PASS_PORT$PREDICT" kserve "$b"
    run native_reader_cluster "http://127.0.0.1:$A_PORT$PREDICT" kserve "$b"
    run native_in_process "http://127.0.0.1:$B_PORT$PREDICT" kserve "$b"
    [ -z "$ALT" ] || run native_in_process_alt "http://127.0.0.1:$C_PORT$PREDICT" kserve "$b"
    floor "$b"
  done
  run reader_direct "http://127.0.0.1:$READER_PORT/v1/vectors" reader 1
done
say "done; load average $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$ROWS" "$CPU" "$(getconf CLK_TCK)" "$STAGE_ROWS" "$FLOOR" "$FLOOR_RANDOM" "$FLOOR_CLIENTS" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cpu = [l.split() for l in open(sys.argv[2])]
tick_us = 1e6 / int(sys.argv[3])
runs = collections.defaultdict(list)
for r, c in zip(rows, cpu):
    assert r["scenario"] == c[0], (r["scenario"], c[0])
    per = [int(t) * tick_us / r["requests"] for t in c[2:]]
    runs[(c[0], r["batch"])].append((r, per))
med = lambda xs: statistics.median(xs)
print("\nmedian over rounds; CPU is µs per request (Envoy A = passthrough listener and the module")
print("calling the reader cluster; Envoy B = the module with its in-process reader)")
print("| case | batch | p50 µs | p99 µs | req/s | CPU Envoy A | CPU Envoy B | CPU reader | CPU Redis | errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for (s, b), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"| {s} | {b} | {med(r['p50_us'] for r, _ in rs):.0f} | {med(r['p99_us'] for r, _ in rs):.0f} | "
          f"{med(r['rps'] for r, _ in rs):.0f} | " +
          " | ".join(f"{med(p[i] for _, p in rs):.0f}" for i in range(4)) +
          f" | {sum(r['errors'] for r, _ in rs)} |")

# The stages of the in-process case, per round from the totals' differences: the mean
# ((total ns after - before) / count) and the median from the histogram (the lower edge of
# the bucket holding it: 4 buckets per power of two, as `native/src/stages.rs` lays them).
def lower(i):
    return i if i < 4 else (4 + i % 4) << (i // 4 - 1)
def median_of(h):
    n, seen = sum(h), 0
    for i, c in enumerate(h):
        seen += c
        if n and seen * 2 >= n:
            return lower(i) / 1000
    return 0.0
stage = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for l in open(sys.argv[4]):
    f = l.split()
    case, b, name = f[0], int(f[1]), f[2]
    k = (len(f) - 2) // 2  # name count total buckets..., before then after
    before, after = [int(x) for x in f[3:2 + k]], [int(x) for x in f[3 + k:]]
    if not case.startswith("native_in_process"):
        continue
    if name not in order:
        order.append(name)
    diff = [a - b for a, b in zip(after, before)]
    if diff[0] > 0:
        stage[(case, b)][name].append((diff[1] / diff[0] / 1000, median_of(diff[2:])))
def floors(path):  # batch -> [(p50 µs, p99 µs)], from redis-benchmark's --csv columns
    out = collections.defaultdict(list)
    for l in open(path):
        f = [x.strip('"') for x in l.strip().split(",")]
        out[int(f[0])].append((float(f[5]) * 1000, float(f[7]) * 1000))
    return out
floor, floor_random = floors(sys.argv[5]), floors(sys.argv[6])
clients = collections.defaultdict(list)  # (batch, test) -> [(p50, p99)]
for l in open(sys.argv[7]):
    f = [x.strip('"') for x in l.strip().split(",")]
    clients[(int(f[0]), f[1].rsplit("_", 1)[0])].append((float(f[5]) * 1000, float(f[7]) * 1000))
for b in sorted({b for b, _ in clients}):
    print(f"batch {b}, the same random MGET, p50 / p99 µs (medians over rounds): "
          f"raw socket {med([x[0] for x in floor_random[b]]):.0f} / {med([x[1] for x in floor_random[b]]):.0f}; "
          + "; ".join(f"{t.replace('MGET_random_', '')} {med([x[0] for x in v]):.0f} / {med([x[1] for x in v]):.0f}"
                      for (bb, t), v in sorted(clients.items()) if bb == b))
batches = sorted(stage)
print("\nstages of the in-process cases: µs per request, median / mean (medians over rounds);")
print("wall-clock, so a stage includes time its thread waited for a core")
print("| stage | " + " | ".join(f"{c} {b} p50 | mean" for c, b in batches) + " |")
print("|---|" + "---:|---:|" * len(batches))
cell = lambda xs, i: f"{med([x[i] for x in xs]):.1f}" if xs else "-"
for name in order:
    print(f"| {name} | " + " | ".join(f"{cell(stage[b][name], 1)} | {cell(stage[b][name], 0)}" for b in batches) + " |")
print("| **sum** | " + " | ".join(
    f"{sum(med([x[1] for x in v]) for v in stage[b].values() if v):.1f} | "
    f"{sum(med([x[0] for x in v]) for v in stage[b].values() if v):.1f}" for b in batches) + " |")
for (c, b) in batches:
    p = [r["p50_us"] for r, _ in runs.get(("passthrough", b), [])]
    n = [r["p50_us"] for r, _ in runs.get((c, b), [])]
    p9 = [r["p99_us"] for r, _ in runs.get(("passthrough", b), [])]
    n9 = [r["p99_us"] for r, _ in runs.get((c, b), [])]
    fp50, fp99 = med([x[0] for x in floor[b]]), med([x[1] for x in floor[b]])
    rp50, rp99 = med([x[0] for x in floor_random[b]]), med([x[1] for x in floor_random[b]])
    if p and n:
        a50, a99 = med(n) - med(p), med(n9) - med(p9)
        print(f"{c} batch {b}: floor (redis-benchmark MGET, 1 conn) p50 {fp50:.0f} µs p99 {fp99:.0f} µs; "
              f"random keys (ferry-floor) p50 {rp50:.0f} µs p99 {rp99:.0f} µs; "
              f"added over passthrough p50 {a50:.0f} µs ({a50 / fp50:.1f}x floor, "
              f"{a50 / rp50:.1f}x random floor) p99 {a99:.0f} µs ({a99 / fp99:.1f}x floor p99, "
              f"{a99 / rp99:.1f}x random floor p99)")
PY
