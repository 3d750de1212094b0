#!/usr/bin/env bash
# bench_serve: braid-serve under load from wrk (a Lua script sets the POST body), on the
# example mlp (or mlp_wide, whose run is most of a request's cost) with batch-1 requests
# ({1,784} float32), at concurrency 1, 8 and 64, with
# dynamic batching off and on. Prints one JSON object per case: requests/s, p50 and p99
# latency, wrk's failed responses and socket errors, and whether every request wrk completed
# was counted by the server (none lost). Batching off runs with one instance (the default) and
# with two (one run per core); batching on with one instance. The last line compares concurrency 1 with an
# in-process run of the same model on the same input shape (braid-run, the anchor): the
# server's overhead per request is the p50 latency minus the in-process median.
#
#   bench/bench_serve.sh BUILD_DIR [SECONDS_PER_CASE] [json|binary] [mlp|mlp_wide]
#
# Targets (docs/performance.md): batching >= 2x the requests/s at concurrency 64; overhead at
# concurrency 1 <= 100 us; no failed or lost requests.
set -uo pipefail
BUILD=$(cd "${1:-build}" && pwd)
SECONDS_PER_CASE=${2:-5}
ENCODING=${3:-json}
MODEL=${4:-mlp}
case "$MODEL" in mlp | mlp_wide) ;; *) echo "bench_serve: the model is mlp or mlp_wide, not \"$MODEL\"" >&2; exit 2 ;; esac
SERVE=$BUILD/serve/braid-serve
RUN=$BUILD/tools/braid-run
MLP=$BUILD/examples/models/$MODEL.braid
for f in "$SERVE" "$RUN" "$MLP"; do
    [ -e "$f" ] || { echo "bench_serve: $f is missing; build braid-serve, braid-run and example_models" >&2; exit 2; }
done
command -v wrk >/dev/null || { echo "bench_serve: wrk is not installed (scripts/bootstrap.sh)" >&2; exit 2; }
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY

WORK=$(mktemp -d)
SERVER_PID=""
trap 'kill ${SERVER_PID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
# Batching off with one instance (the default config), off with two (one run per core: the best
# without batching on two cores), and on with one instance.
for mode in off off2 on; do
    mkdir -p "$WORK/$mode/$MODEL"
    ln -s "$MLP" "$WORK/$mode/$MODEL/model.braid"
done
echo '{"instances": 1}' >"$WORK/off/$MODEL/config.json"
echo '{"instances": 2}' >"$WORK/off2/$MODEL/config.json"
echo '{"max_batch_size": 64, "max_queue_delay_us": 0, "instances": 1}' >"$WORK/on/$MODEL/config.json"

# The request: 784 values in [-1, 1) as JSON, or as binary tensor data.
if [ "$ENCODING" = binary ]; then
    HEADER='{"inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","parameters":{"binary_data_size":3136}}],"outputs":[{"name":"logits","parameters":{"binary_data":true}}]}'
    { printf '%s' "$HEADER"; for i in $(seq 0 783); do printf '\x00\x00\x00\x3f'; done; } >"$WORK/body"
    EXTRA_HEADER="wrk.headers[\"Inference-Header-Content-Length\"] = \"${#HEADER}\""
else
    awk 'BEGIN { srand(1); printf "{\"inputs\":[{\"name\":\"x\",\"shape\":[1,784],\"datatype\":\"FP32\",\"data\":[";
                 for (i = 0; i < 784; i++) printf "%s%.7g", (i ? "," : ""), rand() * 2 - 1; printf "]}]}" }' >"$WORK/body"
    EXTRA_HEADER=""
fi
cat >"$WORK/post.lua" <<LUA
local f = assert(io.open("$WORK/body", "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
$EXTRA_HEADER
LUA

start_server() {
    "$SERVE" --model-repository "$1" --port 0 --max-concurrent-requests 1024 >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 100); do
        PORT=$(head -1 "$WORK/server.log" | sed -n 's/.*:\([0-9]*\)$/\1/p')
        [ -n "$PORT" ] && return 0
        sleep 0.1
    done
    echo "bench_serve: braid-serve did not start: $(cat "$WORK/server.log")" >&2
    exit 1
}

served() { # requests the server answered with 200
    curl -s "http://127.0.0.1:$PORT/metrics" |
        awk -v m="$MODEL" 'index($0, "braid_serve_requests_total{model=\"" m "\",status=\"200\"}") == 1 { n += $2 } END { print n + 0 }'
}

to_ms() { # "123.45us" / "1.2ms" / "1.5s" -> milliseconds
    awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) n /= 1000; else if (v ~ /ms$/) n += 0;
                           else if (v ~ /s$/) n *= 1000; printf "%.4f", n }'
}

declare -A RPS P50
for batching in off off2 on; do
    start_server "$WORK/$batching"
    URL=http://127.0.0.1:$PORT/v2/models/$MODEL/infer
    # Warm up: the first runs plan memory and start the connection threads.
    wrk -t1 -c64 -d1s -s "$WORK/post.lua" "$URL" >/dev/null
    for c in 1 8 64; do
        before=$(served)
        out=$(wrk -t1 -c"$c" -d"${SECONDS_PER_CASE}s" --latency -s "$WORK/post.lua" "$URL")
        after=$(served)
        rps=$(printf '%s\n' "$out" | awk '/^Requests\/sec:/ { print $2 }')
        p50=$(to_ms "$(printf '%s\n' "$out" | awk '$1 == "50%" { print $2 }')")
        p99=$(to_ms "$(printf '%s\n' "$out" | awk '$1 == "99%" { print $2 }')")
        completed=$(printf '%s\n' "$out" | awk '/requests in/ { print $1 }')
        non2xx=$(printf '%s\n' "$out" | awk '/Non-2xx/ { print $NF }')
        socket_errors=$(printf '%s\n' "$out" | awk '/Socket errors/ { gsub(",", ""); print $4 + $6 + $8 + $10 }')
        # wrk stops with requests in flight: the server may count up to c more than wrk.
        counted=$((after - before))
        lost=$((completed - counted))
        [ "$lost" -lt 0 ] && lost=0
        RPS[$batching$c]=$rps
        P50[$batching$c]=$p50
        printf '{"case":"%s_batch1","encoding":"%s","batching":"%s","instances":%d,"concurrency":%d,"seconds":%d,"requests":%d,"requests_per_s":%s,"p50_ms":%s,"p99_ms":%s,"non_2xx":%d,"socket_errors":%d,"server_counted":%d,"lost":%d,"cores":%d}\n' \
            "$MODEL" "$ENCODING" "${batching%2}" "$([ "$batching" = off2 ] && echo 2 || echo 1)" "$c" "$SECONDS_PER_CASE" "$completed" "$rps" "$p50" "$p99" \
            "${non2xx:-0}" "${socket_errors:-0}" "$counted" "$lost" "$(nproc)"
    done
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID"
    SERVER_PID=""
done

# The anchor: the same model and input shape run in-process by braid-run on cpu:default, the
# calling thread, as the embedding API that braid-serve is built on runs it (the model file's
# own cpu0 adds a hand-over to a worker thread per run, 15 to 60 us on this machine); the
# lowest median of three runs (the machine is shared: a busy moment inflates one run, not all
# three).
anchor=$(for _ in 1 2 3; do
    "$RUN" "$MLP" --input x=random:1x784 --iter 5000 --warmup 200 --comp-node cpu:default --json |
        sed -n 's/.*"latency_ms":{"min":[^,]*,"median":\([^,]*\),.*/\1/p'
done | sort -g | head -1)
awk -v rps_off="${RPS[off64]}" -v rps_off2="${RPS[off264]}" -v rps_on="${RPS[on64]}" \
    -v p50="${P50[off1]}" -v anchor="$anchor" -v rps1="${RPS[off1]}" -v enc="$ENCODING" -v model="$MODEL" 'BEGIN {
    printf "{\"case\":\"summary\",\"model\":\"%s\",\"encoding\":\"%s\",\"batching_speedup_c64\":%.2f,\"batching_speedup_c64_vs_2_instances\":%.2f,\"in_process_median_us\":%.1f,\"c1_p50_us\":%.1f,\"overhead_c1_us\":%.1f,\"c1_us_per_request\":%.1f}\n",
        model, enc, rps_on / rps_off, rps_on / rps_off2, anchor * 1000, p50 * 1000, p50 * 1000 - anchor * 1000, 1e6 / rps1 }'
