#!/usr/bin/env bash
# The fleet figures (issue #26): `ferry-fleet` against a real `ferry serve` at N = 100, 1,000
# and 10,000 simulated Envoys (QUICK=1: 100 and 300), each N over ADS in plaintext (two real
# Envoys joining, pushes of 100 KB, and of 1 MB up to 1,000 streams) and mTLS (100 KB), and
# pulling GET /v1/snapshot at the filter's default period, plaintext and mTLS, and over two
# replicas (`ferry serve --shared-state` on a redis-server of the run, half the fleet on each,
# 100 KB pushed to one: needs redis-server on PATH; REPLICAS=0 skips it). Writes the rows
# (fleet.jsonl), the table (fleet.md) and the curve (fleet.svg) to bench/.run/results, or with
# RECORD=1 to bench/results and the fleet section of bench/README.md. `make bench` runs it
# (FLEET=0 skips it). Every process is a child of ferry-fleet, stopped when it ends.
set -euo pipefail
source "$(dirname "$0")/../scripts/lib.sh"
cd "$ROOT"
QUICK=${QUICK:-0}
RECORD=${RECORD:-0}
if [ "$QUICK" = 1 ]; then NS=${FLEET_NS:-"100 300"}; else NS=${FLEET_NS:-"100 1000 10000"}; fi
ENVOY_BIN=${FERRY_ENVOY:-$ROOT/.venv/bin/envoy}
RUN="$ROOT/bench/.run/fleet"
mkdir -p "$RUN"
say() { echo "== $(date +%H:%M:%S) $*"; }

if [ "${FLEET_NO_BUILD:-0}" != 1 ]; then
  say "building (release)"
  cargo build --release --quiet -p ferry -p bench
  cargo build --release --quiet -p ferry-filter --target wasm32-wasip1
fi
# Copies, so that another checkout's build into the shared target/ cannot swap them mid-run.
cp "$BIN/ferry" "$BIN/ferry-fleet" "$WASM" "$RUN/"
ROWS="$RUN/fleet.jsonl"
: > "$ROWS"
fleet() { "$RUN/ferry-fleet" --ferry "$RUN/ferry" --wasm "$RUN/ferry_filter.wasm" --dir "$RUN/runs" --out "$ROWS" --log warn "$@"; }

for n in $NS; do
  sizes=100000
  [ "$n" -le 1000 ] && sizes=100000,1000000
  real=()
  [ -x "$ENVOY_BIN" ] && real=(--envoy "$ENVOY_BIN" --real-envoys 2)
  say "ADS, plaintext, n=$n"; fleet --mode ads --n "$n" --sizes "$sizes" --pushes 3 "${real[@]}"
  say "ADS, mTLS, n=$n";      fleet --mode ads --n "$n" --mtls --sizes 100000 --pushes 3
  say "pull, plaintext, n=$n"; fleet --mode pull --n "$n" --max-http-connections $((n + 1024))
  say "pull, mTLS, n=$n";      fleet --mode pull --n "$n" --mtls --max-http-connections $((n + 1024))
  if [ "${REPLICAS:-1}" = 1 ]; then
    say "ADS over two replicas, plaintext, n=$n"; fleet --mode replicas --n "$n" --sizes 100000 --pushes 3
  fi
done

if [ "$RECORD" = 1 ]; then OUT="$ROOT/bench/results"; README="$ROOT/bench/README.md"; else OUT="$ROOT/bench/.run/results"; README=""; fi
mkdir -p "$OUT"
cp "$ROWS" "$OUT/fleet.jsonl"
python3 "$ROOT/bench/fleet_report.py" --rows "$ROWS" --out "$OUT" ${README:+--readme "$README"}
say "fleet figures in $OUT/fleet.md and $OUT/fleet.svg"
