#!/usr/bin/env bash
# scripts/device-tp.sh: tensor parallelism on a multi-GPU machine (issue 16),
# one command, a summary table at the end. Run from the repository root:
#
#   TP_PARTS="tests bench bench70" bash scripts/device-tp.sh   (logs under $OUT)
#
# NCCL comes from the machine (INFERD_NCCL_LIB, else the first libnccl.so.2
# found: the CUDA toolkit's, or PyTorch's wheel); NVLink multicast stays off
# (NCCL_NVLS_ENABLE=0). Parts:
#   tests:   single + tptests;
#   single:  every kernel case (comm / shard ops included, INFERD_REQUIRE_NCCL=1),
#            test_stories_gpu, test_graphs_gpu;
#   tptests: test_tp on the GPUs (tp 1 via NCCL bitwise, tp 2 vs tp 1 on stories260K
#            and the dummy Llama-3 / Qwen2 / Qwen3 presets), the engine
#            suites at INFERD_TEST_TP=2, two processes (the multi-node path)
#            against one;
#   tpsan:   compute-sanitizer memcheck of test_tp (tests includes it);
#   bench:   `inferd bench latency` Llama-3-8B dummy at tp 1 and tp 2 (batch
#            1/16/64, graphs), and the eager per-op profile at tp 2 (the
#            all-reduce's share of a step);
#   bench2:  the tp 2 rows of bench alone; profile: its --profile-ops part;
#   bench70: Llama-3-70B-shaped dummy at tp 2 (batch 1/16/64);
#   invar:   test_engine_stories (core) at tp 2 / 1 under variants that
#            each remove one source of batch-dependent rounding;
#   diag:    tp 2 generate, eager and graphs, short timeouts, cuda-gdb
#            backtraces of a run that hangs.
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

# diag: tp 2 generate on stories260K, --enforce-eager and with graphs, each
# under a short timeout (NCCL_DEBUG=INFO); a run that hangs gets cuda-gdb's
# backtraces of every thread (-> diag-*.bt)
if [[ " $PARTS " == *" diag "* ]] && ((NGPU >= 2)); then
    for mode in eager graphs; do
        extra=(); [[ $mode == eager ]] && extra=(--enforce-eager)
        NCCL_DEBUG=INFO "$BIN" generate --model "$FIX/models/stories260K" --device cuda --tensor-parallel-size 2 \
            --temperature 0 --max-tokens 32 --prompt "Once upon a time" "${extra[@]}" >"$OUT/diag-$mode.txt" 2>&1 &
        pid=$!
        for _ in $(seq 1 40); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
        if kill -0 $pid 2>/dev/null; then
            timeout 60 cuda-gdb -p $pid -batch -ex "info threads" -ex "thread apply all bt 12" \
                >"$OUT/diag-$mode.bt" 2>&1 || true
            kill -9 $pid 2>/dev/null || true
            row "diag generate tp 2 $mode $(el)" "HUNG (diag-$mode.bt)"
            grep -E "^#|^Thread|^\*" "$OUT/diag-$mode.bt" | grep -vE "libc|pthread_cond|clone|start_thread" | head -40 || true
        else
            wait $pid && rc=0 || rc=$?
            row "diag generate tp 2 $mode (exit $rc) $(el)" "$(tail -c 120 "$OUT/diag-$mode.txt" | tr '\n' ' ')"
        fi
        grep -E "NCCL WARN|Channel|via P2P|Init COMPLETE" "$OUT/diag-$mode.txt" | head -8 || true
    done
fi

# invar: the engine's concurrent-vs-alone test at tp 2 (and tp 1) under
# variants that take one source of batch-dependent rounding away each:
# decode attention never split (INFERD_ATTN_MIN_CHUNK), one NCCL algorithm
# and protocol for every size; twice at the default (same failure = no race)
if [[ " $PARTS " == *" invar "* ]] && ((NGPU >= 2)); then
    ES=$BUILD/tests/scheduler/test_engine_stories
    # TP_INVAR: variants, one "TP ENV..." a line
    VARIANTS=${TP_INVAR:-$'2 default\n2 default-again\n1 default\n2 INFERD_ATTN_MIN_CHUNK=1000000\n2 NCCL_ALGO=Ring NCCL_PROTO=Simple'}
    while read -r v; do
        read -r tp envs <<<"$v"
        log=$OUT/invar-tp$tp-$(echo "$envs" | tr ' =' '_-').log
        [[ $envs == default* ]] && envs=""
        if env $envs INFERD_TEST_DEVICE=cuda INFERD_TEST_TP=$tp CK_RUN_CASE=core timeout 60 "$ES" >"$log" 2>&1
        then row "invar tp $tp ${envs:-default} $(el)" PASS
        else row "invar tp $tp ${envs:-default} $(el)" "FAIL $(grep -m1 -oE 'concurrent: prompt [0-9]+ token [0-9]+: [0-9]+ vs [0-9]+' "$log" || true)"; fi
    done <<<"$VARIANTS"
fi

if [[ " $PARTS " == *" tests "* ]]; then
    export INFERD_REQUIRE_NCCL=1
fi
if [[ " $PARTS " == *" tests "* || " $PARTS " == *" single "* ]]; then
    if timeout 300 "$BUILD/tests/kernels/cuda/test_cuda_kernels" >"$OUT/kernels.log" 2>&1
    then row "test_cuda_kernels (every case, tp included) $(el)" PASS
    else row "test_cuda_kernels (exit $?)" "FAIL (kernels.log)"; FAILED=1; fi
    grep -E "comm|nccl|Checks|fail" "$OUT/kernels.log" | head -12 || true
    for t in test_stories_gpu test_graphs_gpu; do
        if timeout 300 "$BUILD/tests/model/$t" >"$OUT/$t.log" 2>&1
        then row "$t $(el)" PASS
        else row "$t (exit $?)" "FAIL ($t.log)"; FAILED=1; fi
    done
fi
if [[ " $PARTS " == *" tests "* || " $PARTS " == *" tptests "* ]]; then
    export INFERD_REQUIRE_NCCL=1
    if INFERD_TEST_DEVICE=cuda timeout 200 "$BUILD/tests/model/test_tp" >"$OUT/test_tp.log" 2>&1
    then row "test_tp (INFERD_TEST_DEVICE=cuda) $(el)" PASS
    else row "test_tp (exit $?)" "FAIL (test_tp.log)"; FAILED=1; fi
    grep -E "vs|skipped|Checks|fail|Assert" "$OUT/test_tp.log" | head -20 || true
    ((NGPU >= 2)) || row "engine suites at INFERD_TEST_TP=2" "not run: one GPU"
    for t in test_engine_stories test_engine_sampling; do
        ((NGPU >= 2)) || break
        if INFERD_TEST_DEVICE=cuda INFERD_TEST_TP=2 timeout 150 "$BUILD/tests/scheduler/$t" >"$OUT/$t-tp2.log" 2>&1
        then row "$t (cuda, INFERD_TEST_TP=2) $(el)" PASS
        else row "$t (cuda, tp 2, exit $?)" "FAIL ($t-tp2.log)"; FAILED=1; fi
        grep -E "Checks|fail|Assert" "$OUT/$t-tp2.log" | head -5 || true
    done
    # the multi-host code path: two processes, one GPU each, against one process at tp 2
    if ((NGPU >= 2)); then
        GEN=(generate --model "$FIX/models/stories260K" --device cuda --tensor-parallel-size 2 --temperature 0
             --max-tokens 96 --prompt "Once upon a time" --log-level warn)
        timeout 90 "$BIN" "${GEN[@]}" 2>"$OUT/gen-tp2-one.err" | grep -v "prompt tokens:" >"$OUT/gen-tp2-one.txt" || true
        DIST=(--nnodes 2 --master-addr 127.0.0.1 --master-port 29555 --dist-timeout 120)
        timeout 90 "$BIN" "${GEN[@]}" "${DIST[@]}" --node-rank 1 --device-id 1 >"$OUT/gen-node1.txt" 2>&1 &
        NODE1=$!
        timeout 90 "$BIN" "${GEN[@]}" "${DIST[@]}" --node-rank 0 --device-id 0 2>"$OUT/gen-node0.err" \
            | grep -v "prompt tokens:" >"$OUT/gen-tp2-two.txt" || true
        wait $NODE1 && n1=0 || n1=$?
        if ((n1 == 0)) && [[ -s $OUT/gen-tp2-one.txt ]] && cmp -s "$OUT/gen-tp2-one.txt" "$OUT/gen-tp2-two.txt"
        then row "generate tp 2: two processes == one process $(el)" PASS
        else row "generate tp 2 two processes (node 1 exit $n1)" "FAIL (gen-*.txt)"; FAILED=1; fi
        head -c 300 "$OUT/gen-tp2-two.txt" || true; echo
    fi
fi
if [[ " $PARTS " == *" tests "* || " $PARTS " == *" tpsan "* ]]; then
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
if [[ " $PARTS " == *" bench "* || " $PARTS " == *" bench2 "* ]]; then
    TPS=$([[ " $PARTS " == *" bench "* ]] && echo "1 2" || echo 2)
    for tp in $TPS; do
        if timeout 240 "$BIN" "${BL[@]}" --model configs/models/llama3-8b --batch-size 1,16,64 \
              --tensor-parallel-size $tp --output-json "$OUT/bench-8b-tp$tp.json" >"$OUT/bench-8b-tp$tp.txt" 2>&1
        then row "bench latency llama3-8b dummy tp $tp $(el)" ok
        else row "bench latency llama3-8b tp $tp (exit $?)" "FAILED (bench-8b-tp$tp.txt)"; FAILED=1; fi
        grep -E "^\||device:|ceilings|tensor parallel|memory" "$OUT/bench-8b-tp$tp.txt" | head -30 || true
    done
fi
if [[ " $PARTS " == *" bench "* || " $PARTS " == *" profile "* ]]; then
    if timeout 200 "$BIN" "${BL[@]}" --model configs/models/llama3-8b --batch-size 1,16 --num-iters 1 \
          --tensor-parallel-size 2 --profile-ops >"$OUT/profile-8b-tp2.txt" 2>&1
    then row "bench latency --profile-ops llama3-8b tp 2 $(el)" ok
    else row "bench latency --profile-ops tp 2 (exit $?)" "FAILED (profile-8b-tp2.txt)"; FAILED=1; fi
    grep -E "^\||ops of" "$OUT/profile-8b-tp2.txt" | head -60 || true
fi

if [[ " $PARTS " == *" bench70 "* ]]; then
    if timeout 400 "$BIN" "${BL[@]}" --model configs/models/llama3-70b --batch-size 1,16,64 \
          --tensor-parallel-size 2 --max-model-len 4096 --output-json "$OUT/bench-70b-tp2.json" \
          >"$OUT/bench-70b-tp2.txt" 2>&1
    then row "bench latency llama3-70b dummy tp 2 $(el)" ok
    else row "bench latency llama3-70b tp 2 (exit $?)" "FAILED (bench-70b-tp2.txt)"; FAILED=1; fi
    grep -E "^\||device:|ceilings|tensor parallel|memory" "$OUT/bench-70b-tp2.txt" | head -30 || true
fi
echo "=== summary"
cat "$SUMMARY"
exit $FAILED
