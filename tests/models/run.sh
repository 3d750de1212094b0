#!/usr/bin/env bash
# The real-model suite (tests/models/model_suite.js) under ctest, or with --determinism first its
# deterministic-mode check (tests/models/determinism.js): skipped (exit 77) with the reason when
# Node.js or npm is missing or the npm registry is unreachable.
#
#   tests/models/run.sh BUILD_DIR [--only NAME[,NAME...]] [--iter N]
#   tests/models/run.sh --determinism BUILD_DIR [--only NAME[,NAME...]] [--batches 1,3,7,64]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for tool in node npm tar; do
  if ! command -v "$tool" > /dev/null; then
    echo "model suite skipped: $tool is not installed (the suite fetches the models and ONNX Runtime with npm)" >&2
    exit 77
  fi
done
if [[ "${1:-}" == --determinism ]]; then
  shift
  exec node "$here/determinism.js" "$@"
fi
exec node "$here/model_suite.js" "$@"
