#!/usr/bin/env bash
# Memory overhead (docs/performance.md): what a braid-run process holds above its own baseline
# against what the run needs, per model, at 1 and 2 kernel threads.
#
#   bash bench/memory_overhead.sh BUILD_DIR [ITERATIONS]
#
# Models: the example models (BUILD_DIR/examples/models), and the real-model suite's models
# with their inputs where tests/models/run.sh fetched them (BUILD_DIR/models).
#
# Per run, from braid-run --json's process_memory:
#   above    the peak resident bytes (VmHWM) minus the resident bytes before the model loaded
#   need     the graph's parameters and constants, the memory plan's arena and own
#            allocations, the inputs
#   jit      generated code (writable-executable anonymous mappings: oneDNN's kernels)
#   code     file-backed pages the run brought in other than the mapped model: library code
#   rest     above - need - jit - code: heap, thread stacks, kernels' workspaces, packed weights
#   ratio    (above - jit - code) / need
set -euo pipefail
build=${1:?usage: bench/memory_overhead.sh BUILD_DIR [ITERATIONS]}
iters=${2:-20}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
runs=()
for m in mlp transformer_block; do
  runs+=("$m|$build/examples/models/$m.braid|--input x=random")
done
for f in "$build"/models/files/*.onnx; do
  [ -e "$f" ] || continue
  m=$(basename "$f" .onnx)
  dir=$build/models/runs/$m/inputs
  [ -d "$dir" ] || continue
  args=""
  # The suite names an input's file after it with "::" written "__" (onnx::Flatten_0).
  for npy in "$dir"/*.npy; do
    input=$(basename "$npy" .npy)
    args="$args --input ${input//__/::}=$npy"
  done
  runs+=("$m|$f|$args")
done
for entry in "${runs[@]}"; do
  IFS='|' read -r name file args <<< "$entry"
  for t in 1 2; do
    # shellcheck disable=SC2086
    if ! out=$("$build/tools/braid-run" "$file" $args --iter "$iters" --threads "$t" --json \
                 2> /dev/null); then
      echo "{\"model\":\"$name\",\"threads\":$t,\"error\":true}"
      continue
    fi
    echo "$out" | python3 -c '
import json, sys
name, threads = sys.argv[1], int(sys.argv[2])
d = json.load(sys.stdin)
p = d["process_memory"]
b, a = p["before_load"], p["after_run"]
above = a["peak_rss"] - b["rss"]
code = max(0, a["file"] - b["file"] - d.get("mapped_bytes", 0))
print(json.dumps({"model": name, "threads": threads, "above": above, "need": p["need"],
                  "counted": p["need_counts_subgraphs"],
                  "jit": a["jit_code"], "code": code, "anon": a["anon"]}))
' "$name" "$t"
  done
done | python3 -c '
import json, sys
mib = lambda b: b / 2**20
print("| model | threads | above baseline MiB | need MiB | generated code MiB | library code MiB | rest MiB | (above - code) / need |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for line in sys.stdin:
    r = json.loads(line)
    if r.get("error"):
        print("| %s | %d | failed | | | | | |" % (r["model"], r["threads"]))
        continue
    if not r["counted"]:  # If and Loop bodies: their constants and arenas are not counted
        print("| %s | %d | %.2f | n/a (subgraphs) | %.2f | %.2f | | |" % (
            r["model"], r["threads"], mib(r["above"]), mib(r["jit"]), mib(r["code"])))
        continue
    rest = r["above"] - r["need"] - r["jit"] - r["code"]
    ratio = (r["above"] - r["jit"] - r["code"]) / r["need"] if r["need"] else float("nan")
    print("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (
        r["model"], r["threads"], mib(r["above"]), mib(r["need"]), mib(r["jit"]),
        mib(r["code"]), mib(rest), ratio))
'
