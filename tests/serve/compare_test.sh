#!/usr/bin/env bash
# braid-serve returns what braid-run computes: the example mlp and transformer_block models,
# one input each, sent as JSON and as binary tensor data; every output value must be equal
# (bit for bit) to braid-run's output for the same .npy input.
#
#   BRAID_SERVE=... BRAID_RUN=... SERVE_TEST_DATA=... compare_test.sh MODELS_DIR
set -uo pipefail
MODELS=$(cd "$1" && pwd)
source "$(dirname "$0")/lib.sh"
: "${BRAID_RUN:?}" "${SERVE_TEST_DATA:?}"

WORK=$(mktemp -d)
trap 'kill -KILL ${SERVER_PID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repo/mlp" "$WORK/repo/transformer_block"
ln -s "$MODELS/mlp.braid" "$WORK/repo/mlp/model.braid"
ln -s "$MODELS/transformer_block.braid" "$WORK/repo/transformer_block/model.braid"
start_server "$WORK/server.log" "$WORK/repo" || exit 1

# model input output shape seed
while read -r model input output shape seed; do
    dir=$WORK/$model
    mkdir -p "$dir/out"
    "$SERVE_TEST_DATA" make-input "$dir" "$input" "$shape" "$seed" || fail "$model: make-input"
    "$BRAID_RUN" "$MODELS/$model.braid" --input "$input=$dir/input.npy" --iter 1 --warmup 0 \
        --output-dir "$dir/out" >"$dir/braid_run.log" 2>&1 ||
        fail "$model: braid-run: $(cat "$dir/braid_run.log")"

    curl -s --max-time 60 -o "$dir/response.json" -w '%{http_code}' -X POST \
        -H 'Content-Type: application/json' --data-binary @"$dir/request.json" \
        "$URL/v2/models/$model/infer" >"$dir/status.json"
    [ "$(cat "$dir/status.json")" = 200 ] ||
        fail "$model JSON: status $(cat "$dir/status.json"): $(head -c 300 "$dir/response.json")"
    "$SERVE_TEST_DATA" check-json "$dir/response.json" "$output" "$dir/out/$output.npy" ||
        fail "$model: the JSON response differs from braid-run"

    curl -s --max-time 60 -D "$dir/headers.bin" -o "$dir/response.bin" -X POST \
        -H 'Content-Type: application/octet-stream' \
        -H "Inference-Header-Content-Length: $(cat "$dir/request.bin.len")" \
        --data-binary @"$dir/request.bin" "$URL/v2/models/$model/infer"
    grep -q '^HTTP/1.1 200' "$dir/headers.bin" ||
        fail "$model binary: $(head -1 "$dir/headers.bin") $(head -c 300 "$dir/response.bin")"
    jlen=$(tr -d '\r' <"$dir/headers.bin" | sed -n 's/^[Ii]nference-[Hh]eader-[Cc]ontent-[Ll]ength: //p')
    "$SERVE_TEST_DATA" check-binary "$dir/response.bin" "${jlen:-0}" "$output" \
        "$dir/out/$output.npy" || fail "$model: the binary response differs from braid-run"
done <<'CASES'
mlp x logits 4x784 1
transformer_block x y 128x256 2
CASES

stop_server
[ "$SERVER_STATUS" = 0 ] || fail "braid-serve exited $SERVER_STATUS after SIGTERM"
if [ "$FAILURES" -ne 0 ]; then
    cat "$WORK/server.log" >&2
    echo "$FAILURES check(s) failed" >&2
    exit 1
fi
echo "compare test: braid-serve's outputs equal braid-run's"
