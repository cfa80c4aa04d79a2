// serve_bench.mjs: CLIENTS concurrent streaming chat clients (the official `openai` package)
// against a running `still serve` for SECONDS; prints one JSON line: requests/s, generated
// tokens/s (aggregate), time to first token (mean, p50, p90) and per-request decode tokens/s.
// argv: NODE_MODULES BASE_URL CLIENTS SECONDS PROMPT_WORDS NEW_TOKENS
import { createRequire } from 'node:module';

const [nodeModules, baseURL, clientsArg, secsArg, wordsArg, newArg] = process.argv.slice(2);
const require = createRequire(nodeModules + '/../resolve.cjs');
const mod = require('openai');
const OpenAI = mod.OpenAI ?? mod.default ?? mod;
const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 600000 });
const CLIENTS = Number(clientsArg), SECS = Number(secsArg), WORDS = Number(wordsArg), NEW = Number(newArg);
const words = ['river', 'stone', 'cloud', 'lamp', 'field', 'song', 'bread', 'window'];

const ttfts = [], decodeRates = [];
let requests = 0, tokens = 0, errors = 0;
const t0 = performance.now();
async function worker(w) {
  for (let k = 0; performance.now() - t0 < SECS * 1000; k++) {
    const content = Array.from({ length: WORDS }, (_, i) => words[(i * 3 + w + k) % words.length]).join(' ');
    const start = performance.now();
    let first = null, n = 0;
    try {
      const stream = await client.chat.completions.create({ model: 'bench', messages: [{ role: 'user', content }],
        max_tokens: NEW, ignore_eos: true, temperature: 0.8, seed: w * 1000 + k, stream: true,
        stream_options: { include_usage: true } });
      for await (const c of stream) {
        if (first === null && c.choices.length) first = performance.now();
        if (c.usage) n = c.usage.completion_tokens;
      }
    } catch (e) { errors++; continue; }
    const end = performance.now();
    requests++;
    tokens += n;
    if (first !== null) {
      ttfts.push(first - start);
      if (n > 1) decodeRates.push((n - 1) / ((end - first) / 1000));
    }
  }
}
await Promise.all(Array.from({ length: CLIENTS }, (_, w) => worker(w)));
const secs = (performance.now() - t0) / 1000;
const q = (a, p) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : 0; };
const mean = (a) => a.length ? a.reduce((x, y) => x + y, 0) / a.length : 0;
console.log(JSON.stringify({ clients: CLIENTS, seconds: +secs.toFixed(2), requests, errors,
  requests_per_s: +(requests / secs).toFixed(3), tokens_per_s: +(tokens / secs).toFixed(1),
  ttft_ms_mean: +mean(ttfts).toFixed(1), ttft_ms_p50: +q(ttfts, 0.5).toFixed(1), ttft_ms_p90: +q(ttfts, 0.9).toFixed(1),
  decode_tok_s_per_request: +mean(decodeRates).toFixed(1) }));
