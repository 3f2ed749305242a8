#!/usr/bin/env bash
# `make demo`: installs what is missing, builds, starts Redis, the reader, the demo model, the
# control plane (`ferry serve`) and Envoy with the ferry filter, applies and materializes the
# example repo, sends sample requests (printing each before and after enrichment; the on-demand
# features computed in Envoy, with a null input and a division by zero), pushes a
# change hot and shows /status, writes one entity through Feast's POST /push and shows it served,
# logs one route's served features to Parquet (ferry log-sink)
# and leaves the stack running (`make stop`).
# FERRY_MODE=static runs the older static mode: the snapshot inlined in Envoy's bootstrap, no
# control plane. FERRY_RUNTIME=native runs the filter as an Envoy dynamic module
# (libferry_native.so) instead of the Wasm filter (the default, FERRY_RUNTIME=wasm).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

REPO=${FERRY_REPO:-examples/banking}
LISTEN_PORT=${FERRY_LISTEN_PORT:-10000}
ADMIN_PORT=${FERRY_ADMIN_PORT:-9901}
READER_PORT=${FERRY_READER_PORT:-8090}
MODEL_PORT=${FERRY_MODEL_PORT:-8080}
REDIS_PORT=${FERRY_REDIS_PORT:-6379}
XDS_PORT=${FERRY_XDS_PORT:-18000}
CP_PORT=${FERRY_CP_PORT:-8091}
LOG_PORT=${FERRY_LOG_PORT:-18090}
LOG_HTTP_PORT=${FERRY_LOG_HTTP_PORT:-8093}
MODE=${FERRY_MODE:-xds}
RUNTIME=${FERRY_RUNTIME:-wasm}
case "$RUNTIME" in
  wasm) RUNTIME_FLAGS=(--wasm "$WASM") ;;
  native) RUNTIME_FLAGS=(--runtime native --native-module "$NATIVE") ;;
  *) echo "FERRY_RUNTIME must be wasm or native" >&2; exit 1 ;;
esac
export FERRY_REDIS="redis://127.0.0.1:$REDIS_PORT"
case "$MODE" in xds|static) ;; *) echo "FERRY_MODE must be xds or static" >&2; exit 1;; esac
PORTS="$LISTEN_PORT $ADMIN_PORT $READER_PORT $MODEL_PORT $REDIS_PORT $LOG_PORT $LOG_HTTP_PORT"
[ "$MODE" = xds ] && PORTS="$PORTS $XDS_PORT $CP_PORT"

bash scripts/setup.sh
echo "== building (release)"
cargo build --release --quiet -p ferry -p ferry-reader -p ferry-demo-model
cargo build --release --quiet -p ferry-filter --target wasm32-wasip1
cargo build --profile native --quiet -p ferry-native

bash scripts/stop.sh >/dev/null
for p in $PORTS; do
  port_free "$p" || { echo "port $p is in use; free it or set the FERRY_*_PORT variables (see docs/getting-started.md#ports)" >&2; exit 1; }
done

echo "== starting Redis on 127.0.0.1:$REDIS_PORT"
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

echo "== generating the example data set and applying $REPO"
python3 "$REPO/generate_data.py" --entities 10000
"$BIN/ferry" apply "$REPO"

echo "== materializing vectors into Redis"
"$BIN/ferry" materialize "$REPO"

echo "== starting the reader (:$READER_PORT), the demo model (:$MODEL_PORT) and Envoy (:$LISTEN_PORT, $MODE mode, $RUNTIME filter)"
start reader "$BIN/ferry-reader" --listen "127.0.0.1:$READER_PORT"
start model "$BIN/ferry-demo-model" --listen "127.0.0.1:$MODEL_PORT"
# Served-feature logs (docs/served-logs.md): the example's fraud-lenient route logs every
# request; Envoy's gRPC access logger sends them to the sink, which writes Parquet files.
LOG_DIR="$RUN_DIR/served-logs"
rm -rf "$LOG_DIR"
echo "== starting ferry log-sink (gRPC 127.0.0.1:$LOG_PORT, /metrics :$LOG_HTTP_PORT) into $LOG_DIR"
start log-sink "$BIN/ferry" log-sink --dir "$LOG_DIR" --listen "127.0.0.1:$LOG_PORT" \
  --http-listen "127.0.0.1:$LOG_HTTP_PORT" --window-secs 2
ENVOY_ARGS=(--listen-port "$LISTEN_PORT" --admin-port "$ADMIN_PORT" --reader-port "$READER_PORT"
  --model-port "$MODEL_PORT" --log-sink "127.0.0.1:$LOG_PORT" -o "$RUN_DIR/envoy.yaml")
if [ "$MODE" = xds ]; then
  echo "== starting the control plane: xDS 127.0.0.1:$XDS_PORT, HTTP http://127.0.0.1:$CP_PORT"
  # A fresh state directory: the demo's Redis starts empty, so last run's pushed snapshot
  # (restored from the state directory otherwise) is not wanted.
  rm -rf "$RUN_DIR/cp-state"
  # The demo's credentials (docs/security.md, docs/fresh-features.md): fresh random tokens in
  # files only their owner reads, one to push snapshots, one to write features; Envoy routes
  # Feast's POST /push and /write-to-online-store to ferry serve.
  PUSH_TOKEN_FILE="$RUN_DIR/push-token"
  WRITE_TOKEN_FILE="$RUN_DIR/write-token"
  # Each token also as a header file for `curl -H @FILE`: a token never goes into a command's
  # arguments, which every local user can read in /proc/*/cmdline (#35).
  for f in "$PUSH_TOKEN_FILE" "$WRITE_TOKEN_FILE"; do
    (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$f"
      printf 'authorization: Bearer %s\n' "$(cat "$f")" > "$f.header")
  done
  start control-plane env -u FERRY_PUSH_TOKEN "$BIN/ferry" serve "$REPO" "${RUNTIME_FLAGS[@]}" \
    --state-dir "$RUN_DIR/cp-state" --xds-listen "127.0.0.1:$XDS_PORT" --http-listen "127.0.0.1:$CP_PORT" \
    --push-token-file "$PUSH_TOKEN_FILE" --write-token-file "$WRITE_TOKEN_FILE"
  wait_for control-plane "http://127.0.0.1:$CP_PORT/healthz"
  "$BIN/ferry" envoy-config "$REPO" --xds --xds-address "127.0.0.1:$XDS_PORT" "${RUNTIME_FLAGS[@]}" \
    --write-address "127.0.0.1:$CP_PORT" "${ENVOY_ARGS[@]}"
else
  "$BIN/ferry" envoy-config "$REPO" "${RUNTIME_FLAGS[@]}" "${ENVOY_ARGS[@]}"
fi
start envoy "$ENVOY" -c "$RUN_DIR/envoy.yaml" --disable-hot-restart --log-level warn
wait_for reader "http://127.0.0.1:$READER_PORT/healthz"
# In xDS mode Envoy is ready once the control plane's snapshot arrived (the listener warms).
wait_for envoy "http://127.0.0.1:$ADMIN_PORT/ready"

# Indented JSON with lists of numbers (embeddings) kept on one line; raw text if not JSON.
pretty() {
  python3 -c '
import json, re, sys
d = sys.stdin.read()
try:
    out = json.dumps(json.loads(d), indent=2)
    print(re.sub(r"\[\s+([-0-9.e,\s]+?)\s+\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]", out))
except ValueError:
    print(d if d.strip() else "(empty)")
'
}

# What the model received, on-demand features only: per instance the request fields sent, the
# derived features (view__feature of txn_risk and basket) and their statuses from ferry.statuses
# (a feature missing there is PRESENT); the stored features are left out to keep it short.
derived_view() {
  python3 -c '
import json, sys
d = sys.stdin.read()
try:
    doc = json.loads(d)
except ValueError:
    print(d if d.strip() else "(empty)"); sys.exit()
if "instances" not in doc:
    print(json.dumps(doc, indent=2)); sys.exit()
derived = ("txn_risk__", "basket__")
statuses = doc.get("ferry", {}).get("statuses", [])
for i, inst in enumerate(doc["instances"]):
    sent = {k: v for k, v in inst.items() if "__" not in k}
    if "query_embedding" in sent:
        sent["query_embedding"] = "[%d floats]" % len(sent["query_embedding"])
    print("  instance %d, sent %s" % (i, json.dumps(sent)))
    st = statuses[i] if i < len(statuses) else {}
    for k, v in inst.items():
        if k.startswith(derived):
            print("    %-34s %-22s %s" % (k, json.dumps(v), st.get(k, "PRESENT")))
meta = {k: v for k, v in doc.get("ferry", {}).items() if k != "statuses"}
print("  ferry: %s" % json.dumps(meta))
'
}

# send TITLE PATH BODY: prints the request, then what the model received (or Ferry's error).
# With BODY "-" and a 4th argument HEADER, sends a GET carrying only that header.
send() {
  local out status
  echo; echo "######## $1"
  if [ "$3" = "-" ]; then
    echo "---- client sends: GET $2 with header '$4'"
    out=$(curl -sS -D "$RUN_DIR/last.headers" -o "$RUN_DIR/last.body" -w '%{http_code}' \
      -H "$4" "http://127.0.0.1:$LISTEN_PORT$2")
  else
    echo "---- client sends: POST $2"; echo "$3" | pretty
    out=$(curl -sS -D "$RUN_DIR/last.headers" -o "$RUN_DIR/last.body" -w '%{http_code}' \
      -H 'content-type: application/json' --data-binary "$3" "http://127.0.0.1:$LISTEN_PORT$2")
  fi
  status=$out
  if grep -qi '^x-echo-headers:' "$RUN_DIR/last.headers"; then
    echo "---- model receives (HTTP $status from the model), x-ferry-* headers:"
    grep -i '^x-echo-headers:' "$RUN_DIR/last.headers" | sed 's/^[^:]*: //' |
      python3 -c 'import json,sys; h=json.load(sys.stdin); [print(f"  {k}: {v}") for k,v in sorted(h.items()) if k.startswith("x-ferry-")]'
    echo "---- and body:"
  else
    echo "---- Ferry answers HTTP $status (the model is not called):"
  fi
  ${SHOW:-pretty} < "$RUN_DIR/last.body"
}

send "Two users, enriched with every feature of realtime_scoring" /v1/models/fraud:predict \
  '{"instances": [{"user_id": "u000001", "amount": 120.5}, {"user_id": "u000002", "amount": 9.99}]}'
send "u000007's transactions are older than their 1d ttl: null + OUTSIDE_MAX_AGE" /v1/models/fraud:predict \
  '{"instances": [{"user_id": "u000007", "amount": 42.0}]}'
send "A forged feature is overwritten, never trusted" /v1/models/fraud:predict \
  '{"instances": [{"user_id": "u000003", "user_profile__credit_score": 850.0}]}'
send "Unknown user on the strict route (on_missing_entity: reject)" /v1/models/fraud:predict \
  '{"instances": [{"user_id": "nobody"}]}'
send "Unknown user on the lenient route (on_missing_entity: null)" /v1/models/fraud-lenient:predict \
  '{"instances": [{"user_id": "nobody"}, {"user_id": "u000004"}]}'
send "KServe v2 / Open Inference Protocol: one typed tensor per feature" /v2/models/fraud/infer \
  '{"inputs": [{"name": "user_id", "shape": [2], "datatype": "BYTES", "data": ["u000001", "u000007"]}]}'
# Triton's client (tritonclient[http], in .venv) sends binary tensors by default: a JSON header of
# Inference-Header-Content-Length bytes, then the raw tensor bytes. Printed as header + hex.
echo; echo "######## KServe v2 binary tensor data extension, as tritonclient sends it by default"
.venv/bin/python3 - "127.0.0.1:$LISTEN_PORT" <<'PY'
import http.client, json, sys
import numpy as np
import tritonclient.http as triton

def show(body, n):
    print(json.dumps(json.loads(body[:n])))
    print("  + %d bytes of binary tensor data: %s" % (len(body) - n, body[n:].hex(" ")))

ids = triton.InferInput("user_id", [2], "BYTES")
ids.set_data_from_numpy(np.array([b"u000001", b"u000002"], dtype=np.object_))
amount = triton.InferInput("amount", [2], "FP32")
amount.set_data_from_numpy(np.array([120.5, 9.99], dtype=np.float32))
body, n = triton.InferenceServerClient.generate_request_body([amount, ids])
print("---- client sends: POST /v2/models/fraud/infer, Inference-Header-Content-Length: %d" % n)
show(body, n)
conn = http.client.HTTPConnection(sys.argv[1], timeout=10)
conn.request("POST", "/v2/models/fraud/infer", body, {"Inference-Header-Content-Length": str(n)})
r = conn.getresponse()
got, n = r.read(), r.getheader("Inference-Header-Content-Length")
print("---- model receives (HTTP %d), Inference-Header-Content-Length: %s" % (r.status, n))
show(got, int(n)) if n else print(got.decode())
PY
send "Generic JSON: entities at /batch/users, features written at /features of each" /score \
  '{"batch": {"users": [{"user_id": "u000003", "features": {"forged": 1}}, {"user_id": "u000004"}]}}'
send "Header mode: a GET whose body is untouched; features arrive in x-ferry-features" /v1/risk/u000005 - \
  'x-user-id: u000005'
send "Composite key (merchant_id int64, user_id string): a pair, a stale pair, a pair with no row" \
  /v1/models/merchant-fraud:predict \
  '{"instances": [{"merchant_id": 1038, "user_id": "u000001", "amount": 35.0}, {"merchant_id": 1260, "user_id": "u000007", "amount": 12.0}, {"merchant_id": 1001, "user_id": "u000001", "amount": 99.0}]}'
send "Three FeatureServices in one reader call: user, (merchant, user) pair, merchant" \
  /v1/models/full-fraud:predict \
  '{"instances": [{"merchant_id": 1038, "user_id": "u000001", "amount": 35.0}]}'
# On-demand features (docs/on-demand.md): computed in Envoy per instance, after the lookup,
# from the instance's request fields and the stored vector just read; only those are printed.
Q='"query_embedding": [0.3, -1.2, 0.8, 0.1, -0.5, 1.1, 0.0, -0.7]'
SHOW=derived_view send "On-demand features: request fields against the stored vector (stored features left out)" \
  /v1/models/txn-risk:predict \
  "{\"instances\": [{\"user_id\": \"u000001\", \"amount\": 120.5, \"country\": \"DE\", \"items\": 3, $Q}, {\"user_id\": \"u000002\", \"amount\": 2500.0, \"country\": \"FR\", \"items\": 12, $Q}]}"
SHOW=derived_view send "Null inputs and a division by zero: u000042 has no transactions or sessions row, u000007's transactions are stale, u000009's last_login_at is null, u000007 sends no query_embedding, items 0 divides by zero (INVALID)" \
  /v1/models/txn-risk:predict \
  "{\"instances\": [{\"user_id\": \"u000042\", \"amount\": 50.0, \"country\": \"DE\", \"items\": 2, $Q}, {\"user_id\": \"u000007\", \"amount\": 50.0, \"country\": \"DE\", \"items\": 0}, {\"user_id\": \"u000009\", \"amount\": 75.0, \"country\": \"NL\", \"items\": 1, $Q}]}"
reader_calls() {
  curl -fsS "http://127.0.0.1:$ADMIN_PORT/stats?filter=^cluster\.ferry_reader\.upstream_rq_total$" | awk '{print $2}'
}
before=$(reader_calls)
SHOW=derived_view send "On-demand only (basket): request fields, no entity, no reader call; items 0 is INVALID, a missing field NOT_FOUND" \
  /v1/models/basket:predict \
  '{"instances": [{"amount": 120.0, "items": 4}, {"amount": 80.0, "items": 0}, {"amount": 1500.0}]}'
echo "---- reader calls made by Envoy for that request: $(( $(reader_calls) - before ))"
send "Malformed JSON" /v1/models/fraud:predict '{"instances": [{"user_id": '
send "A path no route matches under the protected /v1/models/ is refused, never forwarded" \
  /v1/models/FRAUD:predict '{"instances": [{"user_id": "u000003", "user_profile__credit_score": 850.0}]}'

if [ "$MODE" = xds ]; then
  # A hot change through the control plane: a copy of the repo whose lenient route uses short
  # feature names (no fingerprint change), pushed; Envoy is not restarted.
  echo; echo "######## Hot change over xDS: the lenient route switches to short feature names"
  HOT="$RUN_DIR/repo-hot"
  rm -rf "$HOT"; mkdir -p "$HOT"; cp "$REPO/ferry.yaml" "$HOT/"; ln -s "$(cd "$REPO" && pwd)/data" "$HOT/data"
  python3 - "$HOT/ferry.yaml" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
old = "on_missing_entity: \"null\""
assert old in s, "the example's lenient route changed"
s = s.replace("    feature_names: full\n    " + old, "    feature_names: short\n    " + old, 1)
open(p, "w").write(s)
PY
  CP="http://127.0.0.1:$CP_PORT"
  BODY='{"instances": [{"user_id": "u000001"}]}'
  URL="http://127.0.0.1:$LISTEN_PORT/v1/models/fraud-lenient:predict"
  t0=$(date +%s%N)
  FERRY_PUSH_TOKEN=$(cat "$PUSH_TOKEN_FILE") "$BIN/ferry" apply "$HOT" --materialize --push "$CP" | tail -1
  t1=$(date +%s%N)
  for _ in $(seq 2000); do
    curl -s -H 'content-type: application/json' --data-binary "$BODY" "$URL" | grep -q '"age"' && break
  done
  t2=$(date +%s%N)
  echo "---- the model now receives (short names):"
  curl -s -H 'content-type: application/json' --data-binary "$BODY" "$URL" | pretty | sed -n 1,8p
  echo "  ..."
  printf -- '---- push took %d ms; first request served with the new snapshot %d ms after the push returned (%d ms after `ferry apply` started)\n' \
    $(((t1 - t0) / 1000000)) $(((t2 - t1) / 1000000)) $(((t2 - t0) / 1000000))
  echo "---- control plane /status:"
  # With a push token ferry serve gates /status too: read with it.
  curl -s -H @"$PUSH_TOKEN_FILE.header" "$CP/status" > "$RUN_DIR/status.json"
  python3 - "$RUN_DIR/status.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
snap = s["snapshot"]
services = ", ".join("%s %s" % (x["name"], x["fingerprint"]) for x in snap["services"])
print("  snapshot %s (from %s); services: %s" % (snap["version"], snap["source"], services))
for n in s["nodes"]:
    print("  node %s: acked %s, converged %s, last NACK %s" % (n["node"], n["acked_version"], n["converged"], n["last_nack"]))
print("  all converged: %s" % s["converged"])
PY
fi

# An online write (docs/fresh-features.md): Feast's push request, sent to Envoy with the demo's
# write credential; the next request is served the pushed row.
PUSH_BODY='{"push_source_name": "profile_push", "df": {"user_id": ["u000010"], "event_timestamp": [TS], "age": [52], "credit_score": [801.5], "account_tier": ["platinum"], "is_verified": [true], "signup_days": [1200]}, "to": "online"}'
if [ "$MODE" = xds ] && grep -q '^  - {name: profile_push, views: \[user_profile\]}' "$REPO/ferry.yaml"; then
  echo; echo "######## An online write: Feast's POST /push through Envoy, then the next request"
  URL="http://127.0.0.1:$LISTEN_PORT/v1/models/fraud:predict"
  profile() {
    curl -s -H 'content-type: application/json' --data-binary '{"instances": [{"user_id": "u000010"}]}' "$URL" |
      python3 -c 'import json,sys; i=json.load(sys.stdin)["instances"][0]; print("  " + json.dumps({k: v for k, v in i.items() if k.startswith("user_profile__")}))'
  }
  echo "---- u000010's profile as the model receives it before the push:"; profile
  body=${PUSH_BODY/TS/$(date +%s.%N | cut -c1-17)}
  echo "---- client sends: POST /push (authorization: Bearer <the demo's write token>)"; echo "$body" | pretty
  curl -sS -D "$RUN_DIR/push.headers" -o /dev/null -w '---- answer: HTTP %{http_code}' \
    -H @"$WRITE_TOKEN_FILE.header" -H 'content-type: application/json' \
    --data-binary "$body" "http://127.0.0.1:$LISTEN_PORT/push"
  echo ", $(grep -i '^x-ferry-rows-written:' "$RUN_DIR/push.headers" | tr -d '\r')"
  echo "---- and the next request's profile:"; profile
  PUSHED=1
fi

# What the log sink wrote for the fraud-lenient route (a file is complete 2 s after its first
# row here; `--window-secs`, 60 by default).
echo; echo "######## Served-feature logs of the fraud-lenient route (log: {sample: 1.0})"
for _ in $(seq 50); do
  [ -n "$(find "$LOG_DIR" -name '*.parquet' 2>/dev/null | head -1)" ] && break
  sleep 0.2
done
find "$LOG_DIR" -name '*.parquet' | sort | sed 's/^/  /' | head -5
echo "---- rows written so far: $(curl -fsS "http://127.0.0.1:$LOG_HTTP_PORT/metrics" | awk '/^ferry_log_sink_records_written_total/ {print $2}')" \
  "(read them with pandas: pd.read_parquet(\"$LOG_DIR/realtime_scoring\"))"

CP_LINE=""
PUSH_LINE=""
if [ "$MODE" = xds ]; then
  CP_LINE="  control plane  http://127.0.0.1:$CP_PORT   (/status, /metrics; xDS on 127.0.0.1:$XDS_PORT)
"
  PUSH_LINE="Push:  edit a copy of $REPO, then  FERRY_PUSH_TOKEN=\$(cat $PUSH_TOKEN_FILE) target/release/ferry apply COPY --materialize --push http://127.0.0.1:$CP_PORT
"
  if [ -n "${PUSHED:-}" ]; then
    PUSH_LINE="${PUSH_LINE}Write: curl -s -H @$WRITE_TOKEN_FILE.header -H 'content-type: application/json' http://127.0.0.1:$LISTEN_PORT/push -d '${PUSH_BODY/TS/$(date +%s)}'
"
  fi
fi
cat <<MSG

The stack is running ($MODE mode; pids and logs in .run/):
${CP_LINE}  Envoy + ferry  http://127.0.0.1:$LISTEN_PORT   (admin http://127.0.0.1:$ADMIN_PORT)
  reader         http://127.0.0.1:$READER_PORT   (/healthz, /metrics)
  demo model     http://127.0.0.1:$MODEL_PORT   (echoes the request it received)
  log sink       $LOG_DIR   (/metrics on http://127.0.0.1:$LOG_HTTP_PORT)
  Redis          127.0.0.1:$REDIS_PORT
Try:  curl -s -d '{"instances":[{"user_id":"u000010"}]}' http://127.0.0.1:$LISTEN_PORT/v1/models/fraud:predict
${PUSH_LINE}Stop: make stop
MSG
