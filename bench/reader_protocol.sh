#!/usr/bin/env bash
# bench/reader_protocol.sh: HTTP/1.1 keep-alive versus h2c for the `ferry_reader` cluster (the
# filter's dispatched calls), measured in one sitting. One Redis, one reader and one model serve
# two Envoys that differ only in `ferry envoy-config --reader-protocol` (the http1 one also has
# bench.sh's passthrough listener); ferry-bench drives the ferry_redis route (near cache off) of
# each in turn, A B then B A, round after round, at each batch size and connection count, so
# that the machine's drift hits both alike. Prints one table (median over rounds) and each
# Envoy's ferry_reader stats; rows and logs stay in bench/.run/reader-protocol/ (git-ignored).
#
# Needs what `make bench` installs and builds (BENCH_NO_BUILD=1 skips the build).
# Knobs: RP_ROUNDS (3), RP_BATCHES ("1 10 100"), RP_CONNECTIONS ("1 8"), RP_DURATION (4 s),
# RP_WARMUP (1 s), RP_ENTITIES (100000), RP_PORT_BASE (19200), RP_READER_ARGS (extra reader
# flags, e.g. to try another runtime), RP_RUNTIME (wasm or native: the filter build both Envoys
# run).
set -euo pipefail
source "$(dirname "$0")/lib.sh" reader-protocol

ROUNDS=${RP_ROUNDS:-3}
BATCHES=${RP_BATCHES:-"1 10 100"}
CONNECTIONS=${RP_CONNECTIONS:-"1 8"}
DURATION=${RP_DURATION:-4}
WARMUP=${RP_WARMUP:-1}
ENTITIES=${RP_ENTITIES:-100000}
READER_ARGS=${RP_READER_ARGS:-}
RUNTIME=${RP_RUNTIME:-wasm}
case $RUNTIME in
  wasm) FILTER_ARGS=(--wasm "$WASM") ;;
  native) FILTER_ARGS=(--runtime native --native-module "$NATIVE") ;;
  *) echo "reader_protocol: RP_RUNTIME must be wasm or native, not '$RUNTIME'" >&2; exit 2 ;;
esac
BASE=${RP_PORT_BASE:-19200}
REDIS_PORT=$((BASE + 1)); READER_PORT=$((BASE + 2)); MODEL_PORT=$((BASE + 3))
PASS_PORT=$((BASE + 4))
# Envoy per protocol: listener BASE+10/+20, admin BASE+11/+21.
listen_port() { case $1 in http1) echo $((BASE + 10)) ;; http2) echo $((BASE + 20)) ;; esac; }
admin_port() { echo $(($(listen_port "$1") + 1)); }
PROTOCOLS="http1 http2"

stop_at_exit reader_protocol envoy-http2 envoy-http1 model reader redis
say() { echo "== $(date +%H:%M:%S) $*"; }

if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
  say "building (release)"
  cargo build --release --quiet -p ferry -p ferry-reader -p ferry-demo-model -p bench
  cargo build --release --quiet -p ferry-filter --target wasm32-wasip1
  if [ "$RUNTIME" = native ]; then cargo build --profile native --quiet -p ferry-native; fi
fi
[ -x "$PY" ] || { echo "reader_protocol: no bench/.venv; run make bench once" >&2; exit 1; }
stop_all envoy-http2 envoy-http1 model reader redis
ports_free reader_protocol RP_PORT_BASE $REDIS_PORT $READER_PORT $MODEL_PORT $PASS_PORT $(for x in $PROTOCOLS; do listen_port $x; admin_port $x; done)
rm -rf "$RUN_DIR"; mkdir -p "$RUN_DIR"
ROWS="$RUN_DIR/rows.jsonl"

say "filter runtime: $RUNTIME; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
say "generating $ENTITIES users, materializing into Redis :$REDIS_PORT"
"$PY" "$BENCH/repo/generate_data.py" --entities "$ENTITIES" --anchor "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
FERRY_REDIS="redis://127.0.0.1:$REDIS_PORT/0" "$BIN/ferry" materialize "$BENCH/repo" >/dev/null 2>"$RUN_DIR/materialize.err"
FINGERPRINT=$("$BIN/ferry" apply "$BENCH/repo" | awk '/^feature service scoring / {for (i=1;i<NF;i++) if ($i=="fingerprint") print $(i+1)}')

say "starting the reader, the model and one Envoy per protocol"
# shellcheck disable=SC2086
start reader "$BIN/ferry-reader" --listen "127.0.0.1:$READER_PORT" --redis "redis://127.0.0.1:$REDIS_PORT/0" $READER_ARGS
start model "$BIN/ferry-demo-model" --listen "127.0.0.1:$MODEL_PORT"
for proto in $PROTOCOLS; do
  "$BIN/ferry" envoy-config "$BENCH/repo" "${FILTER_ARGS[@]}" --reader-protocol "$proto" \
    --listen-port "$(listen_port "$proto")" --admin-port "$(admin_port "$proto")" \
    --reader-port "$READER_PORT" --model-port "$MODEL_PORT" -o "$RUN_DIR/envoy-$proto.yaml"
done
"$PY" "$BENCH/passthrough.py" "$RUN_DIR/envoy-http1.yaml" "$PASS_PORT" > "$RUN_DIR/envoy-http1-pass.yaml"
start envoy-http1 "$ENVOY" -c "$RUN_DIR/envoy-http1-pass.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2 --base-id 191
start envoy-http2 "$ENVOY" -c "$RUN_DIR/envoy-http2.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2 --base-id 192
wait_for reader "http://127.0.0.1:$READER_PORT/healthz"
for proto in $PROTOCOLS; do wait_for "envoy-$proto" "http://127.0.0.1:$(admin_port "$proto")/ready"; done

PATH_FERRY=/v1/models/scoring:predict
for proto in $PROTOCOLS; do
  h=$(curl -sS -D - -o "$RUN_DIR/check.body" -H 'content-type: application/json' \
    --data-binary '{"instances":[{"user_id":"u000001","amount":1.5}]}' \
    "http://127.0.0.1:$(listen_port "$proto")$PATH_FERRY")
  echo "$h" | grep -qi '^x-echo-headers:.*"x-ferry-status":"ok"' || {
    echo "reader_protocol: $proto was not enriched:"; echo "$h"; exit 1; }
  # The cluster must really speak the protocol asked for.
  n=$(curl -fsS "http://127.0.0.1:$(admin_port "$proto")/stats?filter=^cluster\.ferry_reader\.upstream_cx_${proto}_total$" | awk '{print $2}')
  [ "${n:-0}" -ge 1 ] || { echo "reader_protocol: envoy-$proto opened no $proto connection to the reader" >&2; exit 1; }
  echo "$proto: enriched, ferry_reader upstream_cx_${proto}_total=$n"
done

LOADGEN="$BIN/ferry-bench"
run() { # run SCENARIO URL PROTOCOL BATCH CONNS
  # shellcheck disable=SC2086
  "$LOADGEN" --url "$2" --protocol "$3" --scenario "$1" --id-space "$ENTITIES" \
    --fingerprint "$FINGERPRINT" --batch "$4" --connections "$5" \
    --duration "$DURATION" --warmup "$WARMUP" --out "$ROWS" >/dev/null
}
for proto in $PROTOCOLS; do  # warm pools and V8; not recorded
  "$LOADGEN" --url "http://127.0.0.1:$(listen_port "$proto")$PATH_FERRY" --protocol kserve \
    --scenario warm --id-space "$ENTITIES" --batch 100 --connections 8 --duration 1 --warmup 0 >/dev/null
done
"$LOADGEN" --url "http://127.0.0.1:$(listen_port http1)/v1/models/scoring-cached:predict" --protocol kserve \
  --scenario warm --id-space 1000 --batch 10 --connections 8 --duration 1 --warmup 0 >/dev/null
for round in $(seq "$ROUNDS"); do
  # Alternate which protocol goes first, so that neither always runs right after the other.
  if [ $((round % 2)) = 1 ]; then order="http1 http2"; else order="http2 http1"; fi
  say "round $round/$ROUNDS ($order); load average $(cut -d' ' -f1-3 /proc/loadavg)"
  # The floor, the reader alone and the cache-hit path, for the dispatch overhead at batch 1.
  run envoy_passthrough "http://127.0.0.1:$PASS_PORT$PATH_FERRY" kserve 1 1
  run reader_direct "http://127.0.0.1:$READER_PORT/v1/vectors" reader 1 1
  # The filter without its reader call: near-cache hits (ids from a hot set of 1,000).
  ENTITIES_SAVED=$ENTITIES; ENTITIES=1000
  run ferry_cache "http://127.0.0.1:$(listen_port http1)/v1/models/scoring-cached:predict" kserve 1 1
  ENTITIES=$ENTITIES_SAVED
  for b in $BATCHES; do
    for c in $CONNECTIONS; do
      for proto in $order; do
        run "ferry_redis_$proto" "http://127.0.0.1:$(listen_port "$proto")$PATH_FERRY" kserve "$b" "$c"
      done
    done
  done
done
say "done; load average $(cut -d' ' -f1-3 /proc/loadavg)"

for proto in $PROTOCOLS; do
  curl -fsS "http://127.0.0.1:$(admin_port "$proto")/stats?filter=^cluster\.ferry_reader\.(upstream_cx_(total|http1_total|http2_total|destroy)|upstream_rq_(total|time)|upstream_rq_pending_total)" \
    > "$RUN_DIR/stats-$proto.txt"
  echo "--- envoy-$proto: ferry_reader"; cat "$RUN_DIR/stats-$proto.txt"
done
curl -fsS "http://127.0.0.1:$READER_PORT/metrics" > "$RUN_DIR/reader-metrics.txt" || true

"$PY" - "$ROWS" <<'PY'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
runs = collections.defaultdict(list)
for r in rows:
    runs[(r["scenario"], r["batch"], r["connections"])].append(r)
med = lambda rs, k: statistics.median(r[k] for r in rs)
print("\nmedian over rounds (p50/p99 in µs)")
print("| scenario | batch | conns | p50 | p99 | req/s | errors | rounds |")
print("|---|---:|---:|---:|---:|---:|---:|---:|")
for (s, b, c), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
    print(f"| {s} | {b} | {c} | {med(rs,'p50_us'):.0f} | {med(rs,'p99_us'):.0f} | "
          f"{med(rs,'rps'):.0f} | {sum(r['errors'] for r in rs)} | {len(rs)} |")
print("\nhttp2 / http1 (median p50, median req/s)")
for (s, b, c), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][2])):
    if s == "ferry_redis_http1" and ("ferry_redis_http2", b, c) in runs:
        r2 = runs[("ferry_redis_http2", b, c)]
        print(f"batch {b:>3} conns {c}: p50 {med(r2,'p50_us')/med(rs,'p50_us'):.2f}x  "
              f"req/s {med(r2,'rps')/med(rs,'rps'):.2f}x")
PY
