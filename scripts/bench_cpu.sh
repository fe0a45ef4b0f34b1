#!/usr/bin/env bash
# scripts/bench_cpu.sh: CPU generation speed on stories260K, one thread and
# all cores, printed as a table (docs/PERF.md records the results).
# usage: scripts/bench_cpu.sh [BUILD_DIR] ; needs the fixtures.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
FIX=${INFERD_FIXTURES:-$(pwd)/../shared/fixtures}
MODEL=$FIX/models/stories260K
BIN=$BUILD/cli/inferd
[[ -x $BIN ]] || { echo "bench_cpu: $BIN not built" >&2; exit 1; }
[[ -d $MODEL ]] || { echo "bench_cpu: $MODEL not found" >&2; exit 1; }
NCPU=$(nproc)
# a 256-token prompt (BOS + ids cycling through the vocabulary) and 200 new tokens
PROMPT_IDS=1$(for i in $(seq 1 255); do printf ",%d" $((259 + (i * 37) % 250)); done)
printf "%-8s %-6s %12s %14s %12s %14s\n" threads runs "prefill tok" "prefill tok/s" "gen tokens" "decode tok/s"
for t in 1 "$NCPU"; do
    best_p=0; best_d=0; ptok=0; gtok=0
    for run in 1 2 3; do
        line=$("$BIN" generate --device cpu --threads "$t" --model "$MODEL" --prompt-ids $PROMPT_IDS \
               --temperature 0 --ignore-eos --max-tokens 200 2>&1 >/dev/null | grep 'prompt tokens:')
        ptok=$(sed -E 's/.*prompt tokens: ([0-9]+).*/\1/' <<<"$line")
        p=$(sed -E 's/.*prefill: [0-9.]+ ms \(([0-9.]+) tok\/s\).*/\1/' <<<"$line")
        gtok=$(sed -E 's/.*generated tokens: ([0-9]+).*/\1/' <<<"$line")
        d=$(sed -E 's/.*decode: [0-9.]+ ms\/token \(([0-9.]+) tok\/s\).*/\1/' <<<"$line")
        best_p=$(awk -v a="$best_p" -v b="$p" 'BEGIN{print (b>a)?b:a}')
        best_d=$(awk -v a="$best_d" -v b="$d" 'BEGIN{print (b>a)?b:a}')
    done
    printf "%-8s %-6s %12s %14s %12s %14s\n" "$t" 3 "$ptok" "$best_p" "$gtok" "$best_d"
done
