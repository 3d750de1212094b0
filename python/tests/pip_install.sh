#!/usr/bin/env bash
# `pip install --no-build-isolation ./python` into a new virtual environment (with the system's
# numpy), then `import braid` from another folder and a model run: the package as a user
# installs it (docs/python.md).
#
#   python/tests/pip_install.sh PYTHON BUILD_DIR [MODULE]
# MODULE: an already built _braid*.so to package (BRAID_PYTHON_MODULE); without it pip runs
# the CMake build in BUILD_DIR.
set -euo pipefail
python=$1 build=$(cd "$2" && pwd) module=${3:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "$build/pip-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$python" -m venv --system-site-packages "$work/venv"
# pip builds in the source tree: a copy keeps the checkout clean and lets tests run in parallel.
mkdir "$work/src"
cp -r "$src/python" "$work/src/python"
rm -rf "$work/src/python/build" "$work/src/python"/*.egg-info "$work/src/python/braid/_braid"*.so
BRAID_PYTHON_MODULE=$module BUILD_DIR=$build BRAID_SOURCE_DIR=$src \
  "$work/venv/bin/pip" install -q --no-build-isolation --no-index "$work/src/python"
cd "$work"
"$work/venv/bin/python" - "$build/examples/models/mlp.braid" <<'PY'
import sys
import numpy as np
import braid
assert "site-packages" in braid.__file__, braid.__file__
y = braid.Model(sys.argv[1]).run({"x": np.ones((3, 784), np.float32)})["logits"]
assert y.shape == (3, 10) and np.isfinite(y).all()
print(f"braid {braid.version()} installed by pip in a virtual environment: {braid.__file__}")
PY
