#!/usr/bin/env bash
# The real-model suite (tests/models/model_suite.js) under ctest: skipped (exit 77) with the
# reason when Node.js or npm is missing or the npm registry is unreachable.
#
#   tests/models/run.sh BUILD_DIR [--only NAME[,NAME...]] [--iter N]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for tool in node npm tar; do
  if ! command -v "$tool" > /dev/null; then
    echo "model suite skipped: $tool is not installed (the suite fetches the models and ONNX Runtime with npm)" >&2
    exit 77
  fi
done
exec node "$here/model_suite.js" "$@"
