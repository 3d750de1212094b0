#!/usr/bin/env bash
# braid-serve under load (label `slow`, not in `make test`): wrk drives the example mlp with
# batch-1 JSON requests at concurrency 64 for 20 s, batching off and then on, while the abuse
# test runs alongside; no request may fail or get lost, and the server must drain and exit 0.
#
#   BRAID_SERVE=... load_test.sh MODELS_DIR [SECONDS]
set -uo pipefail
MODELS=$(cd "$1" && pwd)
DURATION=${2:-20}
source "$(dirname "$0")/lib.sh"
command -v wrk >/dev/null || { echo "wrk is not installed (scripts/bootstrap.sh)"; exit 1; }

WORK=$(mktemp -d)
trap 'kill -KILL ${SERVER_PID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
for mode in off on; do
    mkdir -p "$WORK/$mode/mlp"
    ln -s "$MODELS/mlp.braid" "$WORK/$mode/mlp/model.braid"
done
echo '{"max_batch_size": 64}' >"$WORK/on/mlp/config.json"
awk 'BEGIN { srand(3); printf "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,784],\"datatype\":\"FP32\",\"data\":[";
             for (i = 0; i < 784; i++) printf "%s%.7g", (i ? "," : ""), rand() * 2 - 1; printf "]}]}" }' >"$WORK/body"
cat >"$WORK/post.lua" <<LUA
local f = assert(io.open("$WORK/body", "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
LUA

for mode in off on; do
    start_server "$WORK/server_$mode.log" "$WORK/$mode" --max-concurrent-requests 1024 || exit 1
    RSS0=$(rss_kib "$SERVER_PID")
    out=$(wrk -t1 -c64 -d"${DURATION}s" --latency -s "$WORK/post.lua" "$URL/v2/models/mlp/infer")
    echo "batching $mode:"
    printf '%s\n' "$out" | grep -E 'Requests/sec|requests in|50%|99%|Non-2xx|Socket errors'
    printf '%s\n' "$out" | grep -q 'Non-2xx' && fail "batching $mode: failed responses"
    printf '%s\n' "$out" | grep -q 'Socket errors' && fail "batching $mode: socket errors"
    completed=$(printf '%s\n' "$out" | awk '/requests in/ { print $1 }')
    expect_status 200 GET /metrics
    counted=$(printf '%s\n' "$BODY" | awk '/^braid_serve_requests_total\{model="mlp",status="200"\}/ { print $2 }')
    # wrk stops with up to 64 requests in flight, which the server still answers.
    [ "${counted:-0}" -ge "${completed:-1}" ] && [ "${counted:-0}" -le $((completed + 64)) ] ||
        fail "batching $mode: wrk completed $completed requests, the server answered ${counted:-?}"
    RSS1=$(rss_kib "$SERVER_PID")
    echo "RSS ${RSS0} KiB -> ${RSS1} KiB"
    [ $((RSS1 - RSS0)) -le 131072 ] || fail "batching $mode: RSS grew by $((RSS1 - RSS0)) KiB"
    stop_server
    [ "$SERVER_STATUS" = 0 ] || fail "batching $mode: braid-serve exited $SERVER_STATUS"
done

# The abuse test, longer: three rounds of 1,000 idle connections.
bash "$(dirname "$0")/abuse_test.sh" "$MODELS" 1000 3 || fail "abuse test (3 rounds)"
if [ "$FAILURES" -ne 0 ]; then
    echo "$FAILURES check(s) failed" >&2
    exit 1
fi
echo "load test: passed"
