#!/bin/sh
# A sharded model file (braid-convert --auto-shard dp=2,tp=2) run by its 4 ranks three ways:
# as threads (braid-run --devices 4), as processes under braid-launch (gloo) and under mpirun
# (mpi). In deterministic mode every backend sums in rank order, so the outputs are the same
# bits.
#
#     sharded_model_test.sh BRAID_CONVERT BRAID_LAUNCH BRAID_RUN MODEL MPIRUN [MPIRUN FLAGS...]
set -eu
convert=$1 launch=$2 run=$3 model=$4 mpirun=$5
shift 5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$convert" "$model" --auto-shard dp=2,tp=2 --analytic -o "$tmp/sharded.braid" > "$tmp/convert.txt" ||
    fail "braid-convert: $(cat "$tmp/convert.txt")"
"$run" "$tmp/sharded.braid" --devices 4 --deterministic --iter 1 --output-dir "$tmp/threads" \
    > /dev/null
"$launch" -n 4 --timeout 120 -- "$run" "$tmp/sharded.braid" --backend gloo --deterministic \
    --iter 1 --output-dir "$tmp/gloo" > /dev/null
"$mpirun" -np 4 "$@" "$run" "$tmp/sharded.braid" --backend mpi --deterministic --iter 1 \
    --output-dir "$tmp/mpi" > /dev/null
count=0
for f in "$tmp"/threads/*.npy; do
    name=$(basename "$f")
    cmp -s "$f" "$tmp/gloo/$name" || fail "$name: gloo differs from --devices 4"
    cmp -s "$f" "$tmp/mpi/$name" || fail "$name: mpi differs from --devices 4"
    count=$((count + 1))
done
[ "$count" -ge 1 ] || fail "no outputs written"
echo "sharded model: $count output(s) the same bits on threads, gloo and mpi"
