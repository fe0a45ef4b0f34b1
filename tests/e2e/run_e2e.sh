#!/usr/bin/env bash
# tests/e2e/run_e2e.sh SCRIPT.mjs: install the pinned npm packages of
# package-lock.json (the openai client, the Vercel AI SDK, LangChain JS)
# into tests/e2e/node_modules with `npm ci`, once per lock file version,
# then run SCRIPT against `inferd serve`.
# Exit 77 (ctest skip) when node/npm, the binary, the fixtures or the
# packages (e.g. no network) are unavailable.
set -u
cd "$(dirname "$0")"
script=${1:-openai_e2e.mjs}
skip() { echo "SKIP: $*"; exit 77; }
command -v node >/dev/null 2>&1 || skip "node not found"
command -v npm >/dev/null 2>&1 || skip "npm not found"
[ -n "${INFERD_BIN:-}" ] && [ -x "${INFERD_BIN}" ] || skip "INFERD_BIN not set (run through ctest)"
[ -f "${INFERD_FIXTURES:-}/models/stories260K/model.safetensors" ] || skip "fixture models/stories260K not found"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || skip "node $major is too old (need 18+)"
# The e2e tests may run in parallel (ctest -j): one installs, the others
# wait for it. The stamp records which lock file node_modules was built from.
exec 9>"${TMPDIR:-/tmp}/inferd-e2e-npm-$(id -u).lock"
flock 9
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.inferd-lock-sha256 2>/dev/null)" != "$want" ]; then
    log=$(mktemp /tmp/inferd-npm-XXXXXX.log)
    if ! timeout 300 npm ci --no-audit --no-fund --loglevel=error >"$log" 2>&1; then
        tail -5 "$log"
        rm -f "$log"
        skip "npm ci failed (offline?)"
    fi
    rm -f "$log"
    echo "$want" >node_modules/.inferd-lock-sha256
fi
flock -u 9
echo "openai $(node -p 'require("./node_modules/openai/package.json").version')," \
     "ai $(node -p 'require("./node_modules/ai/package.json").version')," \
     "@ai-sdk/openai $(node -p 'require("./node_modules/@ai-sdk/openai/package.json").version')," \
     "@langchain/openai $(node -p 'require("./node_modules/@langchain/openai/package.json").version')," \
     "node $(node --version)"
exec node "$script"
