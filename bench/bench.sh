#!/usr/bin/env bash
# `make bench` (QUICK=1 for a smoke run): Ferry inside Envoy versus Feast 0.67's feature server,
# same machine, same Redis, same data, one run. Installs what it needs (Envoy, redis-server, the
# bench virtualenv with feast[redis] and matplotlib), builds in release, generates the data set,
# materializes it for both, starts every server on its own loopback port, drives each scenario
# with bench's load generator (ferry-bench), and writes the report: results/latest.json (+ a
# dated copy), results/latency.png, results/added.png and the results tables. By default they go
# to bench/.run/ (git-ignored: bench/.run/report.md and bench/.run/results/), so a run never
# touches committed files; RECORD=1 writes them where they are committed (bench/results/ and
# the results section of bench/README.md). Every process it started is stopped at the end, by
# pid, also on failure or Ctrl-C.
set -euo pipefail
source "$(dirname "$0")/lib.sh" ""   # no NAME: RUN_DIR is bench/.run itself
FEAST="$BENCH/.venv/bin/feast"

QUICK=${QUICK:-0}
RECORD=${RECORD:-0}
if [ "$QUICK" = 1 ]; then
  ENTITIES=${BENCH_ENTITIES:-10000}; DURATION=${BENCH_DURATION:-2}; WARMUP=${BENCH_WARMUP:-0.5}
  RATES=${BENCH_RATES:-200}
else
  ENTITIES=${BENCH_ENTITIES:-100000}; DURATION=${BENCH_DURATION:-4}; WARMUP=${BENCH_WARMUP:-1}
  RATES=${BENCH_RATES:-"100 400"}
fi
BATCHES=${BENCH_BATCHES:-"1 5 10 50 100"}
SCENARIOS=${BENCH_SCENARIOS:-"envoy_passthrough ferry_redis ferry_cache ferry_mix ferry_od ferry_native ferry_native_cache ferry_native_mix ferry_native_od ferry_native_inproc reader_direct ferry_feast ferry_feast_precomputed feast_precomputed feast_regular feast_odfv feast_sdk"}
# BENCH_FEAST_LAYOUTS=1: only the Feast-layout comparison (own layout, Feast's per field and
# precomputed, Feast's server); no criterion, pushes, fleet or logs.
[ "${BENCH_FEAST_LAYOUTS:-0}" = 1 ] && { SCENARIOS="ferry_redis ferry_feast ferry_feast_precomputed feast_precomputed"; BENCH_CRITERION=0 PUSH=0 FLEET=0 LOG=0; }
HOT_SET=${BENCH_HOT_SET:-1000}   # ids of the near-cache scenario: a warm working set
FEAST_WORKERS=${BENCH_FEAST_WORKERS:--1}
# The reader cluster's protocol (http1 | http2); empty = the generator's default, the measured
# choice (bench/README.md, "Reader cluster protocol"; bench/reader_protocol.sh compares the two).
READER_PROTOCOL=${BENCH_READER_PROTOCOL:-}

# Ports: a block of its own (default 19101..19114) so that a running `make demo` is untouched.
BASE=${BENCH_PORT_BASE:-19100}
REDIS_PORT=$((BASE + 1)); READER_PORT=$((BASE + 2)); MODEL_PORT=$((BASE + 3))
LISTEN_PORT=$((BASE + 4)); ADMIN_PORT=$((BASE + 5)); PASS_PORT=$((BASE + 6)); FEAST_PORT=$((BASE + 7))
# ferry_feast: a second reader (on Feast's db) and Envoy, serving bench/feast_ferry.
FF_LISTEN_PORT=$((BASE + 8)); FF_ADMIN_PORT=$((BASE + 9)); FF_READER_PORT=$((BASE + 10))
# A third Envoy runs the native build (libferry_native.so) on the same reader and model.
NATIVE_PORT=$((BASE + 11)); NATIVE_ADMIN_PORT=$((BASE + 12))
# A fourth Envoy runs the native build with the in-process reader (FERRY_NATIVE_READER).
INPROC_PORT=$((BASE + 13)); INPROC_ADMIN_PORT=$((BASE + 14))
PROCS="feast envoy envoy-feast envoy-native envoy-inproc model reader reader-feast redis"

stop_at_exit bench $PROCS

say() { echo "== $(date +%H:%M:%S) $*"; }

say "installing what is missing"
bash scripts/setup.sh
bash scripts/feast_venv.sh "$BENCH/.venv" matplotlib

if [ "${BENCH_NO_BUILD:-0}" = 1 ]; then
  say "using the binaries already built (BENCH_NO_BUILD=1)"
else
  say "building (release)"
  cargo build --release --quiet -p ferry -p ferry-reader -p ferry-demo-model -p bench
  cargo build --release --quiet -p ferry-filter --target wasm32-wasip1
  cargo build --profile native --quiet -p ferry-native
fi

# BENCH_BIN_DIR=DIR: run copies of the binaries, the .wasm and the native module taken right
# after the build, so that builds from other checkouts sharing target/ cannot swap them mid-run.
if [ -n "${BENCH_BIN_DIR:-}" ]; then
  mkdir -p "$BENCH_BIN_DIR"
  cp "$BIN/ferry" "$BIN/ferry-reader" "$BIN/ferry-demo-model" "$BIN/ferry-bench" "$WASM" "$NATIVE" "$BENCH_BIN_DIR/"
  BIN=$BENCH_BIN_DIR; WASM=$BENCH_BIN_DIR/$(basename "$WASM"); NATIVE=$BENCH_BIN_DIR/$(basename "$NATIVE")
fi

stop_all $PROCS
ports_free bench BENCH_PORT_BASE $REDIS_PORT $READER_PORT $MODEL_PORT $LISTEN_PORT $ADMIN_PORT \
  $PASS_PORT $FEAST_PORT $FF_LISTEN_PORT $FF_ADMIN_PORT $FF_READER_PORT \
  $NATIVE_PORT $NATIVE_ADMIN_PORT
# Its own files only: the directories of the scripts that run by themselves (miss_path.sh,
# write_flood.sh, reader_protocol.sh) keep their last run.
mkdir -p "$RUN_DIR"
find "$RUN_DIR" -mindepth 1 -maxdepth 1 ! -name miss-path ! -name write_flood \
  ! -name reader-protocol -exec rm -rf {} +
ROWS="$RUN_DIR/rows.jsonl"; META="$RUN_DIR/meta.json"
echo '{}' > "$META"
# meta KEY JSON: records one fact for the report.
meta() { "$PY" - "$META" "$1" "$2" <<'PYEOF'
import json, sys
path, key, value = sys.argv[1:]
d = json.load(open(path)); d[key] = json.loads(value); json.dump(d, open(path, "w"), indent=1)
PYEOF
}

say "generating $ENTITIES users x 3 views (Parquet, Snappy)"
ANCHOR=$(date -u +%Y-%m-%dT%H:%M:%SZ)
"$PY" "$BENCH/repo/generate_data.py" --entities "$ENTITIES" --anchor "$ANCHOR"

say "starting Redis on :$REDIS_PORT"
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
used_memory() { rcli info memory | awk -F: '/^used_memory:/ {print $2+0}'; }

say "ferry apply + materialize (Redis db 0)"
APPLY=$("$BIN/ferry" apply "$BENCH/repo")
echo "$APPLY" | head -3
FINGERPRINT=$(echo "$APPLY" | awk '/^feature service scoring / {for (i=1;i<NF;i++) if ($i=="fingerprint") print $(i+1)}')
[ -n "$FINGERPRINT" ] || { echo "bench: no fingerprint in ferry apply's output" >&2; exit 1; }
before=$(used_memory)
t0=$(date +%s.%N)
FERRY_REDIS="redis://127.0.0.1:$REDIS_PORT/0" "$BIN/ferry" materialize "$BENCH/repo" 2>"$RUN_DIR/ferry-materialize.err" | tee "$RUN_DIR/ferry-materialize.out"
t1=$(date +%s.%N)
after=$(used_memory)
meta ferry_materialize "{\"entities\": $ENTITIES, \"wall_s\": $(awk "BEGIN {print $t1 - $t0}"), \"used_memory_delta\": $((after - before)), \"output\": $("$PY" -c 'import json,sys; print(json.dumps(sys.stdin.read()))' < "$RUN_DIR/ferry-materialize.out")}"

say "feast apply + materialize with precompute (Redis db 1); this is the slow part"
export FEAST_BENCH_REGISTRY="$RUN_DIR/feast-registry.db"
export FEAST_BENCH_REDIS="127.0.0.1:$REDIS_PORT,db=1"
export FEAST_BENCH_DATA="$BENCH/repo/data"
export PYTHONDONTWRITEBYTECODE=1
("$FEAST" -c "$BENCH/feast" apply >"$RUN_DIR/feast-apply.log" 2>&1) || { tail -20 "$RUN_DIR/feast-apply.log"; exit 1; }
before=$(used_memory)
t0=$(date +%s.%N)
FEAST_TIMES=$("$PY" "$BENCH/feast_ops.py" materialize "$BENCH/feast" \
  "$(date -u -d "$ANCHOR - 8 days" +%Y-%m-%dT%H:%M:%S+00:00)" \
  "$(date -u -d "$ANCHOR + 1 minute" +%Y-%m-%dT%H:%M:%S+00:00)" 2>"$RUN_DIR/feast-materialize.log" | tail -1)
t1=$(date +%s.%N)
after=$(used_memory)
echo "feast materialize: $FEAST_TIMES"
meta feast_materialize "{\"entities\": $ENTITIES, \"wall_s\": $(awk "BEGIN {print $t1 - $t0}"), \"used_memory_delta\": $((after - before)), \"timings\": $FEAST_TIMES}"

say "Redis memory per entity (MEMORY USAGE on a sample)"
"$PY" "$BENCH/redis_memory.py" --port "$REDIS_PORT" --fingerprint "$FINGERPRINT" > "$RUN_DIR/memory.json"
meta redis_memory "$(cat "$RUN_DIR/memory.json")"

# The Envoys serve repo_od: repo's routes plus the on-demand ones (Chalk's three scenarios
# behind one Envoy). Its scoring_mix needs vectors of its own; materialized here, untimed, after
# the figures above (taken on repo alone).
say "ferry materialize repo_od (scoring again, and scoring_mix for the mix; untimed)"
OD_FINGERPRINT=$("$BIN/ferry" apply "$BENCH/repo_od" | awk '/^feature service scoring / {for (i=1;i<NF;i++) if ($i=="fingerprint") print $(i+1)}')
[ "$OD_FINGERPRINT" = "$FINGERPRINT" ] || { echo "bench: scoring differs in repo_od ($OD_FINGERPRINT) and repo ($FINGERPRINT): keep their views the same" >&2; exit 1; }
FERRY_REDIS="redis://127.0.0.1:$REDIS_PORT/0" "$BIN/ferry" materialize "$BENCH/repo_od" >"$RUN_DIR/ferry-materialize-od.out" 2>&1 \
  || { cat "$RUN_DIR/ferry-materialize-od.out"; exit 1; }

say "starting the reader, the model, Envoy (ferry :$LISTEN_PORT, passthrough :$PASS_PORT) and Feast (:$FEAST_PORT)"
start reader "$BIN/ferry-reader" --listen "127.0.0.1:$READER_PORT" --redis "redis://127.0.0.1:$REDIS_PORT/0"
start model "$BIN/ferry-demo-model" --listen "127.0.0.1:$MODEL_PORT"
"$BIN/ferry" envoy-config "$BENCH/repo_od" --wasm "$WASM" --listen-port "$LISTEN_PORT" --admin-port "$ADMIN_PORT" \
  --reader-port "$READER_PORT" --model-port "$MODEL_PORT" -o "$RUN_DIR/envoy-ferry.yaml" \
  ${READER_PROTOCOL:+--reader-protocol "$READER_PROTOCOL"}
"$PY" "$BENCH/passthrough.py" "$RUN_DIR/envoy-ferry.yaml" "$PASS_PORT" > "$RUN_DIR/envoy.yaml"
start envoy "$ENVOY" -c "$RUN_DIR/envoy.yaml" --disable-hot-restart --log-level warn --concurrency 2
"$BIN/ferry" envoy-config "$BENCH/repo_od" --runtime native --native-module "$NATIVE" \
  --listen-port "$NATIVE_PORT" --admin-port "$NATIVE_ADMIN_PORT" \
  --reader-port "$READER_PORT" --model-port "$MODEL_PORT" -o "$RUN_DIR/envoy-native.yaml" \
  ${READER_PROTOCOL:+--reader-protocol "$READER_PROTOCOL"}
# Its own base id: two Envoys on one machine need distinct shared-memory regions.
start envoy-native "$ENVOY" -c "$RUN_DIR/envoy-native.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2 --base-id 1
# The same module answering reader calls in process, from the same Redis (its config still
# names the reader cluster, unused for lookups).
"$BIN/ferry" envoy-config "$BENCH/repo_od" --runtime native --native-module "$NATIVE" \
  --listen-port "$INPROC_PORT" --admin-port "$INPROC_ADMIN_PORT" \
  --reader-port "$READER_PORT" --model-port "$MODEL_PORT" -o "$RUN_DIR/envoy-inproc.yaml"
start envoy-inproc env FERRY_NATIVE_READER="--redis redis://127.0.0.1:$REDIS_PORT/0" \
  "$ENVOY" -c "$RUN_DIR/envoy-inproc.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2 --base-id 2
# Feast's documented production settings: --workers -1 (2 x cores + 1), --worker-connections
# 1000, --registry_ttl_sec 60, keep-alive 30 s; no access log (one line per request otherwise).
start feast "$FEAST" -c "$BENCH/feast" serve --host 127.0.0.1 --port "$FEAST_PORT" \
  --workers "$FEAST_WORKERS" --worker-connections 1000 --registry_ttl_sec 60 \
  --keep-alive-timeout 30 --no-access-log
say "starting Ferry on Feast's layout (reader :$FF_READER_PORT on db 1, Envoy :$FF_LISTEN_PORT)"
start reader-feast "$BIN/ferry-reader" --listen "127.0.0.1:$FF_READER_PORT" --redis "redis://127.0.0.1:$REDIS_PORT/1"
"$BIN/ferry" envoy-config "$BENCH/feast_ferry" --wasm "$WASM" --listen-port "$FF_LISTEN_PORT" \
  --admin-port "$FF_ADMIN_PORT" --reader-port "$FF_READER_PORT" --model-port "$MODEL_PORT" \
  -o "$RUN_DIR/envoy-feast.yaml" ${READER_PROTOCOL:+--reader-protocol "$READER_PROTOCOL"}
start envoy-feast "$ENVOY" -c "$RUN_DIR/envoy-feast.yaml" --disable-hot-restart --log-level warn \
  --concurrency 2
wait_for reader "http://127.0.0.1:$READER_PORT/healthz"
wait_for envoy "http://127.0.0.1:$ADMIN_PORT/ready"
wait_for reader-feast "http://127.0.0.1:$FF_READER_PORT/healthz"
wait_for envoy-feast "http://127.0.0.1:$FF_ADMIN_PORT/ready"
wait_for envoy-native "http://127.0.0.1:$NATIVE_ADMIN_PORT/ready"
wait_for envoy-inproc "http://127.0.0.1:$INPROC_ADMIN_PORT/ready"
for _ in $(seq 600); do curl -fsS -o /dev/null "http://127.0.0.1:$FEAST_PORT/health" 2>/dev/null && break; sleep 0.1; done
meta feast_server "{\"workers\": \"$FEAST_WORKERS\", \"command\": \"feast serve --workers $FEAST_WORKERS --worker-connections 1000 --registry_ttl_sec 60 --keep-alive-timeout 30 --no-access-log\"}"

say "sanity checks"
# check_ferry PATH [PORT [TEXT]]: enriched with status ok (and TEXT in the model's body).
check_ferry() {
  local h
  h=$(curl -sS -D - -o "$RUN_DIR/check.body" -H 'content-type: application/json' \
    --data-binary '{"instances":[{"user_id":"u000001","amount":1.5,"merchant_id":"m00042","channel":"web"}]}' \
    "http://127.0.0.1:${2:-$LISTEN_PORT}$1")
  { echo "$h" | grep -qi '^x-echo-headers:.*"x-ferry-status":"ok"' && grep -q "${3:-}" "$RUN_DIR/check.body"; } || {
    echo "bench: $1 was not enriched${3:+ with $3}:"; echo "$h"; head -c 600 "$RUN_DIR/check.body"; exit 1; }
  echo "ferry $1: enriched ($(wc -c < "$RUN_DIR/check.body") bytes)"
}
check_ferry /v1/models/scoring:predict
check_ferry /v1/models/scoring-cached:predict
check_ferry /v1/models/scoring:predict "$FF_LISTEN_PORT"
check_ferry /v1/models/scoring:predict "$NATIVE_PORT"
check_ferry /v1/models/scoring-cached:predict "$NATIVE_PORT"
check_ferry /v1/models/scoring:predict "$INPROC_PORT"
for port in "$LISTEN_PORT" "$NATIVE_PORT"; do
  check_ferry /v1/models/scoring-mix:predict "$port" '"risk__declines_per_txn":[0-9]'
  check_ferry /v1/models/scoring-od:predict "$port" '"txn__log_amount":[0-9]'
done
curl -fsS -o /dev/null -d '{"instances":[{"user_id":"u000001"}]}' "http://127.0.0.1:$PASS_PORT/v1/models/scoring:predict"
"$PY" "$BENCH/feast_ops.py" check "$BENCH/feast" "http://127.0.0.1:$FEAST_PORT/get-online-features"

# scenario NAME -> "URL PROTOCOL ID-SPACE EXTRA-ARGS"
target() {
  case $1 in
    envoy_passthrough) echo "http://127.0.0.1:$PASS_PORT/v1/models/scoring:predict kserve $ENTITIES" ;;
    ferry_redis) echo "http://127.0.0.1:$LISTEN_PORT/v1/models/scoring:predict kserve $ENTITIES" ;;
    ferry_cache) echo "http://127.0.0.1:$LISTEN_PORT/v1/models/scoring-cached:predict kserve $HOT_SET" ;;
    ferry_feast) echo "http://127.0.0.1:$FF_LISTEN_PORT/v1/models/scoring:predict kserve $ENTITIES" ;;
    ferry_feast_precomputed) echo "http://127.0.0.1:$FF_LISTEN_PORT/v1/models/scoring-precomputed:predict kserve $ENTITIES" ;;
    ferry_native) echo "http://127.0.0.1:$NATIVE_PORT/v1/models/scoring:predict kserve $ENTITIES" ;;
    ferry_native_cache) echo "http://127.0.0.1:$NATIVE_PORT/v1/models/scoring-cached:predict kserve $HOT_SET" ;;
    ferry_mix) echo "http://127.0.0.1:$LISTEN_PORT/v1/models/scoring-mix:predict kserve $ENTITIES" ;;
    ferry_od) echo "http://127.0.0.1:$LISTEN_PORT/v1/models/scoring-od:predict kserve $ENTITIES" ;;
    ferry_native_mix) echo "http://127.0.0.1:$NATIVE_PORT/v1/models/scoring-mix:predict kserve $ENTITIES" ;;
    ferry_native_od) echo "http://127.0.0.1:$NATIVE_PORT/v1/models/scoring-od:predict kserve $ENTITIES" ;;
    ferry_native_inproc) echo "http://127.0.0.1:$INPROC_PORT/v1/models/scoring:predict kserve $ENTITIES" ;;
    reader_direct) echo "http://127.0.0.1:$READER_PORT/v1/vectors reader $ENTITIES --fingerprint $FINGERPRINT" ;;
    feast_precomputed) echo "http://127.0.0.1:$FEAST_PORT/get-online-features feast $ENTITIES --feature-service scoring_precomputed" ;;
    feast_regular) echo "http://127.0.0.1:$FEAST_PORT/get-online-features feast $ENTITIES --feature-service scoring" ;;
    feast_odfv) echo "http://127.0.0.1:$FEAST_PORT/get-online-features feast $ENTITIES --feature-service scoring_odfv --request-data" ;;
    *) echo "bench: unknown scenario $1" >&2; return 1 ;;
  esac
}
LOADGEN="$BIN/ferry-bench"
n_runs=0
for s in $SCENARIOS; do
  if [ "$s" = feast_sdk ]; then
    # In-process: no server, no load generator; one caller, closed loop, timed in Python.
    say "scenario feast_sdk (Feast's get_online_features in process)"
    for b in $BATCHES; do
      # A failure here (Feast's SDK is not our code) is reported and leaves a gap in the tables.
      "$PY" "$BENCH/feast_ops.py" sdk "$BENCH/feast" "$b" "$DURATION" "$WARMUP" "$ENTITIES" \
        >>"$ROWS" 2>"$RUN_DIR/feast-sdk.log" || { echo "feast_sdk batch $b failed:"; tail -5 "$RUN_DIR/feast-sdk.log"; }
      tail -1 "$ROWS"
      n_runs=$((n_runs + 1))
    done
    continue
  fi
  read -r url proto ids extra <<<"$(target "$s")"
  # shellcheck disable=SC2086
  common=(--url "$url" --protocol "$proto" --scenario "$s" --id-space "$ids" $extra)
  say "scenario $s"
  # Warm the path (pools, V8, Python workers, the near cache's working set); not recorded.
  "$LOADGEN" "${common[@]}" --batch 100 --connections 8 --duration 1 --warmup 0 >/dev/null
  for b in $BATCHES; do
    "$LOADGEN" "${common[@]}" --batch "$b" --connections 1 --duration "$DURATION" --warmup "$WARMUP" --out "$ROWS"
    "$LOADGEN" "${common[@]}" --batch "$b" --connections 8 --duration "$DURATION" --warmup "$WARMUP" --out "$ROWS"
    for r in $RATES; do
      "$LOADGEN" "${common[@]}" --batch "$b" --connections 8 --rate "$r" --duration "$DURATION" --warmup "$WARMUP" --out "$ROWS"
    done
    n_runs=$((n_runs + 2 + $(wc -w <<<"$RATES")))
  done
done

# Criterion's cost of five derived features per request, in the same run (the bound of the mix's
# target): natively (filter_request) and through the .wasm in the wasm host. BENCH_CRITERION=0
# skips it.
if [ "${BENCH_CRITERION:-1}" = 1 ]; then
  say "criterion: five derived features per request, natively and in the wasm host"
  if cargo bench -q -p bench --bench filter -- filter_request_derived >"$RUN_DIR/criterion.log" 2>&1 &&
    cargo bench -q -p ferry-wasm-host --bench request -- 'request/enriched_.*_(plain|derived5)' \
      >>"$RUN_DIR/criterion.log" 2>&1; then
    meta criterion "$("$PY" "$BENCH/on_demand_report.py" criterion "$ROOT/target")"
  else
    echo "criterion failed (the mix's targets will have no bound):"; tail -5 "$RUN_DIR/criterion.log"
  fi
fi

say "$n_runs runs done; writing the report"
# Envoy's own view of where time went, summed over every run: the reader call, the model call,
# and each listener's whole request.
curl -fsS "http://127.0.0.1:$ADMIN_PORT/stats?format=json&filter=(ferry_reader|model)\.upstream_rq_time|downstream_rq_time" \
  > "$RUN_DIR/envoy-stats.json" 2>/dev/null && meta envoy_stats "$(cat "$RUN_DIR/envoy-stats.json")" || true
meta run "{\"quick\": $([ "$QUICK" = 1 ] && echo true || echo false), \"entities\": $ENTITIES, \"duration_s\": $DURATION, \"warmup_s\": $WARMUP, \"hot_set\": $HOT_SET, \"fingerprint\": \"$FINGERPRINT\", \"anchor\": \"$ANCHOR\"}"
if [ "$RECORD" = 1 ]; then
  OUT="$BENCH/results"; REPORT="$BENCH/README.md"
else
  OUT="$RUN_DIR/results"; REPORT="$RUN_DIR/report.md"
fi
"$PY" "$BENCH/report.py" --rows "$ROWS" --meta "$META" --envoy "$ENVOY" --out "$OUT" --readme "$REPORT"
[ "$RECORD" = 1 ] || echo "bench: not recorded (bench/README.md and bench/results/ untouched); RECORD=1 records a run"

# Online writes (issue #23): bench/push.sh in the same sitting, after the read scenarios, on its
# own stack (ports 19400 and up; release builds made above). PUSH=0 skips it; QUICK=1 shortens it.
if [ "${PUSH:-1}" = 1 ]; then
  say "pushes: throughput beside Feast's /push, push-to-served latency (bench/push.sh)"
  if [ "$QUICK" = 1 ]; then export PUSH_SECONDS=${PUSH_SECONDS:-2} PUSH_SAMPLES=${PUSH_SAMPLES:-50}; fi
  BENCH_NO_BUILD=1 bash "$BENCH/push.sh" | tee "$RUN_DIR/push.jsonl" ||
    echo "push bench failed; its logs are in bench/.run/push/"
fi

# Served-feature logs (issue #24): bench/log.sh in the same sitting, on its own stack (ports
# 19500 and up; release builds made above): logging off / 0.1 / 1.0 on one Envoy, the sink's
# rows per second. LOG=0 skips it; QUICK=1 shortens it.
if [ "${LOG:-1}" = 1 ]; then
  say "served-feature logs: off, 0.1 and 1.0 on one Envoy, the sink keeping up (bench/log.sh)"
  QUICK=$QUICK BENCH_NO_BUILD=1 LOG_BIN="$BIN" LOG_WASM="$WASM" FEAST_VENV=${FEAST_VENV:-$BENCH/.venv} \
    FERRY_ENVOY="$ENVOY" bash "$BENCH/log.sh" ||
    echo "bench: the served-log bench failed (logs in $RUN_DIR/log/)"
fi

# The fleet figures (bench/fleet.sh, issue #26): the control plane at 100 to 10,000 simulated
# Envoys, after every other process of this run is stopped. FLEET=0 skips them.
if [ "${FLEET:-1}" != 0 ]; then
  for p in $PROCS; do stop "$p" >/dev/null || true; done
  QUICK=$QUICK RECORD=$RECORD FLEET_NO_BUILD=${BENCH_NO_BUILD:-0} bash "$BENCH/fleet.sh"
fi
