#!/usr/bin/env bash
# Ensures a virtualenv with Feast 0.67 (feast[redis,grpcio], and psycopg for a SQL registry on
# PostgreSQL) at DIR, plus any EXTRA pip packages.
# Usage: bash scripts/feast_venv.sh DIR [EXTRA...]. Idempotent: does nothing when DIR already
# has that Feast version and every EXTRA imports.
# Used by `make test` (.venv-feast: the Feast-compatibility tests) and `make bench` (bench/.venv,
# with matplotlib for the plot).
set -euo pipefail
FEAST_VERSION=0.67.0
dir=$1; shift
imports="feast, grpc, psycopg"
for extra in "$@"; do imports="$imports, ${extra%%[<>=\[]*}"; done
if ! "$dir/bin/python" -c "import $imports; assert feast.__version__ == '$FEAST_VERSION'" 2>/dev/null; then
  echo "setup: creating $dir with feast[redis,grpcio]==$FEAST_VERSION psycopg[binary] $*"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "feast[redis,grpcio]==$FEAST_VERSION" \
    "psycopg[binary]" "$@"
fi
