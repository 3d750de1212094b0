#!/usr/bin/env bash
# Runs a fuzz target (fuzz_load, fuzz_rendezvous) for a bounded time on its seeds.
#   run_fuzz.sh FUZZ_BINARY SEEDS_DIR WORK_DIR SECONDS
# The growing corpus and any crash artifacts live under WORK_DIR; exit status is libFuzzer's
# (non-zero on a crash, a sanitizer report, or an escaped exception).
set -euo pipefail
binary=$1 seeds=$2 work=$3 seconds=$4
if [ ! -x "$binary" ]; then
  echo "skipped: $binary is not built (make fuzz-build builds it; make test does so first)"
  exit 77
fi
mkdir -p "$work/corpus" "$work/artifacts"
exec "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
  -artifact_prefix="$work/artifacts/" "$work/corpus" "$seeds"
