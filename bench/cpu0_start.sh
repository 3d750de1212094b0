#!/usr/bin/env bash
# A run's first iterations on `cpu0` at 2 kernel threads (docs/performance.md, "cpu0 at 2
# threads"): PROCESSES braid-run processes of the example mlp (batch 64), 120 iterations each
# without warm-up, on `cpu0` and on `cpu:default`. Prints each process's median latency and
# how many processes took more than 1.5x the fastest one's median: a process whose runs wait
# behind the thread pool's polling worker shows as 2-3x slower for its whole life.
#
#   bash bench/cpu0_start.sh BUILD_DIR [PROCESSES]
set -euo pipefail
build=${1:?usage: bench/cpu0_start.sh BUILD_DIR [PROCESSES]}
processes=${2:-20}
run=$build/tools/braid-run
model=$build/examples/models/mlp.braid
for f in "$run" "$model"; do
  [ -e "$f" ] || { echo "cpu0_start: $f is missing; build braid-run and example_models" >&2; exit 2; }
done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"
for cn in cpu0 cpu:default; do
  medians=()
  for _ in $(seq "$processes"); do
    medians+=("$("$run" "$model" --input x=random:64x784 --iter 120 --warmup 0 --threads 2 \
      --comp-node "$cn" --json | sed -n 's/.*"latency_ms":{"min":[^,]*,"median":\([^,]*\),.*/\1/p')")
  done
  printf '%s\n' "${medians[@]}" | awk -v cn="$cn" '
    { v[NR] = $1; if (NR == 1 || $1 < best) best = $1 }
    END {
      slow = 0; line = ""
      for (i = 1; i <= NR; i++) { if (v[i] > 1.5 * best) slow++; line = line sprintf(" %.3f", v[i]) }
      printf "%s: %d of %d processes slower than 1.5x the fastest (%.3f ms); medians, ms:%s\n",
             cn, slow, NR, best, line
    }'
done
