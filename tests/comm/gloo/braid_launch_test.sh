#!/bin/sh
# braid-launch and braid-run on the gloo backend: the example model dp_allreduce run as 3
# processes gives outputs bit-identical to 3 ranks as threads (--devices 3) and to 3 MPI
# processes; a rank that fails stops the job, is named, and its status is the launcher's.
#
#     braid_launch_test.sh BRAID_LAUNCH BRAID_RUN MODEL MPIRUN [MPIRUN FLAGS...]
set -eu
launch=$1 run=$2 model=$3 mpirun=$4
shift 4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$launch" -n 3 --timeout 60 -- "$run" "$model" --backend gloo --iter 2 \
    --output-dir "$tmp/gloo" > "$tmp/gloo.txt"
grep -q "rank 0 of 3 (gloo backend, server 127.0.0.1:" "$tmp/gloo.txt" ||
    fail "braid-run under braid-launch did not say it ran as rank 0 of 3: $(cat "$tmp/gloo.txt")"
"$run" "$model" --devices 3 --iter 2 --output-dir "$tmp/threads" > /dev/null
"$mpirun" -np 3 "$@" "$run" "$model" --backend mpi --iter 2 --output-dir "$tmp/mpi" > /dev/null
count=0
for f in "$tmp"/threads/*.npy; do
    name=$(basename "$f")
    cmp -s "$f" "$tmp/gloo/$name" || fail "$name: gloo differs from --devices 3"
    cmp -s "$f" "$tmp/mpi/$name" || fail "$name: gloo differs from mpirun --backend mpi"
    count=$((count + 1))
done
[ "$count" -ge 5 ] || fail "expected at least 5 outputs, found $count"

# Without --backend, braid-launch's ranks use gloo.
"$launch" -n 2 -- "$run" "$model" --iter 1 > "$tmp/default.txt"
grep -q "gloo backend" "$tmp/default.txt" || fail "the default backend under braid-launch is not gloo"

# Rank 1 fails: the launcher names it, stops the others (which would sleep 30 s) and exits 7.
start=$(date +%s)
set +e
"$launch" -n 3 --stop-timeout 5 -- sh -c 'if [ "$BRAID_RANK" = 1 ]; then exit 7; fi; exec sleep 30' \
    2> "$tmp/err.txt"
status=$?
set -e
elapsed=$(($(date +%s) - start))
[ "$status" -eq 7 ] || fail "braid-launch exited with $status, expected the failed rank's 7"
grep -q "rank 1 (pid [0-9]*) exited with status 7; stopping the other 2 rank(s)" "$tmp/err.txt" ||
    fail "braid-launch did not name the failed rank: $(cat "$tmp/err.txt")"
[ "$elapsed" -lt 10 ] || fail "stopping the other ranks took $elapsed s"
echo "braid-launch: $count outputs bit-identical across gloo, threads and mpi; failures handled"
