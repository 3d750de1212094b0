#!/usr/bin/env bash
# Generates the hostile model files (make_hostile_models) and runs braid-run and braid-inspect
# on each one: both must exit 3 (a model braid refuses) with an error message, within a time
# limit and an address-space limit (no signal, no out-of-memory kill), and print no terminal
# escape code. Usage:
#   run_hostile_models.sh GENERATOR BRAID_RUN BRAID_INSPECT WORKDIR [--no-rlimit]
# --no-rlimit: sanitizer builds reserve more address space than the limit allows.
set -uo pipefail
generator=$1 braid_run=$2 braid_inspect=$3 work=$4
limit_kib=$((8 * 1024 * 1024))
[ "${5:-}" = "--no-rlimit" ] && limit_kib=unlimited
rm -rf "$work" && mkdir -p "$work/models" "$work/out"
"$generator" "$work/models" > "$work/kinds.txt" || { echo "generator failed"; exit 1; }
# The budget the models are checked against; the address-space limit sits above it.
export BRAID_MEMORY_BUDGET=2G
nr_kinds=0 failures=0
while read -r kind; do
  nr_kinds=$((nr_kinds + 1))
  model="$work/models/$kind.braid"
  for tool in run inspect; do
    if [ $tool = run ]; then cmd=("$braid_run" "$model" --iter 1 --warmup 0); else cmd=("$braid_inspect" "$model"); fi
    out="$work/out/$kind.$tool"
    (ulimit -v "$limit_kib"; exec timeout -k 5 60 "${cmd[@]}") > "$out.stdout" 2> "$out.stderr"
    status=$?
    problem=""
    if [ $status -ne 3 ]; then
      problem="exit status $status, expected 3"
    elif ! grep -q "error: " "$out.stderr"; then
      problem="no error message"
    elif grep -q $'\x1b' "$out.stdout" "$out.stderr"; then
      problem="an escape code reached the terminal"
    fi
    if [ -n "$problem" ]; then
      failures=$((failures + 1))
      echo "FAIL $kind (braid-$tool): $problem"
      sed 's/^/    /' "$out.stderr" | head -5
    else
      echo "ok   $kind (braid-$tool): $(head -c 300 "$out.stderr" | tr -d '\n')"
    fi
  done
done < "$work/kinds.txt"
echo "$nr_kinds kinds, $failures failures"
if [ "$nr_kinds" -lt 50 ]; then echo "expected at least 50 kinds"; exit 1; fi
[ $failures -eq 0 ]
