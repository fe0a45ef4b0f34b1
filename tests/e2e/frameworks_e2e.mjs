// tests/e2e/frameworks_e2e.mjs: the frameworks users reach for first, with
// their default settings, against `inferd serve` on stories260K (CPU):
// the Vercel AI SDK's default OpenAI provider (`ai` + `@ai-sdk/openai`,
// which calls /v1/responses) with generateText and streamText, and
// LangChain JS's completions model (`OpenAI` from `@langchain/openai`)
// generating a batch of prompts in one request, plain and streamed. Each
// result is compared with what the openai client gets for the same input.
// Exit 0 = pass.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';
import { OpenAI as LangChainOpenAI } from '@langchain/openai';
import { MODEL, runE2E } from './server.mjs';

const KEY = 'sk-e2e-frameworks';
const SYSTEM = 'You tell short stories.';
const USER = 'Tell me a story about a dog.';

// A fetch that records each request's url and body before sending it.
function recorder(log) {
  return (url, init) => {
    log.push({ url: String(url), body: init?.body });
    return fetch(url, init);
  };
}

async function aiSdk(base, client) {
  const want = (await client.chat.completions.create({
    model: MODEL, max_tokens: 24, temperature: 0,
    messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: USER }],
  })).choices[0].message.content;
  const sent = [];
  const provider = createOpenAI({ baseURL: `${base}/v1`, apiKey: KEY, fetch: recorder(sent) });
  const model = provider(MODEL); // the default: the Responses API
  const g = await generateText({ model, system: SYSTEM, prompt: USER, maxOutputTokens: 24, temperature: 0 });
  assert.equal(g.text, want);
  assert.equal(g.finishReason, 'length');
  assert.equal(g.usage.outputTokens, 24);
  assert.ok(g.usage.inputTokens > 0);
  console.log('AI SDK generateText ok:', JSON.stringify(g.text.slice(0, 40)));

  const s = streamText({ model, system: SYSTEM, prompt: USER, maxOutputTokens: 24, temperature: 0 });
  let text = '';
  let parts = 0;
  for await (const t of s.textStream) {
    text += t;
    parts++;
  }
  assert.equal(text, want);
  assert.equal(await s.finishReason, 'length');
  assert.equal((await s.usage).outputTokens, 24);
  assert.deepEqual(sent.map((r) => r.url), [`${base}/v1/responses`, `${base}/v1/responses`]);
  console.log(`AI SDK streamText ok (${parts} text parts)`);
}

async function langChain(base, client) {
  const prompts = ['Once upon a time', 'The little dog'];
  const want = [];
  for (const p of prompts)
    want.push((await client.completions.create({ model: MODEL, prompt: p, max_tokens: 20, temperature: 0 })).choices[0].text);
  for (const streaming of [false, true]) {
    const sent = [];
    const llm = new LangChainOpenAI({
      model: MODEL, apiKey: KEY, configuration: { baseURL: `${base}/v1`, fetch: recorder(sent) }, temperature: 0,
      maxTokens: 20, maxRetries: 0, streaming,
    });
    const r = await llm.generate(prompts);
    assert.equal(sent.length, 1); // one request with prompt: [p1, p2]
    assert.deepEqual(JSON.parse(sent[0].body).prompt, prompts);
    assert.equal(r.generations.length, 2);
    r.generations.forEach((gen, i) => assert.equal(gen[0].text, want[i]));
    if (!streaming) assert.equal(r.llmOutput.tokenUsage.completionTokens, 40);
    console.log(`LangChain OpenAI.generate([p1, p2]) ok (${streaming ? 'streamed' : 'plain'})`);
  }
}

await runE2E('e2e frameworks', KEY, async ({ base }) => {
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: KEY, maxRetries: 0, timeout: 120000 });
  await aiSdk(base, client);
  await langChain(base, client);
});
