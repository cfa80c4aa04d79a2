// serve_load.mjs: a bounded load test of `still serve` with the official `openai` client
// (tests/e2e/serve_load.sh starts the server). Every distinct request is first sent alone; then
// CLIENTS clients send ROUNDS rounds of all of them at once (streaming and not, greedy and seeded
// sampling, n 1 and 2), so the scheduler batches them continuously, and every answer must equal
// the one it got alone, token for token. Prints ok / FAIL lines and a throughput line.
// argv: NODE_MODULES BASE_URL CLIENTS ROUNDS DEADLINE_S
import { createRequire } from 'node:module';

const [nodeModules, baseURL, clientsArg, roundsArg, deadlineArg] = process.argv.slice(2);
const require = createRequire(nodeModules + '/../resolve.cjs');
const mod = require('openai');
const OpenAI = mod.OpenAI ?? mod.default ?? mod;
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 60000 });
const CLIENTS = Number(clientsArg), ROUNDS = Number(roundsArg), DEADLINE = Number(deadlineArg) * 1000;

let failed = 0;
const check = (name, cond, detail) => {
  if (cond) console.log(`ok ${name}`); else { failed++; console.log(`FAIL ${name}: ${detail ?? ''}`); }
};

// distinct requests: prompt lengths, token counts and sampling differ
const words = ['alpha', 'beta', 'gamma', 'delta', 'epsilon', 'zeta', 'eta', 'theta'];
const requests = [];
for (let i = 0; i < 8; i++) {
  const content = Array.from({ length: 1 + 7 * i }, (_, k) => words[(i + k) % words.length]).join(' ');
  const sample = i % 2 === 1;
  requests.push({ model: 'tiny', messages: [{ role: 'user', content }], max_tokens: 6 + 5 * (i % 4),
    ignore_eos: true, n: i % 3 === 2 ? 2 : 1, temperature: sample ? 0.9 : 0, seed: 100 + i, stream: i % 4 >= 2 });
}

async function ask(req) {
  if (!req.stream) {
    const r = await client.chat.completions.create(req);
    return { texts: r.choices.map((c) => c.message.content), tokens: r.usage.completion_tokens, ttft: null };
  }
  const t0 = performance.now();
  let ttft = null;
  const texts = [];
  let tokens = 0;
  const stream = await client.chat.completions.create({ ...req, stream_options: { include_usage: true } });
  for await (const c of stream) {
    if (c.usage) tokens = c.usage.completion_tokens;
    for (const ch of c.choices) {
      if (ttft === null && ch.delta?.content) ttft = performance.now() - t0;
      texts[ch.index] = (texts[ch.index] ?? '') + (ch.delta?.content ?? '');
    }
  }
  return { texts, tokens, ttft };
}

const alone = [];
for (const r of requests) alone.push(await ask(r));
check('alone_answers', alone.every((a, i) => a.texts.length === requests[i].n && a.tokens === requests[i].n * requests[i].max_tokens),
  JSON.stringify(alone.map((a) => a.tokens)));

const t0 = performance.now();
let done = 0, mismatches = 0, errors = 0, tokens = 0;
const firstBad = [];
async function worker(w) {
  for (let round = 0; round < ROUNDS && performance.now() - t0 < DEADLINE; round++) {
    for (let k = 0; k < requests.length; k++) {
      const i = (k + w) % requests.length;
      try {
        const a = await ask(requests[i]);
        tokens += a.tokens;
        if (JSON.stringify(a.texts) !== JSON.stringify(alone[i].texts)) {
          mismatches++;
          if (firstBad.length < 2) firstBad.push(`request ${i}: ${JSON.stringify(a.texts)} vs alone ${JSON.stringify(alone[i].texts)}`);
        }
      } catch (e) {
        errors++;
        if (firstBad.length < 2) firstBad.push(`request ${i}: ${e.status ?? ''} ${e.message}`);
      }
      done++;
    }
  }
}
await Promise.all(Array.from({ length: CLIENTS }, (_, w) => worker(w)));
const secs = (performance.now() - t0) / 1000;
check('load_no_errors', errors === 0, `${errors} errors: ${firstBad.join('; ')}`);
check('load_same_as_alone', mismatches === 0 && done > 0, `${mismatches} of ${done} answers differ: ${firstBad.join('; ')}`);
check('load_within_deadline', secs * 1000 < DEADLINE + 15000, `${secs.toFixed(1)} s`);
console.log(`# ${done} requests from ${CLIENTS} clients in ${secs.toFixed(2)} s: ${(done / secs).toFixed(1)} req/s, ${(tokens / secs).toFixed(0)} tokens/s`);
process.exit(failed ? 1 : 0);
