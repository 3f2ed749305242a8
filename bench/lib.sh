# The bench scripts' common start, sourced as `source "$(dirname "$0")/lib.sh" NAME [feast]`:
# scripts/lib.sh (ROOT, BIN, WASM, ENVOY, start/stop), the repo root as working directory,
# BENCH (this folder), RUN_DIR bench/.run/NAME (lib.sh's start/stop keep pids and logs there;
# NAME "" is bench/.run itself: always pass it, or `source` hands on the script's own
# arguments), and VENV and PY: the bench's venv, or with `feast` the Feast venv (FEAST_VENV,
# default .venv-feast).
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
cd "$ROOT"
BENCH="$ROOT/bench"
RUN_DIR="$BENCH/.run${1:+/$1}"
if [ "${2:-}" = feast ]; then VENV=${FEAST_VENV:-$ROOT/.venv-feast}; else VENV="$BENCH/.venv"; fi
PY="$VENV/bin/python"
