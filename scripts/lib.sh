# Shared by the demo scripts: where things live, and starting/stopping background processes by
# pid (never by name).
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUN_DIR="$ROOT/.run"
ENVOY="$ROOT/.venv/bin/envoy"
BIN="$ROOT/target/release"
WASM="$ROOT/target/wasm32-wasip1/release/ferry_filter.wasm"
# The native module: its own profile (release, but unwinding: Cargo.toml's [profile.native]).
NATIVE="$ROOT/target/native/libferry_native.so"

# start NAME CMD...: runs CMD in its own session, logs to .run/NAME.log, pid in .run/NAME.pid.
start() {
  local name=$1; shift
  mkdir -p "$RUN_DIR"
  setsid -f bash -c 'echo $$ > "$1"; shift; exec "$@"' _ "$RUN_DIR/$name.pid" "$@" \
    > "$RUN_DIR/$name.log" 2>&1 < /dev/null
  for _ in $(seq 50); do [ -s "$RUN_DIR/$name.pid" ] && return 0; sleep 0.02; done
  echo "could not start $name" >&2; return 1
}

# stop NAME: TERM, then KILL after 5 s, the pid recorded by start.
stop() {
  local f="$RUN_DIR/$1.pid" pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    echo "stopped $1 (pid $pid)"
  fi
  rm -f "$f"
}

# stop_at_exit NAME PROC...: at exit stops every PROC (started by start), and on a failure says
# where the logs are; an interrupt exits 130 through it. For the bench scripts.
stop_at_exit() {
  STOP_AT_EXIT_NAME=$1; shift
  STOP_AT_EXIT_PROCS="$*"
  trap _stop_at_exit EXIT
  trap 'exit 130' INT TERM
}
_stop_at_exit() {
  local rc=$? p
  for p in $STOP_AT_EXIT_PROCS; do stop "$p" >/dev/null || true; done
  [ $rc -eq 0 ] || echo "$STOP_AT_EXIT_NAME: failed (exit $rc); logs in $RUN_DIR" >&2
  exit $rc
}

# wait_for NAME URL: until URL answers 2xx, or fail showing NAME's log.
wait_for() {
  for _ in $(seq 100); do
    curl -fsS -o /dev/null "$2" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$1 did not come up at $2; its log:" >&2
  tail -20 "$RUN_DIR/$1.log" >&2
  return 1
}

# ports_free NAME KNOB PORT...: fails, as NAME, at the first PORT in use, naming KNOB (the
# variable that moves the ports).
ports_free() {
  local name=$1 knob=$2 p
  shift 2
  for p in "$@"; do
    port_free "$p" || { echo "$name: port $p is in use; set $knob" >&2; exit 1; }
  done
}

# bench_build [PKG...]: unless BENCH_NO_BUILD=1, the release builds a Wasm bench runs: ferry,
# the reader, the demo model, each PKG, and the filter (.wasm).
bench_build() {
  [ "${BENCH_NO_BUILD:-0}" != 1 ] || return 0
  echo "== $(date +%H:%M:%S) building (release)" >&2
  local pkgs=(-p ferry -p ferry-reader -p ferry-demo-model) p
  for p in "$@"; do pkgs+=(-p "$p"); done
  cargo build --release --quiet "${pkgs[@]}"
  cargo build --release --quiet -p ferry-filter --target wasm32-wasip1
}

# stop_all PROC...: stops what an earlier run left of each PROC (started by start).
stop_all() {
  local p
  for p in "$@"; do stop "$p" >/dev/null || true; done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
