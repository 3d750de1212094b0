#!/usr/bin/env bash
# braid-serve's protocol test: every endpoint and every error status, through curl.
#
#   protocol_test.sh BRAID_SERVE MODELS_DIR [ONNX_RELU_MODEL]
set -uo pipefail
BRAID_SERVE=$1
MODELS=$(cd "$2" && pwd)
RELU_ONNX=${3:-}
source "$(dirname "$0")/lib.sh"

WORK=$(mktemp -d)
trap 'kill -KILL ${SERVER_PID:-} 2>/dev/null; rm -rf "$WORK"' EXIT
REPO=$WORK/repo
mkdir -p "$REPO/mlp" "$REPO/transformer_block" "$REPO/mlp_batched" "$REPO/spare" "$REPO/mlp_1m"
ln -s "$MODELS/mlp.braid" "$REPO/mlp_1m/model.braid"
# A memory budget that the default batch fits and 2,000 rows do not.
echo '{"memory_budget": "1M"}' >"$REPO/mlp_1m/config.json"
ln -s "$MODELS/mlp.braid" "$REPO/mlp/model.braid"
ln -s "$MODELS/transformer_block.braid" "$REPO/transformer_block/model.braid"
ln -s "$MODELS/mlp.braid" "$REPO/mlp_batched/model.braid"
ln -s "$MODELS/mlp.braid" "$REPO/spare/model.braid"
# A long batching window: a lone request waits 1.5 s for company, which holds it in flight.
echo '{"max_batch_size": 8, "max_queue_delay_us": 1500000, "instances": 1}' \
    >"$REPO/mlp_batched/config.json"
if [ -n "$RELU_ONNX" ] && [ -f "$RELU_ONNX" ]; then
    mkdir -p "$REPO/relu_onnx"
    ln -s "$RELU_ONNX" "$REPO/relu_onnx/model.onnx"
fi

start_server "$WORK/server.log" "$REPO" --model-control --max-body-bytes 8000000 \
    --max-concurrent-requests 2 || exit 1

X1=$(awk 'BEGIN { for (i = 0; i < 784; i++) printf "%s%g", (i ? "," : ""), (i % 13) / 13 - 0.5 }')
JSON_MLP='{"id":"r1","inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","data":['$X1']}]}'

# Health, server and model metadata.
expect_status 200 GET /v2/health/live && expect_body_has '"live":true'
expect_status 200 GET /v2/health/ready && expect_body_has '"ready":true'
expect_status 200 GET /v2 && expect_body_has '"name":"braid-serve"' &&
    expect_body_has binary_tensor_data
expect_status 200 GET /v2/models/mlp &&
    expect_body_has '"inputs":[{"name":"x","datatype":"FP32","shape":[-1,784]}]' &&
    expect_body_has '"outputs":[{"name":"logits","datatype":"FP32","shape":[-1,10]}]'
expect_status 200 GET /v2/models/mlp/versions/1 && expect_body_has '"versions":["1"]'
expect_status 404 GET /v2/models/mlp/versions/7 && expect_body_has 'no version'
expect_status 404 GET /v2/models/nosuch && expect_body_has 'no model named \"nosuch\"'
expect_status 200 GET /v2/models/mlp/ready
expect_status 404 GET /v2/models/nosuch/ready
expect_status 404 GET /v2/nothing/here && expect_body_has '"error"'
expect_status 404 GET /elsewhere
expect_status 405 POST /v2/health/live -d '{}'
expect_status 405 GET /v2/models/mlp/infer && expect_body_has 'method not allowed'
expect_status 405 PUT /v2/models/mlp -d '{}'
expect_status 405 DELETE /v2

# Inference: JSON, requested outputs, binary tensors.
expect_status 200 POST /v2/models/mlp/infer -d "$JSON_MLP" &&
    expect_body_has '"model_name":"mlp"' && expect_body_has '"id":"r1"' &&
    expect_body_has '"shape":[1,10]'
expect_status 200 POST /v2/models/mlp/versions/1/infer -d "$JSON_MLP"
expect_status 200 POST /v2/models/mlp/infer \
    -d '{"inputs":[{"name":"x","shape":[2,784],"datatype":"FP32","data":[['$X1'],['$X1']]}],"outputs":[{"name":"logits"}]}' &&
    expect_body_has '"shape":[2,10]'
# Binary input and output: 784 floats of 0.5.
HDR='{"inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","parameters":{"binary_data_size":3136}}],"outputs":[{"name":"logits","parameters":{"binary_data":true}}]}'
{ printf '%s' "$HDR"; for _ in $(seq 784); do printf '\x00\x00\x00\x3f'; done; } >"$WORK/bin_req"
curl -s --max-time 30 -D "$WORK/bin_headers" -o "$WORK/bin_resp" -X POST \
    -H "Inference-Header-Content-Length: ${#HDR}" --data-binary @"$WORK/bin_req" \
    "$URL/v2/models/mlp/infer"
grep -qi '^HTTP/1.1 200' "$WORK/bin_headers" || fail "binary infer: $(head -1 "$WORK/bin_headers")"
JLEN=$(tr -d '\r' <"$WORK/bin_headers" | sed -n 's/^[Ii]nference-[Hh]eader-[Cc]ontent-[Ll]ength: //p')
[ -n "$JLEN" ] && [ "$(stat -c %s "$WORK/bin_resp")" -eq $((JLEN + 40)) ] ||
    fail "binary infer: JSON part $JLEN bytes, body $(stat -c %s "$WORK/bin_resp") bytes, expected 40 bytes of logits after it"
head -c "$JLEN" "$WORK/bin_resp" | grep -q '"binary_data_size":40' || fail "binary infer: no binary_data_size 40"
if [ -d "$REPO/relu_onnx" ]; then
# Responses are sent whole after each request. On one kept-alive connection: a response over
# 64 KiB (800 rows of JSON logits) and then a small one both arrive complete.
BIG_HDR='{"inputs":[{"name":"x","shape":[800,784],"datatype":"FP32","parameters":{"binary_data_size":2508800}}]}'
{ printf '%s' "$BIG_HDR"; head -c 2508800 /dev/zero; } >"$WORK/big_req"
curl -s --max-time 30 -o "$WORK/big_resp" -w '%{http_code} %{num_connects}\n' -X POST \
    -H "Inference-Header-Content-Length: ${#BIG_HDR}" --data-binary @"$WORK/big_req" \
    "$URL/v2/models/mlp/infer" --next -s -o "$WORK/small_resp" -w '%{http_code} %{num_connects}\n' \
    -X POST -d "$JSON_MLP" "$URL/v2/models/mlp/infer" >"$WORK/two_codes"
[ "$(tr '\n' ' ' <"$WORK/two_codes")" = "200 1 200 0 " ] ||
    fail "two requests on one connection: status and new connections $(tr '\n' ' ' <"$WORK/two_codes"), expected 200 1 200 0"
[ "$(stat -c %s "$WORK/big_resp")" -gt 65536 ] && grep -q '"shape":\[800,10\]' "$WORK/big_resp" &&
    [ "$(tail -c 4 "$WORK/big_resp")" = ']}]}' ] ||
    fail "800-row response: $(stat -c %s "$WORK/big_resp") bytes, ends with $(tail -c 20 "$WORK/big_resp")"
grep -q '"id":"r1"' "$WORK/small_resp" || fail "second request on the connection: $(head -c 200 "$WORK/small_resp")"
# A client that asks for "100 Continue" before sending its body gets it at once (curl would
# otherwise wait 20 s for it, past its 10 s limit).
C100=$(curl -s --max-time 10 --expect100-timeout 20 -o /dev/null -w '%{http_code}' -X POST \
    -H 'Expect: 100-continue' --data-binary @"$WORK/big_req" \
    -H "Inference-Header-Content-Length: ${#BIG_HDR}" "$URL/v2/models/mlp/infer")
[ "$C100" = 200 ] || fail "Expect: 100-continue: status $C100, expected 200 within 10 s"
    expect_status 200 GET /v2/models/relu_onnx && expect_body_has '"platform":"onnx"'
    RELU_DATA=$(awk 'BEGIN { for (i = 0; i < 60; i++) printf "%s%d", (i ? "," : ""), i - 30 }')
    expect_status 200 POST /v2/models/relu_onnx/infer \
        -d '{"inputs":[{"name":"x","shape":[3,4,5],"datatype":"FP32","data":['$RELU_DATA']}]}' &&
        expect_body_has '"data":[0,0,0,'
fi

# 400: malformed requests, each naming what is wrong.
expect_status 400 POST /v2/models/mlp/infer -d '{"inputs":[' && expect_body_has 'invalid JSON at byte'
expect_status 400 POST /v2/models/mlp/infer -d '[1,2]' && expect_body_has 'must be a JSON object'
expect_status 400 POST /v2/models/mlp/infer \
    -d '{"inputs":[{"name":"x","shape":[1,784],"datatype":"INT64","data":[1]}]}' &&
    expect_body_has 'input \"x\" has datatype FP32, the request gave INT64'
expect_status 400 POST /v2/models/mlp/infer \
    -d '{"inputs":[{"name":"x","shape":[1,784],"datatype":"BYTES","data":[1]}]}' &&
    expect_body_has 'not supported'
expect_status 400 POST /v2/models/mlp/infer \
    -d '{"inputs":[{"name":"x","shape":[1,783],"datatype":"FP32","data":[1]}]}' &&
    expect_body_has 'has shape [-1,784] (-1: any size), the request gave [1,783]'
expect_status 400 POST /v2/models/mlp/infer \
    -d '{"inputs":[{"name":"y","shape":[1,784],"datatype":"FP32","data":[1]}]}' &&
    expect_body_has 'no input named \"y\" (inputs: x)'
expect_status 400 POST /v2/models/mlp/infer -d '{"inputs":[]}' && expect_body_has 'input \"x\" is missing'
# expect_x_data STATUS DATA TEXT: the mlp's input x [1,784] with DATA between the brackets
# of its data gets STATUS, with TEXT in the body.
expect_x_data() {
  expect_status "$1" POST /v2/models/mlp/infer \
      -d '{"inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","data":['"$2"']}]}' &&
      expect_body_has "$3"
}
expect_x_data 400 "${X1%,*}" '784 elements), its data has 783'
# A tensor's data: spaces and line breaks between the numbers, a "NaN" among them, and
# elements missing or not separated by commas (the error names where).
X1_SPACED=$(printf '%s' "$X1" | sed 's/,/ ,\n /g')
expect_x_data 200 " $X1_SPACED
 " '"shape":[1,10]'
expect_x_data 200 '"NaN",'"${X1#*,}" '"shape":[1,10]'
expect_x_data 400 "1,,${X1#*,}" 'invalid JSON in an array at element 1 '
expect_x_data 400 "1 2,${X1#*,}" 'invalid JSON in an array at element 1 '
expect_x_data 400 "$X1," 'invalid JSON in an array at element 784 '
expect_x_data 400 "1.5x,${X1#*,}" 'data[0] = 1.5x is not a FP32 value'
expect_status 400 POST /v2/models/mlp/infer \
    -d '{"inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","data":[1,2,3]}]}' &&
    expect_body_has 'more than its 74 bytes of JSON can hold'
expect_status 400 POST /v2/models/mlp/infer \
    -d '{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":["a",2]}]}'
expect_status 400 POST /v2/models/mlp/infer -d "${JSON_MLP%\}}"',"outputs":[{"name":"probs"}]}' &&
    expect_body_has 'no output named \"probs\" (outputs: logits)'
expect_status 400 POST /v2/models/mlp/infer -H 'Inference-Header-Content-Length: 99999' \
    -d "$JSON_MLP" && expect_body_has 'Inference-Header-Content-Length is 99999'
expect_status 400 POST /v2/models/mlp/infer -H 'Inference-Header-Content-Length: ${#HDR}' \
    --data-binary @"$WORK/bin_req" && expect_body_has 'Inference-Header-Content-Length must be'
expect_status 400 POST /v2/models/mlp/infer -H "Inference-Header-Content-Length: ${#HDR}" \
    --data-binary "$HDR" && expect_body_has 'bytes of binary data'
X9=$(for i in $(seq 9); do printf '%s[%s]' "$([ "$i" -gt 1 ] && echo ,)" "$X1"; done)
expect_status 400 POST /v2/models/mlp_batched/infer \
    -d '{"inputs":[{"name":"x","shape":[9,784],"datatype":"FP32","data":['"$X9"']}]}' &&
    expect_body_has 'max_batch_size 8'
expect_status 404 POST /v2/models/nosuch/infer -d "$JSON_MLP" && expect_body_has 'no model named'

# 500: a run that fails inside braid (over the model's memory budget).
H2000='{"inputs":[{"name":"x","shape":[2000,784],"datatype":"FP32","parameters":{"binary_data_size":6272000}}]}'
{ printf '%s' "$H2000"; head -c 6272000 /dev/zero; } >"$WORK/rows_2000"
expect_status 500 POST /v2/models/mlp_1m/infer -H "Inference-Header-Content-Length: ${#H2000}" \
    --data-binary @"$WORK/rows_2000" && expect_body_has 'OUT_OF_MEMORY'
expect_status 200 POST /v2/models/mlp_1m/infer -d "$JSON_MLP"

# 413: a body over --max-body-bytes.
head -c 9000000 /dev/zero | tr '\0' ' ' >"$WORK/big"
expect_status 413 POST /v2/models/mlp/infer --data-binary @"$WORK/big" &&
    expect_body_has 'over the limit of 8000000 bytes'

# 504: deadlines, from the header and from the JSON parameter; no work is done.
expect_status 504 POST /v2/models/mlp/infer -H 'Inference-Timeout-Us: 0' -d "$JSON_MLP" &&
    expect_body_has 'it was not run'
expect_status 504 POST /v2/models/mlp/infer \
    -d '{"parameters":{"timeout":0},"inputs":[{"name":"x","shape":[1,784],"datatype":"FP32","data":['$X1']}]}'
expect_status 400 POST /v2/models/mlp/infer -H 'Inference-Timeout-Us: soon' -d "$JSON_MLP"
# In the batch queue: the window is 1.5 s, the request's deadline 200 ms.
T0=$(date +%s%N)
expect_status 504 POST /v2/models/mlp_batched/infer -H 'Inference-Timeout-Us: 200000' \
    -d "$JSON_MLP" && expect_body_has 'it was not run'
T1=$(date +%s%N)
[ $(((T1 - T0) / 1000000)) -lt 1400 ] || fail "a 200 ms deadline answered after $(((T1 - T0) / 1000000)) ms"

# Dynamic batching: 2 requests sent together run as one batch of 2 rows, at the window's end.
CLIENTS=()
for i in 1 2; do
    req POST /v2/models/mlp_batched/infer -d "$JSON_MLP" >"$WORK/batched_$i" &
    CLIENTS+=($!)
done
# 503: with those two in flight (they wait 1.5 s for the window), the limit of 2 is reached.
sleep 0.5
expect_status 503 POST /v2/models/mlp/infer -d "$JSON_MLP" && expect_body_has 'the limit is 2'
wait "${CLIENTS[@]}"
for i in 1 2; do
    tail -1 "$WORK/batched_$i" | grep -q 'HTTP 200' ||
        fail "batched request $i: $(tail -1 "$WORK/batched_$i")"
done
expect_status 200 GET /metrics
expect_body_has 'braid_serve_batch_size_count{model="mlp_batched"} 1'
expect_body_has 'braid_serve_batch_size_sum{model="mlp_batched"} 2'
expect_body_has 'braid_serve_requests_total{model="mlp",status="200"}'
expect_body_has 'braid_serve_requests_total{model="mlp",status="400"}'
expect_body_has 'braid_serve_requests_total{model="mlp",status="504"}'
expect_body_has 'braid_serve_request_failures_total{model="mlp"}'
expect_body_has 'braid_serve_request_duration_seconds_bucket{model="mlp",le="+Inf"}'
expect_body_has 'braid_serve_queue_duration_seconds_count{model="mlp_batched"}'
expect_body_has 'braid_serve_in_flight 0'
expect_body_has 'braid_serve_rejected_overload_total 1'
expect_body_has 'braid_serve_connections '
expect_status 405 POST /metrics -d '{}'

# The repository endpoints (enabled here with --model-control).
expect_status 200 POST /v2/repository/index && expect_body_has '{"name":"spare","version":"1","state":"READY"}'
expect_status 200 POST /v2/repository/models/spare/unload
expect_status 404 GET /v2/models/spare/ready && expect_body_has 'is not loaded'
expect_status 404 POST /v2/models/spare/infer -d "$JSON_MLP"
expect_status 200 POST /v2/repository/index && expect_body_has '{"name":"spare","version":"1","state":"UNAVAILABLE"}'
expect_status 404 POST /v2/repository/models/spare/unload
expect_status 200 POST /v2/repository/models/spare/load
expect_status 200 GET /v2/models/spare/ready
expect_status 200 POST /v2/models/spare/infer -d "$JSON_MLP"
expect_status 404 POST /v2/repository/models/absent/load && expect_body_has 'no folder absent'
expect_status 400 POST /v2/repository/models/..bad/load && expect_body_has 'not a valid model name'
mkdir -p "$REPO/broken" && echo '{"max_batch_size": "many"}' >"$REPO/broken/config.json" &&
    ln -s "$MODELS/mlp.braid" "$REPO/broken/model.braid"
expect_status 400 POST /v2/repository/models/broken/load && expect_body_has 'max_batch_size'
expect_status 405 GET /v2/repository/index

# SIGTERM while a request waits in the batch queue: it is answered, then the server exits 0.
req POST /v2/models/mlp_batched/infer -d "$JSON_MLP" >"$WORK/draining" &
CLIENT=$!
sleep 0.3
stop_server
wait $CLIENT
tail -1 "$WORK/draining" | grep -q 'HTTP 200' || fail "request in flight at SIGTERM: $(tail -1 "$WORK/draining")"
[ "$SERVER_STATUS" = 0 ] || fail "braid-serve exited $SERVER_STATUS after SIGTERM, expected 0"

# Without --model-control the repository endpoints are refused.
rm -rf "$REPO/broken"
# This one is configured through the environment.
BRAID_SERVE_MAX_BODY_BYTES=5000 start_server "$WORK/server2.log" "$REPO" || exit 1
expect_status 403 POST /v2/repository/index && expect_body_has '--model-control'
expect_status 413 POST /v2/models/mlp/infer -d "$JSON_MLP" && expect_body_has 'limit of 5000 bytes'
expect_status 403 POST /v2/repository/models/mlp/unload
stop_server
[ "$SERVER_STATUS" = 0 ] || fail "second server exited $SERVER_STATUS"

# A repository that does not load: exit 3 with the model's name.
mkdir -p "$WORK/bad/oops"
"$BRAID_SERVE" --model-repository "$WORK/bad" --port 0 >"$WORK/bad.log" 2>&1
STATUS=$?
[ "$STATUS" = 3 ] && grep -q 'model "oops"' "$WORK/bad.log" ||
    fail "bad repository: exit $STATUS, output $(cat "$WORK/bad.log")"
"$BRAID_SERVE" --port 0 >"$WORK/usage.log" 2>&1
[ $? = 2 ] || fail "missing --model-repository did not exit 2"

if [ "$FAILURES" -ne 0 ]; then
    echo "server log:" >&2
    cat "$WORK/server.log" >&2
    echo "$FAILURES check(s) failed" >&2
    exit 1
fi
echo "protocol test: all checks passed"
