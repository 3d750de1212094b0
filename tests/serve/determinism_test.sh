#!/usr/bin/env bash
# braid-serve in deterministic mode ("deterministic": true in config.json): each request's logits
# are the same bits alone as batched with three other requests in one run (dynamic batching), so
# every request gets its own rows back, and the model's metadata reports the mode.
#
#   determinism_test.sh MODELS_DIR
set -uo pipefail
MODELS=$(cd "$1" && pwd)
source "$(dirname "$0")/lib.sh"

WORK=$(mktemp -d)
trap 'kill -KILL ${SERVER_PID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
REPO=$WORK/repo
mkdir -p "$REPO/mlp" "$REPO/mlp_alone" "$REPO/mlp_two"
ln -s "$MODELS/mlp.braid" "$REPO/mlp/model.braid"
ln -s "$MODELS/mlp.braid" "$REPO/mlp_alone/model.braid"
ln -s "$MODELS/mlp.braid" "$REPO/mlp_two/model.braid"
echo '{"deterministic": true}' >"$REPO/mlp_alone/config.json"
# Two instances batching without a window: batches run as requests come, two at a time.
echo '{"max_batch_size": 8, "max_queue_delay_us": 0, "instances": 2, "deterministic": true}' \
    >"$REPO/mlp_two/config.json"
# A 2 s window: four requests sent together land in one run of four rows.
echo '{"max_batch_size": 8, "max_queue_delay_us": 2000000, "deterministic": true}' \
    >"$REPO/mlp/config.json"
start_server "$WORK/server.log" "$REPO" || exit 1

expect_status 200 GET /v2/models/mlp && expect_body_has '"deterministic":true'

# Request i: one row of 784 floats, binary in and out (the logits' exact bits come back).
make_request() {
    local i=$1 hdr
    hdr='{"inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","parameters":{"binary_data_size":3136}}],"outputs":[{"name":"logits","parameters":{"binary_data":true}}]}'
    printf '%s' "${#hdr}" >"$WORK/req$i.len"
    {
        printf '%s' "$hdr"
        python3 -c "
import struct, sys
sys.stdout.buffer.write(struct.pack('<784f', *[((k * 7 + $i * 13) % 29) / 29 - 0.5 for k in range(784)]))"
    } >"$WORK/req$i"
}
send() { # send I OUT: the logits' 40 bytes of request I into OUT
    local i=$1 out=$2
    curl -s --max-time 60 -D "$out.headers" -o "$out.body" -X POST \
        -H "Inference-Header-Content-Length: $(cat "$WORK/req$i.len")" \
        --data-binary @"$WORK/req$i" "$URL/v2/models/${MODEL:-mlp}/infer"
    local jlen
    jlen=$(tr -d '\r' <"$out.headers" | sed -n 's/^[Ii]nference-[Hh]eader-[Cc]ontent-[Ll]ength: //p')
    tail -c +$((jlen + 1)) "$out.body" >"$out"
}
for i in 0 1 2 3; do make_request "$i"; done

# Each request alone: the same model without batching.
for i in 0 1 2 3; do MODEL=mlp_alone send "$i" "$WORK/alone$i"; done
for i in 0 1 2 3; do
    [ "$(stat -c %s "$WORK/alone$i")" -eq 40 ] || fail "request $i alone: $(stat -c %s "$WORK/alone$i") bytes of logits, expected 40"
done
before=$(req GET /metrics | sed -n 's/^braid_serve_batch_size_count{model="mlp"} //p')
pids=()
for i in 0 1 2 3; do
    send "$i" "$WORK/batched$i" &
    pids+=($!)
done
wait "${pids[@]}" # not the server, also a child of this shell
after=$(req GET /metrics | sed -n 's/^braid_serve_batch_size_count{model="mlp"} //p')
# Four requests in fewer than four runs: request 0 shared a run with others.
[ -n "$before" ] && [ -n "$after" ] && [ $((after - before)) -lt 4 ] ||
    fail "the four requests were not batched (runs: ${before:-?} before, ${after:-?} after)"
# Every request gets its own rows back, with the same bits as alone.
for i in 0 1 2 3; do
    cmp -s "$WORK/alone$i" "$WORK/batched$i" ||
        fail "request $i batched with others gave other bits than alone: $(od -An -tf4 "$WORK/alone$i" | head -1) vs $(od -An -tf4 "$WORK/batched$i" | head -1)"
done

# The same through two batching instances, each request sent 4 times at once.
pids=()
for i in 0 1 2 3; do
    for k in 0 1 2 3; do
        MODEL=mlp_two send "$i" "$WORK/two$i.$k" &
        pids+=($!)
    done
done
wait "${pids[@]}"
for i in 0 1 2 3; do
    for k in 0 1 2 3; do
        cmp -s "$WORK/alone$i" "$WORK/two$i.$k" ||
            fail "request $i (copy $k) on two batching instances: other bits than alone"
    done
done

stop_server
[ "$FAILURES" -eq 0 ] && echo "determinism_test: all passed"
exit $((FAILURES > 0))
