#!/usr/bin/env bash
# scripts/device-env.sh: sourced by the device scripts (device-run.sh,
# device-perf.sh) on the GPU machine; not run by itself. Unpacks the carried
# Debian packages (.deps/debs: libmicrohttpd, cJSON, jemalloc, Check, PCRE2,
# libcurl; .deps/lib: their runtime libraries, scripts/device-deps.sh makes
# both) under /tmp, points pkg-config and the loader at them, and defines
# device_build DIR [make targets...] (CUDA sm_90a, Release, every core).
# Sets ROOT, DEPS, INFERD_LIBS, FIX (fixtures: ./shared-fixtures, else
# .deps/fixtures) and exports INFERD_FIXTURES and INFERD_LD_LIBRARY_PATH.
ROOT=$(pwd)
DEPS=/tmp/inferd-deps
rm -rf "$DEPS" && mkdir -p "$DEPS"
for f in .deps/debs/*.deb; do dpkg -x "$f" "$DEPS"; done
export PKG_CONFIG_SYSROOT_DIR=$DEPS
export PKG_CONFIG_PATH=$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS/usr/share/pkgconfig
export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH
if ! command -v pkg-config >/dev/null; then
    export PKG_CONFIG_EXECUTABLE=$DEPS/usr/bin/pkgconf
    ln -sf "$DEPS/usr/bin/pkgconf" "$DEPS/usr/bin/pkg-config"
    export PATH=$DEPS/usr/bin:$PATH
    export LD_LIBRARY_PATH=$DEPS/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# libmicrohttpd.pc names gnutls in Requires.private; only its runtime library
# (.deps/lib) is carried, so give pkg-config a stub entry for it.
printf 'Name: gnutls\nDescription: stub (runtime carried in .deps/lib)\nVersion: 3.7.9\nLibs:\nCflags:\n' \
    >"$DEPS/usr/lib/x86_64-linux-gnu/pkgconfig/gnutls.pc"
INFERD_LIBS=$DEPS/usr/lib/x86_64-linux-gnu:$ROOT/.deps/lib
export INFERD_LD_LIBRARY_PATH=$INFERD_LIBS
FIX=$ROOT/shared-fixtures
[[ -d $FIX ]] || FIX=$ROOT/.deps/fixtures
export INFERD_FIXTURES=$FIX

# device_build DIR [TARGET...]: configure + build (all targets when none named);
# DEVICE_CUDA_FLAGS adds nvcc flags (e.g. -DKC_NO_PDL_TRIGGER for an A/B build).
device_build() {
    local dir=$1
    shift
    local targets=()
    (($# > 0)) && targets=(--target "$@")
    LD_LIBRARY_PATH=$INFERD_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
        cmake -S . -B "$dir" -DINFERD_CUDA=ON -DINFERD_FIXTURES="$FIX" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_C_FLAGS="-I$DEPS/usr/include" -DCMAKE_LIBRARY_PATH="$DEPS/usr/lib/x86_64-linux-gnu" \
        -DCMAKE_INCLUDE_PATH="$DEPS/usr/include" -DCMAKE_CUDA_FLAGS="${DEVICE_CUDA_FLAGS:-}" \
        -DCMAKE_EXE_LINKER_FLAGS="-L$DEPS/usr/lib/x86_64-linux-gnu -Wl,-rpath-link,$ROOT/.deps/lib" &&
        cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
}
