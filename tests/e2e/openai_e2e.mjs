// tests/e2e/openai_e2e.mjs: the official `openai` npm client, unchanged,
// against `inferd serve` on stories260K (CPU): models list, completion (the
// llama2.c golden greedy text), streaming completion, batched prompts (one
// choice per prompt, equal to the single requests, streamed chunks by
// index), echo, n > 1 (seeded choices equal the single requests with seed
// + k), presence/frequency penalties (change the greedy text), logit_bias
// (+100 forces a token), chat, chat with n = 2, streaming chat (same text
// as non-streamed, usage chunk), responses.create plain and streamed (the same text as chat), and
// the client's typed errors for a wrong key, an unknown model and refused
// fields. Exit 0 = pass.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { MODEL, golden, runE2E } from './server.mjs';

const KEY = 'sk-e2e-test';
const g = golden();

async function completions(client) {
  const c = await client.completions.create({ model: MODEL, prompt: g.prompt, max_tokens: 60, temperature: 0 });
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices[0].text, g.text);
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 60);
  console.log('completion ok:', JSON.stringify(c.choices[0].text.slice(0, 40)), 'timings', JSON.stringify(c.timings));

  let streamed = '';
  const cs = await client.completions.create({
    model: MODEL, prompt: g.prompt, max_tokens: 60, temperature: 0, stream: true,
  });
  for await (const chunk of cs) streamed += chunk.choices[0]?.text ?? '';
  assert.equal(streamed, g.text);
  console.log('streaming completion ok');
}

// A batch of prompts (text and token ids) equals the single requests; the
// stream interleaves chunks tagged by index; echo prepends each prompt.
async function batched(client) {
  const prompts = [g.prompt, 'The little dog', 'Lily wanted'];
  const singles = [];
  for (const p of prompts) {
    const r = await client.completions.create({ model: MODEL, prompt: p, max_tokens: 20, temperature: 0 });
    singles.push(r);
  }
  const b = await client.completions.create({ model: MODEL, prompt: prompts, max_tokens: 20, temperature: 0 });
  assert.equal(b.choices.length, 3);
  b.choices.forEach((c, i) => {
    assert.equal(c.index, i);
    assert.equal(c.text, singles[i].choices[0].text);
  });
  assert.equal(b.usage.prompt_tokens, singles.reduce((s, r) => s + r.usage.prompt_tokens, 0));
  assert.equal(b.usage.completion_tokens, 60);

  const ids = [[1, 403, 407], [1, 403]];
  const bi = await client.completions.create({ model: MODEL, prompt: ids, max_tokens: 8, temperature: 0 });
  assert.equal(bi.choices.length, 2);

  const texts = ['', '', ''];
  const finishes = [null, null, null];
  let usage = null;
  const s = await client.completions.create({
    model: MODEL, prompt: prompts, max_tokens: 20, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  for await (const chunk of s) {
    for (const c of chunk.choices) {
      texts[c.index] += c.text;
      if (c.finish_reason) finishes[c.index] = c.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.deepEqual(texts, singles.map((r) => r.choices[0].text));
  assert.deepEqual(finishes, ['length', 'length', 'length']);
  assert.equal(usage.completion_tokens, 60);
  console.log('batched prompts ok (plain, token ids, streamed by index)');

  const e = await client.completions.create({
    model: MODEL, prompt: prompts.slice(0, 2), max_tokens: 20, temperature: 0, echo: true,
  });
  e.choices.forEach((c, i) => assert.equal(c.text, prompts[i] + singles[i].choices[0].text));
  let echoed = '';
  const es = await client.completions.create({
    model: MODEL, prompt: g.prompt, max_tokens: 20, temperature: 0, echo: true, stream: true,
  });
  let first = null;
  for await (const chunk of es) {
    const t = chunk.choices[0]?.text ?? '';
    if (first === null) first = t;
    echoed += t;
  }
  assert.equal(first, g.prompt);
  assert.equal(echoed, g.prompt + singles[0].choices[0].text);
  console.log('echo ok');
}

// n, penalties and logit_bias through the client's own request types.
async function sampling(base, client) {
  const n = await client.completions.create({
    model: MODEL, prompt: g.prompt, max_tokens: 20, temperature: 0.9, seed: 99, n: 2,
  });
  assert.equal(n.choices.length, 2);
  for (const k of [0, 1]) {
    const one = await client.completions.create({
      model: MODEL, prompt: g.prompt, max_tokens: 20, temperature: 0.9, seed: 99 + k,
    });
    assert.equal(n.choices[k].index, k);
    assert.equal(n.choices[k].text, one.choices[0].text);
  }
  assert.equal(n.usage.completion_tokens, n.choices.length * 20);
  console.log('n=2 ok');

  const plain = await client.completions.create({ model: MODEL, prompt: g.prompt, max_tokens: 40, temperature: 0 });
  for (const pen of [{ presence_penalty: 2 }, { frequency_penalty: 2 }]) {
    const p = await client.completions.create({ model: MODEL, prompt: g.prompt, max_tokens: 40, temperature: 0, ...pen });
    assert.notEqual(p.choices[0].text, plain.choices[0].text, JSON.stringify(pen));
    const again = await client.completions.create({ model: MODEL, prompt: g.prompt, max_tokens: 40, temperature: 0, ...pen });
    assert.equal(again.choices[0].text, p.choices[0].text);
  }
  console.log('penalties ok');

  // +100 on one id: every generated token is that id (greedy and sampled);
  // /detokenize names the token (a leading space is dropped at the start
  // of a text, hence the trim)
  const id = 403;
  const piece = await fetch(`${base}/detokenize`, {
    method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ tokens: [id] }),
  }).then((r) => r.json());
  for (const temperature of [0, 1]) {
    const b = await client.completions.create({
      model: MODEL, prompt: g.prompt, max_tokens: 8, temperature, seed: 5, logprobs: 0, logit_bias: { [id]: 100 },
    });
    const toks = b.choices[0].logprobs.tokens;
    assert.equal(toks.length, 8);
    assert.ok(toks.every((t) => t === toks[0] && t.trim() === piece.prompt.trim()), JSON.stringify(toks));
    assert.deepEqual(b.choices[0].text.trim().split(' '), Array(8).fill(piece.prompt.trim()));
  }
  console.log('logit_bias ok');
}

const messages = [
  { role: 'system', content: 'You tell short stories.' },
  { role: 'user', content: 'Tell me a story about a dog.' },
];

async function chat(client) {
  const chat = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 30, temperature: 0 });
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
    model: MODEL, messages, max_tokens: 30, temperature: 0, stream: true, stream_options: { include_usage: true },
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

  const two = await client.chat.completions.create({ model: MODEL, messages, max_tokens: 30, temperature: 0, n: 2 });
  assert.equal(two.choices.length, 2);
  two.choices.forEach((c, i) => {
    assert.equal(c.index, i);
    assert.equal(c.message.content, chat.choices[0].message.content);
  });
  assert.equal(two.usage.prompt_tokens, chat.usage.prompt_tokens);
  assert.equal(two.usage.completion_tokens, 60);
  console.log('chat n=2 ok');
  return chat.choices[0].message.content;
}

// responses.create renders through the chat template: the same text as chat.
async function responses(client, chatText) {
  const r = await client.responses.create({
    model: MODEL, instructions: messages[0].content, input: messages[1].content, max_output_tokens: 30, temperature: 0,
  });
  assert.equal(r.object, 'response');
  assert.equal(r.output_text, chatText); // the SDK's own accessor over output[].content[]
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.usage.output_tokens, 30);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 30);

  const r2 = await client.responses.create({
    model: MODEL, input: messages.map((m) => ({ role: m.role, content: [{ type: 'input_text', text: m.content }] })),
    max_output_tokens: 30, temperature: 0,
  });
  assert.equal(r2.output_text, chatText);

  const types = [];
  let deltas = '';
  let done = null;
  const stream = await client.responses.create({
    model: MODEL, instructions: messages[0].content, input: messages[1].content, max_output_tokens: 30,
    temperature: 0, stream: true,
  });
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') deltas += ev.delta;
    if (ev.type === 'response.incomplete' || ev.type === 'response.completed') done = ev.response;
  }
  assert.deepEqual(types.slice(0, 4),
    ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  assert.deepEqual(types.slice(-4),
    ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
  assert.equal(deltas, chatText);
  assert.equal(done.output[0].content[0].text, chatText);
  assert.equal(done.usage.output_tokens, 30);
  console.log('responses ok (plain, message list, streamed:', types.length, 'events)');
}

async function errors(base, client) {
  await assert.rejects(
    new OpenAI({ baseURL: `${base}/v1`, apiKey: 'sk-wrong', maxRetries: 0 }).models.list(),
    (e) => e instanceof OpenAI.AuthenticationError && e.status === 401,
  );
  await assert.rejects(
    client.completions.create({ model: 'gpt-4', prompt: 'hi', max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404,
  );
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'hi', max_tokens: 100000 }),
    (e) => e instanceof OpenAI.BadRequestError && /512/.test(e.message) && /100000/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: ['ok', ''], max_tokens: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'prompt' && /'prompt'\[1\]/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt: 'hi', suffix: 'end', max_tokens: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'suffix',
  );
  await assert.rejects(
    client.responses.create({ model: MODEL, input: 'hi', previous_response_id: 'resp_123' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id',
  );
  await assert.rejects(
    client.responses.create({ model: MODEL, input: 'hi', tools: [{ type: 'function', name: 'f', parameters: {} }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools',
  );
  console.log('typed errors ok');
}

await runE2E('e2e openai', KEY, async ({ base }) => {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120000 });
  const models = await client.models.list();
  assert.equal(models.data[0].id, MODEL);
  await completions(client);
  await batched(client);
  await sampling(base, client);
  const chatText = await chat(client);
  await responses(client, chatText);
  await errors(base, client);
});
