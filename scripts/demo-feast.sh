#!/usr/bin/env bash
# `make demo-feast`: Ferry in front of a Feast repo (examples/feast). Installs Feast 0.67 in the
# project's virtualenv (.venv-feast), writes the example's Parquet files, runs `feast apply` and
# `feast materialize` into Redis, starts Feast's feature server and, beside it, Envoy with the
# ferry filter serving the same FeatureService from the same Redis (Feast's layout, Feast's
# registry file). Sends one request to both and prints the values side by side, then a KServe
# request enriched by Ferry. Leaves everything running (`make stop`).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

EXAMPLE=examples/feast
FEAST_REPO="$EXAMPLE/feature_repo"
LISTEN_PORT=${FERRY_LISTEN_PORT:-10000}
ADMIN_PORT=${FERRY_ADMIN_PORT:-9901}
READER_PORT=${FERRY_READER_PORT:-8090}
MODEL_PORT=${FERRY_MODEL_PORT:-8080}
REDIS_PORT=${FERRY_REDIS_PORT:-6379}
FEAST_PORT=${FERRY_FEAST_PORT:-6566}
VENV="$ROOT/.venv-feast"

bash scripts/setup.sh
bash scripts/feast_venv.sh "$VENV"
echo "== building (release)"
cargo build --release --quiet -p ferry -p ferry-reader -p ferry-demo-model
cargo build --release --quiet -p ferry-filter --target wasm32-wasip1

bash scripts/stop.sh >/dev/null
for p in $LISTEN_PORT $ADMIN_PORT $READER_PORT $MODEL_PORT $REDIS_PORT $FEAST_PORT; do
  port_free "$p" || { echo "port $p is in use; free it or set the FERRY_*_PORT variables" >&2; exit 1; }
done

echo "== starting Redis on 127.0.0.1:$REDIS_PORT"
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

# Feast's side, as a Feast user runs it.
export FEAST_DEMO_REDIS="127.0.0.1:$REDIS_PORT"
echo "== Feast: the example's data, feast apply, feast materialize-incremental (into Redis)"
"$VENV/bin/python" "$FEAST_REPO/generate_data.py"
rm -f "$FEAST_REPO/data/registry.db"
(cd "$FEAST_REPO" && "$VENV/bin/feast" apply >"$RUN_DIR/feast-apply.log" 2>&1) ||
  { tail -20 "$RUN_DIR/feast-apply.log"; exit 1; }
(cd "$FEAST_REPO" && "$VENV/bin/feast" materialize-incremental "$(date -u +%Y-%m-%dT%H:%M:%S)" \
  >"$RUN_DIR/feast-materialize.log" 2>&1) || { tail -20 "$RUN_DIR/feast-materialize.log"; exit 1; }
echo "== starting feast serve on 127.0.0.1:$FEAST_PORT"
start feast "$VENV/bin/feast" -c "$FEAST_REPO" serve --host 127.0.0.1 --port "$FEAST_PORT" --no-access-log

# Ferry's side: its snapshot read from Feast's registry, nothing materialized by Ferry.
echo "== ferry apply $EXAMPLE (Feast's registry), the reader, the demo model and Envoy"
"$BIN/ferry" apply "$EXAMPLE"
start reader "$BIN/ferry-reader" --listen "127.0.0.1:$READER_PORT" --redis "redis://127.0.0.1:$REDIS_PORT"
start model "$BIN/ferry-demo-model" --listen "127.0.0.1:$MODEL_PORT"
"$BIN/ferry" envoy-config "$EXAMPLE" --wasm "$WASM" --listen-port "$LISTEN_PORT" \
  --admin-port "$ADMIN_PORT" --reader-port "$READER_PORT" --model-port "$MODEL_PORT" \
  -o "$RUN_DIR/envoy.yaml"
start envoy "$ENVOY" -c "$RUN_DIR/envoy.yaml" --disable-hot-restart --log-level warn
wait_for reader "http://127.0.0.1:$READER_PORT/healthz"
wait_for envoy "http://127.0.0.1:$ADMIN_PORT/ready"
for _ in $(seq 600); do curl -fsS -o /dev/null "http://127.0.0.1:$FEAST_PORT/health" 2>/dev/null && break; sleep 0.1; done

REQUEST='{"feature_service": "fraud_model", "entities": {"user_id": ["u0001", "u0007", "u0010", "nobody"]}}'
echo; echo "######## The same request to Feast's server (:$FEAST_PORT) and to Envoy + Ferry (:$LISTEN_PORT)"
echo "---- client sends: POST /get-online-features"; echo "$REQUEST"
curl -fsS -H 'content-type: application/json' -d "$REQUEST" \
  "http://127.0.0.1:$FEAST_PORT/get-online-features" > "$RUN_DIR/feast.json"
curl -fsS -H 'content-type: application/json' -d "$REQUEST" \
  "http://127.0.0.1:$LISTEN_PORT/get-online-features" > "$RUN_DIR/ferry.json"
# Columns are matched by name: Feast 0.67 orders a service's features by a Python set, Ferry by
# name (docs/feast.md, "Where Ferry answers differently").
python3 - "$RUN_DIR/feast.json" "$RUN_DIR/ferry.json" <<'PY'
import json, sys
feast, ferry = (json.load(open(p)) for p in sys.argv[1:3])
cols = lambda d: dict(zip(d["metadata"]["feature_names"], d["results"]))
a, b = cols(feast), cols(ferry)
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
ids = a["user_id"]["values"]
cell = lambda r, i: "%s %s" % (json.dumps(r["values"][i]), "" if r["statuses"][i] == "PRESENT" else r["statuses"][i])
print("  %-18s %-7s  %-28s %-28s" % ("feature", "entity", "Feast's server", "Ferry in Envoy"))
same = known = 0
for name in sorted(n for n in a if n != "user_id"):
    for i, uid in enumerate(ids):
        x, y = a[name], b[name]
        equal = (x["values"][i], x["statuses"][i]) == (y["values"][i], y["statuses"][i])
        # Documented: Feast 0.67's server answers every null PRESENT (an unknown entity, a view
        # without a row, a null value); Ferry says why (NOT_FOUND, NULL_VALUE).
        unknown = (x["values"][i] is None and y["values"][i] is None and x["statuses"][i] == "PRESENT"
                   and y["statuses"][i] in ("NOT_FOUND", "NULL_VALUE"))
        same += equal
        known += (not equal) and unknown
        mark = "" if equal else ("  (a null: Ferry says why)" if unknown else "  <- differs")
        print("  %-18s %-7s  %-28s %-28s%s" % (name, uid, cell(x, i), cell(y, i), mark))
total = (len(a) - 1) * len(ids)
print("---- %d of %d values and statuses equal; %d differ as documented; %d otherwise" % (same, total, known, total - same - known))
PY

echo; echo "######## A KServe v1 request to the model, enriched by Ferry from Feast's data"
BODY='{"instances": [{"user_id": "u0001", "amount": 42.5}, {"user_id": "u0010", "amount": 7.0}]}'
echo "---- client sends: POST /v1/models/fraud:predict"; echo "$BODY"
echo "---- model receives:"
curl -fsS -H 'content-type: application/json' -d "$BODY" "http://127.0.0.1:$LISTEN_PORT/v1/models/fraud:predict" |
  python3 -m json.tool

cat <<MSG

Running (pids and logs in .run/):
  Feast's server  http://127.0.0.1:$FEAST_PORT   (feast serve over $FEAST_REPO)
  Envoy + ferry   http://127.0.0.1:$LISTEN_PORT   (admin http://127.0.0.1:$ADMIN_PORT)
  reader          http://127.0.0.1:$READER_PORT   demo model http://127.0.0.1:$MODEL_PORT   Redis 127.0.0.1:$REDIS_PORT
Try:  curl -s -d '$REQUEST' http://127.0.0.1:$LISTEN_PORT/get-online-features
Stop: make stop
MSG
