#!/usr/bin/env bash
# embed_install: `cmake --install` into a temporary prefix, then the embedding examples built
# against that prefix the way a user builds them (find_package(braid), and pkg-config for the C
# one) and run on the example MLP. Also checks that libbraid.so exports only the public API.
#
#   install_test.sh BUILD_DIR EXAMPLES_DIR MODEL [CMAKE [CC [CXX [PKG_CONFIG]]]]
set -euo pipefail
build_dir=$1 examples_dir=$2 model=$3
cmake=${4:-cmake} cc=${5:-cc} cxx=${6:-c++} pkg_config=${7:-pkg-config}

for f in "$build_dir"/libbraid.so "$model"; do
  [ -e "$f" ] || { echo "missing $f: build the default target first (make build)"; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

step() { echo "== $*"; }

step "install into a temporary prefix"
"$cmake" --install "$build_dir" --prefix "$prefix" >/dev/null
lib=$(find "$prefix" -name 'libbraid.so.0' | head -1)
[ -n "$lib" ] || { echo "libbraid.so.0 not installed"; exit 1; }
libdir=$(dirname "$lib")
for f in include/braid/embed.h include/braid/braid_c.h; do
  [ -f "$prefix/$f" ] || { echo "not installed: $f"; exit 1; }
done
[ -f "$libdir/cmake/braid/braidConfig.cmake" ] || { echo "no braidConfig.cmake"; exit 1; }
[ -f "$libdir/pkgconfig/braid.pc" ] || { echo "no braid.pc"; exit 1; }
# libbraid.so -> libbraid.so.0 -> libbraid.so.<version>, and the SONAME is libbraid.so.0.
[ "$(readlink "$libdir/libbraid.so")" = libbraid.so.0 ] || { echo "bad libbraid.so link"; exit 1; }
soname=$(objdump -p "$libdir/libbraid.so.0" | awk '$1 == "SONAME" {print $2}')
[ "$soname" = libbraid.so.0 ] || { echo "SONAME is '$soname', expected libbraid.so.0"; exit 1; }

step "exported symbols: braid_* and braid::embed:: only"
leaks=$(nm -D --defined-only "$libdir/libbraid.so.0" | awk '{print $3}' | c++filt |
  grep -Ev '^(braid_|braid::embed::|typeinfo for braid::embed::Error$|typeinfo name for braid::embed::Error$|vtable for braid::embed::Error$)' |
  grep -Ev '^(_init|_fini|_edata|_end|__bss_start)$' || true)
[ -z "$leaks" ] || { echo "exported beyond the public API:"; echo "$leaks"; exit 1; }
# The symbol list read once: `nm | grep -q` under pipefail fails when grep stops reading
# early and nm dies of SIGPIPE, which a long enough list made happen.
exported=$(nm -D --defined-only "$libdir/libbraid.so.0")
if [ "$(c++filt <<<"$exported" | grep -c '::Impl::')" != 0 ]; then
  echo "exports private Impl members"; exit 1
fi
for sym in braid_model_load_file braid_context_run braid_status_free braid_context_set_sequence_input; do
  grep -qw "$sym" <<<"$exported" || { echo "$sym not exported"; exit 1; }
done

for lang in c cpp; do
  step "embed_$lang: find_package(braid), built out of tree"
  compiler=-DCMAKE_C_COMPILER=$cc
  [ $lang = cpp ] && compiler=-DCMAKE_CXX_COMPILER=$cxx
  "$cmake" -S "$examples_dir/embed_$lang" -B "$work/embed_$lang" -DCMAKE_PREFIX_PATH="$prefix" \
    "$compiler" -DCMAKE_BUILD_TYPE=Release >/dev/null
  "$cmake" --build "$work/embed_$lang" >/dev/null
  step "embed_$lang: run"
  "$work/embed_$lang/embed_$lang" "$model" 4
done

step "embed_c: pkg-config"
export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046
"$cc" -std=c99 -Wall -Werror -o "$work/embed_c_pc" "$examples_dir/embed_c/main.c" \
  $("$pkg_config" --cflags --libs braid) -pthread
LD_LIBRARY_PATH=$libdir "$work/embed_c_pc" "$model" 2
echo "embed_install: ok"
