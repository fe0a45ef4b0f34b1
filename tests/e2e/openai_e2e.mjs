// tests/e2e/openai_e2e.mjs: the official `openai` npm client, unchanged,
// against `inferd serve` on stories260K (CPU): models list, completion (the
// llama2.c golden greedy text), streaming completion, chat, streaming chat
// (same text as non-streamed, usage chunk), and the client's typed errors
// for a wrong key and an unknown model. Starts and stops the server itself;
// the server must exit 0 on SIGTERM. Exit 0 = pass.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const bin = process.env.INFERD_BIN;
const fixtures = process.env.INFERD_FIXTURES;
const model = `${fixtures}/models/stories260K`;
const KEY = 'sk-e2e-test';

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

function stopServer(child) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); }, 30000);
    child.on('exit', (code, signal) => { clearTimeout(timer); resolve({ code, signal }); });
    child.kill('SIGTERM');
  });
}

const golden = JSON.parse(readFileSync(`${fixtures}/golden/stories260K.json`, 'utf8')).cases[0];
const goldenText = golden.stdout_text.slice(golden.prompt.length);

const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const child = spawn(bin, ['serve', '--model', model, '--device', 'cpu', '--threads', '1', '--host', '127.0.0.1',
  '--port', String(port), '--chat-template', 'chatml', '--api-key', KEY, '--log-level', 'warn'],
{ stdio: ['ignore', 'inherit', 'inherit'] });

let failed = false;
try {
  await waitHealthy(base, child, 30000);
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120000 });

  const models = await client.models.list();
  assert.equal(models.data[0].id, 'stories260K');

  const c = await client.completions.create({
    model: 'stories260K', prompt: golden.prompt, max_tokens: 60, temperature: 0,
  });
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices[0].text, goldenText);
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 60);
  console.log('completion ok:', JSON.stringify(c.choices[0].text.slice(0, 40)), 'timings', JSON.stringify(c.timings));

  let streamed = '';
  const cs = await client.completions.create({
    model: 'stories260K', prompt: golden.prompt, max_tokens: 60, temperature: 0, stream: true,
  });
  for await (const chunk of cs) streamed += chunk.choices[0]?.text ?? '';
  assert.equal(streamed, goldenText);
  console.log('streaming completion ok');

  const messages = [
    { role: 'system', content: 'You tell short stories.' },
    { role: 'user', content: 'Tell me a story about a dog.' },
  ];
  const chat = await client.chat.completions.create({
    model: 'stories260K', messages, max_tokens: 30, temperature: 0,
  });
  assert.equal(chat.object, 'chat.completion');
  assert.equal(chat.choices[0].message.role, 'assistant');
  assert.ok(chat.choices[0].message.content.length > 0);
  assert.equal(chat.usage.completion_tokens, 30);
  console.log('chat ok:', JSON.stringify(chat.choices[0].message.content.slice(0, 40)));

  let text = '';
  let role = null;
  let usage = null;
  let finish = null;
  const stream = await client.chat.completions.create({
    model: 'stories260K', messages, max_tokens: 30, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (ch?.delta?.role) role = ch.delta.role;
    if (ch?.delta?.content) text += ch.delta.content;
    if (ch?.finish_reason) finish = ch.finish_reason;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, chat.choices[0].message.content);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 30);
  console.log('streaming chat ok');

  await assert.rejects(
    new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sk-wrong', maxRetries: 0 }).models.list(),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401,
  );
  await assert.rejects(
    client.completions.create({ model: 'gpt-4', prompt: 'hi', max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404,
  );
  await assert.rejects(
    client.completions.create({ model: 'stories260K', prompt: 'hi', max_tokens: 100000 }),
    (e) => e instanceof OpenAI.BadRequestError && /512/.test(e.message) && /100000/.test(e.message),
  );
  console.log('typed errors ok');
} catch (e) {
  failed = true;
  console.error('FAIL:', e);
}
const { code, signal } = await stopServer(child);
if (code !== 0) {
  failed = true;
  console.error(`FAIL: server exit code ${code} signal ${signal}`);
}
console.log(failed ? 'e2e FAILED' : 'e2e passed');
process.exit(failed ? 1 : 0);
