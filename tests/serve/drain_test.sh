#!/usr/bin/env bash
# braid-serve's drain under load: hey keeps 32 kept-alive connections busy with inference
# requests, SIGTERM arrives in the middle. Every request sent on an open connection gets an
# answer (200, or 503 once the drain began); none is lost to a connection closed unannounced
# (no EOF, reset, or "server closed idle connection"); new connections are refused; the server
# exits 0 once its connections are closed.
#
#   BRAID_SERVE=... drain_test.sh MODELS_DIR
set -uo pipefail
MODELS=$(cd "$1" && pwd)
source "$(dirname "$0")/lib.sh"
command -v hey >/dev/null || { echo "hey is not installed (scripts/bootstrap.sh)"; exit 1; }

WORK=$(mktemp -d)
trap 'kill -KILL ${SERVER_PID:-} ${HEY_PID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repo/mlp"
ln -s "$MODELS/mlp.braid" "$WORK/repo/mlp/model.braid"
X1=$(awk 'BEGIN { for (i = 0; i < 784; i++) printf "%s%g", (i ? "," : ""), (i % 5) / 5 }')
echo '{"inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","data":['"$X1"']}]}' >"$WORK/body"

for round in 1 2; do
    start_server "$WORK/server.log" "$WORK/repo" --max-concurrent-requests 1024 || exit 1
    hey -z 4s -c 32 -m POST -T application/json -D "$WORK/body" "$URL/v2/models/mlp/infer" \
        >"$WORK/hey.txt" 2>&1 &
    HEY_PID=$!
    sleep 1.5
    T0=$(date +%s%N)
    stop_server
    T1=$(date +%s%N)
    wait "$HEY_PID"
    HEY_PID=""
    [ "$SERVER_STATUS" = 0 ] || fail "round $round: braid-serve exited $SERVER_STATUS after SIGTERM"
    grep -q '^  \[200\]' "$WORK/hey.txt" || fail "round $round: no request succeeded before the drain"
    # Errors other than refused new connections are requests lost on open connections.
    LOST=$(sed -n '/Error distribution:/,$p' "$WORK/hey.txt" | grep '^  \[' | grep -v 'connection refused' || true)
    [ -z "$LOST" ] || fail "round $round: requests lost during the drain: $LOST"
    echo "round $round: drained in $(((T1 - T0) / 1000000)) ms; status codes: $(sed -n '/Status code distribution:/,/^$/p' "$WORK/hey.txt" | grep '\[' | tr -s ' ' | tr '\n' ';')"
done
if [ "$FAILURES" -ne 0 ]; then
    cat "$WORK/hey.txt" >&2
    tail -20 "$WORK/server.log" >&2
    echo "$FAILURES check(s) failed" >&2
    exit 1
fi
echo "drain test: passed"
