#!/usr/bin/env bash
# scripts/test.sh: set up, configure, build and run every test, twice: a
# normal build (build/) and a sanitizer build (build-asan/, ASan + UBSan);
# then the CUDA kernel tests in the host emulator and the fuzz harnesses.
# Tests needing a GPU are labelled "gpu" and skip cleanly without one.
# Fixtures: $INFERD_FIXTURES or ../shared/fixtures.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
JOBS=${JOBS:-$(nproc)}
FIX=${INFERD_FIXTURES:-$ROOT/../shared/fixtures}

bash scripts/setup.sh --test

run_build() {
    local dir=$1; shift
    cmake -S . -B "$dir" -DINFERD_WERROR=ON -DINFERD_FIXTURES="$FIX" "$@"
    cmake --build "$dir" -j "$JOBS"
    (cd "$dir" && ctest --output-on-failure -j "$JOBS" --timeout 900)
}

echo "=== normal build"
run_build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "=== sanitizer build (ASan + UBSan)"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
run_build build-asan -DINFERD_SANITIZE=ON -DINFERD_CUDA=OFF -DCMAKE_BUILD_TYPE=Debug
# the CUDA kernels' tests against their CPU twins in the host emulator
# (tests/kernels/cuda/emu: the kernels' own source, no GPU needed; quick
# sizes); EMU_TESTS=0 skips it
if [[ ${EMU_TESTS:-1} != 0 ]]; then
    echo "=== CUDA kernel tests in the host emulator"
    EMU_BUILD=$ROOT/build-emu bash tests/kernels/cuda/emu/emu-test.sh
fi
# libFuzzer harnesses (tests/fuzz), 30 s each, when clang is there
# (setup.sh --test installs it); FUZZ_SECONDS=0 skips them.
if [[ ${FUZZ_SECONDS:-30} != 0 ]] && command -v clang >/dev/null 2>&1; then
    echo "=== fuzz (libFuzzer, ${FUZZ_SECONDS:-30} s per harness)"
    # known reproducers must stay fixed; a crash newly found in 30 s is
    # reported in the table (and kept under build-fuzz/artifacts) without
    # failing the run
    FUZZ_NEW_FATAL=${FUZZ_NEW_FATAL:-0} bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
fi
echo "=== all tests passed"
