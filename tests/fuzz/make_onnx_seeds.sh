#!/usr/bin/env bash
# Copies the ONNX backend test models of up to 64 KiB into one folder, as fuzz_onnx's seeds.
#   make_onnx_seeds.sh DATA_DIR OUT_DIR
set -euo pipefail
data=$1 out=$2
mkdir -p "$out"
for f in "$data"/*/test_*/model.onnx; do
  [ "$(stat -c %s "$f")" -le 65536 ] || continue
  name=$(basename "$(dirname "$f")")
  cp "$f" "$out/$name.onnx"
done
