#!/usr/bin/env bash
# braid-serve under abuse: malformed JSON; a wrong datatype, shape and input name; a body over
# the limit; a client that trickles bytes; 1,000 idle connections; clients that disconnect
# mid-request. Each gets a clear error or is dropped, valid requests sent the whole time all
# succeed, and the server's RSS stays bounded.
#
#   BRAID_SERVE=... abuse_test.sh MODELS_DIR [IDLE_CONNECTIONS] [ROUNDS]
set -uo pipefail
MODELS=$(cd "$1" && pwd)
IDLE=${2:-1000}
ROUNDS=${3:-1}
source "$(dirname "$0")/lib.sh"
trap "" PIPE # writes to a connection the server closed must not kill the script
ulimit -n 8192 2>/dev/null || ulimit -n "$(ulimit -Hn)"
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((IDLE + 200)) ]; then
    echo "note: the open-file limit is $(ulimit -n); $((IDLE = $(ulimit -n) - 200)) idle connections instead"
fi

WORK=$(mktemp -d)
VALID_PID=""
trap 'kill ${VALID_PID:-} 2>/dev/null; kill -KILL ${SERVER_PID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repo/mlp"
ln -s "$MODELS/mlp.braid" "$WORK/repo/mlp/model.braid"
start_server "$WORK/server.log" "$WORK/repo" --max-body-bytes 1000000 --read-timeout-s 1 \
    --idle-timeout-s 3 || exit 1

X1=$(awk 'BEGIN { for (i = 0; i < 784; i++) printf "%s%g", (i ? "," : ""), (i % 7) / 7 }')
echo '{"inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","data":['"$X1"']}]}' >"$WORK/valid.json"
INFER=/v2/models/mlp/infer

# Valid requests, one after the other, until told to stop; one status per line.
valid_requests() {
    while [ ! -e "$WORK/stop" ]; do
        curl -s --max-time 10 -o /dev/null -w '%{http_code}\n' -X POST \
            -H 'Content-Type: application/json' --data-binary @"$WORK/valid.json" "$URL$INFER"
        sleep 0.02
    done >"$WORK/valid_statuses"
}

# Opens a connection on a new descriptor (its number in $CONN).
connect() { exec {CONN}<>"/dev/tcp/127.0.0.1/$PORT"; }

# Warm up, then the baseline RSS.
for _ in $(seq 20); do req POST "$INFER" --data-binary @"$WORK/valid.json" >/dev/null; done
RSS0=$(rss_kib "$SERVER_PID")
valid_requests &
VALID_PID=$!

for round in $(seq "$ROUNDS"); do
    # Malformed JSON, wrong datatype, shape and name: 400 with the reason.
    for _ in $(seq 20); do
        expect_status 400 POST "$INFER" -d '{"inputs":[{"name":"x",' && expect_body_has 'invalid JSON'
        expect_status 400 POST "$INFER" -d '{"inputs":[{"name":"x","shape":[1,784],"datatype":"INT8","data":[1]}]}' &&
            expect_body_has 'has datatype FP32, the request gave INT8'
        expect_status 400 POST "$INFER" -d '{"inputs":[{"name":"x","shape":[784],"datatype":"FP32","data":[1]}]}' &&
            expect_body_has 'the request gave [784]'
        expect_status 400 POST "$INFER" -d '{"inputs":[{"name":"z","shape":[1,784],"datatype":"FP32","data":[1]}]}' &&
            expect_body_has 'no input named'
    done
    expect_status 400 POST "$INFER" -d "$(printf '%0.s[' $(seq 5000))" && expect_body_has 'nesting deeper'
    # A shape of 3 GiB with one value of data: refused before any memory is taken.
    expect_status 400 POST "$INFER" -d '{"inputs":[{"name":"x","shape":[1000000,784],"datatype":"FP32","data":[1]}]}' &&
        expect_body_has 'more than its'
    expect_status 400 POST "$INFER" -d '{"inputs":[{"name":"x","shape":[1099511627776,784],"datatype":"FP32","data":[1]}]}' &&
        expect_body_has 'too large'
    expect_status 400 POST "$INFER" --data-binary $'\xff\xfe\x00garbage'

    # A body over the limit: 413 (sent whole, and announced only by Content-Length).
    head -c 2000000 /dev/zero | tr '\0' '1' >"$WORK/big"
    expect_status 413 POST "$INFER" --data-binary @"$WORK/big" && expect_body_has 'over the limit'
    # An announced body over the limit is refused before it is read: the 413 comes well within
    # the 1 s read timeout, and a client that goes on sending finds the connection closed.
    for length in 999999999999 10000000000; do
        connect
        T0=$(date +%s%N)
        printf 'POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n' "$INFER" "$length" >&$CONN
        LINE=$(timeout 3 head -1 <&$CONN)
        MS=$((($(date +%s%N) - T0) / 1000000))
        grep -q '413' <<<"$LINE" || fail "an announced body of $length bytes got '$LINE', not 413"
        [ "$MS" -lt 500 ] || fail "an announced body of $length bytes was refused after $MS ms"
        exec {CONN}>&-
    done
    connect
    printf 'POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 300000000\r\n\r\n' "$INFER" >&$CONN
    if timeout 20 head -c 300000000 /dev/zero >&$CONN 2>/dev/null; then
        fail "300 MB were sent after a refused Content-Length: the server read the body"
    fi
    exec {CONN}>&-
    # A Content-Length that is not a number: 400 at once, not after the read timeout.
    connect
    T0=$(date +%s%N)
    printf 'POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n' "$INFER" >&$CONN
    LINE=$(timeout 3 head -1 <&$CONN)
    MS=$((($(date +%s%N) - T0) / 1000000))
    grep -q '400' <<<"$LINE" || fail "Content-Length: -1 got '$LINE', not 400"
    [ "$MS" -lt 500 ] || fail "Content-Length: -1 was answered after $MS ms"
    exec {CONN}>&-
    # A chunked body is held to the same limit: refused once the bytes read pass it, without
    # the rest being read (RSS stays flat).
    RSS_BEFORE=$(rss_kib "$SERVER_PID")
    CODE=$(head -c 100000000 /dev/zero | curl -s --max-time 20 -o /dev/null -w '%{http_code}' \
        -X POST -H 'Transfer-Encoding: chunked' -T - "$URL$INFER")
    [ "$CODE" = 413 ] || fail "a 100 MB chunked body got status $CODE, not 413"
    RSS_AFTER=$(rss_kib "$SERVER_PID")
    [ $((RSS_AFTER - RSS_BEFORE)) -le 16384 ] ||
        fail "a refused chunked body grew RSS by $((RSS_AFTER - RSS_BEFORE)) KiB"

    # A client that trickles its request slower than the read timeout (1 s) is dropped.
    connect
    TRICKLE=$CONN
    T0=$(date +%s)
    for c in P O S T ' ' /; do
        printf '%s' "$c" >&$TRICKLE 2>/dev/null || break
        sleep 1.5
    done
    # The server closed it: reading gives end of file (or the write above failed).
    timeout 5 cat <&$TRICKLE >/dev/null
    [ $? -ne 124 ] || fail "a trickling client was not dropped"
    exec {TRICKLE}>&-

    # Clients that go away mid-request: half a body, a request without reading the response.
    for _ in $(seq 20); do
        connect
        printf 'POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{"inputs":[' "$INFER" >&$CONN
        exec {CONN}>&-
        connect
        printf 'POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n' "$INFER" \
            "$(stat -c %s "$WORK/valid.json")" >&$CONN
        cat "$WORK/valid.json" >&$CONN
        exec {CONN}>&-
    done

    # Idle connections: opened and left silent, while valid requests go on.
    IDLE_FDS=()
    for _ in $(seq "$IDLE"); do
        connect || { fail "could not open idle connection ${#IDLE_FDS[@]}"; break; }
        IDLE_FDS+=("$CONN")
    done
    sleep 1
    expect_status 200 GET /metrics
    OPEN=$(printf '%s\n' "$BODY" | sed -n 's/^braid_serve_connections \([0-9]*\)$/\1/p')
    [ "${OPEN:-0}" -ge $((IDLE / 2)) ] || fail "only ${OPEN:-?} connections open with $IDLE idle ones"
    for _ in $(seq 10); do expect_status 200 POST "$INFER" --data-binary @"$WORK/valid.json"; done
    RSS_IDLE=$(rss_kib "$SERVER_PID")
    for fd in "${IDLE_FDS[@]}"; do exec {fd}>&-; done
    echo "round $round: RSS ${RSS0} KiB at start, ${RSS_IDLE} KiB with $IDLE idle connections (${OPEN:-?} open)"
done

# After the idle timeout the connections' threads are gone, and the server still serves.
sleep 3.5
touch "$WORK/stop"
wait "$VALID_PID"
VALID_PID=""
for _ in $(seq 10); do expect_status 200 POST "$INFER" --data-binary @"$WORK/valid.json"; done
RSS1=$(rss_kib "$SERVER_PID")
TOTAL=$(wc -l <"$WORK/valid_statuses")
BAD=$(grep -vc '^200$' "$WORK/valid_statuses")
echo "valid requests during the abuse: $TOTAL, not 200: $BAD; RSS ${RSS0} KiB -> ${RSS1} KiB"
[ "$TOTAL" -ge 10 ] || fail "only $TOTAL valid requests were sent during the abuse"
[ "$BAD" -eq 0 ] || fail "$BAD valid requests failed: $(grep -v '^200$' "$WORK/valid_statuses" | sort | uniq -c | tr '\n' ' ')"
# Bounded: 1,000 connection threads (1 MiB stacks, mostly untouched) may take a few tens of
# MiB while they live; once they are gone the server is back near its baseline.
LIMIT_KIB=${RSS_LIMIT_KIB:-65536}
[ $((RSS1 - RSS0)) -le "$LIMIT_KIB" ] || fail "RSS grew by $((RSS1 - RSS0)) KiB (limit $LIMIT_KIB)"
stop_server
[ "$SERVER_STATUS" = 0 ] || fail "braid-serve exited $SERVER_STATUS after SIGTERM"
if [ "$FAILURES" -ne 0 ]; then
    tail -20 "$WORK/server.log" >&2
    echo "$FAILURES check(s) failed" >&2
    exit 1
fi
echo "abuse test: passed"
