#!/usr/bin/env bash
# Installs every Debian package sluice needs to build, test and run, and
# from the npm registry the browser tests' driver (playwright-core, the
# exact version of tests/browser/package-lock.json; the browser is
# Debian's chromium) and OpenAI's Node SDK for the client tests
# (tests/clients/package-lock.json). Idempotent: what is present is skipped and nothing is
# printed.
# Usage: scripts/install-deps.sh            (as root, or with sudo available)
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  libssl-dev libxxhash-dev libsqlite3-dev libucx-dev
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libcpp-httplib-dev libboost1.81-dev
  libopenblas-pthread-dev libpng-dev libyaml-cpp-dev
  python3-dev pybind11-dev python3-pybind11 python3-numpy python3-torch python3-pytest libdlpack-dev
  clang-format-16 clang-16 libclang-rt-16-dev libfuzzer-16-dev llvm-16 lld
  ffmpeg nodejs
  iproute2 iptables libnetfilter-queue-dev gdb mmdebstrap etcd-server gnuplot-nox prometheus
  chromium
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
# npm comes with some builds of nodejs; Debian's own nodejs needs its npm.
command -v npm >/dev/null || missing+=(npm)

SUDO=""
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

browser="$(cd "$(dirname "$0")/.." && pwd)/tests/browser"
if [ ! -f "$browser/node_modules/playwright-core/package.json" ]; then
  echo "install-deps: installing playwright-core (npm) in tests/browser" >&2
  npm ci --prefix "$browser" --no-audit --no-fund --loglevel=error >/dev/null
fi
clients="$(dirname "$browser")/clients"
if [ ! -f "$clients/node_modules/openai/package.json" ]; then
  echo "install-deps: installing OpenAI's Node SDK (npm) in tests/clients" >&2
  npm ci --prefix "$clients" --no-audit --no-fund --loglevel=error >/dev/null
fi
