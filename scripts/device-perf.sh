#!/usr/bin/env bash
# scripts/device-perf.sh: the decode-graph + `inferd bench latency` pass on
# the GPU machine (issue 12), one command. From the repository root:
#
#   bash scripts/device-perf.sh          (device tool: carry [".deps"]; logs in $OUT)
#
# Steps, each checked (a failed test is reported and the rest still runs;
# the exit status is non-zero when any step failed):
#   1. unpack the carried Debian packages (.deps, as scripts/device-run.sh);
#   2. build only what this pass needs (CUDA, sm_90a, Release);
#   3. test_graphs_gpu: graphs vs --enforce-eager bitwise on stories260K,
#      golden tokens through graphs, ceilings;
#   4. engine invariance (test_engine_stories) and test_stories_gpu with
#      INFERD_TEST_DEVICE=cuda, graphs on;
#   5. `inferd bench latency` on Llama-3-8B-shaped dummy weights, graphs on
#      and --enforce-eager, batch x context table;
#   6. compute-sanitizer memcheck of test_graphs_gpu (graph replays).
# Before 3, the small-batch GEMM pass (issue 12 item 4): test_cuda_kernels
# (every CUDA op vs its CPU twin, the GEMV forced for n = 1..16 with and
# without PDL) with INFERD_TEST_GEMM_BENCH=1 (cuBLASLt vs GEMV vs GEMV+PDL
# on the Llama-3-8B shapes -> gemm-bench.txt) and its memcheck; after 5,
# `bench latency` variants (INFERD_GEMV_MAX_N=0: cuBLASLt only; GEMV
# without PDL) and the --profile-ops per-op tables (-> profile-ops.txt).
# DEVICE_PERF_ROWS=long skips 3, 4 and 6 and benchmarks instead the long
# rows: batch 256 at 1k context and batch 1 at 8k (llama3-8b) and 32k
# (llama3.1-8b: rope scaling) context, graphs on and --enforce-eager.
# DEVICE_PERF_ROWS=wave runs the acceptance tables of issues 12 and 13
# instead (scripts/device-wave.sh: decode attention split variants, the
# batch x context table graphs and eager, batch 256 at 1k and batch 1 at
# 32k, prefill 512..16k, HF transformers prefill beside it, start-up time).
# DEVICE_PERF_QUICK=1 runs only the dense kernel cases (CK_RUN_CASE=dense)
# and skips the 8k row and the memcheck of test_graphs_gpu (fits one
# 10-minute device call with the GEMM pass).
set -uo pipefail
QUICK=${DEVICE_PERF_QUICK:-0}
LONG=$([[ ${DEVICE_PERF_ROWS:-} == long ]] && echo 1 || echo 0)
WAVE=$([[ ${DEVICE_PERF_ROWS:-} == wave ]] && echo 1 || echo 0)
ROOT=$(pwd)
# logs go to /tmp and come back packed (the device tool returns at most 8
# files): $OUT/logs.tgz, $OUT/summary.txt and the two bench tables
FINAL_OUT=${OUT:-$ROOT/device-logs}
OUT=/tmp/inferd-perf-logs
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL_OUT"
trap 'cp "$OUT"/summary.txt "$OUT"/bench-latency-graphs.txt "$OUT"/bench-latency-eager.txt "$OUT"/gemm-bench.txt "$OUT"/profile-ops.txt "$OUT"/variants.txt "$FINAL_OUT/" 2>/dev/null; tar czf "$FINAL_OUT/logs.tgz" -C /tmp inferd-perf-logs' EXIT
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
FAILED=0
row() { printf "%-58s %s\n" "$1" "$2" | tee -a "$SUMMARY"; [[ $2 == ok* || $2 == PASS* ]] || FAILED=1; }
T0=$(date +%s)
el() { echo "$(( $(date +%s) - T0 ))s"; }

# 1. dependencies
source scripts/device-env.sh
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv; nvcc --version | tail -2; } >"$OUT/device.txt" 2>&1

# 2. build (DEVICE_PERF_BUILD=DIR: use DIR as built, e.g. by scripts/gpu-test.sh in the same call)
BUILD=$ROOT/build-gpu
if [[ -n ${DEVICE_PERF_BUILD:-} ]]; then
    BUILD=$ROOT/$DEVICE_PERF_BUILD
    if [[ -x $BUILD/cli/inferd ]]; then row "build: using $DEVICE_PERF_BUILD as built" ok
    else row "build: $DEVICE_PERF_BUILD" "FAILED (no cli/inferd)"; exit 1; fi
elif device_build "$BUILD" inferd test_graphs_gpu test_engine_stories test_engine_sampling test_stories_gpu test_cuda_kernels \
      >"$OUT/build.log" 2>&1
then row "build (CUDA sm_90a) $(el)" ok
else row "build (CUDA sm_90a)" "FAILED (build.log)"; tail -30 "$OUT/build.log"; exit 1; fi
export LD_LIBRARY_PATH=$INFERD_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$BUILD/cli/inferd

if [[ $WAVE == 1 ]]; then
    source scripts/device-wave.sh
    echo "=== summary"; cat "$SUMMARY"; exit $FAILED
fi

if [[ $LONG == 1 ]]; then
    for v in graphs eager; do
        extra=()
        [[ $v == eager ]] && extra=(--enforce-eager)
        : >"$OUT/bench-latency-$v.txt"
        for spec in "llama3-8b 256 1024 32 1" "llama3-8b 1 8000 64 1" "llama3.1-8b 1 32000 64 1"; do
            read -r cfg b in o it <<<"$spec"
            if timeout 150 "$BIN" bench latency --model configs/models/$cfg --load-format dummy --device cuda \
                  --batch-size "$b" --input-len "$in" --output-len "$o" --num-iters-warmup 0 --num-iters "$it" \
                  --max-num-seqs "$b" --max-num-batched-tokens 8192 "${extra[@]}" >>"$OUT/bench-latency-$v.txt" 2>&1
            then row "bench latency $cfg b$b in$in ($v) $(el)" ok
            else row "bench latency $cfg b$b in$in ($v, exit $?)" FAILED; fi
        done
        grep -E "^\| [0-9]|ceilings|graphs:|capture" "$OUT/bench-latency-$v.txt"
    done
    echo "=== summary"; cat "$SUMMARY"; exit $FAILED
fi

# 2b. kernels vs CPU twins (GEMV included), GEMM timings, memcheck of the kernels
KT=$BUILD/tests/kernels/cuda/test_cuda_kernels
CASE=()
[[ $QUICK == 1 ]] && CASE=(CK_RUN_CASE=dense)
if env "${CASE[@]}" INFERD_TEST_GEMM_BENCH=1 timeout 300 "$KT" >"$OUT/test_cuda_kernels.log" 2>&1
then row "test_cuda_kernels (GEMV n=1..16, PDL on/off) $(el)" PASS
else row "test_cuda_kernels (exit $?)" "FAIL (test_cuda_kernels.log)"; fi
grep -E "^GEMM_BENCH" "$OUT/test_cuda_kernels.log" | sed 's/^GEMM_BENCH //' >"$OUT/gemm-bench.txt"
grep -E "matmul|logits|gemv|Checks|FAIL" "$OUT/test_cuda_kernels.log" | head -20
cat "$OUT/gemm-bench.txt"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if env "${CASE[@]}" INFERD_TEST_QUICK=1 timeout 240 "$CS" --tool memcheck --report-api-errors no --error-exitcode 99 \
      "$KT" >"$OUT/sanitizer-kernels.log" 2>&1
then row "compute-sanitizer memcheck test_cuda_kernels $(el)" "PASS $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-kernels.log" | tail -1)"
else row "compute-sanitizer memcheck kernels (exit $?)" "FAIL $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-kernels.log" | tail -1)"; fi

# 3. graphs vs eager
if timeout 240 "$BUILD/tests/model/test_graphs_gpu" >"$OUT/test_graphs_gpu.log" 2>&1
then row "test_graphs_gpu (graphs == eager bitwise) $(el)" PASS
else row "test_graphs_gpu (exit $?)" "FAIL (test_graphs_gpu.log)"; fi
grep -E "graphs:|batch|golden|ceilings|replays|Checks|fail|Assert" "$OUT/test_graphs_gpu.log" | head -30

# 3b. the same with the GEMV forced on stories260K's weights (they are
# under the 1 MiB floor of the default rule): GEMV + PDL inside the graphs
if INFERD_GEMV_MIN_BYTES=0 timeout 240 "$BUILD/tests/model/test_graphs_gpu" >"$OUT/test_graphs_gpu_gemv.log" 2>&1
then row "test_graphs_gpu, GEMV forced (INFERD_GEMV_MIN_BYTES=0) $(el)" PASS
else row "test_graphs_gpu GEMV forced (exit $?)" "FAIL (test_graphs_gpu_gemv.log)"; fi
grep -E "Checks|fail|Assert" "$OUT/test_graphs_gpu_gemv.log" | head -8

# 4. engine invariance and stories260K on the GPU, graphs on
for t in scheduler/test_engine_stories model/test_stories_gpu; do
    if (cd "$BUILD" && INFERD_TEST_DEVICE=cuda INFERD_BIN=$BIN timeout 300 "$BUILD/tests/$t") >"$OUT/$(basename $t).log" 2>&1
    then row "$(basename $t) (INFERD_TEST_DEVICE=cuda, graphs on) $(el)" PASS
    else row "$(basename $t) (exit $?)" "FAIL ($(basename $t).log)"; fi
    grep -E "Checks|fail|Assert" "$OUT/$(basename $t).log" | head -5
done

# 5. bench latency, graphs vs eager
BL=(bench latency --model configs/models/llama3-8b --load-format dummy --device cuda
    --batch-size 1,16,64 --input-len 512,1024 --output-len 64 --num-iters-warmup 1 --num-iters 2
    --max-num-batched-tokens 8192 --log-level info)
for v in graphs eager; do
    extra=()
    [[ $v == eager ]] && extra=(--enforce-eager)
    if timeout 200 "$BIN" "${BL[@]}" "${extra[@]}" --output-json "$OUT/bench-latency-$v.json" >"$OUT/bench-latency-$v.txt" 2>&1
    then row "bench latency llama3-8b dummy ($v) $(el)" ok
    else row "bench latency ($v, exit $?)" "FAILED (bench-latency-$v.txt)"; fi
    grep -E "^\||device:|ceilings|graphs|steps:|capture" "$OUT/bench-latency-$v.txt"
done
# 5b. small-batch GEMM variants (graphs on): cuBLASLt only, GEMV without
# PDL, the default (GEMV + PDL, above); then the per-op profiles (eager)
: >"$OUT/variants.txt"
BV=(bench latency --model configs/models/llama3-8b --load-format dummy --device cuda
    --batch-size 1,4,16 --input-len 512 --output-len 64 --num-iters-warmup 1 --num-iters 2
    --max-num-batched-tokens 8192)
for v in "cublas INFERD_GEMV_MAX_N=0" "gemv-nopdl INFERD_GEMV_PDL=0" "gemv-v1 INFERD_GEMV_VARIANT=1" \
         "gemv-max8 INFERD_GEMV_MAX_N=8" "default INFERD_GEMV_PDL=1"; do
    read -r name envs <<<"$v"
    echo "=== $name ($envs)" >>"$OUT/variants.txt"
    if env "$envs" timeout 120 "$BIN" "${BV[@]}" >>"$OUT/variants.txt" 2>&1
    then row "bench latency variant $name $(el)" ok
    else row "bench latency variant $name (exit $?)" FAILED; fi
done
grep -E "^===|^\| [0-9]" "$OUT/variants.txt"
: >"$OUT/profile-ops.txt"
for v in "cublas INFERD_GEMV_MAX_N=0" "default INFERD_GEMV_PDL=1"; do
    read -r name envs <<<"$v"
    echo "=== $name ($envs) --profile-ops" >>"$OUT/profile-ops.txt"
    if env "$envs" timeout 120 "$BIN" bench latency --model configs/models/llama3-8b --load-format dummy \
          --device cuda --batch-size 1,16 --input-len 512 --output-len 64 --num-iters-warmup 1 --num-iters 1 \
          --max-num-batched-tokens 8192 --profile-ops >>"$OUT/profile-ops.txt" 2>&1
    then row "bench latency --profile-ops $name $(el)" ok
    else row "bench latency --profile-ops $name (exit $?)" FAILED; fi
done
grep -vE "^\[|^$" "$OUT/profile-ops.txt" | grep -E "^===|^\||ops of" | head -80

if [[ $QUICK == 1 ]]; then echo "=== summary"; cat "$SUMMARY"; exit $FAILED; fi
# batch 1 at a long context, graphs only (prefill of 8k tokens)
if timeout 90 "$BIN" bench latency --model configs/models/llama3-8b --load-format dummy --device cuda \
      --batch-size 1 --input-len 8000 --output-len 32 --num-iters-warmup 1 --num-iters 1 \
      --max-num-batched-tokens 8192 >"$OUT/bench-latency-8k.txt" 2>&1
then row "bench latency batch 1 x 8k context (graphs) $(el)" ok
else row "bench latency 8k (exit $?)" "FAILED (bench-latency-8k.txt)"; fi
grep -E "^\| 1 " "$OUT/bench-latency-8k.txt"

# 6. compute-sanitizer memcheck of the graph path
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if INFERD_TEST_QUICK=1 timeout 240 "$CS" --tool memcheck --report-api-errors no --error-exitcode 99 \
      "$BUILD/tests/model/test_graphs_gpu" >"$OUT/sanitizer-graphs.log" 2>&1
then row "compute-sanitizer memcheck test_graphs_gpu $(el)" "PASS $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-graphs.log" | tail -1)"
else row "compute-sanitizer memcheck (exit $?)" "FAIL $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-graphs.log" | tail -1)"; fi
echo "=== summary"
cat "$SUMMARY"
exit $FAILED
