#!/usr/bin/env bash
# scripts/device-tp.sh: tensor parallelism on a multi-GPU machine (issue 16),
# one command, a summary table at the end. Run from the repository root:
#
#   TP_PARTS="tests bench bench70" bash scripts/device-tp.sh   (logs under $OUT)
#
# NCCL comes from the machine (INFERD_NCCL_LIB, else the first libnccl.so.2
# found: the CUDA toolkit's, or PyTorch's wheel); NVLink multicast stays off
# (NCCL_NVLS_ENABLE=0). Parts:
#   tests:   the kernel comm / shard-op cases (INFERD_REQUIRE_NCCL=1), test_tp
#            on the GPUs (tp 1 via NCCL bitwise, tp 2 vs tp 1 on stories260K
#            and the dummy Llama-3 / Qwen2 / Qwen3 presets), the engine
#            suites at INFERD_TEST_TP=2, compute-sanitizer memcheck of test_tp;
#   bench:   `inferd bench latency` Llama-3-8B dummy at tp 1 and tp 2 (batch
#            1/16/64, graphs), and the eager per-op profile at tp 2 (the
#            all-reduce's share of a step);
#   bench70: Llama-3-70B-shaped dummy at tp 2 (batch 1/16/64).
set -euo pipefail
ROOT=$(pwd)
FINAL_OUT=${OUT:-$ROOT/device-logs}
OUT=/tmp/inferd-tp-logs
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL_OUT"
trap 'cp "$OUT/summary.txt" "$FINAL_OUT/" 2>/dev/null; tar czf "$FINAL_OUT/logs.tgz" -C /tmp inferd-tp-logs' EXIT
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
row() { printf "%-56s %s\n" "$1" "$2" | tee -a "$SUMMARY"; }
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0)) s]"; }
PARTS=${TP_PARTS:-tests bench bench70}
FAILED=0

source scripts/device-env.sh
export NCCL_NVLS_ENABLE=0
if [[ -z ${INFERD_NCCL_LIB:-} ]]; then
    INFERD_NCCL_LIB=$(find /usr/local/cuda*/lib* /usr/lib /opt -name 'libnccl.so.2' 2>/dev/null | head -1 || true)
fi
export INFERD_NCCL_LIB
row "NCCL library" "${INFERD_NCCL_LIB:-none found}"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
nvidia-smi topo -m >"$OUT/topo.txt" 2>&1 || true
NGPU=$(nvidia-smi -L | wc -l)
row "GPUs" "$NGPU"

BUILD=$ROOT/build-tp
if device_build "$BUILD" inferd test_tp test_cuda_kernels test_engine_stories test_engine_sampling test_stories_gpu test_graphs_gpu \
      >"$OUT/build.log" 2>&1
then row "build (CUDA sm_90a) $(el)" ok
else row "build" "FAILED (build.log)"; tail -30 "$OUT/build.log"; exit 1; fi
export LD_LIBRARY_PATH=$INFERD_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$BUILD/cli/inferd

if [[ " $PARTS " == *" tests "* ]]; then
    export INFERD_REQUIRE_NCCL=1
    if timeout 300 "$BUILD/tests/kernels/cuda/test_cuda_kernels" >"$OUT/kernels.log" 2>&1
    then row "test_cuda_kernels (every case, tp included) $(el)" PASS
    else row "test_cuda_kernels (exit $?)" "FAIL (kernels.log)"; FAILED=1; fi
    grep -E "comm|nccl|Checks|fail" "$OUT/kernels.log" | head -12
    for t in test_stories_gpu test_graphs_gpu; do
        if timeout 300 "$BUILD/tests/model/$t" >"$OUT/$t.log" 2>&1
        then row "$t $(el)" PASS
        else row "$t (exit $?)" "FAIL ($t.log)"; FAILED=1; fi
    done
    if INFERD_TEST_DEVICE=cuda timeout 500 "$BUILD/tests/model/test_tp" >"$OUT/test_tp.log" 2>&1
    then row "test_tp (INFERD_TEST_DEVICE=cuda) $(el)" PASS
    else row "test_tp (exit $?)" "FAIL (test_tp.log)"; FAILED=1; fi
    grep -E "vs|skipped|Checks|fail|Assert" "$OUT/test_tp.log" | head -20
    ((NGPU >= 2)) || row "engine suites at INFERD_TEST_TP=2" "not run: one GPU"
    for t in test_engine_stories test_engine_sampling; do
        ((NGPU >= 2)) || break
        if INFERD_TEST_DEVICE=cuda INFERD_TEST_TP=2 timeout 300 "$BUILD/tests/scheduler/$t" >"$OUT/$t-tp2.log" 2>&1
        then row "$t (cuda, INFERD_TEST_TP=2) $(el)" PASS
        else row "$t (cuda, tp 2, exit $?)" "FAIL ($t-tp2.log)"; FAILED=1; fi
        grep -E "Checks|fail|Assert" "$OUT/$t-tp2.log" | head -5
    done
    # the multi-host code path: two processes, one GPU each, against one process at tp 2
    if ((NGPU >= 2)); then
        GEN=(generate --model "$FIX/models/stories260K" --device cuda --tensor-parallel-size 2 --temperature 0
             --max-tokens 96 --prompt "Once upon a time" --log-level warn)
        "$BIN" "${GEN[@]}" 2>"$OUT/gen-tp2-one.err" | grep -v "prompt tokens:" >"$OUT/gen-tp2-one.txt" || true
        DIST=(--nnodes 2 --master-addr 127.0.0.1 --master-port 29555 --dist-timeout 120)
        "$BIN" "${GEN[@]}" "${DIST[@]}" --node-rank 1 --device-id 1 >"$OUT/gen-node1.txt" 2>&1 &
        NODE1=$!
        "$BIN" "${GEN[@]}" "${DIST[@]}" --node-rank 0 --device-id 0 2>"$OUT/gen-node0.err" \
            | grep -v "prompt tokens:" >"$OUT/gen-tp2-two.txt" || true
        wait $NODE1 && n1=0 || n1=$?
        if ((n1 == 0)) && [[ -s $OUT/gen-tp2-one.txt ]] && cmp -s "$OUT/gen-tp2-one.txt" "$OUT/gen-tp2-two.txt"
        then row "generate tp 2: two processes == one process $(el)" PASS
        else row "generate tp 2 two processes (node 1 exit $n1)" "FAIL (gen-*.txt)"; FAILED=1; fi
        head -c 300 "$OUT/gen-tp2-two.txt"; echo
    fi
    CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    if INFERD_TEST_DEVICE=cuda timeout 300 "$CS" --tool memcheck --report-api-errors no --error-exitcode 99 \
          "$BUILD/tests/model/test_tp" >"$OUT/sanitizer-tp.log" 2>&1
    then row "compute-sanitizer memcheck test_tp $(el)" "PASS $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-tp.log" | tail -1)"
    else row "compute-sanitizer memcheck test_tp (exit $?)" "FAIL $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-tp.log" | tail -1)"; FAILED=1; fi
fi

BL=(bench latency --load-format dummy --device cuda --input-len 512 --output-len 64 --num-iters-warmup 1
    --num-iters 2 --max-num-batched-tokens 8192)
if ((NGPU < 2)); then
    [[ " $PARTS " == *" bench"* ]] && row "bench parts" "not run: one GPU"
    PARTS=${PARTS//bench70/}
    PARTS=${PARTS//bench/}
fi
if [[ " $PARTS " == *" bench "* ]]; then
    for tp in 1 2; do
        if timeout 240 "$BIN" "${BL[@]}" --model configs/models/llama3-8b --batch-size 1,16,64 \
              --tensor-parallel-size $tp --output-json "$OUT/bench-8b-tp$tp.json" >"$OUT/bench-8b-tp$tp.txt" 2>&1
        then row "bench latency llama3-8b dummy tp $tp $(el)" ok
        else row "bench latency llama3-8b tp $tp (exit $?)" "FAILED (bench-8b-tp$tp.txt)"; FAILED=1; fi
        grep -E "^\||device:|ceilings|tensor parallel|memory" "$OUT/bench-8b-tp$tp.txt" | head -30
    done
    if timeout 200 "$BIN" "${BL[@]}" --model configs/models/llama3-8b --batch-size 1,16 --num-iters 1 \
          --tensor-parallel-size 2 --profile-ops >"$OUT/profile-8b-tp2.txt" 2>&1
    then row "bench latency --profile-ops llama3-8b tp 2 $(el)" ok
    else row "bench latency --profile-ops tp 2 (exit $?)" "FAILED (profile-8b-tp2.txt)"; FAILED=1; fi
    grep -E "^\||ops of" "$OUT/profile-8b-tp2.txt" | head -60
fi

if [[ " $PARTS " == *" bench70 "* ]]; then
    if timeout 400 "$BIN" "${BL[@]}" --model configs/models/llama3-70b --batch-size 1,16,64 \
          --tensor-parallel-size 2 --max-model-len 4096 --output-json "$OUT/bench-70b-tp2.json" \
          >"$OUT/bench-70b-tp2.txt" 2>&1
    then row "bench latency llama3-70b dummy tp 2 $(el)" ok
    else row "bench latency llama3-70b tp 2 (exit $?)" "FAILED (bench-70b-tp2.txt)"; FAILED=1; fi
    grep -E "^\||device:|ceilings|tensor parallel|memory" "$OUT/bench-70b-tp2.txt" | head -30
fi
echo "=== summary"
cat "$SUMMARY"
exit $FAILED
