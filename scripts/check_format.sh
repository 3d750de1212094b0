#!/usr/bin/env bash
# Fails when a tracked C++ source is not formatted per .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' 2>/dev/null || true)
[ -z "$files" ] && files=$(find base memory graph operators comm serialization tools tests \
  bench examples -name '*.h' -o -name '*.cpp' 2>/dev/null)
bad=0
for f in $files; do
  [ -f "$f" ] || continue
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (run: clang-format -i $f)"
    bad=1
  fi
done
exit $bad
