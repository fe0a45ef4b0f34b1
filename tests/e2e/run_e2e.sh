#!/usr/bin/env bash
# tests/e2e/run_e2e.sh: install the official openai npm client (once, into
# tests/e2e/node_modules) and run openai_e2e.mjs against `inferd serve`.
# Exit 77 (ctest skip) when node/npm, the binary, the fixtures or the
# package (e.g. no network) are unavailable.
set -u
cd "$(dirname "$0")"
skip() { echo "SKIP: $*"; exit 77; }
command -v node >/dev/null 2>&1 || skip "node not found"
command -v npm >/dev/null 2>&1 || skip "npm not found"
[ -n "${INFERD_BIN:-}" ] && [ -x "${INFERD_BIN}" ] || skip "INFERD_BIN not set (run through ctest)"
[ -f "${INFERD_FIXTURES:-}/models/stories260K/model.safetensors" ] || skip "fixture models/stories260K not found"
major=$(node -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 18 ] || skip "node $major is too old (need 18+)"
if [ ! -f node_modules/openai/package.json ]; then
    log=$(mktemp /tmp/inferd-npm-XXXXXX.log)
    if ! timeout 300 npm install --no-audit --no-fund --no-package-lock --loglevel=error >"$log" 2>&1; then
        tail -5 "$log"
        rm -f "$log"
        skip "npm install openai failed (offline?)"
    fi
    rm -f "$log"
fi
echo "openai npm package $(node -p 'require("./node_modules/openai/package.json").version'), node $(node --version)"
exec node openai_e2e.mjs
