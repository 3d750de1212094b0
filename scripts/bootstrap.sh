#!/usr/bin/env bash
# Installs every Debian package that braid's build, tests and benchmarks need.
# Idempotent: when everything is present it only checks and returns.
# CUDA is not installed here: when a toolkit is present (e.g. /usr/local/cuda) the build
# finds it and compiles the GPU code (BRAID_WITH_CUDA=AUTO), otherwise it builds without it.
set -euo pipefail

PACKAGES=(
  cmake g++ make pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libspdlog-dev libfmt-dev libxxhash-dev
  libflatbuffers-dev flatbuffers-compiler
  libopenblas-dev libdnnl-dev
  libopenmpi-dev openmpi-bin
  libcli11-dev libasio-dev
  libonnx-dev libonnx-testdata libprotobuf-dev
  libgloo-dev
  libcpp-httplib-dev wrk hey curl
  nlohmann-json3-dev libsimdjson-dev
  libglpk-dev
  debootstrap
  pybind11-dev python3-dev python3-numpy python3-pytest python3-pip python3-setuptools
  python3-venv
  clang clang-format libclang-rt-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "bootstrap: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
