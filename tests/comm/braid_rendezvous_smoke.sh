#!/usr/bin/env bash
# Starts the braid-rendezvous binary on a free port, registers 64 clients through it (with
# bench_rendezvous) and stops it with SIGTERM, which must end it cleanly.
#     braid_rendezvous_smoke.sh path/to/braid-rendezvous path/to/bench_rendezvous
set -euo pipefail
server=$1
clients=$2
out=$(mktemp)
"$server" --host 127.0.0.1 --port 0 >"$out" &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$out"' EXIT
for _ in $(seq 200); do
  grep -q "listening on" "$out" && break
  sleep 0.05
done
port=$(sed -n 's/^braid-rendezvous listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$out")
if [ -z "$port" ]; then
  echo "braid-rendezvous printed no port:"
  cat "$out"
  exit 1
fi
"$clients" --port "$port" --clients 64 --json
kill -TERM "$pid"
wait "$pid"
echo "braid-rendezvous on port $port stopped cleanly"
