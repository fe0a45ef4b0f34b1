#!/usr/bin/env bash
# scripts/device-run.sh: everything inferd runs on the GPU machine, in one
# command, with a summary table at the end. Run from the repository root:
#
#   bash scripts/device-run.sh            (logs under $OUT when set, else ./device-logs)
#
# Steps (each one's exit status is checked; the script stops at the first
# failure of a step that later steps depend on):
#   1. unpack the carried Debian packages (.deps/debs, .deps/lib: libmicrohttpd,
#      cJSON, jemalloc, Check, PCRE2, libcurl and their runtime libraries);
#   2. configure + build with the CUDA backend (sm_90a) using all cores;
#   3. scripts/gpu-test.sh: every ctest test labelled gpu + compute-sanitizer;
#   4. the CPU-path test suite on this machine too (the engine invariance
#      tests, with INFERD_TEST_DEVICE=cuda for their GPU variants);
#   5. HF transformers comparison on a random-weight Llama-3-structured model;
#   6. Llama-3-8B-shaped dummy-weight generation speed, with the device's
#      copy bandwidth and bf16 GEMM rate measured by PyTorch as ceilings, and
#      HF transformers generate as the peer; then `inferd bench latency`
#      with decode CUDA graphs and with --enforce-eager (scripts/device-perf.sh
#      runs the graph tests, the sanitizer pass and longer tables).
set -euo pipefail
ROOT=$(pwd)
# Logs are written under /tmp/inferd-device-logs and packed into one
# $OUT/logs.tgz at exit (the device tool returns at most 8 files).
FINAL_OUT=${OUT:-$ROOT/device-logs}
OUT=/tmp/inferd-device-logs
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL_OUT"
trap 'cp "$OUT/summary.txt" "$FINAL_OUT/" 2>/dev/null; tar czf "$FINAL_OUT/logs.tgz" -C /tmp inferd-device-logs' EXIT
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
row() { printf "%-44s %s\n" "$1" "$2" | tee -a "$SUMMARY"; }

# 1. dependencies
source scripts/device-env.sh

# 2. build
BUILD=$ROOT/build-gpu
device_build "$BUILD" >"$OUT/build.log" 2>&1 && row "build (CUDA sm_90a)" "ok" || { row "build (CUDA sm_90a)" "FAILED (build.log)"; tail -40 "$OUT/build.log"; exit 1; }
export LD_LIBRARY_PATH=$INFERD_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=$BUILD/cli/inferd

# 3. GPU kernel tests + compute-sanitizer
if OUT=$OUT/gpu bash scripts/gpu-test.sh "$BUILD" >"$OUT/gpu-test.log" 2>&1; then row "gpu-test.sh (kernels vs CPU twins, memcheck)" "PASS"
else row "gpu-test.sh (kernels vs CPU twins, memcheck)" "FAIL (gpu-test.log)"; fi
grep -E "^\| |PASS|FAIL" "$OUT/gpu-test.log" | tail -40 || true

# 3b. the attention kernels (cp.async double buffer of the tensor-core prefill) under racecheck + synccheck
CSAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck synccheck; do
    if INFERD_TEST_QUICK=1 CK_RUN_CASE=attention "$CSAN" --tool $tool --report-api-errors no --error-exitcode 99 \
          "$BUILD/tests/kernels/cuda/test_cuda_kernels" >"$OUT/attn-$tool.log" 2>&1
    then row "compute-sanitizer $tool (attention cases)" "PASS $(grep -E 'SUMMARY' "$OUT/attn-$tool.log" | tail -1)"
    else row "compute-sanitizer $tool (attention cases)" "FAIL (attn-$tool.log)"; fi
done

# 4. the whole ctest suite on this machine, GPU variants on
#    (one test at a time: each engine test sizes its KV cache from the GPU's free memory)
if (cd "$BUILD" && INFERD_TEST_DEVICE=cuda ctest -R "${DEVICE_CTEST_RE:-stories|engine|generate|model_support|graphs|model_files|bench_throughput}" -V -j 1 --timeout 600) >"$OUT/ctest.log" 2>&1
then row "ctest -R stories|engine|generate (INFERD_TEST_DEVICE=cuda)" "PASS"
else row "ctest -R stories|engine|generate (INFERD_TEST_DEVICE=cuda)" "FAIL (ctest.log)"; fi
grep -E "^[0-9]+: .*(preempt|prefix|cache hit|chunk|seeded|GPU|golden|concurrent|reproduced|tokens)" "$OUT/ctest.log" | head -30 || true
tail -3 "$OUT/ctest.log"

# 5. stories260K golden on the GPU + HF comparison on a random Llama-3-structured model
PY="env -u LD_LIBRARY_PATH python3"
M=/tmp/rand-llama3
if $PY scripts/hf_reference.py make-random --config configs/models/test-llama3-small/config.json --out $M >"$OUT/hf.log" 2>&1 &&
   $PY scripts/hf_reference.py compare --model $M --inferd "$BIN" >>"$OUT/hf.log" 2>&1; then
    row "HF transformers logits (random llama3-small)" "PASS"
else row "HF transformers logits (random llama3-small)" "FAIL (hf.log)"; fi
tail -3 "$OUT/hf.log"
# 5b. the same for random Qwen2 (q/k/v biases, tied embeddings, transformers-4 config) and Qwen3
# (per-head q/k RMSNorm, head_dim 128 != hidden/heads, transformers-5 config), and Llama with rope
# scaling linear / dynamic / yarn (prompts past the original context), same tolerance
for q in qwen2 qwen3 llama-rope-linear llama-rope-dynamic llama-rope-yarn; do
    M=/tmp/rand-$q
    if $PY scripts/hf_reference.py make-random --config configs/models/test-$q-small/config.json --out $M >"$OUT/hf-$q.log" 2>&1 &&
       $PY scripts/hf_reference.py compare --model $M --inferd "$BIN" >>"$OUT/hf-$q.log" 2>&1; then
        row "HF transformers logits (random $q-small)" "PASS"
    else row "HF transformers logits (random $q-small)" "FAIL (hf-$q.log)"; fi
    tail -3 "$OUT/hf-$q.log"
done
# 5c. the CPU backend (fp32) against the same HF references: with 5b, CPU and GPU agree within the
# tolerance of each to HF
for q in llama3 qwen2 qwen3; do
    if $PY scripts/hf_reference.py compare --model /tmp/rand-$q --inferd "$BIN" --device cpu >"$OUT/hf-cpu-$q.log" 2>&1
    then row "HF transformers logits, CPU backend ($q-small)" "PASS"
    else row "HF transformers logits, CPU backend ($q-small)" "FAIL (hf-cpu-$q.log)"; fi
    tail -2 "$OUT/hf-cpu-$q.log"
done

# 6. Llama-3-8B dummy weights: speed
if $PY scripts/bench_gpu.py --inferd "$BIN" --config configs/models/llama3-8b >"$OUT/bench.log" 2>&1
then row "bench_gpu.py (llama3-8b dummy, batch 1)" "ok"
else row "bench_gpu.py (llama3-8b dummy, batch 1)" "FAILED (bench.log)"; fi
cat "$OUT/bench.log" | tail -30
# 6b. issue 5's acceptance command, verbatim but for the paths (text prompt through the llama3 tokenizer)
if "$BIN" generate --load-format dummy --model configs/models/llama3-8b --tokenizer "$FIX/tokenizers/llama3" \
      --prompt "The capital of France is" --max-tokens 64 --ignore-eos --temperature 0 >"$OUT/gen8b.log" 2>&1
then row "generate --load-format dummy llama3-8b (text prompt)" "ok"
else row "generate --load-format dummy llama3-8b (text prompt)" "FAILED (gen8b.log)"; fi
grep -E "memory:|prompt tokens:" "$OUT/gen8b.log" || tail -5 "$OUT/gen8b.log"

# 6c. `inferd bench latency` (issue 12): decode CUDA graphs vs --enforce-eager, roofline per row
LBIN=$BUILD/cli/inferd
for v in graphs eager; do
    extra=()
    [[ $v == eager ]] && extra=(--enforce-eager)
    if "$LBIN" bench latency --model configs/models/llama3-8b --load-format dummy --device cuda --batch-size 1,16,64 \
          --input-len 512 --output-len 64 --num-iters-warmup 1 --num-iters 2 --max-num-batched-tokens 8192 \
          "${extra[@]}" >"$OUT/bench-latency-$v.txt" 2>&1
    then row "bench latency llama3-8b dummy ($v)" "ok"
    else row "bench latency llama3-8b dummy ($v)" "FAILED (bench-latency-$v.txt)"; fi
    grep -E "^\| [0-9]|ceilings|graphs:" "$OUT/bench-latency-$v.txt" || true
done

# 6d. prefill attention: tensor-core kernel vs the CUDA-core one (INFERD_PREFILL_ATTN=simt), 512 and 2048 tokens
for v in tc simt; do
    pa=auto
    [[ $v == simt ]] && pa=simt
    if INFERD_PREFILL_ATTN=$pa "$LBIN" bench latency --model configs/models/llama3-8b --load-format dummy \
          --device cuda --batch-size 1 --input-len 512,2048 --output-len 8 --num-iters-warmup 1 --num-iters 3 \
          --max-num-batched-tokens 8192 >"$OUT/bench-prefill-$v.txt" 2>&1
    then row "bench latency prefill ($v)" "ok"
    else row "bench latency prefill ($v)" "FAILED (bench-prefill-$v.txt)"; fi
    grep -E "^\| [0-9]|ceilings" "$OUT/bench-prefill-$v.txt" || true
done

# 7. tokenizer encode speed vs HF tokenizers (Rust), same machine
if $PY scripts/bench_tokenizer.py --fixtures "$FIX" --perf-bin "$BUILD/tests/tokenizer/test_tok_perf" --inferd "$BIN" >"$OUT/tok.log" 2>&1
then row "bench_tokenizer.py (100 KB encode vs HF)" "ok"
else row "bench_tokenizer.py (100 KB encode vs HF)" "FAILED (tok.log)"; fi
cat "$OUT/tok.log"
echo "=== summary"
cat "$SUMMARY"
