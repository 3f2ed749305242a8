#!/usr/bin/env bash
# bench/log.sh: served-feature logs end to end (issue #24), in one sitting. One Wasm Envoy
# (`ferry envoy-config --log-sink`) with the bench's scoring route three times: logging off,
# `log: {sample: 0.1}` and `log: {sample: 1.0}`, `ferry log-sink` writing Parquet, the reader,
# the demo model and Redis; release builds. Per batch (1 and 100) the three routes are driven in
# the order off, 0.1, 1.0, off again (the two "off" runs give the run's noise), each at one
# connection (latency) and at 8 (the full rate, for the sink). Per run: p50/p99 (ferry-bench),
# Envoy CPU per request (utime+stime from /proc/PID/stat over the run, divided by Envoy's
# request count), and the sink's rows written per second (ferry_log_sink_records_written_total
# over the run) against the rows Envoy sent it (logs_written × batch), with Envoy's and the
# sink's drops. Prints JSON lines and a table; logs in bench/.run/log/.
# Knobs: QUICK=1 (short runs), LOG_SECONDS (5; QUICK 2), LOG_WARMUP (1; QUICK 0.5),
# LOG_ROUNDS (3; QUICK 1: off, 0.1, 1.0 that many times, interleaved, then off once more),
# LOG_ENTITIES (10000), LOG_PORT_BASE (19500), BENCH_NO_BUILD=1, LOG_BIN, LOG_WASM, FEAST_VENV (default
# .venv-feast, for the data generator), FERRY_ENVOY.
set -euo pipefail
source "$(dirname "$0")/lib.sh" log feast
# LOG_BIN, LOG_WASM: where the binaries and the .wasm are (bench.sh passes its copies).
BIN=${LOG_BIN:-$BIN}; WASM=${LOG_WASM:-$WASM}; ENVOY=${FERRY_ENVOY:-$ENVOY}
QUICK=${QUICK:-0}
if [ "$QUICK" = 1 ]; then SECS=${LOG_SECONDS:-2}; WARM=${LOG_WARMUP:-0.5}; ROUNDS=${LOG_ROUNDS:-1}
else SECS=${LOG_SECONDS:-5}; WARM=${LOG_WARMUP:-1}; ROUNDS=${LOG_ROUNDS:-3}; fi
ENTITIES=${LOG_ENTITIES:-10000}
BASE=${LOG_PORT_BASE:-19500}
REDIS_PORT=$((BASE + 1)); READER_PORT=$((BASE + 2)); MODEL_PORT=$((BASE + 3))
LISTEN_PORT=$((BASE + 4)); ADMIN_PORT=$((BASE + 5)); SINK_PORT=$((BASE + 6)); SINK_HTTP=$((BASE + 7))
PROCS="envoy sink model reader redis"
# The sink's window: short, so that a run's rows are in files soon after it ends.
WINDOW=1

stop_at_exit log $PROCS
say() { echo "== $(date +%H:%M:%S) $*" >&2; }

bench_build bench
stop_all $PROCS
ports_free log LOG_PORT_BASE $REDIS_PORT $READER_PORT $MODEL_PORT $LISTEN_PORT $ADMIN_PORT $SINK_PORT $SINK_HTTP
rm -rf "$RUN_DIR"; mkdir -p "$RUN_DIR/repo" "$RUN_DIR/bin"
# Copies, so that another checkout's build into the shared target/ cannot swap them mid-run.
cp "$BIN/ferry" "$BIN/ferry-reader" "$BIN/ferry-demo-model" "$BIN/ferry-bench" "$WASM" "$RUN_DIR/bin/"
B="$RUN_DIR/bin"
say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# The bench repo with two more routes on the same service, logged at 0.1 and 1.0 (first: the
# longest prefix must come before /v1/models/scoring).
"$PY" "$BENCH/repo/generate_data.py" --entities "$ENTITIES" --out "$RUN_DIR/repo/data" >/dev/null
awk '{print} /^routes:/ {
  for (i = 0; i < 2; i++) {
    name = i ? "scoring-log-all" : "scoring-log-tenth"; rate = i ? "1.0" : "0.1"
    printf "  - name: %s\n    match: {path_prefix: /v1/models/%s}\n    service: scoring\n", name, name
    printf "    format: kserve_v1\n    entity: {field: user_id}\n    feature_names: full\n"
    printf "    on_missing_entity: reject\n    log: {sample: %s}\n\n", rate
  }
}' "$BENCH/repo/ferry.yaml" > "$RUN_DIR/repo/ferry.yaml"
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
"$B/ferry" materialize "$RUN_DIR/repo" --redis "redis://127.0.0.1:$REDIS_PORT/0" >/dev/null 2>"$RUN_DIR/materialize.err"

say "starting the sink, the reader, the model and Envoy"
start sink "$B/ferry" log-sink --dir "$RUN_DIR/served" --listen "127.0.0.1:$SINK_PORT" \
  --http-listen "127.0.0.1:$SINK_HTTP" --window-secs "$WINDOW"
start reader "$B/ferry-reader" --listen "127.0.0.1:$READER_PORT" --redis "redis://127.0.0.1:$REDIS_PORT/0"
start model "$B/ferry-demo-model" --listen "127.0.0.1:$MODEL_PORT"
"$B/ferry" envoy-config "$RUN_DIR/repo" --wasm "$B/ferry_filter.wasm" --listen-port "$LISTEN_PORT" \
  --admin-port "$ADMIN_PORT" --reader-port "$READER_PORT" --model-port "$MODEL_PORT" \
  --log-sink "127.0.0.1:$SINK_PORT" -o "$RUN_DIR/envoy.yaml"
start envoy "$ENVOY" -c "$RUN_DIR/envoy.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2 --base-id 501
wait_for sink "http://127.0.0.1:$SINK_HTTP/metrics"
wait_for reader "http://127.0.0.1:$READER_PORT/healthz"
wait_for envoy "http://127.0.0.1:$ADMIN_PORT/ready"
ENVOY_PID=$(cat "$RUN_DIR/envoy.pid")

# Figures read around each run.
envoy_stat() { curl -fsS "http://127.0.0.1:$ADMIN_PORT/stats?filter=^$1\$" | awk -F': ' '{s += $2} END {print s + 0}'; }
sink_metric() { curl -fsS "http://127.0.0.1:$SINK_HTTP/metrics" | awk -v k="$1" '$1 == k {print $2 + 0; f = 1} END {if (!f) print 0}'; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$ENVOY_PID/stat"; }
snapshot() {
  echo "$(cpu_ticks) $(envoy_stat http.ingress.downstream_rq_completed) \
$(envoy_stat access_logs.grpc_access_log.logs_written) $(envoy_stat access_logs.grpc_access_log.logs_dropped) \
$(sink_metric ferry_log_sink_records_written_total) \
$(sink_metric 'ferry_log_sink_records_dropped_total{reason="buffer_full"}')"
}
# The sink's rows are in files one window (and Envoy's 1 s flush) after they were sent: wait
# until its written total stops moving.
settle() {
  local last=-1 now
  sleep $((WINDOW + 1))
  for _ in $(seq 20); do
    now=$(sink_metric ferry_log_sink_records_written_total)
    [ "$now" = "$last" ] && return 0
    last=$now; sleep 0.5
  done
}

ROWS="$RUN_DIR/log.jsonl"; : > "$ROWS"
TICK=$(getconf CLK_TCK)
# run MODE ROUTE BATCH CONNS: one ferry-bench run and the figures around it, one JSON line.
run() {
  local mode=$1 route=$2 batch=$3 conns=$4 before after t0 t1 row
  before=$(snapshot); t0=$(date +%s.%N)
  row=$("$B/ferry-bench" --url "http://127.0.0.1:$LISTEN_PORT/v1/models/$route:predict" \
    --protocol kserve --scenario "log_$mode" --id-space "$ENTITIES" --batch "$batch" \
    --connections "$conns" --duration "$SECS" --warmup "$WARM")
  t1=$(date +%s.%N); settle; after=$(snapshot)
  python3 - "$row" "$before" "$after" "$t0" "$t1" "$batch" "$TICK" "$mode" <<'PYEOF' | tee -a "$ROWS"
import json, sys
row = json.loads(sys.argv[1])
b = [float(x) for x in sys.argv[2].split()]
a = [float(x) for x in sys.argv[3].split()]
wall = float(sys.argv[5]) - float(sys.argv[4])
batch, tick = int(sys.argv[6]), int(sys.argv[7])
d = [y - x for x, y in zip(b, a)]
cpu_s, reqs, sent, envoy_dropped, written, sink_dropped = d
row.update(mode=sys.argv[8], wall_s=round(wall, 2), envoy_requests=int(reqs),
           envoy_cpu_us_per_req=round(cpu_s / tick * 1e6 / reqs, 1) if reqs else None,
           envoy_rps=round(reqs / wall, 1), logs_sent=int(sent), logs_dropped=int(envoy_dropped),
           rows_sent=int(sent) * batch, rows_written=int(written), rows_dropped_sink=int(sink_dropped),
           rows_written_per_s=round(written / wall, 1), rows_sent_per_s=round(sent * batch / wall, 1))
print(json.dumps(row))
PYEOF
}

say "warming the three routes"
for r in scoring scoring-log-tenth scoring-log-all; do
  "$B/ferry-bench" --url "http://127.0.0.1:$LISTEN_PORT/v1/models/$r:predict" --protocol kserve \
    --scenario warm --id-space "$ENTITIES" --batch 100 --connections 8 --duration 1 --warmup 0 >/dev/null
done
settle
for batch in 1 100; do
  for conns in 1 8; do
    say "batch $batch, $conns connection(s): $ROUNDS round(s) of off, 0.1, 1.0, then off"
    for _ in $(seq "$ROUNDS"); do
      run off scoring "$batch" "$conns"
      run tenth scoring-log-tenth "$batch" "$conns"
      run all scoring-log-all "$batch" "$conns"
    done
    run off scoring "$batch" "$conns"
  done
done
say "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# The table: medians over the rounds; added latency against the "off" median, the spread of
# the "off" runs as the noise.
python3 - "$ROWS" <<'PYEOF' | tee "$RUN_DIR/log.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
key = lambda r: (r["batch"], r["connections"])
med = lambda rs, f: statistics.median(r[f] for r in rs)
print("| batch | conns | logging | runs | p50 µs | p99 µs | added p50 / p99 µs | req/s | Envoy CPU µs/req | rows sent/s | rows written/s | dropped (Envoy, sink) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for k in sorted({key(r) for r in rows}):
    g = lambda m: [r for r in rows if key(r) == k and r["mode"] == m]
    off = g("off")
    b50, b99 = med(off, "p50_us"), med(off, "p99_us")
    for m, label in (("off", "off"), ("tenth", "0.1"), ("all", "1.0")):
        rs = g(m)
        if m == "off":
            s50 = max(r["p50_us"] for r in rs) - min(r["p50_us"] for r in rs)
            s99 = max(r["p99_us"] for r in rs) - min(r["p99_us"] for r in rs)
            added = f"noise (spread) {s50} / {s99}"
        else:
            added = f"{med(rs, 'p50_us') - b50:+.0f} / {med(rs, 'p99_us') - b99:+.0f}"
        sent = sum(r["rows_sent"] for r in rs); written = sum(r["rows_written"] for r in rs)
        wall = sum(r["wall_s"] for r in rs)
        drops = f"{sum(r['logs_dropped'] for r in rs)}, {sum(r['rows_dropped_sink'] for r in rs)}"
        print(f"| {k[0]} | {k[1]} | {label} | {len(rs)} | {med(rs, 'p50_us'):.0f} | {med(rs, 'p99_us'):.0f} | {added} | "
              f"{med(rs, 'rps'):.0f} | {med(rs, 'envoy_cpu_us_per_req'):.1f} | {sent / wall:.0f} | {written / wall:.0f} | {drops} |")
PYEOF
say "rows in $ROWS, table in $RUN_DIR/log.md; the sink's files under $RUN_DIR/served"
