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
expect_exit3 "$data/node/test_bernoulli/model.onnx" "(Bernoulli, opset 15): this op is not supported"

# A shape input (Reshape's target as a graph input) is read when the model runs: its value comes
# from --input (a random value is refused, naming it), or is bound with --bind, and
# braid-convert bakes a bound value into the braid file.
reshape=$data/node/test_reshape_reordered_all_dims/model.onnx
set +e
"$tools/braid-run" "$reshape" --iter 1 > /dev/null 2> "$tmp/err.txt"
rc=$?
set -e
[ $rc -eq 2 ] && grep -q 'input "shape": the model reads its value as a shape argument' "$tmp/err.txt" ||
  { echo "unbound shape input: exit $rc"; cat "$tmp/err.txt"; exit 1; }
# shape.npy: int64 {4,2,3}
header="{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }"
{ printf '\x93NUMPY\x01\x00\x76\x00%s%60s\n' "$header" ''
  printf '\x04\0\0\0\0\0\0\0\x02\0\0\0\0\0\0\0\x03\0\0\0\0\0\0\0'; } > "$tmp/shape.npy"
"$tools/braid-run" "$reshape" --input shape="$tmp/shape.npy" --iter 1 > "$tmp/fed.txt"
grep -q 'output reshaped: float32 {4,2,3}' "$tmp/fed.txt" || { cat "$tmp/fed.txt"; exit 1; }
"$tools/braid-run" "$reshape" --bind shape=4,2,3 --iter 1 > "$tmp/bound.txt"
grep -q 'output reshaped: float32 {4,2,3}' "$tmp/bound.txt" || { cat "$tmp/bound.txt"; exit 1; }
"$tools/braid-convert" "$reshape" --bind shape=4,2,3 -o "$tmp/bound.braid" > /dev/null
"$tools/braid-run" "$tmp/bound.braid" --iter 1 | grep -q 'output reshaped: float32 {4,2,3}'
set +e
"$tools/braid-run" "$reshape" --bind shape=4,x --iter 1 2> "$tmp/err.txt"
rc=$?
set -e
[ $rc -eq 2 ] && grep -q '"x" is not a number' "$tmp/err.txt" || { echo "bad --bind: exit $rc"; exit 1; }
expect_bind_error() { # flags, message part
  set +e
  "$tools/braid-run" "$reshape" $1 --iter 1 > /dev/null 2> "$tmp/err.txt"
  rc=$?
  set -e
  [ $rc -eq 3 ] && grep -q "$2" "$tmp/err.txt" || { echo "$1: exit $rc"; cat "$tmp/err.txt"; exit 1; }
}
expect_bind_error "--bind shape=4,2,4" "24 values\|holds\|cannot"
expect_bind_error "--bind nosuch=1" 'which is not an input of the model' 
echo "onnx cli: ok"
