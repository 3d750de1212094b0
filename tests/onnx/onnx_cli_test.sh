#!/usr/bin/env bash
# ONNX files through the command-line tools: braid-run runs one, braid-convert writes a braid
# model that gives the same output, braid-inspect describes one; a truncated file and an
# unsupported op exit 3 naming the problem (the node, its op type and opset).
set -euo pipefail
tools=$1
data=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
model=$data/pytorch-converted/test_Conv2d/model.onnx

"$tools/braid-run" "$model" --iter 2 > "$tmp/run.txt"
"$tools/braid-convert" "$model" -o "$tmp/conv.braid" > /dev/null
"$tools/braid-run" "$tmp/conv.braid" --iter 2 > "$tmp/run2.txt"
sum1=$(grep -o 'checksum [0-9a-f]*' "$tmp/run.txt")
sum2=$(grep -o 'checksum [0-9a-f]*' "$tmp/run2.txt")
[ "$sum1" = "$sum2" ] || { echo "converted model differs: $sum1 vs $sum2"; exit 1; }
"$tools/braid-inspect" "$model" | grep -q "Conv2d" || { echo "braid-inspect: no Conv2d"; exit 1; }

expect_exit3() { # file, expected message part
  set +e
  "$tools/braid-run" "$1" > "$tmp/out.txt" 2> "$tmp/err.txt"
  rc=$?
  set -e
  [ $rc -eq 3 ] || { echo "$1: exit $rc, expected 3"; cat "$tmp/err.txt"; exit 1; }
  grep -q "$2" "$tmp/err.txt" || { echo "$1: message lacks \"$2\":"; cat "$tmp/err.txt"; exit 1; }
}
head -c 100 "$model" > "$tmp/truncated.onnx"
expect_exit3 "$tmp/truncated.onnx" "not an ONNX model"
expect_exit3 "$data/node/test_gridsample/model.onnx" "(GridSample, opset 16): this op is not supported"
echo "onnx cli: ok"
