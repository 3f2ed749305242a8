#!/usr/bin/env bash
# Stops exactly the processes `make demo` (or `make demo-feast`) started, by the pids it recorded in .run/.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
for p in envoy control-plane log-sink model reader feast redis; do stop "$p"; done
