// serve_client.mjs: the official `openai` npm client against a running `still serve`
// (tests/e2e/serve_openai.sh starts it). Prints "ok NAME" / "FAIL NAME: why" lines.
// argv: NODE_MODULES BASE_URL API_KEY EXPECT_DIR; EXPECT_DIR holds chat_greedy.txt and
// completion_greedy.txt, what `still generate` produced for the same prompts.
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const [nodeModules, baseURL, apiKey, expectDir] = process.argv.slice(2);
const require = createRequire(nodeModules + '/../resolve.cjs');  // resolves in nodeModules
const mod = require('openai');
const OpenAI = mod.OpenAI ?? mod.default ?? mod;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const chatGreedy = readFileSync(`${expectDir}/chat_greedy.txt`, 'utf8');
const complGreedy = readFileSync(`${expectDir}/completion_greedy.txt`, 'utf8');

let failed = 0;
function check(name, cond, detail) {
  if (cond) console.log(`ok ${name}`);
  else { failed++; console.log(`FAIL ${name}: ${detail ?? ''}`); }
}
async function attempt(name, fn) {
  try { await fn(); } catch (e) { failed++; console.log(`FAIL ${name}: threw ${e?.status ?? ''} ${e?.message ?? e}`); }
}
const user = (content) => [{ role: 'user', content }];

// Streams a chat request; returns per-choice text, finish reasons, the usage chunk and chunk count.
async function streamChat(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  const text = [], finish = [];
  let usage = null, chunks = 0, roles = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text[ch.index] = (text[ch.index] ?? '') + (ch.delta?.content ?? '');
      if (ch.delta?.role === 'assistant') roles++;
      if (ch.finish_reason) finish[ch.index] = ch.finish_reason;
    }
  }
  return { text, finish, usage, chunks, roles };
}

await attempt('models_list', async () => {
  const models = await client.models.list();
  const ids = [];
  for await (const m of models) ids.push(m.id);
  check('models_list', ids.includes('tiny'), JSON.stringify(ids));
});

await attempt('chat_greedy_equals_generate', async () => {
  const r = await client.chat.completions.create({ model: 'tiny', messages: user('hi'), max_tokens: 8, temperature: 0, logprobs: true });
  const ch = r.choices[0];
  check('chat_greedy_equals_generate', ch.message.content === chatGreedy,
    `${JSON.stringify(ch.message.content)} vs still generate ${JSON.stringify(chatGreedy)}`);
  check('chat_shape', r.object === 'chat.completion' && ch.message.role === 'assistant' && r.id.startsWith('chatcmpl-'),
    JSON.stringify(r).slice(0, 300));
  const n = r.usage.completion_tokens;
  check('chat_usage', n >= 1 && n <= 8 && r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens + n,
    JSON.stringify(r.usage));
  check('chat_finish_reason', ch.finish_reason === (n === 8 ? 'length' : 'stop'), `${ch.finish_reason} after ${n} tokens`);
  const lp = ch.logprobs?.content ?? [];
  check('chat_logprobs', lp.length === n && lp.every((t) => t.logprob <= 0 && typeof t.token === 'string')
    && lp.map((t) => t.token).join('') === ch.message.content, JSON.stringify(lp).slice(0, 300));
});

await attempt('chat_stream', async () => {
  const params = { model: 'tiny', messages: user('tell me a story'), max_tokens: 12, temperature: 0.9, seed: 11, n: 2 };
  const full = await client.chat.completions.create(params);
  const again = await client.chat.completions.create(params);
  const texts = full.choices.map((c) => c.message.content);
  check('chat_seeded_n2_deterministic', texts.length === 2 && JSON.stringify(texts) === JSON.stringify(again.choices.map((c) => c.message.content)),
    JSON.stringify([texts, again.choices.map((c) => c.message.content)]));
  check('chat_seeded_n2_distinct', texts[0] !== texts[1], JSON.stringify(texts));
  const other = await client.chat.completions.create({ ...params, seed: 12 });
  check('chat_other_seed_differs', JSON.stringify(other.choices.map((c) => c.message.content)) !== JSON.stringify(texts), 'same text for seeds 11 and 12');
  const s = await streamChat({ ...params, stream_options: { include_usage: true } });
  check('chat_stream_equals_nonstream', JSON.stringify(s.text) === JSON.stringify(texts), JSON.stringify([s.text, texts]));
  check('chat_stream_finish', s.finish.length === 2 && s.finish.every((f) => f === 'length' || f === 'stop'), JSON.stringify(s.finish));
  check('chat_stream_role_once_per_choice', s.roles === 2, `${s.roles} role deltas`);
  check('chat_stream_usage', s.usage && s.usage.completion_tokens === full.usage.completion_tokens
    && s.usage.prompt_tokens === full.usage.prompt_tokens, JSON.stringify([s.usage, full.usage]));
  check('chat_stream_chunks', s.chunks > 3, `${s.chunks} chunks`);
});

await attempt('chat_stop', async () => {
  const cps = Array.from(chatGreedy);  // code points: a stop string is whole characters
  const stop = cps[Math.floor(cps.length / 2)];
  const want = chatGreedy.slice(0, chatGreedy.indexOf(stop));
  const r = await client.chat.completions.create({ model: 'tiny', messages: user('hi'), max_tokens: 8, temperature: 0, stop: [stop] });
  check('chat_stop_string', r.choices[0].message.content === want && r.choices[0].finish_reason === 'stop',
    `${JSON.stringify(r.choices[0].message.content)} (${r.choices[0].finish_reason}) vs ${JSON.stringify(want)}, stop ${JSON.stringify(stop)}`);
  const s = await streamChat({ model: 'tiny', messages: user('hi'), max_tokens: 8, temperature: 0, stop: stop });
  check('chat_stream_stop_string', s.text[0] === want && s.finish[0] === 'stop', JSON.stringify([s.text, s.finish, want]));
});

await attempt('chat_tools', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const plain = await client.chat.completions.create({ model: 'tiny', messages: user('Weather in Paris?'), max_tokens: 4, temperature: 0 });
  const r = await client.chat.completions.create({ model: 'tiny', messages: user('Weather in Paris?'), tools, max_tokens: 4, temperature: 0 });
  check('chat_tools_reach_template', r.usage.prompt_tokens > plain.usage.prompt_tokens + 20,
    `${r.usage.prompt_tokens} prompt tokens with tools, ${plain.usage.prompt_tokens} without`);
  const m = r.choices[0].message;
  check('chat_tools_answer_shape', (typeof m.content === 'string' || Array.isArray(m.tool_calls))
    && ['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason), JSON.stringify(r.choices[0]));
  // a conversation that already holds a call and its result (content null on the call turn)
  const history = [...user('Weather in Paris?'),
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: 'sunny, 21 C' }];
  const r2 = await client.chat.completions.create({ model: 'tiny', messages: history, tools, max_tokens: 4, temperature: 0 });
  check('chat_tool_result_turn', r2.usage.prompt_tokens > r.usage.prompt_tokens + 10, `${r2.usage.prompt_tokens} vs ${r.usage.prompt_tokens}`);
  const s = await streamChat({ model: 'tiny', messages: user('Weather in Paris?'), tools, max_tokens: 4, temperature: 0 });
  check('chat_tools_stream_equals', s.text[0] === (m.content ?? ''), JSON.stringify([s.text, m.content]));
  // the text streams as it comes (one chunk per token), not all at the end
  check('chat_tools_stream_incremental', s.chunks >= 4, `${s.chunks} chunks`);
  // the client's own stream accumulator (tool_calls deltas included) gives the whole answer
  const fin = await client.chat.completions.stream({ model: 'tiny', messages: user('Weather in Paris?'), tools,
    max_tokens: 4, temperature: 0 }).finalChatCompletion();
  const fm = fin.choices[0].message;
  check('chat_tools_stream_helper', fm.content === m.content && JSON.stringify(fm.tool_calls ?? []) === JSON.stringify(m.tool_calls ?? [])
    && fin.choices[0].finish_reason === r.choices[0].finish_reason, JSON.stringify([fm, m]));
});

await attempt('completions', async () => {
  const r = await client.completions.create({ model: 'tiny', prompt: 'Hello', max_tokens: 6, temperature: 0, logprobs: 0 });
  check('completion_greedy_equals_generate', r.choices[0].text === complGreedy,
    `${JSON.stringify(r.choices[0].text)} vs still generate ${JSON.stringify(complGreedy)}`);
  check('completion_shape', r.object === 'text_completion' && r.usage.prompt_tokens === 1, JSON.stringify(r).slice(0, 300));
  const lp = r.choices[0].logprobs;
  check('completion_logprobs', lp && lp.tokens.length === r.usage.completion_tokens && lp.token_logprobs.every((x) => x <= 0)
    && lp.tokens.join('') === r.choices[0].text, JSON.stringify(lp).slice(0, 300));
  const stream = await client.completions.create({ model: 'tiny', prompt: 'Hello', max_tokens: 6, temperature: 0, stream: true });
  let text = '', finish = null;
  for await (const c of stream) { text += c.choices[0]?.text ?? ''; finish = c.choices[0]?.finish_reason ?? finish; }
  check('completion_stream_equals', text === complGreedy && finish !== null, JSON.stringify([text, complGreedy, finish]));
});

await attempt('errors', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  try { await bad.models.list(); check('wrong_key_401', false, 'no error'); } catch (e) { check('wrong_key_401', e.status === 401, `${e.status} ${e.message}`); }
  try {
    await client.chat.completions.create({ model: 'tiny', messages: user('hi'), temperature: 7 });
    check('bad_field_400', false, 'no error');
  } catch (e) { check('bad_field_400', e.status === 400 && /temperature/.test(e.message), `${e.status} ${e.message}`); }
  try {
    await client.chat.completions.create({ model: 'tiny', messages: user('hi'), max_tokens: 100000 });
    check('too_long_400', false, 'no error');
  } catch (e) { check('too_long_400', e.status === 400 && /the limit is \d+/.test(e.message), `${e.status} ${e.message}`); }
});

process.exit(failed ? 1 : 0);
