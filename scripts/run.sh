#!/usr/bin/env bash
# scripts/run.sh: the one command to try inferd. Installs the build
# dependencies (scripts/setup.sh), builds the `inferd` binary and starts the
# OpenAI-compatible server.
#
#   bash scripts/run.sh                       # built-in tiny model: random weights, byte-level
#                                             # tokenizer, ChatML template; no download needed
#   MODEL=/path/to/hf-model bash scripts/run.sh   # a real HuggingFace Llama directory
#   PORT=9000 bash scripts/run.sh --max-num-seqs 32   # extra args go to `inferd serve`
#
# Environment: MODEL, HOST (127.0.0.1), PORT (8000), BUILD (build), JOBS (nproc),
# API_KEY (optional; required by the server as a Bearer token when set).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
JOBS=${JOBS:-$(nproc)}

bash scripts/setup.sh
cmake -S . -B "$BUILD" >/dev/null
cmake --build "$BUILD" -j "$JOBS" --target inferd

args=()
if [[ -n "${MODEL:-}" ]]; then
    name=$(basename "${MODEL%/}")
    args+=(--model "$MODEL")
else
    name=tiny
    tiny="$BUILD/tiny-model"
    python3 scripts/make_tiny_tokenizer.py --spec configs/models/tiny/tokenizer_spec.json \
        --config configs/models/tiny/config.json --out "$tiny"
    args+=(--model "$tiny" --load-format dummy --served-model-name tiny --kv-cache-bytes 64M)
fi
auth=()
if [[ -n "${API_KEY:-}" ]]; then
    args+=(--api-key "$API_KEY")
    auth=(-H "Authorization: Bearer $API_KEY")
fi

cat <<MSG

Starting inferd serve on http://$HOST:$PORT (model '$name'). Try, from another shell:

  curl http://$HOST:$PORT/v1/completions -H 'Content-Type: application/json' ${auth[*]:+-H '${auth[1]}'} \\
       -d '{"model": "$name", "prompt": "Once upon a time", "max_tokens": 32}'

  curl -N http://$HOST:$PORT/v1/chat/completions -H 'Content-Type: application/json' ${auth[*]:+-H '${auth[1]}'} \\
       -d '{"model": "$name", "messages": [{"role": "user", "content": "Hello!"}], "stream": true}'

Metrics: curl http://$HOST:$PORT/metrics    Stop: Ctrl-C (graceful).
MSG
[[ -z "${MODEL:-}" ]] && echo "(The built-in tiny model has random weights: its replies are gibberish.)"
echo
exec "$BUILD/cli/inferd" serve "${args[@]}" --host "$HOST" --port "$PORT" "$@"
