#!/usr/bin/env bash
# tests/kernels/cuda/emu/emu-test.sh: build the CUDA kernel test against the
# host emulator (kemu.h) and run it. See docs/DEVICE.md section 5.
#   bash tests/kernels/cuda/emu/emu-test.sh       (INFERD_TEST_QUICK=1)
#   EMU_FULL=1 bash tests/kernels/cuda/emu/emu-test.sh   (every case; slower)
#   EMU_SANITIZE=1 ...   (ASan + UBSan on the emulated kernels: device
#                         memory is host memory here, so overruns are caught)
# Builds into build-emu/ with at most 2 compiler jobs; needs g++, Check, cJSON.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../../.." && pwd)
EMU=$ROOT/tests/kernels/cuda/emu
B=${EMU_BUILD:-$ROOT/build-emu}
SAN=()
if [[ ${EMU_SANITIZE:-0} == 1 ]]; then
    B=${EMU_BUILD:-$ROOT/build-emu-san}
    # shellcheck disable=SC2054
    SAN=(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:detect_stack_use_after_return=0}
fi
mkdir -p "$B/src" "$B/obj"
CF=(-O1 -g -ffp-contract=off -I"$ROOT" -I"$ROOT/tests" -I"$EMU/include" -DINFERD_HAVE_CUDA=1 -fopenmp -D_GNU_SOURCE "${SAN[@]}")
jobs=()
for f in "$ROOT"/kernels/cuda/*.cu; do
    out=$B/src/$(basename "${f%.cu}").cpp
    python3 "$EMU/rewrite.py" "$f" "$out"
    jobs+=("g++ -std=c++17 ${CF[*]} -Wall -Wno-unused-function -Wno-unknown-pragmas -c $out -o $B/obj/$(basename "$out").o")
done
# objects named after the path (kernels/comm.c and kernels/cpu/comm.c differ)
for f in "$ROOT"/common/*.c "$ROOT"/kernels/*.c "$ROOT"/kernels/cpu/*.c "$ROOT"/tests/test_util.c "$ROOT"/tests/kernels/cuda/*.c; do
    rel=${f#"$ROOT"/}
    jobs+=("gcc -std=c11 ${CF[*]} -Wall -c $f -o $B/obj/${rel//\//_}.o")
done
printf '%s\n' "${jobs[@]}" | xargs -P 2 -I{} sh -c '{}'
# shellcheck disable=SC2046
g++ -fopenmp "${SAN[@]}" -o "$B/test_cuda_kernels_emu" "$B"/obj/*.o $(pkg-config --libs check libcjson) -lpthread -lm
cd "$B"
if [[ ${EMU_FULL:-0} == 1 ]]; then unset INFERD_TEST_QUICK; else export INFERD_TEST_QUICK=1; fi
./test_cuda_kernels_emu
