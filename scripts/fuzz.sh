#!/usr/bin/env bash
# `make fuzz`: coverage-guided fuzzing (cargo fuzz / libFuzzer, ASan) of the filter's request
# parsers and rewriters, vector decoder, snapshot decoder, reader-answer handling and whole
# request state machine (bypass), one target at a time, each for FUZZ_SECONDS (default 60) or
# FUZZ_RUNS executions. Installs what is missing: a nightly toolchain (minimal) and
# cargo-fuzz. Seeds are read from fuzz/corpus/TARGET (committed, small); what the fuzzer finds
# goes to fuzz/generated/TARGET (ignored by git). Crashes land in fuzz/artifacts/TARGET: the run
# then fails and names them (reproduce with `cargo +nightly fuzz run TARGET FILE`).
#   FUZZ_SECONDS=300 make fuzz            # longer
#   FUZZ_TARGETS="kserve_v1 json" make fuzz
#   FUZZ_RUNS=1000000 make fuzz           # this many executions per target (and no time limit
#                                         # unless FUZZ_SECONDS is set too)
#   FUZZ_SLICES=6 FUZZ_SECONDS=600 FUZZ_TARGETS=config_space make fuzz
#                                         # a campaign: 6 slices, each resuming from the corpus
#                                         # the earlier ones (and earlier sittings) generated
#   FUZZ_KEEP=1 make fuzz                 # then minimize corpus + generated into fuzz/kept/TARGET
#                                         # (committed; the stable replay runs every input)
#   FUZZ_LEDGER=0 make fuzz               # leave fuzz/campaign.tsv alone (CI's short run)
# Each run starts from the committed seeds (fuzz/corpus/TARGET), the kept corpus
# (fuzz/kept/TARGET) and what earlier runs on this machine generated; it writes only to
# fuzz/generated/TARGET.
# Every slice of every target adds a row to fuzz/campaign.tsv (committed): the campaign's ledger
# across sittings (date, commit, target, seconds, executions, coverage, corpus units, crashes).
# FERRY_FUZZ_SKIP_KNOWN=all makes config_space skip the inputs of its known open bugs.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_EACH=${FUZZ_SECONDS:-60}
if [ -n "${FUZZ_RUNS:-}" ]; then
  limits=(-runs="$FUZZ_RUNS")
  [ -n "${FUZZ_SECONDS:-}" ] && limits+=(-max_total_time="$SECONDS_EACH")
  budget="$FUZZ_RUNS runs"
else
  limits=(-max_total_time="$SECONDS_EACH")
  budget="${SECONDS_EACH}s"
fi

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "fuzz: installing the nightly toolchain (minimal profile)"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

targets=${FUZZ_TARGETS:-$(cargo +nightly fuzz list)}
echo "== building fuzz targets (nightly, release, ASan): $targets"
for t in $targets; do cargo +nightly fuzz build "$t"; done

mkdir -p fuzz/logs
failed=()
printf '%-18s %12s %10s %8s %8s\n' target executions exec/s seconds crashes > fuzz/logs/summary.txt
ledger=fuzz/campaign.tsv
[ -f "$ledger" ] || printf 'date\tcommit\ttarget\tseconds\texecutions\tcoverage\tunits\tcrashes\tskip_known\n' > "$ledger"
commit=$(git rev-parse --short HEAD 2>/dev/null || echo '?')
slices=${FUZZ_SLICES:-1}
for slice in $(seq 1 "$slices"); do
for t in $targets; do
  echo "== fuzzing $t for $budget (slice $slice of $slices)"
  mkdir -p "fuzz/generated/$t" "fuzz/corpus/$t"
  seeds=("fuzz/corpus/$t")
  [ -d "fuzz/kept/$t" ] && seeds+=("fuzz/kept/$t")
  status=0
  started=$SECONDS
  touch "fuzz/logs/$t.started"
  cargo +nightly fuzz run "$t" "fuzz/generated/$t" "${seeds[@]}" -- \
    "${limits[@]}" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=256 -print_final_stats=1 \
    > "fuzz/logs/$t.log" 2>&1 || status=$?
  took=$((SECONDS - started))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "fuzz/logs/$t.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "fuzz/logs/$t.log" | tail -1)
  # Only this run's crashes (artifacts/ keeps those of earlier runs).
  crashes=$(find "fuzz/artifacts/$t" -type f -newer "fuzz/logs/$t.started" 2>/dev/null | wc -l)
  printf '%-18s %12s %10s %8s %8s\n' "$t" "${execs:-?}" "${rate:-?}" "$took" "$crashes" | tee -a fuzz/logs/summary.txt
  cov=$(grep -oE 'cov: [0-9]+' "fuzz/logs/$t.log" | tail -1 | cut -d' ' -f2)
  units=$(grep -oE 'corp: [0-9]+' "fuzz/logs/$t.log" | tail -1 | cut -d' ' -f2)
  [ "${FUZZ_LEDGER:-1}" = 0 ] || printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$commit" "$t" "$took" \
    "${execs:-?}" "${cov:-?}" "${units:-?}" "$crashes" "${FERRY_FUZZ_SKIP_KNOWN:-}" >> "$ledger"
  if [ "$status" -ne 0 ] || [ "$crashes" -gt 0 ]; then
    failed+=("$t")
    grep -E -A25 '^==[0-9]+==|panicked at|SUMMARY' "fuzz/logs/$t.log" | head -40 >&2 || true
  fi
done
done
if [ "${FUZZ_KEEP:-}" = 1 ]; then
  for t in $targets; do
    echo "== minimizing $t's corpus into fuzz/kept/$t"
    rm -rf "fuzz/kept/$t.new" && mkdir -p "fuzz/kept/$t.new" "fuzz/kept/$t"
    # The first folder receives the merge.
    cargo +nightly fuzz run "$t" "fuzz/kept/$t.new" "fuzz/corpus/$t" "fuzz/generated/$t" \
      "fuzz/kept/$t" -- -set_cover_merge=1 -malloc_limit_mb=256 -rss_limit_mb=2048 \
      > "fuzz/logs/$t.merge.log" 2>&1
    rm -rf "fuzz/kept/$t" && mv "fuzz/kept/$t.new" "fuzz/kept/$t"
    echo "fuzz/kept/$t: $(find "fuzz/kept/$t" -type f | wc -l) inputs"
  done
fi
echo "== ledger (fuzz/campaign.tsv): seconds per target over all sittings"
awk -F'\t' 'NR > 1 { s[$3] += $4; n[$3] += $5 } END { for (t in s) printf "%-18s %8d s %12d executions\n", t, s[t], n[t] }' "$ledger" | sort
echo "== summary (also in fuzz/logs/summary.txt)"
cat fuzz/logs/summary.txt
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes or failures in: ${failed[*]} (inputs in fuzz/artifacts/, logs in fuzz/logs/)" >&2
  exit 1
fi
