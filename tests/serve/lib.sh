# Shared helpers of braid-serve's script tests (sourced). Every wait has a deadline.
#
#   start_server LOG REPO [FLAGS...]   starts braid-serve on a free port: sets SERVER_PID, URL
#   stop_server                        SIGTERM, then waits (at most 30 s) for it to exit
#   req METHOD PATH [CURL ARGS...]     prints the body, then a line "HTTP <status>"
#   expect_status WANT METHOD PATH ... fails unless the status is WANT; the body in $BODY
set -uo pipefail

: "${BRAID_SERVE:?BRAID_SERVE must name the braid-serve binary}"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY
FAILURES=0

fail() {
    echo "FAIL: $*" >&2
    FAILURES=$((FAILURES + 1))
}

start_server() {
    local log=$1 repo=$2
    shift 2
    # Emptied here, not by the background job's redirection: that runs when the job starts,
    # so a log reused from an earlier server could still show the old port to the loop below.
    : >"$log"
    "$BRAID_SERVE" --model-repository "$repo" --port 0 "$@" >>"$log" 2>&1 &
    SERVER_PID=$!
    local port=""
    for _ in $(seq 600); do # 60 s: sanitizer builds start slowly
        port=$(head -1 "$log" 2>/dev/null | sed -n 's/^braid-serve listening on http:\/\/[^:]*:\([0-9]*\)$/\1/p')
        [ -n "$port" ] && break
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            echo "braid-serve exited before listening:" >&2
            cat "$log" >&2
            return 1
        fi
        sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "braid-serve did not print its port within 60 s:" >&2
        cat "$log" >&2
        return 1
    fi
    URL=http://127.0.0.1:$port
    PORT=$port
}

# SIGTERM and wait for the exit status (in $SERVER_STATUS); SIGKILL after 30 s.
stop_server() {
    kill -TERM "$SERVER_PID" 2>/dev/null
    for _ in $(seq 300); do
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$SERVER_PID" 2>/dev/null; then
        fail "braid-serve did not exit within 30 s of SIGTERM"
        kill -KILL "$SERVER_PID"
    fi
    wait "$SERVER_PID"
    SERVER_STATUS=$?
}

req() {
    local method=$1 path=$2
    shift 2
    curl -s --max-time 30 -X "$method" -w '\nHTTP %{http_code}\n' "$@" "$URL$path"
}

expect_status() {
    local want=$1 method=$2 path=$3
    shift 3
    local out
    out=$(req "$method" "$path" "$@")
    STATUS=$(printf '%s\n' "$out" | tail -1 | sed 's/HTTP //')
    BODY=$(printf '%s\n' "$out" | sed '$d')
    if [ "$STATUS" != "$want" ]; then
        fail "$method $path: status $STATUS, expected $want; body: ${BODY:0:300}"
        return 1
    fi
    return 0
}

# expect_body_has TEXT: the last response body contains TEXT.
expect_body_has() {
    case "$BODY" in
    *"$1"*) return 0 ;;
    *) fail "body does not contain '$1': ${BODY:0:300}" ;;
    esac
}

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
