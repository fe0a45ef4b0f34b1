#!/usr/bin/env bash
# scripts/device-deps.sh: fill .deps/ (git-ignored) with what the GPU machine
# lacks, to carry there with the device tool (carry: [".deps"]):
#   .deps/debs/      Debian packages for the build (unpacked there with dpkg -x)
#   .deps/lib/       runtime libraries those packages pull in (from this machine)
#   .deps/fixtures/  a copy of the test fixtures (../shared does not travel)
# Run here, from anywhere; idempotent. See docs/DEVICE.md.
set -euo pipefail
cd "$(dirname "$0")/.."
FIX=${INFERD_FIXTURES:-$(pwd)/../shared/fixtures}
mkdir -p .deps/debs .deps/lib .deps/fixtures
bash scripts/setup.sh
PKGS=(libmicrohttpd-dev libmicrohttpd12 libcjson-dev libcjson1 libjemalloc-dev libjemalloc2 check
      libsubunit0 libsubunit-dev libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
      libcurl4-openssl-dev libcurl4 libunistring-dev libunistring2 pkgconf pkgconf-bin libpkgconf3 pkg-config)
(cd .deps/debs && apt-get download "${PKGS[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
# runtime dependencies of libcurl and libmicrohttpd, minus the C library itself
for lib in $( (ldd /usr/lib/x86_64-linux-gnu/libcurl.so.4; ldd /usr/lib/x86_64-linux-gnu/libmicrohttpd.so.12) |
              awk '$3 ~ /^\// {print $3}' | sort -u); do
    case $(basename "$lib") in libc.so.6 | libm.so.6 | libresolv.so.2) ;; *) cp -L "$lib" .deps/lib/ ;; esac
done
if [[ -d $FIX ]]; then
    mkdir -p .deps/fixtures/tokenizers
    cp -r "$FIX/golden" "$FIX/models" .deps/fixtures/
    cp -r "$FIX/tokenizers/llama2" "$FIX/tokenizers/llama3" "$FIX/tokenizers/llama3-nobos" .deps/fixtures/tokenizers/
else
    echo "device-deps: fixtures not found at $FIX (GPU tests that need them will skip)" >&2
fi
echo "device-deps: $(ls .deps/debs | wc -l) packages, $(ls .deps/lib | wc -l) libraries, $(du -sh .deps | cut -f1) in .deps"
