#!/usr/bin/env bash
# The clean-room check: does a new user's machine build and test braid from the README alone?
#
# Builds a minimal Debian 12 root (debootstrap --variant=minbase bookworm, from this machine's
# apt sources), adds only make, git and ca-certificates, clones this repository's committed HEAD
# into it and runs the README's commands there, so that every other package has to come from
# scripts/bootstrap.sh. Prints each step's time and, on failure, the step and the end of its log.
#
#   scripts/check_fresh_machine.sh          make run, pip install ./python, then make test
#                                           (the fuzz label skipped)
#   scripts/check_fresh_machine.sh --quick  make run, pip install ./python, then make test-smoke
#                                           (CI's half: the library, one test binary and the
#                                           smoke label)
#
# Needs root (debootstrap, chroot, mounts) and the debootstrap package (bootstrap.sh installs
# it). The root lives in $FRESH_ROOT (default /tmp/braid-fresh-root) and is removed first and,
# unless KEEP_FRESH_ROOT=1, afterwards. CUDA is not in the root, so it builds without it.
set -euo pipefail

MODE=full
case "${1:-}" in
  --quick) MODE=quick ;;
  "") ;;
  *) echo "usage: $0 [--quick]" >&2; exit 2 ;;
esac

REPO="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="${FRESH_ROOT:-/tmp/braid-fresh-root}"
LOGS="${FRESH_LOGS:-$REPO/build/fresh}"
SUITE=bookworm
# Where the clone lives inside the root (a path of the root, not of this machine).
SRC=/usr/src/braid

if [ "$(id -u)" -ne 0 ]; then
  echo "check-fresh: needs root (debootstrap, chroot and mounts)" >&2
  exit 2
fi
if ! command -v debootstrap >/dev/null; then
  echo "check-fresh: debootstrap is not installed; run scripts/bootstrap.sh first" >&2
  exit 2
fi

# The mirror debootstrap downloads from: this machine's own Debian source, so that the root
# sees the same package versions a user of this machine would.
mirror() {
  local uri
  uri=$(grep -h -E '^\s*URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null |
          awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list)
  fi
  echo "${uri:-http://deb.debian.org/debian}"
}

MOUNTS=()
cleanup() {
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do umount -l "${MOUNTS[$i]}" 2>/dev/null || true; done
  if [ "${KEEP_FRESH_ROOT:-0}" != 1 ]; then rm -rf --one-file-system "$ROOT"; fi
}
trap cleanup EXIT

mount_in_root() { # type-or-bind source target
  mkdir -p "$ROOT$3"
  if [ "$1" = bind ]; then mount --bind "$2" "$ROOT$3"; else mount -t "$1" "$2" "$ROOT$3"; fi
  MOUNTS+=("$ROOT$3")
}

mkdir -p "$LOGS"
FAILED=""
step() { # name command...: runs a step with its output in $LOGS/<name>.log, prints its time
  local name=$1 start end rc=0
  shift
  start=$(date +%s)
  "$@" >"$LOGS/$name.log" 2>&1 || rc=$?
  end=$(date +%s)
  printf 'check-fresh: %-12s %s in %ds\n' "$name" "$([ $rc -eq 0 ] && echo passed || echo FAILED)" \
    $((end - start))
  if [ $rc -ne 0 ]; then
    FAILED=$name
    echo "---- last 60 lines of $LOGS/$name.log ----"
    tail -n 60 "$LOGS/$name.log"
    return $rc
  fi
}

# Runs a command in the root with a login-like environment of its own: nothing from this
# machine's shell (build flags, paths) leaks in, except OpenBLAS's core override, which the
# machine may need for correct results on its CPU.
in_root() {
  local keep=()
  for v in OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; do
    if [ -n "${!v:-}" ]; then keep+=("$v=${!v}"); fi
  done
  chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM=dumb "${keep[@]}" /bin/bash -c "$1"
}

make_root() {
  rm -rf --one-file-system "$ROOT"
  debootstrap --variant=minbase "$SUITE" "$ROOT" "$(mirror)"
  # The machine's apt sources (the same mirror, and security updates) and name resolution.
  rm -f "$ROOT/etc/apt/sources.list"
  if [ -f /etc/apt/sources.list ]; then cp /etc/apt/sources.list "$ROOT/etc/apt/"; fi
  for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] && cp "$f" "$ROOT/etc/apt/sources.list.d/"
  done
  cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
  mount_in_root proc proc /proc
  mount_in_root sysfs sys /sys
  mount_in_root bind /dev /dev
  mount_in_root devpts devpts /dev/pts
  mount_in_root tmpfs tmpfs /dev/shm
  in_root 'export DEBIAN_FRONTEND=noninteractive; apt-get update -qq &&
           apt-get install -y -qq --no-install-recommends make git ca-certificates'
}

clone() {
  local commit
  commit=$(git -C "$REPO" rev-parse HEAD)
  echo "cloning $commit (committed HEAD; uncommitted changes are not part of the check)"
  mkdir -p "$(dirname "$ROOT$SRC")"
  git clone -q --no-hardlinks "$REPO" "$ROOT$SRC"
  git -C "$ROOT$SRC" checkout -q "$commit"
}

T0=$(date +%s)
echo "check-fresh: Debian $SUITE minbase root in $ROOT, logs in $LOGS ($MODE)"
step debootstrap make_root || exit 1
step clone clone || exit 1
step make-run in_root "cd $SRC && make run" || exit 1
# The Python package as docs/python.md installs it: pip builds the module with CMake.
step pip-install in_root "cd $SRC && python/tests/pip_install.sh python3 build" || exit 1
if [ "$MODE" = full ]; then
  step make-test in_root "cd $SRC && make test TEST_EXCLUDE='slow|fuzz'" || exit 1
else
  step make-smoke in_root "cd $SRC && make test-smoke" || exit 1
fi
echo "check-fresh: passed in $(($(date +%s) - T0))s ($MODE)"
