#!/usr/bin/env bash
# scripts/setup.sh: install the build dependencies from Debian's packages;
# with --test also what the tests need (Node.js + npm for the official openai
# client test). Idempotent: returns quickly when everything is installed.
#   bash scripts/setup.sh [--test]
set -euo pipefail

PKGS=(cmake gcc make pkg-config libmicrohttpd-dev libcjson-dev libjemalloc-dev check
      libpcre2-dev libcurl4-openssl-dev libunistring-dev python3)
if [[ ${1:-} == --test ]]; then
    PKGS+=(nodejs npm)
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
