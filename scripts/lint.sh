#!/usr/bin/env bash
# `make lint`: the docs' links, the product code's shape (scripts/shape.py), formatting and
# clippy (the filter also for wasm32-wasip1), warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 scripts/check_docs.py
python3 scripts/shape.py
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
cargo clippy -p ferry-filter --target wasm32-wasip1 --quiet -- -D warnings
cargo clippy -p ferry-filter --target wasm32-wasip1 --features fault-injection --quiet -- -D warnings
# The native module's test-only fault injection (tests/integration/tests/native_panic.rs).
cargo clippy -p ferry-native --all-targets --features fault-injection --quiet -- -D warnings
