#!/usr/bin/env bash
# scripts/device-wave.sh: the acceptance tables of issues 12 (decode) and 13
# (prefill), sourced by `DEVICE_PERF_ROWS=wave bash scripts/device-perf.sh`
# after its build (uses its BIN, BUILD, OUT, row, el). Every table row comes
# from `inferd bench latency` with the ceilings it measures at start; the
# peer (HF transformers, scripts/bench_gpu.py) runs in the same call.
W=$OUT/wave
mkdir -p "$W"
# WAVE_PARTS picks sections (default all): tests fuse minchunk decode prefill peer startup ab profile tput serve
# (and, only when named: engtests gemmdata peercompile mcab attnsan invtest abbase ncudec gemvprof tputsweep tputgraph decodelong attnab hflong pipe merge gemvtc tcbk pipeab pipeprof pipetput pfprof long128k attnfull tcmt tput512 ncutc ncustep ncutcsrc ncudecsrc dectc envab kcases tcform pdlsan fuseseeds kvfp8 ring asyncab knockout)
PARTS=" ${WAVE_PARTS:-tests fuse minchunk decode prefill peer startup ab profile tput serve} "
part() { [[ $PARTS == *" $1 "* ]]; }
# WAVE_TIMING_ONLY=1: the variant parts (merge, gemvtc, tcbk) skip their
# kernel cases and sanitizers (run by an earlier call) and only time
checks() { [[ -z ${WAVE_TIMING_ONLY:-} ]]; }
L8=configs/models/llama3-8b
L31=configs/models/llama3.1-8b

health_ok() { # PORT: GET /health answered 200 (bash's /dev/tcp: no curl needed)
    local line=""
    { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
    printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
    read -r -t 2 line <&3
    exec 3<&-
    [[ $line == *" 200 "* ]]
}

# gpu_test DIR/NAME: one test binary of the build on the GPU (graphs on, the
# CLI for the tests that start it), its log in $W/NAME.log, a summary row
gpu_test() {
    local name
    name=$(basename "$1")
    if (cd "$BUILD" && INFERD_TEST_DEVICE=cuda INFERD_BIN=$BIN timeout 300 "$BUILD/tests/$1") >"$W/$name.log" 2>&1
    then row "$name (cuda, graphs on) $(el)" PASS
    else row "$name (exit $?)" "FAIL (wave/$name.log)"; fi
    grep -E "Checks|fail|Assert|async" "$W/$name.log" | head -12
}

# a. correctness of what the tables run: attention kernels vs their CPU twin,
#    graphs == eager bitwise, engine invariance on the GPU
if part tests; then
if CK_RUN_CASE=attention timeout 200 "$BUILD/tests/kernels/cuda/test_cuda_kernels" >"$W/attn-kernels.log" 2>&1
then row "test_cuda_kernels attention cases $(el)" PASS
else row "test_cuda_kernels attention (exit $?)" "FAIL (wave/attn-kernels.log)"; fi
grep -E "attention .*(FAIL|splits=[0-9]+ )" "$W/attn-kernels.log" | head -12
for c in penalty sample; do
    if INFERD_TEST_QUICK= CK_RUN_CASE=$c timeout 200 "$BUILD/tests/kernels/cuda/test_cuda_kernels" >"$W/$c-kernels.log" 2>&1
    then row "test_cuda_kernels $c cases $(el)" PASS
    else row "test_cuda_kernels $c (exit $?)" "FAIL (wave/$c-kernels.log)"; fi
done
for t in model/test_graphs_gpu model/test_stories_gpu scheduler/test_engine_stories scheduler/test_engine_sampling; do
    gpu_test $t
done
fi

# a1. only the engine's invariance tests on the GPU (graphs on, async
#     scheduling on; the kernel cases are gpu-test.sh's)
part engtests && for t in scheduler/test_engine_stories scheduler/test_engine_sampling; do
    gpu_test $t
done

# a2. the fused decode layers (kern_matmul_fused): every form vs its CPU twin
#     (full sizes), compute-sanitizer on them, then A/B of INFERD_FUSE=1 / 0
#     at batch 1/2/4 x 512 (graphs), alternating processes, and batch 1 x 32k
if part fuse; then
for c in fused dense; do
    if INFERD_TEST_QUICK= CK_RUN_CASE=$c timeout 300 "$BUILD/tests/kernels/cuda/test_cuda_kernels" >"$W/$c-kernels.log" 2>&1
    then row "test_cuda_kernels $c cases (full) $(el)" PASS
    else row "test_cuda_kernels $c (exit $?)" "FAIL (wave/$c-kernels.log)"; fi
    grep -E "matmul|gemv|silu|rope|rmsnorm|FAIL" "$W/$c-kernels.log" | grep -vE "^GEMM_BENCH" | head -12
done
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if INFERD_TEST_QUICK=1 CK_RUN_CASE=fused timeout 300 "$CS" --tool memcheck --error-exitcode 9 \
      "$BUILD/tests/kernels/cuda/test_cuda_kernels" >"$W/fused-sanitizer.log" 2>&1
then row "compute-sanitizer memcheck fused cases $(el)" "PASS $(grep -E 'ERROR SUMMARY' "$W/fused-sanitizer.log" | tail -1)"
else row "compute-sanitizer fused (exit $?)" "FAIL $(grep -E 'ERROR SUMMARY' "$W/fused-sanitizer.log" | tail -1)"; fi
# variants: INFERD_FUSE = 2 (default) / 1 / 0, alternating processes
vbins=("fuse2:$BIN:2" "fuse1:$BIN:1" "fuse0:$BIN:0")
for rep in 1 2; do
    for v in "${vbins[@]}"; do
        IFS=: read -r name b f <<<"$v"
        if INFERD_FUSE=$f timeout 120 "$b" bench latency --model $L8 --load-format dummy --device cuda \
              --batch-size 1,2,4 --input-len 512 --output-len 64 --num-iters-warmup 1 --num-iters 2 \
              --max-num-batched-tokens 8192 --output-json "$W/fuse-$name-$rep.json" >"$W/fuse-$name-$rep.txt" 2>&1
        then row "A/B $name b1/2/4 x 512 (run $rep) $(el)" ok
        else row "A/B $name (run $rep, exit $?)" FAILED; fi
        grep -E "^\| [0-9]" "$W/fuse-$name-$rep.txt" | head -3
    done
done
if timeout 120 "$BIN" bench latency --model $L8 --load-format dummy --device cuda --batch-size 1 --input-len 512 \
      --output-len 32 --num-iters-warmup 1 --num-iters 1 --max-num-batched-tokens 8192 --profile-ops >"$W/fuse-profile.txt" 2>&1
then row "bench latency --profile-ops b1 x 512 (fused) $(el)" ok
else row "bench latency --profile-ops fused (exit $?)" FAILED; fi
grep -vE "^\[|^$|INFO" "$W/fuse-profile.txt" | grep -E "^\||ops of" | head -30
fi

# b. decode: the shortest split (INFERD_ATTN_MIN_CHUNK) at batch 1/16/64 x 512
part minchunk && for mc in ${WAVE_MIN_CHUNKS:-32 256}; do
    if INFERD_ATTN_MIN_CHUNK=$mc timeout 150 "$BIN" bench latency --model $L8 --load-format dummy --device cuda \
          --batch-size 1,16,64 --input-len 512 --output-len 64 --num-iters-warmup 1 --num-iters 2 \
          --max-num-batched-tokens 8192 >"$W/minchunk-$mc.txt" 2>&1
    then row "bench latency min chunk $mc $(el)" ok
    else row "bench latency min chunk $mc (exit $?)" FAILED; fi
    grep -E "^\| [0-9]" "$W/minchunk-$mc.txt"
done

# c. the decode table: batch 1/16/64 x 512/1k, graphs and eager; batch 256 x 1k
#    (output long enough that the last prefill ends before the timed decode)
#    and batch 1 x 32k (Llama-3.1 rope scaling); WAVE_DECODE_ARGS adds flags
#    to every run (e.g. "--kv-cache-dtype fp8")
part decode && for v in graphs eager; do
    extra=()
    [[ $v == eager ]] && extra=(--enforce-eager)
    if timeout 200 "$BIN" bench latency --model $L8 --load-format dummy --device cuda --batch-size 1,16,64 \
          --input-len 512,1024 --output-len 64 --num-iters-warmup 1 --num-iters 2 --max-num-batched-tokens 8192 \
          "${extra[@]}" ${WAVE_DECODE_ARGS:-} --output-json "$W/decode-$v.json" >"$W/decode-$v.txt" 2>&1
    then row "bench latency 1/16/64 x 512/1k ($v) $(el)" ok
    else row "bench latency 1/16/64 x 512/1k ($v, exit $?)" FAILED; fi
    grep -E "^\| [0-9]|ceilings|capture" "$W/decode-$v.txt"
    [[ $v == eager && -z ${WAVE_LONG_EAGER:-} ]] && continue # long rows: graphs only unless asked
    for spec in "$L8 256 1024 160 256 2048" "$L31 1 32000 64 1 33000"; do
        read -r cfg b in o ns mml <<<"$spec"
        if timeout 200 "$BIN" bench latency --model $cfg --load-format dummy --device cuda --batch-size "$b" \
              --input-len "$in" --output-len "$o" --num-iters-warmup 0 --num-iters 1 --max-num-seqs "$ns" \
              --max-num-batched-tokens 8192 --max-model-len "$mml" "${extra[@]}" ${WAVE_DECODE_ARGS:-} \
              >"$W/decode-$v-b$b-$in.txt" 2>&1
        then row "bench latency b$b x $in ($v) $(el)" ok
        else row "bench latency b$b x $in ($v, exit $?)" FAILED; fi
        grep -E "^\| [0-9]" "$W/decode-$v-b$b-$in.txt"
    done
done

# d. prefill at 512 / 2k / 8k / 16k (one chunk each), Llama-3.1 shapes
if part prefill; then
if timeout 200 "$BIN" bench latency --model $L31 --load-format dummy --device cuda --batch-size 1 \
      --input-len 512,2048,8192,16384 --output-len 4 --num-iters-warmup 1 --num-iters 2 \
      --max-num-batched-tokens 16384 --max-model-len 16400 >"$W/prefill.txt" 2>&1
then row "bench latency prefill 512..16k $(el)" ok
else row "bench latency prefill (exit $?)" FAILED; fi
grep -E "^\| [0-9]|ceilings" "$W/prefill.txt"
fi

# d2. the GEMM ceiling's operands: torch.matmul 8192^3 on zeros / randn /
#     uniform data, short and sustained runs (scripts/gemm_operands.py)
if part gemmdata; then
if timeout 120 env -u LD_LIBRARY_PATH python3 scripts/gemm_operands.py >"$W/gemmdata.txt" 2>&1
then row "gemm_operands.py (zeros / random) $(el)" ok
else row "gemm_operands.py (exit $?)" FAILED; fi
grep -E "^\||device" "$W/gemmdata.txt"
fi

# e. the peer: HF transformers prefill + decode at 2k (and 16k) in this run
PY="env -u LD_LIBRARY_PATH python3"
part peer && for pl in ${WAVE_PEER_LENS:-2048}; do
    cfg=$L8
    ((pl > 8192)) && cfg=$L31
    if timeout 240 $PY scripts/bench_gpu.py --inferd "$BIN" --config $cfg --prompt-len $pl --gen 32 --runs 2 \
          --batch 0 --no-scaling >"$W/peer-$pl.txt" 2>&1
    then row "bench_gpu.py prompt $pl (inferd vs HF) $(el)" ok
    else row "bench_gpu.py prompt $pl (exit $?)" FAILED; fi
    grep -E "^\||ceiling|copy|GEMM" "$W/peer-$pl.txt" | tail -8
done

# e2. the peer's fast path: HF with a static cache + torch.compile, its own
#     process (compiling takes minutes; a failure is reported, not fatal)
part peercompile && for pl in ${WAVE_PEER_LENS:-2048}; do
    cfg=$L8
    ((pl > 8192)) && cfg=$L31
    if timeout ${WAVE_COMPILE_TIMEOUT:-400} env -u LD_LIBRARY_PATH python3 scripts/bench_gpu.py --hf-compile \
          --config $cfg --prompt-len $pl --gen 32 --runs 2 >"$W/peercompile-$pl.txt" 2>&1
    then row "bench_gpu.py --hf-compile prompt $pl $(el)" ok
    else row "bench_gpu.py --hf-compile prompt $pl (exit $?)" "FAILED (wave/peercompile-$pl.txt)"; fi
    grep -E "^\||ceiling|GEMM|compile|Error|error" "$W/peercompile-$pl.txt" | tail -8
done

# f. start-up: dummy Llama-3-8B to a 200 from /health, graph capture included
if part startup; then
PORT=18431
t0=$(date +%s.%N)
"$BIN" serve --model $L8 --load-format dummy --device cuda --tokenizer "$FIX/tokenizers/llama3" --port $PORT \
    >"$W/serve-start.log" 2>&1 &
SPID=$!
ok=0
for _ in $(seq 1 600); do
    if health_ok $PORT; then ok=1; break; fi
    kill -0 $SPID 2>/dev/null || break
    sleep 0.05
done
t1=$(date +%s.%N)
kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
if [[ $ok == 1 ]]; then row "serve start-up to /health 200: $(awk "BEGIN{printf \"%.2f\", $t1 - $t0}") s" ok
else row "serve start-up" "FAILED (wave/serve-start.log)"; fi
grep -E "graphs|capture|ready|listening|memory" "$W/serve-start.log" | head -5
fi

# g. A/B: the small kernels' PDL trigger (kc_pdl_trigger) on (this build) and
#    off (a second build with -DKC_NO_PDL_TRIGGER), alternating processes
if part ab; then
if DEVICE_CUDA_FLAGS=-DKC_NO_PDL_TRIGGER device_build "$ROOT/build-gpu-notrig" inferd >"$W/build-notrig.log" 2>&1
then
    for rep in 1 2; do
        for v in trig notrig; do
            b=$BIN
            [[ $v == notrig ]] && b=$ROOT/build-gpu-notrig/cli/inferd
            timeout 100 "$b" bench latency --model $L8 --load-format dummy --device cuda --batch-size 1,16,64 \
                --input-len 512 --output-len 64 --num-iters-warmup 1 --num-iters 2 --max-num-batched-tokens 8192 \
                >"$W/ab-$v-$rep.txt" 2>&1 && row "A/B PDL trigger: $v (run $rep) $(el)" ok || row "A/B $v $rep" FAILED
            grep -E "^\| [0-9]" "$W/ab-$v-$rep.txt" | head -3
        done
    done
else row "A/B build without the PDL trigger" "FAILED (wave/build-notrig.log)"; fi
fi

# h. where a decode step goes: the per-op table (eager, an event per op), batch
#    WAVE_PROFILE_BATCH (1,16) at context WAVE_PROFILE_LEN (512), cache WAVE_PROFILE_KV (auto)
if part profile; then
pb=${WAVE_PROFILE_BATCH:-1,16} pl=${WAVE_PROFILE_LEN:-512} pk=${WAVE_PROFILE_KV:-auto}
if timeout 180 "$BIN" bench latency --model $L8 --load-format dummy --device cuda --batch-size "$pb" --input-len "$pl" \
      --output-len 32 --num-iters-warmup 1 --num-iters 1 --max-num-batched-tokens 8192 --max-num-seqs 64 \
      --kv-cache-dtype "$pk" --profile-ops >"$W/profile-ops.txt" 2>&1
then row "bench latency --profile-ops b$pb x $pl kv $pk $(el)" ok
else row "bench latency --profile-ops (exit $?)" FAILED; fi
grep -vE "^\[|^$|INFO" "$W/profile-ops.txt" | grep -E "^\||ops of" | head -60
fi

# i. offline throughput (issue 13 item 5): 1000 requests random 512/128 and 128/128
if part tput; then
for io in "512 128" "128 128"; do
    read -r il ol <<<"$io"
    if timeout 240 "$BIN" bench throughput --model $L8 --load-format dummy --device cuda --input-len $il \
          --output-len $ol --num-prompts 1000 --output-json "$W/tput-$il-$ol.json" >"$W/tput-$il-$ol.txt" 2>&1
    then row "bench throughput 1000 x $il/$ol $(el)" ok
    else row "bench throughput $il/$ol (exit $?)" FAILED; fi
    grep -E "^\||Throughput|engine|ceilings" "$W/tput-$il-$ol.txt" | tail -6
done
fi

# i2. offline throughput against the engine's batch limits (issue 13): the same
#     1000 requests with --max-num-seqs 256 / 512 / 1024 and a 16k token budget
# tput_run NAME IN OUT SEQS TOKENS CAP [ARGS...]: one 1000-request bench
# throughput row (decode graphs up to CAP rows: INFERD_GRAPH_MAX_BATCH)
# into $W/NAME.txt; ARGS go to bench throughput too
tput_run() {
    local name=$1 il=$2 ol=$3 ns=$4 bt=$5 cap=$6
    shift 6
    if INFERD_GRAPH_MAX_BATCH=$cap timeout 240 "$BIN" bench throughput --model $L8 --load-format dummy \
          --device cuda --input-len $il --output-len $ol --num-prompts 1000 --max-num-seqs $ns \
          --max-num-batched-tokens $bt --output-json "$W/$name.json" "$@" >"$W/$name.txt" 2>&1
    then row "bench throughput $il/$ol seqs $ns tokens $bt graphs to $cap $(el)" ok
    else row "bench throughput $il/$ol seqs $ns graphs to $cap (exit $?)" FAILED; fi
    grep -E "^\| [0-9]|engine:|^time:" "$W/$name.txt" | tail -3
}
if part tputsweep; then
for io in "512 128" "128 128"; do
    read -r il ol <<<"$io"
    for lim in "256 8192" "512 16384" "1024 16384"; do
        read -r ns bt <<<"$lim"
        tput_run "tput-$il-$ol-$ns" $il $ol $ns $bt 512
    done
done
fi

# i2a. the two throughput rows of issue 13 at --max-num-seqs 512 (16k budget);
#      WAVE_TPUT_KV="auto fp8": each row per --kv-cache-dtype
if part tput512; then
for dt in ${WAVE_TPUT_KV:-auto}; do
    tput_run "tput512-512-128-$dt" 512 128 512 16384 512 --kv-cache-dtype $dt
    tput_run "tput512-128-128-$dt" 128 128 512 16384 512 --kv-cache-dtype $dt
done
fi

# i2b. the same at --max-num-seqs 1024 with decode graphs up to 1024 rows
#      (INFERD_GRAPH_MAX_BATCH=1024) against the default cap of 512
if part tputgraph; then
for io in "512 128" "128 128"; do
    read -r il ol <<<"$io"
    for cap in 512 1024; do
        tput_run "tputgraph-$il-$ol-$cap" $il $ol 1024 16384 $cap
    done
done
fi

# i3. the two near-miss decode rows of issue 12, three iterations each
if part decodelong; then
for spec in "$L8 256 1024 160 256 2048" "$L31 1 32000 64 1 33000"; do
    read -r cfg b in o ns mml <<<"$spec"
    if timeout 200 "$BIN" bench latency --model $cfg --load-format dummy --device cuda --batch-size "$b" \
          --input-len "$in" --output-len "$o" --num-iters-warmup 1 --num-iters 3 --max-num-seqs "$ns" \
          --max-num-batched-tokens 8192 --max-model-len "$mml" >"$W/decodelong-b$b-$in.txt" 2>&1
    then row "bench latency b$b x $in x3 $(el)" ok
    else row "bench latency b$b x $in x3 (exit $?)" FAILED; fi
    grep -E "^\| [0-9]|ceilings" "$W/decodelong-b$b-$in.txt"
done
fi

# i4. decode attention build variants (unroll, CTAs a SM for GQA groups <= 4):
#     batch 64 / 256 at 1k and batch 1 at 32k, graphs, each variant its own build
# ab_variants PREFIX "NAME FLAGS" ...: each variant its own build (nvcc
# FLAGS), then batch 64 / 256 at 1k and batch 1 at 32k, graphs
ab_variants() {
    local prefix=$1 v name flags VB
    shift
    for v in "$@"; do
        read -r name flags <<<"$v"
        VB=$ROOT/build-$prefix-$name
        if DEVICE_CUDA_FLAGS="$flags" device_build "$VB" inferd >"$W/$prefix-build-$name.log" 2>&1
        then row "$prefix build $name $(el)" ok
        else row "$prefix build $name" FAILED; continue; fi
        timeout 120 "$VB/cli/inferd" bench latency --model $L8 --load-format dummy --device cuda --batch-size 64,256 \
            --input-len 1024 --output-len 96 --num-iters-warmup 0 --num-iters 1 --max-num-seqs 256 \
            --max-num-batched-tokens 16384 --max-model-len 2048 >"$W/$prefix-$name.txt" 2>&1 \
            && row "$prefix $name b64/b256 x 1k $(el)" ok || row "$prefix $name b64/b256 (exit $?)" FAILED
        timeout 120 "$VB/cli/inferd" bench latency --model $L31 --load-format dummy --device cuda --batch-size 1 \
            --input-len 32000 --output-len 64 --num-iters-warmup 0 --num-iters 1 --max-num-seqs 1 \
            --max-num-batched-tokens 8192 --max-model-len 33000 >"$W/$prefix-$name-32k.txt" 2>&1 \
            && row "$prefix $name b1 x 32k $(el)" ok || row "$prefix $name b1 x 32k (exit $?)" FAILED
        grep -E "^\| [0-9]" "$W/$prefix-$name.txt" "$W/$prefix-$name-32k.txt" | grep -v "GPU busy" | head -6
        grep -c "spill" "$W/$prefix-build-$name.log" || true
    done
}
part attnab && ab_variants attnab "u4c4 -DKC_DEC_UNROLL=4 -DKC_DEC_CTAS_SMALL_GROUP=4" \
    "u8c4 -DKC_DEC_UNROLL=8 -DKC_DEC_CTAS_SMALL_GROUP=4" "u2c6 -DKC_DEC_UNROLL=2 -DKC_DEC_CTAS_SMALL_GROUP=6" \
    "u4c3 -DKC_DEC_UNROLL=4 -DKC_DEC_CTAS_SMALL_GROUP=3"

# lat NAME TIMEOUT LABEL ARGS...: one `inferd bench latency --load-format
# dummy --device cuda ARGS` into $W/NAME.txt (variables assigned before the
# call reach it), its row in the summary, its table rows printed
lat() {
    local name=$1 t=$2 label=$3
    shift 3
    if timeout "$t" "$BIN" bench latency --load-format dummy --device cuda "$@" >"$W/$name.txt" 2>&1
    then row "$label $(el)" ok
    else row "$label (exit $?)" FAILED; fi
    grep -E "^\| [0-9]" "$W/$name.txt" | grep -v "GPU busy" | head -6
}
# with_env "ENV..." CMD ARGS...: CMD with the environment assignments ENV
# (space-separated, may be empty)
with_env() {
    local envs=$1
    shift
    if [[ -n $envs ]]; then (export $envs; "$@"); else "$@"; fi
}
# lat_env "ENV..." NAME TIMEOUT LABEL ARGS...: `lat` under with_env
lat_env() { with_env "$1" lat "${@:2}"; }
# variant_envs NAME:VAR=VAL+VAR=VAL: "VAR=VAL VAR=VAL" (nothing for NAME alone)
variant_envs() {
    if [[ $1 == *:* ]]; then local e=${1#*:}; echo "${e//+/ }"; fi
}
# prefill_rows TAG LABEL: `lat` of the prefill rows 512..16k (Llama-3.1
# config) and of one 16k-token step of 32 x 512 (Llama-3-8B); variables
# assigned before the call reach both
prefill_rows() {
    lat "$1-prefill" 150 "$2 prefill 512..16k" --model $L31 --batch-size 1 --input-len 512,2048,8192,16384 \
        --output-len 4 --num-iters-warmup 1 --num-iters 2 --max-num-batched-tokens 16384 --max-model-len 16400
    lat "$1-b32" 150 "$2 b32 x 512" --model $L8 --batch-size 32 --input-len 512 --output-len 4 \
        --num-iters-warmup 1 --num-iters 2 --max-num-seqs 512 --max-num-batched-tokens 16384 --max-model-len 1024
}
# kcase NAME QUICK CASE [TOOL]: test_cuda_kernels CK_RUN_CASE=CASE (QUICK=1:
# quick sizes, else full), under compute-sanitizer TOOL when one is named
kcase() {
    local name=$1 quick=$2 case=$3 tool=${4:-} cs=()
    # (API errors not reported: the dense case's out-of-memory test fails a cudaMalloc on purpose)
    [[ -n $tool ]] && cs=("$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)" \
        --tool "$tool" --report-api-errors no --error-exitcode 9)
    if INFERD_TEST_QUICK=$([[ $quick == 1 ]] && echo 1) CK_RUN_CASE=$case timeout 400 "${cs[@]}" \
          "$BUILD/tests/kernels/cuda/test_cuda_kernels" >"$W/$name.log" 2>&1
    then row "test_cuda_kernels $case${tool:+ ($tool)} $(el)" "PASS $(grep -E 'SUMMARY' "$W/$name.log" | tail -1)"
    else row "test_cuda_kernels $case${tool:+ ($tool)} (exit $?)" "FAIL (wave/$name.log)"; fi
    grep -E "FAIL|differ|ran, forced|m-tiles|Checks" "$W/$name.log" | head -8
}

# i4a0. kernel cases by name: WAVE_KCASES (full sizes), WAVE_KCASES_SAN
#       (quick sizes under compute-sanitizer memcheck)
if part kcases; then
for c in ${WAVE_KCASES:-}; do kcase "kc-$c" 0 "$c"; done
for c in ${WAVE_KCASES_SAN:-}; do kcase "kc-$c-memcheck" 1 "$c" memcheck; done
fi
# i4a1. the fused cases under compute-sanitizer memcheck, WAVE_REPS times
#       each with programmatic GEMV launches and without (INFERD_GEMV_PDL=0):
#       does a bitwise mismatch there follow the launches?
if part pdlsan; then
for rep in $(seq 1 "${WAVE_REPS:-3}"); do
    for p in 1 0; do INFERD_GEMV_PDL=$p kcase "pdlsan-$p-$rep" 1 fused memcheck; done
done
fi
# i4a1b. the fused cases (quick sizes) under fixed seeds: WAVE_SEED_LIST,
#        else 1..WAVE_SEEDS (default 20): randomized bitwise cases that fail
#        on some inputs only
if part fuseseeds; then
nbad=0
seeds=${WAVE_SEED_LIST:-$(seq 1 "${WAVE_SEEDS:-20}")}
for sd in $seeds; do
    if ! INFERD_TEST_SEED=$sd INFERD_TEST_QUICK=1 CK_RUN_CASE=fused timeout 120 \
          "$BUILD/tests/kernels/cuda/test_cuda_kernels" >"$W/fuseseed-$sd.log" 2>&1; then
        nbad=$((nbad + 1))
        grep -E "differ|FAIL" "$W/fuseseed-$sd.log" | head -3
    fi
done
row "test_cuda_kernels fused, $(wc -w <<<"$seeds") seeds $(el)" "$([[ $nbad == 0 ]] && echo PASS || echo "FAIL: $nbad seeds")"
fi
# i4a. the attention kernel cases at full sizes (128k context among them)
part attnfull && kcase attnfull 0 attention
# i4a2. compute-sanitizer memcheck and racecheck of the attention cases (quick sizes)
if part attnsan; then
kcase attnsan-memcheck 1 attention memcheck
kcase attnsan-racecheck 1 attention racecheck
fi

# i4b. the decode kernel's cp.async ring (INFERD_ATTN_DEC_PIPE=1, default)
#      against K/V straight to registers (=0): kernel cases (both bodies,
#      bitwise equal), compute-sanitizer memcheck + racecheck on them, then
#      bench latency rows with graphs, processes alternating
if part pipe; then
kcase pipe 0 attention
kcase pipe-memcheck 1 attention memcheck
kcase pipe-racecheck 1 attention racecheck
for rep in $(seq 1 "${WAVE_REPS:-1}"); do
    for pv in 1 0; do
        INFERD_ATTN_DEC_PIPE=$pv lat "pipe$pv-$rep" 150 "pipe=$pv b1/16/64/256 x 1k (run $rep)" --model $L8 \
            --batch-size 1,16,64,256 --input-len 1024 --output-len 64 --num-iters-warmup 1 --num-iters 1 \
            --max-num-seqs 256 --max-num-batched-tokens 16384 --max-model-len 2048
    done
done
for pv in 1 0; do
    INFERD_ATTN_DEC_PIPE=$pv lat "pipe$pv-32k" 120 "pipe=$pv b1 x 32k" --model $L31 --batch-size 1 \
        --input-len 32000 --output-len 64 --num-iters-warmup 0 --num-iters 2 --max-num-seqs 1 \
        --max-num-batched-tokens 8192 --max-model-len 33000
done
fi
# i4b2. split-KV partials merged by the last split CTA (INFERD_ATTN_MERGE=fused)
#       against the merge kernel (default), each with and without PDL launches
#       of the decode kernels (INFERD_ATTN_PDL=1): kernel cases (both forms, bitwise
#       equal) + memcheck / racecheck / synccheck, graphs == eager and engine
#       invariance with the fused form, then bench latency rows with graphs,
#       processes alternating (the batch-1 rows split; batch >= 64 does not)
if part merge; then
if checks; then
kcase merge 0 attention
kcase merge-memcheck 1 attention memcheck
kcase merge-racecheck 1 attention racecheck
kcase merge-synccheck 1 attention synccheck
fi
checks && for t in model/test_graphs_gpu scheduler/test_engine_stories; do
    if (cd "$BUILD" && INFERD_ATTN_MERGE=fused INFERD_ATTN_PDL=1 INFERD_TEST_DEVICE=cuda INFERD_BIN=$BIN timeout 300 \
          "$BUILD/tests/$t") >"$W/merge-$(basename $t).log" 2>&1
    then row "$(basename $t) (cuda, fused merge, pdl) $(el)" PASS
    else row "$(basename $t) fused merge, pdl (exit $?)" "FAIL (wave/merge-$(basename $t).log)"; fi
done
MERGE_VARIANTS=("kernel 0" "fused 0" "kernel 1" "fused 1") # INFERD_ATTN_MERGE, INFERD_ATTN_PDL
for rep in $(seq 1 "${WAVE_REPS:-2}"); do
    for v in "${MERGE_VARIANTS[@]}"; do
        read -r mv pv <<<"$v"
        INFERD_ATTN_MERGE=$mv INFERD_ATTN_PDL=$pv lat "merge-$mv-pdl$pv-$rep" 150 \
            "merge=$mv pdl=$pv b1/16/64 x 512/1k (run $rep)" --model $L8 --batch-size 1,16,64 --input-len 512,1024 \
            --output-len 64 --num-iters-warmup 1 --num-iters 2 --max-num-seqs 64 --max-num-batched-tokens 8192 \
            --max-model-len 2048
    done
done
for v in "${MERGE_VARIANTS[@]}"; do
    read -r mv pv <<<"$v"
    INFERD_ATTN_MERGE=$mv INFERD_ATTN_PDL=$pv lat "merge-$mv-pdl$pv-32k" 120 "merge=$mv pdl=$pv b1 x 32k" \
        --model $L31 --batch-size 1 --input-len 32000 --output-len 64 --num-iters-warmup 0 --num-iters 2 \
        --max-num-seqs 1 --max-num-batched-tokens 8192 --max-model-len 33000
done
fi
# i4b3. the GEMV's tensor-core form (INFERD_GEMV_TC_MIN_N, off by default):
#       dense kernel cases at full sizes (every n on both forms, batch
#       invariance of each) + memcheck, the per-shape GEMM_BENCH table (cuBLASLt
#       / GEMV / GEMV v1 / tensor-core GEMV at n = 1..16), graphs == eager
#       with it forced onto stories260K, then bench latency b1..16 x 1k with
#       graphs: the default against GEMV to 16 tokens with the tensor-core form
#       from n = 3, 5 or 9 (n - 1 on the graph ladder), processes alternating
if part gemvtc; then
if checks; then
kcase gemvtc 0 dense
kcase gemvtc-memcheck 1 dense memcheck
fi
if checks; then
if INFERD_TEST_GEMM_BENCH=1 CK_RUN_CASE=dense timeout 400 "$BUILD/tests/kernels/cuda/test_cuda_kernels" \
      >"$W/gemvtc-bench.log" 2>&1
then row "GEMM_BENCH (cuBLASLt / GEMV / v1 / tensor cores) $(el)" ok
else row "GEMM_BENCH (exit $?)" "FAIL (wave/gemvtc-bench.log)"; fi
grep -E "^GEMM_BENCH" "$W/gemvtc-bench.log" | head -48
if (cd "$BUILD" && INFERD_GEMV_MAX_N=16 INFERD_GEMV_TC_MIN_N=3 INFERD_GEMV_MIN_BYTES=0 INFERD_TEST_DEVICE=cuda \
      INFERD_BIN=$BIN timeout 300 "$BUILD/tests/model/test_graphs_gpu") >"$W/gemvtc-graphs.log" 2>&1
then row "test_graphs_gpu (tensor-core GEMV from n = 3, forced on stories260K) $(el)" PASS
else row "test_graphs_gpu tensor-core GEMV (exit $?)" "FAIL (wave/gemvtc-graphs.log)"; fi
fi
for rep in $(seq 1 "${WAVE_REPS:-1}"); do
    # INFERD_GEMV_MAX_N:INFERD_GEMV_TC_MIN_N pairs (WAVE_GEMV_VARIANTS, comma-separated)
    for v in $(tr ',' ' ' <<<"${WAVE_GEMV_VARIANTS:-4:0,16:3,16:5,16:9}"); do
        IFS=: read -r mx tn <<<"$v"
        INFERD_GEMV_MAX_N=$mx INFERD_GEMV_TC_MIN_N=$tn lat "gemvtc-$mx-$tn-$rep" 150 \
            "gemv max $mx tc from $tn b1..16 x 1k (run $rep)" --model $L8 --batch-size 1,2,4,8,16 --input-len 1024 \
            --output-len 64 --num-iters-warmup 1 --num-iters 2 --max-num-seqs 16 --max-num-batched-tokens 8192 \
            --max-model-len 2048
    done
done
fi
# ring build variants (stages x unroll), batch 64 / 256 at 1k and batch 1 at 32k
#      (rings under 33 KiB do not build: the merge area of 8 heads a CTA reuses the ring)
part pipeab && ab_variants pipeab "s3u4 -DKC_DEC_STAGES=3" "s4u4 -DKC_DEC_STAGES=4" \
    "s6u2 -DKC_DEC_STAGES=6 -DKC_DEC_UNROLL=2"
if part pipeprof; then
lat pipe1-profile 120 "--profile-ops b256 x 1k" --model $L8 --batch-size 256 --input-len 1024 --output-len 16 \
    --num-iters-warmup 0 --num-iters 1 --max-num-seqs 256 --max-num-batched-tokens 16384 --max-model-len 2048 \
    --profile-ops
grep -E "attention|all ops|GEMM|gate|down" "$W/pipe1-profile.txt" | head -12
fi

# i4c. the tensor-core prefill's forms (INFERD_PREFILL_TC, WAVE_TC_FORMS,
#      default mma2 wg): kernel cases at full sizes (every form vs the CPU
#      twin) and under memcheck, then the prefill rows 512..16k and the
#      16k-token step of 32 x 512 of each form; WAVE_TC_128K=1 adds b1 x
#      131000 for each. `tcmt` (earlier sessions' name): forms mma2 and mma1
#      with the 128k rows.
if part tcform || part tcmt; then
forms=${WAVE_TC_FORMS:-mma2 wg}
if part tcmt; then forms="mma2 mma1"; WAVE_TC_128K=1; fi
checks && kcase tcform 0 attention
checks && kcase tcform-memcheck 1 attention memcheck
for f in $forms; do
    INFERD_PREFILL_TC=$f prefill_rows "tcf-$f" "tc $f"
done
if [[ -n ${WAVE_TC_128K:-} ]]; then
for f in $forms; do
    INFERD_PREFILL_TC=$f lat "tcf-$f-128k" 200 "tc $f b1 x 131000" --model $L31 --batch-size 1 \
        --input-len 131000 --output-len 8 --num-iters-warmup 0 --num-iters 1 --max-num-seqs 4 \
        --max-num-batched-tokens 16384 --max-model-len 131072
done
fi
fi
# i4c2. tensor-core prefill with 32-key tiles (-DKC_TC_BK=32, its own build:
#       at head_dim 128 and two m-tiles no spills, 255 registers; 64-key
#       tiles spill 36 bytes): attention kernel cases on that build, then the
#       prefill rows 512..16k and the 16k-token step of 32 x 512 on both
#       builds, processes alternating
if part tcbk; then
VB=$ROOT/build-tcbk32
if DEVICE_CUDA_FLAGS="-DKC_TC_BK=32" device_build "$VB" inferd $(checks && echo test_cuda_kernels) >"$W/tcbk-build.log" 2>&1
then row "tcbk build BK=32 $(el)" ok
    if ! checks; then :
    elif CK_RUN_CASE=attention timeout 300 "$VB/tests/kernels/cuda/test_cuda_kernels" >"$W/tcbk-kernels.log" 2>&1
    then row "test_cuda_kernels attention (BK=32) $(el)" PASS
    else row "test_cuda_kernels attention BK=32 (exit $?)" "FAIL (wave/tcbk-kernels.log)"; fi
    for b in "$VB/cli/inferd 32" "$BIN 64"; do
        read -r bin bk <<<"$b"
        BIN=$bin prefill_rows "tcbk$bk" "tc BK=$bk"
    done
else row "tcbk build BK=32" FAILED; fi
fi
# i4c3. small-batch products: the per-shape GEMM_BENCH table (cuBLASLt /
#       GEMV / v1 / tensor-core GEMV at n = 1..16), the per-op decode
#       profile at batch 1 / 4 / 16 x 1k, and ncu of the tensor-core GEMV's
#       first five launches at batch 16 (eager)
if part gemvprof; then
if INFERD_TEST_GEMM_BENCH=1 CK_RUN_CASE=dense timeout 300 "$BUILD/tests/kernels/cuda/test_cuda_kernels" \
      >"$W/gemvprof-bench.log" 2>&1
then row "GEMM_BENCH $(el)" ok
else row "GEMM_BENCH (exit $?)" "FAIL (wave/gemvprof-bench.log)"; fi
grep -E "^GEMM_BENCH" "$W/gemvprof-bench.log" | head -48
lat gemvprof-ops 150 "--profile-ops b1/4/16 x 1k" --model $L8 --batch-size 1,4,16 --input-len 1024 --output-len 16 \
    --num-iters-warmup 0 --num-iters 1 --max-num-seqs 16 --max-num-batched-tokens 8192 --max-model-len 2048 --profile-ops
grep -vE "^\[|^$|INFO" "$W/gemvprof-ops.txt" | grep -E "^\||ops of" | head -90
INFERD_GEMV_MAX_N=16 INFERD_GEMV_TC_MIN_N=3 lat gemvprof-ops-tc 150 "--profile-ops b16 x 1k, tensor-core GEMV" \
    --model $L8 --batch-size 16 --input-len 1024 --output-len 16 --num-iters-warmup 0 --num-iters 1 --max-num-seqs 16 \
    --max-num-batched-tokens 8192 --max-model-len 2048 --profile-ops
grep -E "GEMM|all ops" "$W/gemvprof-ops-tc.txt" | head -12
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if INFERD_GEMV_MAX_N=16 INFERD_GEMV_TC_MIN_N=3 timeout 200 "$NCU" --clock-control none --kernel-name regex:gemv_tc \
      --launch-skip 0 --launch-count 5 --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section Occupancy --section LaunchStats "$BIN" bench latency --model $L8 --load-format dummy --device cuda \
      --batch-size 16 --input-len 128 --output-len 4 --num-iters-warmup 0 --num-iters 1 --enforce-eager \
      --max-num-seqs 16 --max-model-len 1024 >"$W/gemvprof-ncu.txt" 2>&1
then row "ncu gemv_tc b16 $(el)" ok
else row "ncu gemv_tc b16 (exit $?)" FAILED; fi
grep -vE "^\[|^ +-+|^$|^==PROF==|INFO|^\|" "$W/gemvprof-ncu.txt" | grep -E "[0-9]|gemv" | head -150
fi
# i4c5. the tensor-core GEMV's shared-memory ring (INFERD_GEMV_TC_RING: 0
#       off, 1 the rule, the default): the dense cases at full sizes with the
#       GEMM_BENCH table (test_gemv, test_gemv_ring_bitwise: the ring's
#       products bitwise the register form's), the fused cases at full sizes
#       (every form with the ring off and forced), quick sizes of both under
#       memcheck and the fused ones under racecheck; graphs == eager and
#       engine invariance with the ring forced onto every size
#       (INFERD_GEMV_TC_RING=2); the per-op profile at batch 1 / 16 x 512,
#       ring off and on (the A/B of the steps: envab)
# (WAVE_RING_VAR: the switch the graph / engine tests force to 2 and the
#  profiles set to 0 / 1, INFERD_GEMV_TC_RING unless another 0/1/2 switch
#  of a GEMV form is named)
if part ring; then
RV=${WAVE_RING_VAR:-INFERD_GEMV_TC_RING}
INFERD_TEST_GEMM_BENCH=1 kcase ring-dense 0 dense
grep -E "^GEMM_BENCH" "$W/ring-dense.log" | head -48
kcase ring-fused 0 fused
if checks; then
    kcase ring-dense-memcheck 1 dense memcheck
    kcase ring-fused-memcheck 1 fused memcheck
    kcase ring-fused-racecheck 1 fused racecheck
fi
for t in model/test_graphs_gpu scheduler/test_engine_stories; do
    if (cd "$BUILD" && export "$RV=2" && INFERD_TEST_DEVICE=cuda INFERD_BIN=$BIN timeout 300 "$BUILD/tests/$t") \
          >"$W/ring-$(basename $t).log" 2>&1
    then row "$(basename $t) (cuda, graphs, $RV=2) $(el)" PASS
    else row "$(basename $t) ($RV=2, exit $?)" "FAIL (wave/ring-$(basename $t).log)"; fi
done
for v in 0 1; do
    [[ -n ${WAVE_RING_NO_PROFILE:-} ]] && break
    lat_env "$RV=$v" "ring-ops-$v" 150 "--profile-ops b1/16 x 512, $RV=$v" --model $L8 --batch-size 1,16 \
        --input-len 512 --output-len 16 --num-iters-warmup 0 --num-iters 1 --max-num-seqs 16 \
        --max-num-batched-tokens 8192 --max-model-len 2048 --profile-ops
    grep -vE "^\[|^$|INFO" "$W/ring-ops-$v.txt" | grep -E "^\||ops of" | head -60
done
fi
# i4c4. ncu of decode kernels (eager, --gpu-memory-utilization 0.3 so the
#       replays save little memory): the decode attention and merge kernels
#       at batch 16 and 1 x 1k, and the tensor-core GEMV's four products at
#       batch 16 (WAVE_NCU_SPEC: "NAME BATCH REGEX SKIP COUNT [ENV...]" lines;
#       WAVE_NCU_ARGS: more ncu arguments, e.g. sections or metrics;
#       WAVE_NCU_BENCH_ARGS: more bench latency arguments, e.g.
#       --kv-cache-dtype fp8)
ncu_one() { # NAME BATCH REGEX SKIP COUNT [ENV...]
    local name=$1 b=$2 rx=$3 skip=$4 cnt=$5
    shift 5
    local NCU
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    if env "$@" timeout 240 "$NCU" --clock-control none --kernel-name "regex:$rx" --launch-skip "$skip" \
          --launch-count "$cnt" --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
          --section Occupancy --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis \
          ${WAVE_NCU_ARGS:-} "$BIN" bench latency --model $L8 \
          --load-format dummy --device cuda --batch-size "$b" --input-len 1024 --output-len 8 --num-iters-warmup 0 \
          --num-iters 1 --enforce-eager --max-num-seqs "$((b < 16 ? 16 : b))" --max-model-len 2048 \
          --gpu-memory-utilization 0.3 ${WAVE_NCU_BENCH_ARGS:-} >"$W/ncu-$name.txt" 2>&1
    then row "ncu $name $(el)" ok
    else row "ncu $name (exit $?)" FAILED; fi
    grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Eligible Warps|No Eligible|Block Limit|Dynamic Shared|Issue Slots Busy|Executed Ipc A" "$W/ncu-$name.txt" | head -60
}
if part ncudec; then
while read -r spec; do
    [[ -z $spec ]] && continue
    # shellcheck disable=SC2086
    ncu_one $spec
done <<<"${WAVE_NCU_SPEC:-dec16 16 attn_decode_kernel|attn_merge_kernel 64 2
dec1 1 attn_decode_kernel|attn_merge_kernel 64 2
tc16 16 gemv_tc 0 4 INFERD_GEMV_MAX_N=16 INFERD_GEMV_TC_MIN_N=3}"
fi
# overlay_build TREE OVERLAY LOG TARGET...: a copy of the tree (no build
# folders, no .deps) at TREE with OVERLAY's files laid over it, built (CUDA)
# in TREE/build-gpu with the TARGETs, the build's output into LOG
overlay_build() {
    local tree=$1 overlay=$2 log=$3
    shift 3
    rm -rf "$tree" && mkdir -p "$tree"
    tar -C "$ROOT" --exclude='./build*' --exclude=./.deps -cf - . | tar -C "$tree" -xf -
    cp -r "$overlay"/. "$tree"/
    (cd "$tree" && device_build "$tree/build-gpu" "$@") >"$log" 2>&1
}
# i4c5. A/B against a baseline build: the files under build-abbase/ (carried,
#       laid out as in the tree: the previous version of what changed)
#       replace theirs in a copy of the tree, built as build-abtree; then the
#       decode kernel cases and sanitizers, graphs == eager and engine
#       invariance on this build, and the decode rows on both builds,
#       processes alternating (WAVE_REPS runs)
if part abbase; then
AB=$ROOT/build-abtree
if overlay_build "$AB" "$ROOT/build-abbase" "$W/abbase-build.log" inferd
then row "baseline build ($(cd "$ROOT/build-abbase" && find . -type f | tr '\n' ' ')) $(el)" ok
    BASE=$AB/build-gpu/cli/inferd
    if [[ -z ${WAVE_AB_NO_ATTN:-} ]]; then # WAVE_AB_NO_ATTN=1: a change outside the attention skips its cases
        kcase ab-attn 0 attention
        kcase ab-attn-memcheck 1 attention memcheck
        kcase ab-attn-racecheck 1 attention racecheck
    fi
    for t in model/test_graphs_gpu scheduler/test_engine_stories; do
        if (cd "$BUILD" && INFERD_TEST_DEVICE=cuda INFERD_BIN=$BIN timeout 300 "$BUILD/tests/$t") >"$W/ab-$(basename $t).log" 2>&1
        then row "$(basename $t) (cuda, graphs) $(el)" PASS
        else row "$(basename $t) (exit $?)" "FAIL (wave/ab-$(basename $t).log)"; fi
        # and with WAVE_AB_TEST_ENV (VAR=VALUE ...) set, e.g. a switch the variants time
        [[ -z ${WAVE_AB_TEST_ENV:-} ]] && continue
        if (cd "$BUILD" && export $WAVE_AB_TEST_ENV && INFERD_TEST_DEVICE=cuda INFERD_BIN=$BIN timeout 300 \
              "$BUILD/tests/$t") >"$W/ab-env-$(basename $t).log" 2>&1
        then row "$(basename $t) ($WAVE_AB_TEST_ENV) $(el)" PASS
        else row "$(basename $t) ($WAVE_AB_TEST_ENV, exit $?)" "FAIL (wave/ab-env-$(basename $t).log)"; fi
    done
    # variants: base, new, and new with each NAME:VAR=VALUE of WAVE_AB_ENVS
    abv=(base new ${WAVE_AB_ENVS:-})
    # the rows: WAVE_AB_BATCH x WAVE_AB_LENS (default 1,16,64 x 512,1024), WAVE_AB_ARGS more bench
    # latency arguments (e.g. --kv-cache-dtype fp8)
    abb=${WAVE_AB_BATCH:-1,16,64} abl=${WAVE_AB_LENS:-512,1024}
    for rep in $(seq 1 "${WAVE_REPS:-2}"); do
        for v in "${abv[@]}"; do
            b=$BIN envs=()
            [[ $v == base ]] && b=$BASE
            [[ $v == *=* ]] && envs=("${v#*:}")
            # shellcheck disable=SC2086
            BIN=$b lat_env "${envs[*]}" "ab-${v%%:*}-$rep" 150 "${v%%=*} b$abb x $abl (run $rep)" --model $L8 \
                --batch-size "$abb" --input-len "$abl" --output-len 64 --num-iters-warmup 1 --num-iters 2 \
                --max-num-seqs 64 --max-num-batched-tokens 8192 --max-model-len 2048 ${WAVE_AB_ARGS:-}
        done
    done
    for v in "${abv[@]}"; do
        [[ ${WAVE_AB_32K:-1} == 0 ]] && break # WAVE_AB_32K=0: no b1 x 32k rows
        b=$BIN envs=()
        [[ $v == base ]] && b=$BASE
        [[ $v == *=* ]] && envs=("${v#*:}")
        BIN=$b lat_env "${envs[*]}" "ab-${v%%:*}-32k" 120 "${v%%=*} b1 x 32k" --model $L31 --batch-size 1 \
            --input-len 32000 --output-len 64 --num-iters-warmup 0 --num-iters 2 --max-num-seqs 1 \
            --max-num-batched-tokens 8192 --max-model-len 33000
    done
    # WAVE_AB_B256=1: batch 256 x 1k of base and new
    if [[ -n ${WAVE_AB_B256:-} ]]; then
        for v in base new; do
            b=$BIN
            [[ $v == base ]] && b=$BASE
            BIN=$b lat "ab-$v-b256" 150 "$v b256 x 1k" --model $L8 --batch-size 256 --input-len 1024 \
                --output-len 160 --num-iters-warmup 0 --num-iters 1 --max-num-seqs 256 \
                --max-num-batched-tokens 8192 --max-model-len 2048
        done
    fi
    # WAVE_AB_PREFILL=1: the prefill rows (512..16k, and a 16k-token step of 32 x 512) of base and new
    if [[ -n ${WAVE_AB_PREFILL:-} ]]; then
        for rep in 1 2; do
            BIN=$BASE prefill_rows "ab-base-$rep" "base (run $rep)"
            prefill_rows "ab-new-$rep" "new (run $rep)"
        done
    fi
else row "baseline build" "FAILED (wave/abbase-build.log)"; fi
fi
# i4c6. engine invariance across variant builds: each carried build-abvar-NAME/
#       (files laid out as in the tree) replaces its files in a copy of the
#       tree; test_engine_stories (cuda, graphs) runs WAVE_INV_RUNS times on
#       every variant and on this build (is a failure the change's, or the
#       test's luck?), with WAVE_INV_ENV (e.g. INFERD_GEMV_MIN_BYTES=0) set
if part invtest; then
inv_runs() { # NAME TESTBIN
    for r in $(seq 1 "${WAVE_INV_RUNS:-2}"); do
        if (cd "${2%/tests/*}" && env ${WAVE_INV_ENV:-} INFERD_TEST_DEVICE=cuda timeout 300 "$2") >"$W/inv-$1-$r.log" 2>&1
        then row "test_engine_stories $1 (run $r) $(el)" PASS
        else row "test_engine_stories $1 (run $r)" "FAIL $(grep -oE 'F:[^:]*:[a-z_]+:[0-9]+: [^:]*: prompt [0-9]+ token [0-9]+: [0-9]+ vs [0-9]+' "$W/inv-$1-$r.log" | sed 's/F:[^:]*://' | tr '\n' ';')"; fi
    done
}
for d in "$ROOT"/build-abvar-*/; do
    [[ -d $d ]] || continue
    name=$(basename "$d"); name=${name#build-abvar-}
    VT=$ROOT/build-vt-$name
    if overlay_build "$VT" "$d" "$W/inv-build-$name.log" test_engine_stories
    then inv_runs "$name" "$VT/build-gpu/tests/scheduler/test_engine_stories"
    else row "variant build $name" "FAILED (wave/inv-build-$name.log)"; fi
done
inv_runs this "$BUILD/tests/scheduler/test_engine_stories"
fi
# i4c7. the shortest decode split: INFERD_ATTN_MIN_CHUNK=32 (default) against
#       WAVE_MC_ALT (default 64): attention kernel cases and engine
#       invariance with the alternative, then b1/16 x 512/1k and b1 x 32k
#       rows, processes alternating (WAVE_REPS runs)
if part mcab; then
ALT=${WAVE_MC_ALT:-64}
if INFERD_ATTN_MIN_CHUNK=$ALT CK_RUN_CASE=attention timeout 300 "$BUILD/tests/kernels/cuda/test_cuda_kernels" \
      >"$W/mcab-kernels.log" 2>&1
then row "test_cuda_kernels attention (min chunk $ALT) $(el)" PASS
else row "test_cuda_kernels attention min chunk $ALT (exit $?)" "FAIL (wave/mcab-kernels.log)"; fi
if (cd "$BUILD" && INFERD_ATTN_MIN_CHUNK=$ALT INFERD_TEST_DEVICE=cuda timeout 300 "$BUILD/tests/scheduler/test_engine_stories") \
      >"$W/mcab-engine.log" 2>&1
then row "test_engine_stories (min chunk $ALT) $(el)" PASS
else row "test_engine_stories min chunk $ALT (exit $?)" "FAIL (wave/mcab-engine.log)"; fi
for rep in $(seq 1 "${WAVE_REPS:-2}"); do
    for mc in 32 "$ALT"; do
        INFERD_ATTN_MIN_CHUNK=$mc lat "mcab-$mc-$rep" 150 "min chunk $mc b1/16 x 512/1k (run $rep)" --model $L8 \
            --batch-size 1,16 --input-len 512,1024 --output-len 64 --num-iters-warmup 1 --num-iters 2 \
            --max-num-seqs 64 --max-num-batched-tokens 8192 --max-model-len 2048
    done
done
for mc in 32 "$ALT"; do
    INFERD_ATTN_MIN_CHUNK=$mc lat "mcab-$mc-32k" 120 "min chunk $mc b1 x 32k" --model $L31 --batch-size 1 \
        --input-len 32000 --output-len 64 --num-iters-warmup 0 --num-iters 2 --max-num-seqs 1 \
        --max-num-batched-tokens 8192 --max-model-len 33000
done
fi
# i4c7. the tensor-core decode body (INFERD_ATTN_DEC_TC, default on) against
#       the CUDA-core bodies: attention kernel cases (full), memcheck and
#       racecheck, graphs == eager and engine invariance; then decode rows
#       of both, processes alternating (WAVE_REPS runs), batch 256 x 1k
#       and batch 1 x 32k
if part dectc; then
kcase dectc 0 attention
kcase dectc-memcheck 1 attention memcheck
kcase dectc-racecheck 1 attention racecheck
for t in model/test_graphs_gpu scheduler/test_engine_stories; do
    if (cd "$BUILD" && INFERD_TEST_DEVICE=cuda INFERD_BIN=$BIN timeout 300 "$BUILD/tests/$t") >"$W/dectc-$(basename $t).log" 2>&1
    then row "$(basename $t) (cuda, graphs) $(el)" PASS
    else row "$(basename $t) (exit $?)" "FAIL (wave/dectc-$(basename $t).log)"; fi
done
for rep in $(seq 1 "${WAVE_REPS:-2}"); do
    for tcv in 0 1; do
        lat_env "INFERD_ATTN_DEC_TC=$tcv" "dectc-$tcv-$rep" 150 "decode tc=$tcv b1/16/64 x 512/1k (run $rep)" \
            --model $L8 --batch-size 1,16,64 --input-len 512,1024 --output-len 64 --num-iters-warmup 1 --num-iters 2 \
            --max-num-seqs 64 --max-num-batched-tokens 8192 --max-model-len 2048
    done
done
for tcv in 0 1; do
    lat_env "INFERD_ATTN_DEC_TC=$tcv" "dectc-$tcv-b256" 150 "decode tc=$tcv b256 x 1k" --model $L8 --batch-size 256 \
        --input-len 1024 --output-len 160 --num-iters-warmup 0 --num-iters 1 --max-num-seqs 256 \
        --max-num-batched-tokens 8192 --max-model-len 2048
    lat_env "INFERD_ATTN_DEC_TC=$tcv" "dectc-$tcv-32k" 120 "decode tc=$tcv b1 x 32k" --model $L31 --batch-size 1 \
        --input-len 32000 --output-len 64 --num-iters-warmup 0 --num-iters 2 --max-num-seqs 1 \
        --max-num-batched-tokens 8192 --max-model-len 33000
done
fi
# i4d2. environment variants of one build: WAVE_ENV_VARIANTS is a list of
#       NAME:VAR=VAL+VAR=VAL (NAME alone: no variable); decode rows at batch
#       WAVE_ENVAB_BATCH (default 1,16) x 512/1k, processes alternating
#       (WAVE_REPS runs); test_graphs_gpu and test_engine_stories first with
#       WAVE_ENVAB_TEST_ENV (VAR=VAL ...) when set; WAVE_ENVAB_LENS: the contexts
#       (default 512,1024); WAVE_ENVAB_ARGS: more bench
#       latency arguments (e.g. --kv-cache-dtype fp8; the GEMM search A/B:
#       WAVE_ENV_VARIANTS="on off:INFERD_GEMM_SEARCH_MAX_N=0" WAVE_ENVAB_BATCH=1,16,64)
# dec_rows "ENV..." NAME LABEL BATCHES LENS ARGS...: one `lat` of the decode
# rows BATCHES x LENS (Llama-3-8B, 64 tokens out, warm-up 1 + 2 iterations)
# under the environment ENV, the A/B shape of envab and knockout
dec_rows() {
    local envs=$1 name=$2 label=$3 batches=$4 lens=$5
    shift 5
    lat_env "$envs" "$name" 150 "$label" --model $L8 --batch-size "$batches" --input-len "$lens" --output-len 64 \
        --num-iters-warmup 1 --num-iters 2 --max-num-seqs 64 --max-num-batched-tokens 8192 --max-model-len 2048 "$@"
}
if part envab; then
if [[ -n ${WAVE_ENVAB_TEST_ENV:-} ]]; then
    for t in model/test_graphs_gpu scheduler/test_engine_stories; do
        if (cd "$BUILD" && export $WAVE_ENVAB_TEST_ENV && INFERD_TEST_DEVICE=cuda INFERD_BIN=$BIN timeout 300 \
              "$BUILD/tests/$t") >"$W/envab-$(basename $t).log" 2>&1
        then row "$(basename $t) ($WAVE_ENVAB_TEST_ENV) $(el)" PASS
        else row "$(basename $t) ($WAVE_ENVAB_TEST_ENV, exit $?)" "FAIL (wave/envab-$(basename $t).log)"; fi
    done
fi
for rep in $(seq 1 "${WAVE_REPS:-2}"); do
    for v in ${WAVE_ENV_VARIANTS:-base}; do
        dec_rows "$(variant_envs "$v")" "envab-${v%%:*}-$rep" \
            "${v%%:*} b${WAVE_ENVAB_BATCH:-1,16} x ${WAVE_ENVAB_LENS:-512,1024} (run $rep)" \
            "${WAVE_ENVAB_BATCH:-1,16}" "${WAVE_ENVAB_LENS:-512,1024}" ${WAVE_ENVAB_ARGS:-}
    done
done
fi
# i4d2a. where a graph step goes, op by op (INFERD_KNOCKOUT, model_knockout_parse):
#        one process a variant, the full step then each op left out of the
#        decode steps, batch WAVE_KO_BATCH (default 1,16,64) x 1k, fp8 cache
#        unless WAVE_KO_ARGS says otherwise; prints ms saved per op and batch
if part knockout; then
ko_rows() { grep -E '^\| [0-9]+ \| 1024 \| 64 \| [0-9]' "$1" | awk -F'|' 'NF >= 16 {printf "%s ", $8}'; }
for v in full norm silu rope attn qkv o gateup down; do
    dec_rows "$([[ $v == full ]] || echo INFERD_KNOCKOUT=$v)" "ko-$v" "knock-out $v" "${WAVE_KO_BATCH:-1,16,64}" 1024 \
        ${WAVE_KO_ARGS:---kv-cache-dtype fp8} >/dev/null
done
read -r -a full <<<"$(ko_rows "$W/ko-full.txt")"
echo "knock-out (batch ${WAVE_KO_BATCH:-1,16,64} x 1k): step ms ${full[*]}; ms saved by leaving out:" | tee -a "$SUMMARY"
for v in norm silu rope attn qkv o gateup down; do
    read -r -a got <<<"$(ko_rows "$W/ko-$v.txt")"
    line="  $v:"
    for i in "${!full[@]}"; do line+=" $(awk -v a="${full[$i]}" -v b="${got[$i]:-0}" 'BEGIN {printf "%.3f", a - b}')"; done
    echo "$line" | tee -a "$SUMMARY"
done
fi
# i4d2b. async scheduling (--async-scheduling, the default) against
#       --no-async-scheduling, processes alternating, WAVE_REPS runs: the
#       decode rows b1/16/64 x 512/1k (step time, the GPU's idle gap, the
#       engine thread's host time; the SM clock and power sampled by
#       nvidia-smi during each run), then b256 x 1k and bench throughput
#       512/128 each way; WAVE_ASYNC_ARGS adds flags to every run
if part asyncab; then
async_flag() { [[ $1 == off ]] && echo --no-async-scheduling; }
# the SM clock and board power sampled every 100 ms while a run goes
# (is the GPU slower per step once it never idles?): mean and min per run
smi_start() { nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 >"$W/$1.smi" 2>&1 &
              SMI=$!; }
smi_stop() {
    kill $SMI 2>/dev/null; wait $SMI 2>/dev/null
    awk -F', *' -v n="$1" '$1 ~ /^[0-9]/ {c++; s += $1; p += $2; if (!m || $1 < m) m = $1}
        END {if (c) printf "clocks %s: SM %.0f MHz mean, %.0f min, power %.1f W mean over %d samples\n", n, s / c, m, p / c, c}' "$W/$1.smi"
}
for rep in $(seq 1 "${WAVE_REPS:-2}"); do
    for v in on off; do
        smi_start "asyncab-$v-$rep"
        lat "asyncab-$v-$rep" 150 "async $v b1/16/64 x 512/1k (run $rep)" --model $L8 --batch-size 1,16,64 \
            --input-len 512,1024 --output-len 64 --num-iters-warmup 1 --num-iters 2 --max-num-seqs 64 \
            --max-num-batched-tokens 8192 --max-model-len 2048 $(async_flag $v) ${WAVE_ASYNC_ARGS:-}
        smi_stop "asyncab-$v-$rep"
        grep -A9 "GPU busy ms/step" "$W/asyncab-$v-$rep.txt" | grep -E "^\| [0-9]"
    done
done
for v in on off; do
    lat "asyncab-b256-$v" 200 "async $v b256 x 1k" --model $L8 --batch-size 256 --input-len 1024 --output-len 160 \
        --num-iters-warmup 0 --num-iters 1 --max-num-seqs 256 --max-num-batched-tokens 8192 --max-model-len 2048 \
        $(async_flag $v) ${WAVE_ASYNC_ARGS:-}
    grep -A4 "GPU busy ms/step" "$W/asyncab-b256-$v.txt" | grep -E "^\| [0-9]"
    tput_run "asyncab-tput-$v" 512 128 512 16384 512 $(async_flag $v) ${WAVE_ASYNC_ARGS:-}
done
fi
# i4d3. the same environment variants on the prefill rows (prefill_rows:
#       512..16k at batch 1 and 32 x 512), processes alternating, WAVE_REPS
#       runs; with WAVE_ENVPF_TPUT=1 each variant's bench throughput 512/128
#       (1000 requests, 512 sequences, 16k budget) after the last run
if part envpf; then
for rep in $(seq 1 "${WAVE_REPS:-2}"); do
    for v in ${WAVE_ENV_VARIANTS:-base}; do
        with_env "$(variant_envs "$v")" prefill_rows "envpf-${v%%:*}-$rep" "${v%%:*} (run $rep)"
    done
done
if [[ -n ${WAVE_ENVPF_TPUT:-} ]]; then
    for v in ${WAVE_ENV_VARIANTS:-base}; do
        with_env "$(variant_envs "$v")" tput_run "envpf-tput-${v%%:*}" 512 128 512 16384 512
    done
fi
fi
# i4e. the fp8 KV cache (--kv-cache-dtype fp8): the attention and fused
#      kernel cases (every decode body and the prefill's bf16 copy, the K/V
#      writes of every route) at full sizes (and under memcheck, quick
#      sizes, with WAVE_KVFP8_SAN=1; scripts/gpu-test.sh runs it too),
#      graphs == eager with it (test_graphs_gpu); then the decode rows
#      b1/16/64 x 512/1k with the cache in bf16 (auto), fp8 (the
#      tensor-core decode body) and fp8 on the CUDA-core bodies
#      (INFERD_ATTN_DEC_TC=0), processes alternating, WAVE_REPS runs; b256 x
#      1k and b1 x 32k auto / fp8; prefill 2k and 16k auto / fp8
if part kvfp8; then
if checks; then
    for c in attention fused; do
        kcase "kvfp8-$c" 0 "$c"
        [[ -n ${WAVE_KVFP8_SAN:-} ]] && kcase "kvfp8-$c-san" 1 "$c" memcheck
    done
    if (cd "$BUILD" && INFERD_TEST_DEVICE=cuda timeout 300 "$BUILD/tests/model/test_graphs_gpu") \
          >"$W/kvfp8-graphs.log" 2>&1
    then row "test_graphs_gpu (fp8 form among them) $(el)" PASS
    else row "test_graphs_gpu (exit $?)" "FAIL (wave/kvfp8-graphs.log)"; fi
    if (cd "$BUILD" && INFERD_TEST_KV_FP8=1 INFERD_TEST_DEVICE=cuda INFERD_BIN=$BIN timeout 300 \
          "$BUILD/tests/scheduler/test_engine_stories") >"$W/kvfp8-engine.log" 2>&1
    then row "test_engine_stories (cuda, fp8 KV) $(el)" PASS
    else row "test_engine_stories (fp8 KV, exit $?)" "FAIL (wave/kvfp8-engine.log)"; fi
fi
for rep in $(seq 1 "${WAVE_REPS:-2}"); do
    for v in auto fp8 fp8simt; do
        dt=${v%simt}
        with_env "$([[ $v == fp8simt ]] && echo INFERD_ATTN_DEC_TC=0)" lat "kvfp8-$v-$rep" 150 \
            "kv $v b1/16/64 x 512/1k (run $rep)" --model $L8 --batch-size 1,16,64 --input-len 512,1024 \
            --output-len 64 --num-iters-warmup 1 --num-iters 2 --max-num-seqs 64 --max-num-batched-tokens 8192 \
            --max-model-len 2048 --kv-cache-dtype "$dt"
    done
done
for dt in auto fp8; do
    lat "kvfp8-b256-$dt" 150 "kv $dt b256 x 1k" --model $L8 --batch-size 256 --input-len 1024 --output-len 160 \
        --num-iters-warmup 0 --num-iters 1 --max-num-seqs 256 --max-num-batched-tokens 8192 --max-model-len 2048 \
        --kv-cache-dtype $dt
    lat "kvfp8-b1-32k-$dt" 150 "kv $dt b1 x 32k" --model $L31 --batch-size 1 --input-len 32000 --output-len 64 \
        --num-iters-warmup 0 --num-iters 1 --max-num-seqs 1 --max-num-batched-tokens 8192 --max-model-len 33000 \
        --kv-cache-dtype $dt
    lat "kvfp8-prefill-$dt" 150 "kv $dt prefill 2k/16k" --model $L31 --batch-size 1 --input-len 2048,16384 \
        --output-len 4 --num-iters-warmup 1 --num-iters 2 --max-num-batched-tokens 16384 --max-model-len 16400 \
        --kv-cache-dtype $dt
done
fi
# i4d0. where the time between kernels goes: ncu's duration of every kernel
#       of a short b1 x 512 run (graphs on, caches and clocks left alone),
#       the kernels of each decode step to be summed against the step time
#       of the same run without ncu (wave/ncustep-*.csv; WAVE_STEP_BATCHES,
#       WAVE_STEP_LEN context, WAVE_STEP_ARGS more bench arguments; the last
#       pure decode step's kernels grouped by scripts/ncu_steps.py into
#       wave/ncustep-b*-table.txt); then the
#       tensor-core prefill kernel at layer 16 of a 16k prompt with the full
#       section set and its per-SASS-instruction stall samples
#       (wave/ncutcsrc-sass.csv)
if part ncustep; then
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
sl=${WAVE_STEP_LEN:-512}
for b in ${WAVE_STEP_BATCHES:-1}; do
    sargs=(--model $L8 --batch-size $b --input-len $sl --output-len 8 --num-iters-warmup 0 --num-iters 1
           --max-num-seqs $((b > 16 ? b : 16)) --max-num-batched-tokens 8192 --max-model-len $((2 * sl)) ${WAVE_STEP_ARGS:-})
    lat "ncustep-plain-b$b" 120 "b$b x $sl without ncu" "${sargs[@]}"
    if timeout 400 "$NCU" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
          --print-units base "$BIN" bench latency --load-format dummy --device cuda "${sargs[@]}" \
          >"$W/ncustep-b$b.csv" 2>"$W/ncustep-b$b.err"
    then row "ncu every kernel b$b x $sl $(el)" "ok $(grep -c gpu__time_duration "$W/ncustep-b$b.csv") kernels"
        $PY scripts/ncu_steps.py "$W/ncustep-b$b.csv" --batch $b >"$W/ncustep-b$b-table.txt" 2>&1
        head -16 "$W/ncustep-b$b-table.txt"
    else row "ncu every kernel b$b (exit $?)" FAILED; tail -5 "$W/ncustep-b$b.err"; fi
done
fi
if part ncutcsrc; then
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if timeout 300 "$NCU" --clock-control none --kernel-name regex:${WAVE_NCU_KERNEL:-attn_prefill_tc_kernel} \
      --launch-skip 48 --launch-count 1 --set full -f -o "$W/ncutcsrc" "$BIN" bench latency --model $L31 --load-format dummy --device cuda --batch-size 1 \
      --input-len 16384 --output-len 2 --num-iters-warmup 0 --num-iters 1 --enforce-eager \
      --max-num-batched-tokens 16384 --max-model-len 16400 >"$W/ncutcsrc.txt" 2>&1
then row "ncu --set full tc prefill 16k $(el)" ok
    "$NCU" -i "$W/ncutcsrc.ncu-rep" --print-details all >"$W/ncutcsrc-details.txt" 2>&1 || true
    "$NCU" -i "$W/ncutcsrc.ncu-rep" --page source --csv --print-source sass >"$W/ncutcsrc-sass.csv" 2>&1 || true
    grep -E "Duration|Registers|Warp Cycles Per Issued|Issue Slots Busy|Achieved Occupancy|Grid Size|Block Limit" \
        "$W/ncutcsrc-details.txt" | head -12
    echo "sass rows: $(wc -l <"$W/ncutcsrc-sass.csv")"
    $PY scripts/ncu_sass.py "$W/ncutcsrc-sass.csv" >"$W/ncutcsrc-sass-table.txt" 2>&1 && head -40 "$W/ncutcsrc-sass-table.txt"
else row "ncu --set full tc prefill 16k (exit $?)" FAILED; fi
fi
# i4d1. one decode attention launch of a pure decode step, ncu --set full
#       with its per-instruction samples, summed by scripts/ncu_sass.py
#       (wave/ncudecsrc-sass-table.txt): WAVE_DECSRC_KERNEL (regex, default
#       attn_decode_tc8), batch WAVE_DECSRC_BATCH (16) at WAVE_DECSRC_LEN
#       (1024) context, WAVE_DECSRC_ARGS (default --kv-cache-dtype fp8)
if part ncudecsrc; then
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
db=${WAVE_DECSRC_BATCH:-16}
dl=${WAVE_DECSRC_LEN:-1024}
if timeout 300 "$NCU" --clock-control none --kernel-name regex:${WAVE_DECSRC_KERNEL:-attn_decode_tc8} \
      --launch-skip 600 --launch-count 1 --set full -f -o "$W/ncudecsrc" "$BIN" bench latency --model $L8 \
      --load-format dummy --device cuda --batch-size $db --input-len $dl --output-len 48 --num-iters-warmup 0 \
      --num-iters 1 --max-num-seqs $((db > 16 ? db : 16)) --max-num-batched-tokens 8192 --max-model-len $((2 * dl)) \
      ${WAVE_DECSRC_ARGS:---kv-cache-dtype fp8} >"$W/ncudecsrc.txt" 2>&1
then row "ncu --set full decode attention b$db x $dl $(el)" ok
    "$NCU" -i "$W/ncudecsrc.ncu-rep" --page details --print-units base >"$W/ncudecsrc-details.txt" 2>&1 || true
    "$NCU" -i "$W/ncudecsrc.ncu-rep" --page source --csv --print-source sass >"$W/ncudecsrc-sass.csv" 2>&1 || true
    grep -E "Duration|DRAM Throughput|Issue Slots Busy|Achieved Occupancy|Grid Size" "$W/ncudecsrc-details.txt" | head -6
    $PY scripts/ncu_sass.py "$W/ncudecsrc-sass.csv" >"$W/ncudecsrc-sass-table.txt" 2>&1 && head -40 "$W/ncudecsrc-sass-table.txt"
else row "ncu --set full decode attention b$db x $dl (exit $?)" FAILED; fi
fi
# i4d. ncu of the tensor-core prefill attention kernel (one launch, layer 16
#      of a 16k prompt): speed of light, pipes, stalls, occupancy
if part ncutc; then
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for in in ${WAVE_NCU_LENS:-16384}; do
    if timeout 300 "$NCU" --clock-control none --kernel-name regex:${WAVE_NCU_KERNEL:-attn_prefill_tc_kernel} \
          --launch-skip ${WAVE_NCU_SKIP:-48} \
          --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
          --section Occupancy --section LaunchStats --section InstructionStats --section MemoryWorkloadAnalysis \
          --section SchedulerStats --section WarpStateStats --metrics smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active "$BIN" bench latency --model $L31 --load-format dummy --device cuda \
          --batch-size 1 --input-len $in --output-len 2 --num-iters-warmup 0 --num-iters 1 --enforce-eager \
          --max-num-batched-tokens 16384 --max-model-len 16400 >"$W/ncu-tc-$in.txt" 2>&1
    then row "ncu attn_prefill_tc_kernel prompt $in $(el)" ok
    else row "ncu attn_prefill_tc_kernel prompt $in (exit $?)" FAILED; fi
    grep -vE "^\[|^ +-+|^$|^==PROF==|INFO|^\|" "$W/ncu-tc-$in.txt" | grep -E "[0-9]" | head -120
done
fi

# i4e. where a prefill step goes (--profile-ops: the table of the steps
#      with a prompt chunk): one 16k-token step (32 prompts of 512, as in
#      bench throughput 512/128) and a 2k prompt; then the 128k prompt with
#      graphs and the profile of its 16k-token chunks (Llama-3.1 config)
if part pfprof; then
for spec in "$L8 32 512 1024" "$L8 1 2048 4096"; do
    read -r cfg b in mml <<<"$spec"
    lat "pfprof-b$b-$in" 150 "--profile-ops b$b x $in" --model $cfg --batch-size $b --input-len $in --output-len 4 \
        --num-iters-warmup 1 --num-iters 1 --max-num-seqs 512 --max-num-batched-tokens 16384 --max-model-len $mml \
        --profile-ops
    sed -n '/ops of a step with a prompt chunk/,$p' "$W/pfprof-b$b-$in.txt" | grep -E "^\||ops of" | head -20
done
fi
if part long128k; then
lat long128k 200 "b1 x 131000 (llama3.1, graphs)" --model $L31 --batch-size 1 --input-len 131000 --output-len 32 \
    --num-iters-warmup 0 --num-iters 1 --max-num-seqs 4 --max-num-batched-tokens 16384 --max-model-len 131072 \
    --output-json "$W/long128k.json"
grep -E "memory:|graphs:" "$W/long128k.txt" | head -3
lat long128k-prof 200 "--profile-ops b1 x 131000" --model $L31 --batch-size 1 --input-len 131000 --output-len 8 \
    --num-iters-warmup 0 --num-iters 1 --max-num-seqs 4 --max-num-batched-tokens 16384 --max-model-len 131072 \
    --profile-ops
sed -n '/ops of a step with a prompt chunk/,$p' "$W/long128k-prof.txt" | grep -E "^\||ops of" | head -20
fi

if part pipetput; then
for pv in 1 0; do
    INFERD_ATTN_DEC_PIPE=$pv tput_run "pipe$pv-tput-512-128" 512 128 512 16384 512
done
INFERD_ATTN_DEC_PIPE=1 tput_run "pipe1-tput-128-128" 128 128 512 16384 512
fi

# i5. HF transformers at long prompts (issue 13's acceptance): a random
#     Llama-3.1-structured small model (llama3 rope scaling, original context
#     4096), prompts of 2,048 and 16,384 ids (chunked prefill: 2,048 tokens a
#     step), last-position logits and 16 greedy tokens, GPU and CPU backends
if part hflong; then
PY="env -u LD_LIBRARY_PATH python3"
M=/tmp/rand-llama31
if $PY scripts/hf_reference.py make-random --config configs/models/test-llama31-small/config.json --out $M \
      >"$W/hflong-make.log" 2>&1; then
    for n in 2048 16384; do
        if $PY scripts/hf_reference.py compare --model $M --inferd "$BIN" --prompt-len $n >"$W/hflong-$n.log" 2>&1
        then row "HF logits, random llama3.1-small, prompt $n (cuda) $(el)" PASS
        else row "HF logits, random llama3.1-small, prompt $n (cuda)" "FAIL (hflong-$n.log)"; fi
        tail -3 "$W/hflong-$n.log"
    done
    if $PY scripts/hf_reference.py compare --model $M --inferd "$BIN" --prompt-len 2048 --device cpu \
          >"$W/hflong-cpu-2048.log" 2>&1
    then row "HF logits, random llama3.1-small, prompt 2048 (cpu) $(el)" PASS
    else row "HF logits, random llama3.1-small, prompt 2048 (cpu)" "FAIL (hflong-cpu-2048.log)"; fi
    tail -3 "$W/hflong-cpu-2048.log"
else row "hf_reference.py make-random llama3.1-small" "FAILED (hflong-make.log)"; fi
fi

# j. serving (issue 13 item 4, issue 12's TPOT target): inferd serve + bench serve,
#    random 512/128 at concurrency 1/16/64/256, TTFT / TPOT / ITL percentiles
# WAVE_SERVE_VARIANTS: one server (and one set of concurrencies) each,
# "NAME" or "NAME:FLAG+FLAG" (more server flags; e.g. "async
# sync:--no-async-scheduling"; a word NAME=VALUE is set in the server's environment,
# e.g. "dec:INFERD_ASYNC_CHAIN=decode"); default one server with no extra flags
serve_variant() { # TAG "FLAGS": FLAGS' words of the form NAME=VALUE go to the environment
local tag=$1 flags=() envs=() w
for w in $2; do
    if [[ $w =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$w"); else flags+=("$w"); fi
done
PORT=18432
env "${envs[@]}" "$BIN" serve --model $L8 --load-format dummy --device cuda --tokenizer "$FIX/tokenizers/llama3" --port $PORT \
    --max-num-seqs 256 --max-num-batched-tokens 8192 --log-level warn "${flags[@]}" >"$W/serve$tag.log" 2>&1 &
SPID=$!
ok=0
for _ in $(seq 1 600); do
    if health_ok $PORT; then ok=1; break; fi
    kill -0 $SPID 2>/dev/null || break
    sleep 0.1
done
if [[ $ok == 1 ]]; then
    for c in ${WAVE_CONC:-1 16 64 256}; do
        np=$((c * 2 > 16 ? c * 2 : 16))
        if timeout 200 "$BIN" bench serve --port $PORT --tokenizer "$FIX/tokenizers/llama3" --dataset-name random \
              --input-len 512 --output-len 128 --ignore-eos --num-prompts $np --max-concurrency $c --num-warmups 2 \
              --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 --disable-tqdm \
              --result-dir "$W" --result-filename "serve$tag-c$c.json" >"$W/serve$tag-c$c.txt" 2>&1
        then row "bench serve$tag random 512/128 concurrency $c ($np prompts) $(el)" ok
        else row "bench serve$tag concurrency $c (exit $?)" FAILED; fi
        grep -E "throughput|TTFT|TPOT|ITL|E2E|P50|P99|Mean|Median" "$W/serve$tag-c$c.txt" | head -24
    done
else row "serve$tag for bench serve" "FAILED (wave/serve$tag.log)"; fi
kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
}
if part serve; then
for v in ${WAVE_SERVE_VARIANTS:-}; do
    f=""
    [[ $v == *:* ]] && { f=${v#*:}; f=${f//+/ }; }
    serve_variant "-${v%%:*}" "$f"
done
[[ -z ${WAVE_SERVE_VARIANTS:-} ]] && serve_variant "" ""
fi
