#!/usr/bin/env bash
# The HTTP layer alone: cpp-httplib (what braid-serve uses) against Boost.Beast, on the same
# echo server (read the body, answer a small JSON document), driven by wrk with the 9 KiB JSON
# body of bench_serve's requests. Then robustness: 1,000 idle connections held open, the CPU
# the server burns over 5 s meanwhile, its RSS, and the latency of requests sent meanwhile.
# Needs Boost (libboost-dev, not a braid dependency) and cpp-httplib; builds both servers into
# a temporary folder. Results: docs/serving.md, "The HTTP library".
#
#   bench/serve_http/compare.sh [SECONDS_PER_CASE]
set -uo pipefail
SECONDS_PER_CASE=${1:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
SERVER_PID=""
trap 'kill ${SERVER_PID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY
ulimit -n 8192 2>/dev/null

T0=$(date +%s.%N)
g++ -O2 -std=c++20 "$HERE/httplib_echo.cpp" -o "$WORK/httplib_echo" $(pkg-config --cflags --libs cpp-httplib) -pthread || exit 1
T1=$(date +%s.%N)
g++ -O2 -std=c++20 "$HERE/beast_echo.cpp" -o "$WORK/beast_echo" -pthread || exit 1
T2=$(date +%s.%N)
awk -v a="$T0" -v b="$T1" -v c="$T2" 'BEGIN { printf "{\"case\":\"compile_s\",\"httplib\":%.1f,\"beast\":%.1f}\n", b - a, c - b }'

awk 'BEGIN { srand(1); printf "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,784],\"datatype\":\"FP32\",\"data\":[";
             for (i = 0; i < 784; i++) printf "%s%.7g", (i ? "," : ""), rand() * 2 - 1; printf "]}]}" }' >"$WORK/body"
cat >"$WORK/post.lua" <<LUA
local f = assert(io.open("$WORK/body", "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
LUA

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }

run() { # NAME PORT COMMAND...
    local name=$1 port=$2
    shift 2
    "$@" &
    SERVER_PID=$!
    sleep 0.5
    local url=http://127.0.0.1:$port/infer
    wrk -t1 -c64 -d1s -s "$WORK/post.lua" "$url" >/dev/null
    for c in 1 64; do
        out=$(wrk -t1 -c"$c" -d"${SECONDS_PER_CASE}s" --latency -s "$WORK/post.lua" "$url")
        printf '{"case":"echo","library":"%s","concurrency":%d,"requests_per_s":%s,"p50":"%s","p99":"%s","errors":"%s"}\n' \
            "$name" "$c" "$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ { print $2 }')" \
            "$(printf '%s\n' "$out" | awk '$1 == "50%" { print $2 }')" \
            "$(printf '%s\n' "$out" | awk '$1 == "99%" { print $2 }')" \
            "$(printf '%s\n' "$out" | grep -E 'Non-2xx|Socket errors' | tr '\n' ' ')"
    done
    # 1,000 idle connections.
    local fds=() fd
    for _ in $(seq 1000); do
        exec {fd}<>"/dev/tcp/127.0.0.1/$port" && fds+=("$fd")
    done
    sleep 1
    local before after
    before=$(cpu_ticks "$SERVER_PID")
    sleep 5
    after=$(cpu_ticks "$SERVER_PID")
    out=$(wrk -t1 -c1 -d"${SECONDS_PER_CASE}s" --latency -s "$WORK/post.lua" "$url")
    printf '{"case":"idle_1000","library":"%s","open":%d,"cpu_percent_while_idle":%.1f,"rss_kib":%d,"c1_requests_per_s":%s,"c1_p99":"%s"}\n' \
        "$name" "${#fds[@]}" "$(awk -v a="$before" -v b="$after" -v hz="$(getconf CLK_TCK)" 'BEGIN { print (b - a) / hz / 5 * 100 }')" \
        "$(rss_kib "$SERVER_PID")" "$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ { print $2 }')" \
        "$(printf '%s\n' "$out" | awk '$1 == "99%" { print $2 }')"
    for fd in "${fds[@]}"; do exec {fd}>&-; done
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null
    SERVER_PID=""
}

# httplib: a thread per connection (1,100 threads, so that the idle connections do not starve
# the measured one, as braid-serve's own connection queue does); Beast: 2 threads, asynchronous.
run httplib 18002 "$WORK/httplib_echo" 18002 1100
run beast 18001 "$WORK/beast_echo" 18001 2
