#!/usr/bin/env bash
# The price of deterministic mode (docs/determinism.md): bench/vs_ort's models through braid-run,
# default mode against --deterministic in the same run, alternating, three rounds; medians of
# the per-round latency medians, and their ratio (deterministic / default).
#
#   bash bench/determinism.sh BUILD_DIR [ITERATIONS]
set -euo pipefail
build=${1:?usage: bench/determinism.sh BUILD_DIR [ITERATIONS]}
iters=${2:-200}
work=$build/determinism_bench
mkdir -p "$work"
"$build/bench/make_vs_ort_models" "$work/models" >&2
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
for m in mlp_small mlp_large transformer cnn add_chain; do
  n=$iters
  [ "$m" = mlp_large ] && n=$(( iters < 20 ? iters : 20 ))
  for t in 1 2; do
    for round in 1 2 3; do
      for mode in default deterministic; do
        flag=""
        [ "$mode" = deterministic ] && flag=--deterministic
        "$build/tools/braid-run" "$work/models/$m.onnx" --input "x=$work/models/$m.npy" \
          --threads "$t" --iter "$n" --warmup 3 --json $flag > "$work/run.json"
        ms=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["latency_ms"]["median"])' \
               < "$work/run.json")
        echo "{\"model\":\"$m\",\"threads\":$t,\"mode\":\"$mode\",\"ms\":$ms}"
      done
    done
  done
done | tee "$work/lines.json" | python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print("| model | threads | default (ms) | deterministic (ms) | ratio |")
print("| --- | ---: | ---: | ---: | ---: |")
for m in dict.fromkeys(r["model"] for r in rows):
    for t in (1, 2):
        d = statistics.median(r["ms"] for r in rows if r["model"] == m and r["threads"] == t and r["mode"] == "default")
        x = statistics.median(r["ms"] for r in rows if r["model"] == m and r["threads"] == t and r["mode"] == "deterministic")
        print("| %s | %d | %.3f | %.3f | %.2f |" % (m, t, d, x, x / d))
'
