#!/usr/bin/env bash
# braid-serve with every connection slot held by slow clients: 12 connections trickle their
# request line a byte every 0.3 s (well within the read timeout) into a server of 8 slots. A
# normal request still gets its answer within a second or two: connections that have had no
# request in progress for longer than --stall-timeout-ms are closed to make room. A body that
# trickles for longer than the read timeout gets 408.
#
#   BRAID_SERVE=... slow_clients_test.sh MODELS_DIR
set -uo pipefail
MODELS=$(cd "$1" && pwd)
source "$(dirname "$0")/lib.sh"
trap "" PIPE

WORK=$(mktemp -d)
PIDS=()
trap 'kill ${PIDS[*]:-} 2>/dev/null; kill -KILL ${SERVER_PID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repo/mlp"
ln -s "$MODELS/mlp.braid" "$WORK/repo/mlp/model.braid"
start_server "$WORK/server.log" "$WORK/repo" --max-connections 8 --read-timeout-s 2 \
    --stall-timeout-ms 500 || exit 1
X1=$(awk 'BEGIN { for (i = 0; i < 784; i++) printf "%s%g", (i ? "," : ""), (i % 3) / 3 }')
echo '{"inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","data":['"$X1"']}]}' >"$WORK/valid.json"
INFER=/v2/models/mlp/infer

# A connection that sends its request line one byte every 0.3 s, for up to 12 s.
trickle() {
    exec {fd}<>"/dev/tcp/127.0.0.1/$PORT" || return
    for _ in $(seq 40); do
        printf 'G' >&$fd 2>/dev/null || break
        sleep 0.3
    done
    exec {fd}>&-
}
for _ in $(seq 12); do
    trickle &
    PIDS+=($!)
done
sleep 1
for attempt in 1 2 3; do
    T0=$(date +%s%N)
    expect_status 200 POST "$INFER" --data-binary @"$WORK/valid.json"
    MS=$((($(date +%s%N) - T0) / 1000000))
    echo "request $attempt with 12 trickling connections on 8 slots: ${MS} ms"
    [ "$MS" -lt 2500 ] || fail "request $attempt waited $MS ms behind trickling connections"
done
kill "${PIDS[@]}" 2>/dev/null
wait "${PIDS[@]}" 2>/dev/null
PIDS=()

# A body that trickles past the read timeout: 408, not a thread held for as long as it lasts.
exec {CONN}<>"/dev/tcp/127.0.0.1/$PORT"
printf 'POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n' "$INFER" >&$CONN
for _ in $(seq 20); do
    printf '1' >&$CONN 2>/dev/null || break
    sleep 0.3
done
LINE=$(timeout 3 head -1 <&$CONN)
exec {CONN}>&-
grep -q '408' <<<"$LINE" || fail "a body trickled past the read timeout got '$LINE', not 408"

stop_server
[ "$SERVER_STATUS" = 0 ] || fail "braid-serve exited $SERVER_STATUS after SIGTERM"
if [ "$FAILURES" -ne 0 ]; then
    tail -20 "$WORK/server.log" >&2
    echo "$FAILURES check(s) failed" >&2
    exit 1
fi
echo "slow clients test: passed"
