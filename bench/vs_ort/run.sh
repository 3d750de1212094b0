#!/usr/bin/env bash
# bench/vs_ort: the same ONNX files through braid (braid-run, ONNX import) and ONNX Runtime
# (onnxruntime-node, installed here by npm into the build folder: a benchmark-only anchor, never
# a build dependency), in one run, on the same input, at 1 and 2 threads; braid on cpu0 (one
# worker thread) and cpu:default (the calling thread). Prints one JSON line per case,
#   {"bench":"vs_ort","model":M,"threads":T,"comp_node":C,"braid_ms":..,"ort_ms":..,"ratio":..}
# (ratio = braid / ORT; below 1 braid is faster), then a table.
#
#   bench/vs_ort/run.sh [BUILD_DIR] [ITERATIONS]      (after `make build`)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:-$here/../../build}" && pwd)
iters=${2:-50}
work=$build/vs_ort
mkdir -p "$work"
if [ ! -d "$work/node_modules/onnxruntime-node" ]; then
  cp "$here/package.json" "$work/package.json"
  # The package ships its CPU build; its install script only fetches CUDA libraries.
  (cd "$work" && npm install --no-audit --no-fund --ignore-scripts --silent) >&2
fi
cp "$here/ort_bench.js" "$here/npy.js" "$work/"
"$build/bench/make_vs_ort_models" "$work/models" >&2
models="mlp_small mlp_large transformer cnn add_chain"
lines=()
for m in $models; do
  model=$work/models/$m.onnx
  n=$iters
  [ "$m" = mlp_large ] && n=$(( iters < 20 ? iters : 20 ))
  # Both runtimes must agree on the output before their times are compared.
  (cd "$work" && node ort_bench.js "$model" 1 1 "$work/$m.ort.bin" > /dev/null)
  "$build/tools/braid-run" "$model" --input "x=$work/models/$m.npy" --iter 1 --warmup 0 \
    --output-dir "$work/out_$m" > /dev/null
  python3 - "$work/out_$m/y.npy" "$work/$m.ort.bin" "$m" <<'PY'
import struct, sys
npy = open(sys.argv[1], "rb").read()
hl = struct.unpack("<H", npy[8:10])[0]
a = struct.unpack(f"<{(len(npy) - 10 - hl) // 4}f", npy[10 + hl:])
raw = open(sys.argv[2], "rb").read()
b = struct.unpack(f"<{len(raw) // 4}f", raw)
assert len(a) == len(b), f"{sys.argv[3]}: {len(a)} vs {len(b)} output values"
bad = [i for i in range(len(a)) if abs(a[i] - b[i]) > 1e-4 + 1e-3 * abs(b[i])]
if bad:
    i = bad[0]
    sys.exit(f"{sys.argv[3]}: braid and ONNX Runtime disagree at {i}: {a[i]} vs {b[i]}")
PY
  for t in 1 2; do
    ort=$(cd "$work" && node ort_bench.js "$model" "$t" "$n" | sed -n 's/.*"median_ms":\([0-9.e+-]*\).*/\1/p')
    for cn in cpu0 cpu:default; do
      # The JSON goes to a file first: a Python reading the pipe would start up on the cores
      # braid-run is being timed on.
      "$build/tools/braid-run" "$model" --input "x=$work/models/$m.npy" --threads "$t" \
        --comp-node "$cn" --iter "$n" --warmup 3 --json > "$work/braid_run.json"
      braid=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["latency_ms"]["median"])' \
                < "$work/braid_run.json")
      line=$(python3 -c "import json; print(json.dumps({'bench':'vs_ort','model':'$m','threads':$t,'comp_node':'$cn','braid_ms':round($braid,4),'ort_ms':round($ort,4),'ratio':round($braid/$ort,3)}))")
      echo "$line"
      lines+=("$line")
    done
  done
done
isa=$(python3 -c 'import json,sys; print(json.load(sys.stdin).get("kernel_isa", "?"))' \
        < "$work/braid_run.json")
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), braid's kernels: $isa"
printf '%s\n' "${lines[@]}" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
print("\n| model | threads | ORT (ms) | braid cpu0 (ms) | ratio | braid cpu:default (ms) | ratio |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for m in dict.fromkeys(r["model"] for r in rows):
    for t in (1, 2):
        a = next(r for r in rows if r["model"] == m and r["threads"] == t and r["comp_node"] == "cpu0")
        b = next(r for r in rows if r["model"] == m and r["threads"] == t and r["comp_node"] == "cpu:default")
        print("| %s | %d | %.3f | %.3f | %.2f | %.3f | %.2f |" % (m, t, a["ort_ms"], a["braid_ms"],
              a["ratio"], b["braid_ms"], b["ratio"]))
'
