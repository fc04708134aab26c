// The official openai SDK (node) against a running deltaserve: the request shapes LangChain,
// Open WebUI and agent frameworks send with Qwen's published sampling settings — n > 1,
// presence / frequency / repetition penalties, logit_bias, top_k / min_p, stop_token_ids,
// min_tokens, echo — streaming and not, and an out-of-range n answered with a 400 the SDK
// raises as BadRequestError; with a second server (the tiny Qwen3.5-VL fixture and its mmproj),
// an image as a data URL, streaming and not. Usage: node sdk_test.mjs PORT [VL_PORT VL_REFERENCE_JSON]
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: `http://127.0.0.1:${process.argv[2]}/v1`, apiKey: 'unused', maxRetries: 0 });
let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`);
  if (!ok) failures += 1;
};

const model = (await client.models.list()).data[0].id;
const qwen = { temperature: 0.7, top_p: 0.95, top_k: 20, min_p: 0, presence_penalty: 1.5 };

// Chat, n = 2, with the penalties and a logit bias.
const chat = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Write a haiku about GPUs.' }], ...qwen, n: 2, seed: 11,
  frequency_penalty: 0.5, repetition_penalty: 1.05, logit_bias: { 198: -100 }, max_tokens: 12,
});
check(chat.choices.length === 2, 'chat n=2 returns two choices');
check(chat.choices.every((c, i) => c.index === i && typeof c.finish_reason === 'string'), 'chat choices carry index and finish_reason');
check(chat.usage.completion_tokens >= 2 && chat.usage.total_tokens === chat.usage.prompt_tokens + chat.usage.completion_tokens,
  'chat usage sums the choices');

// Streaming chat, n = 2, with the usage chunk.
const stream = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Count to five.' }], ...qwen, n: 2, seed: 5, max_tokens: 10,
  stream: true, stream_options: { include_usage: true },
});
const seen = new Set();
let usage = null;
let finishes = 0;
for await (const chunk of stream) {
  for (const c of chunk.choices) {
    seen.add(c.index);
    if (c.finish_reason) finishes += 1;
  }
  if (chunk.usage) usage = chunk.usage;
}
check(seen.has(0) && seen.has(1) && seen.size === 2, 'streamed chunks carry choices 0 and 1');
check(finishes === 2, 'each streamed choice finishes once');
check(usage !== null && usage.completion_tokens >= 2, 'the stream ends with one usage chunk');

// Completions: n = 3 with echo, min_tokens and stop_token_ids (vLLM extensions ride in the body).
const prompt = 'def fibonacci(n):';
const comp = await client.completions.create({
  model, prompt, n: 3, echo: true, max_tokens: 6, min_tokens: 2, stop_token_ids: [198], temperature: 1, seed: 1,
});
check(comp.choices.length === 3 && comp.choices.every((c, i) => c.index === i), 'completions n=3, indexes 0..2');
check(comp.choices.every((c) => c.text.startsWith(prompt)), 'echo puts the prompt first in every choice');

// Greedy choices are identical.
const greedy = await client.completions.create({ model, prompt, n: 2, max_tokens: 8, temperature: 0 });
check(greedy.choices[0].text === greedy.choices[1].text, 'greedy choices are identical');

// Out-of-range values: 400, raised by the SDK with the parameter named.
for (const [body, param] of [[{ n: 17 }, 'n'], [{ presence_penalty: 3 }, 'presence_penalty'],
                             [{ logit_bias: { 999999999: 1 } }, 'logit_bias'], [{ min_p: 2 }, 'min_p']]) {
  try {
    await client.completions.create({ model, prompt, max_tokens: 2, ...body });
    check(false, `${param} out of range is refused`);
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === param, `${param} out of range: 400 naming it`);
  }
}

// Embeddings and rerank (the server hosts them beside the chat model: run.sh's --embed-model and
// --rerank-model). The SDK asks for base64 unless told otherwise and decodes it itself, so the
// default call and encoding_format 'float' must give the same vectors.
const models = (await client.models.list()).data;
const embedModel = models.find((m) => m.task === 'embed')?.id;
check(models.length === 3 && embedModel !== undefined, '/v1/models lists the chat, embedding and reranker models');
const texts = ['The capital of France is Paris.', 'def add(a, b): return a + b', 'Grüße, 世界'];
const viaBase64 = await client.embeddings.create({ model: embedModel, input: texts });
const viaFloat = await client.embeddings.create({ model: embedModel, input: texts, encoding_format: 'float' });
check(viaBase64.data.length === 3 && viaBase64.data.every((d, i) => d.index === i && d.object === 'embedding'),
  'embeddings.create returns one embedding per input, in order');
const close = (a, b) => a.length === b.length && a.every((x, i) => Math.abs(x - b[i]) <= 1e-6);
check(viaBase64.data.every((d, i) => close(d.embedding, viaFloat.data[i].embedding)),
  'the SDK-decoded base64 vectors equal the float ones');
const norm = Math.hypot(...viaFloat.data[0].embedding);
check(Math.abs(norm - 1) < 1e-4 && viaFloat.usage.prompt_tokens > 0, 'embeddings are unit vectors with usage');
const raw = await client.embeddings.create({ model: embedModel, input: 'x', encoding_format: 'base64' });
check(typeof raw.data[0].embedding === 'string', "encoding_format 'base64' returns the base64 string");
const short = await client.embeddings.create({ model: embedModel, input: texts[0], dimensions: 16, encoding_format: 'float' });
check(short.data[0].embedding.length === 16 && Math.abs(Math.hypot(...short.data[0].embedding) - 1) < 1e-4,
  'dimensions 16: the first 16 values, re-normalised');
try {
  await client.embeddings.create({ model: embedModel, input: 'x', dimensions: 100000 });
  check(false, 'dimensions out of range is refused');
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.status === 400, 'dimensions out of range: 400');
}
// Rerank is no SDK method: the SDK's generic post, as RAG stacks call it.
const ranked = await client.post('/rerank', {
  body: { query: 'capital of France', documents: ['Paris is the capital of France.', 'Bananas are yellow.'], top_n: 1 },
});
check(ranked.results.length === 1 && ranked.results[0].index >= 0 && ranked.results[0].relevance_score >= 0,
  'rerank through client.post: top_n 1 with index and relevance_score');

// Vision input (issue 31), on the second server (run.sh: the tiny Qwen3.5-VL fixture with --mmproj,
// f32 KV cache): the reference's PNG as an image_url data URL, greedy. The reply's tokens are the
// transformers reference's (tests/data/reference/qwen35_vl.json, decoded by the server's
// /detokenize), the same as the raw HTTP request's (as tests/e2e/test_vision_e2e.cpp sends it),
// and the stream carries the same tokens and text.
const [vlPort, vlReference] = process.argv.slice(3);
if (vlPort !== undefined) {
  const ref = JSON.parse(readFileSync(vlReference, 'utf8'));
  const one = ref.prompts.one_image;
  const vl = new OpenAI({ baseURL: `http://127.0.0.1:${vlPort}/v1`, apiKey: 'unused', maxRetries: 0 });
  const post = async (path, body) => (await fetch(`http://127.0.0.1:${vlPort}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  })).json();
  const request = {
    model: (await vl.models.list()).data[0].id,
    messages: [{ role: 'user', content: [
      { type: 'image_url', image_url: { url: ref.images[one.images[0]].data_url } },
      { type: 'text', text: one.messages[0].content.find((p) => p.type === 'text').text },
    ] }],
    temperature: 0, max_tokens: one.greedy_16.tokens.length, logprobs: true, ignore_eos: true,
  };
  const want = (await post('/detokenize', { tokens: one.greedy_16.tokens })).prompt;
  const tokens = (logprobs) => logprobs.content.map((t) => Buffer.from(t.bytes).toString('latin1'));
  const text = (tokenList) => Buffer.from(tokenList.join(''), 'latin1').toString('utf8');
  const said = (m) => (m.reasoning_content ?? '') + (m.content ?? '');

  const reply = await vl.chat.completions.create(request);
  const got = tokens(reply.choices[0].logprobs);
  check(got.length === one.greedy_16.tokens.length && text(got) === want,
    'image_url data URL: the reply is the reference greedy tokens');
  check(reply.usage.prompt_tokens === one.ids.length, 'image_url data URL: prompt_tokens counts the image tokens');
  const raw = await post('/v1/chat/completions', request);
  check(JSON.stringify(tokens(raw.choices[0].logprobs)) === JSON.stringify(got) &&
    said(raw.choices[0].message) === said(reply.choices[0].message),
    'image_url data URL: the SDK reply equals the raw HTTP reply');

  const streamed = [];
  let streamedText = '';
  let finish = null;
  for await (const chunk of await vl.chat.completions.create({ ...request, stream: true })) {
    for (const c of chunk.choices) {
      if (c.logprobs?.content) streamed.push(...tokens(c.logprobs));
      streamedText += said(c.delta ?? {});
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  check(JSON.stringify(streamed) === JSON.stringify(got) && finish === 'length',
    'image_url data URL, streamed: the same tokens, finish_reason length');
  check(streamedText === said(reply.choices[0].message), 'image_url data URL, streamed: the same text');
}

if (failures > 0) {
  console.error(`${failures} check(s) failed`);
  process.exit(1);
}
console.log('all checks passed');
