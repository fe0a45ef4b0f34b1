#!/usr/bin/env bash
# scripts/setup.sh: install the build dependencies from Debian's packages;
# with --test also what the tests need (Node.js + npm for the official openai
# client test; clang, its runtime libraries (libFuzzer, sanitizers) and
# OpenMP for the libFuzzer harnesses of scripts/fuzz.sh; g++ for the CUDA
# kernels' host emulator, tests/kernels/cuda/emu). Idempotent:
# returns quickly when everything is installed.
#   bash scripts/setup.sh [--test]
set -euo pipefail

# libpython3-dev + python3-jinja2: chat templates are rendered by jinja2 embedded in the
# server (INFERD_JINJA); the build, the server and the tests all need them.
PKGS=(cmake gcc make pkg-config libmicrohttpd-dev libcjson-dev libjemalloc-dev check
      libpcre2-dev libcurl4-openssl-dev libunistring-dev python3 libpython3-dev python3-jinja2)
if [[ ${1:-} == --test ]]; then
    PKGS+=(nodejs npm clang libclang-rt-dev libomp-dev g++)
fi

missing=()
for p in "${PKGS[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
# nodejs/npm may come from elsewhere (e.g. a preinstalled Node): accept working binaries.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
    tmp=()
    for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || tmp+=("$p"); done
    missing=("${tmp[@]+"${tmp[@]}"}")
fi
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "setup: all dependencies present"
fi
