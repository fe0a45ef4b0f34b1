// tests/e2e/server.mjs: start and stop `inferd serve` on stories260K (CPU)
// for the e2e scripts: a free loopback port, the given API key, chatml
// (stories260K ships no chat template), /health polled until 200. The
// server must exit 0 on SIGTERM; stopServer reports how it exited.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';

export const fixtures = process.env.INFERD_FIXTURES;
export const MODEL = 'stories260K';

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function waitHealthy(base, child, timeoutMs) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (child.exitCode !== null) throw new Error(`server exited early (${child.exitCode})`);
    try {
      const r = await fetch(`${base}/health`);
      if (r.status === 200) return;
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('server did not become healthy');
}

// { child, base } once healthy.
export async function startServer(apiKey) {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const child = spawn(process.env.INFERD_BIN, ['serve', '--model', `${fixtures}/models/${MODEL}`, '--device', 'cpu',
    '--threads', '1', '--host', '127.0.0.1', '--port', String(port), '--chat-template', 'chatml',
    '--api-key', apiKey, '--log-level', 'warn'], { stdio: ['ignore', 'inherit', 'inherit'] });
  await waitHealthy(base, child, 30000);
  return { child, base };
}

// SIGTERM, SIGKILL after 30 s; resolves { code, signal }.
export function stopServer(child) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); }, 30000);
    child.on('exit', (code, signal) => { clearTimeout(timer); resolve({ code, signal }); });
    child.kill('SIGTERM');
  });
}

// The llama2.c golden case: prompt and its 60-token greedy continuation.
export function golden() {
  const g = JSON.parse(readFileSync(`${fixtures}/golden/stories260K.json`, 'utf8')).cases[0];
  return { prompt: g.prompt, text: g.stdout_text.slice(g.prompt.length) };
}

// Run body(server) against a fresh server; exit 0 only when it passed and
// the server exited 0.
export async function runE2E(name, apiKey, body) {
  let failed = false;
  let server = null;
  try {
    server = await startServer(apiKey);
    await body(server);
  } catch (e) {
    failed = true;
    console.error('FAIL:', e);
  }
  if (server) {
    const { code, signal } = await stopServer(server.child);
    if (code !== 0) {
      failed = true;
      console.error(`FAIL: server exit code ${code} signal ${signal}`);
    }
  }
  console.log(failed ? `${name} FAILED` : `${name} passed`);
  process.exit(failed ? 1 : 0);
}
