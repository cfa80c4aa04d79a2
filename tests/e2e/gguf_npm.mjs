// gguf_npm.mjs: an independent reader on the GGUF files `still export-gguf` writes: Hugging Face's
// @huggingface/gguf parser (package-lock.json) reads the file, and this script checks what it read
// against the source checkpoint read here on its own (config.json, the safetensors header and
// bytes): the architecture keys, the file type, the tokenizer keys, every tensor's name (the
// converter's names), shape (dims reversed), type, alignment and place in the data section, and
// for f32 the very bytes of every tensor the converter does not permute.
// argv: NODE_MODULES MODEL_DIR FILE.gguf OUTTYPE
import { createRequire } from 'node:module';
import { readFileSync, statSync } from 'node:fs';

const [nodeModules, dir, file, outtype] = process.argv.slice(2);
const require = createRequire(nodeModules + '/../resolve.cjs');
const { gguf } = require('@huggingface/gguf');
const tag = `${dir.split('/').pop()}_${outtype}`;
let failed = 0;
const check = (name, cond, detail) => {
  if (cond) console.log(`ok ${name}_${tag}`); else { failed++; console.log(`FAIL ${name}_${tag}: ${detail ?? ''}`); }
};

const cfg = JSON.parse(readFileSync(`${dir}/config.json`, 'utf8'));
const st = readFileSync(`${dir}/model.safetensors`);
const hlen = Number(st.readBigUInt64LE(0));
const header = JSON.parse(st.subarray(8, 8 + hlen).toString('utf8'));
const stData = st.subarray(8 + hlen);
const { metadata, tensorInfos, tensorDataOffset } = await gguf(file, { allowLocalFile: true });

// metadata
const arch = cfg.model_type;
const hd = cfg.head_dim ?? cfg.hidden_size / cfg.num_attention_heads;
const f32 = (x) => Math.fround(x);
const want = {
  'general.architecture': arch,
  'general.file_type': { f32: 0, f16: 1, bf16: 32, q8_0: 7 }[outtype],
  [`${arch}.block_count`]: cfg.num_hidden_layers,
  [`${arch}.embedding_length`]: cfg.hidden_size,
  [`${arch}.feed_forward_length`]: cfg.intermediate_size,
  [`${arch}.attention.head_count`]: cfg.num_attention_heads,
  [`${arch}.attention.head_count_kv`]: cfg.num_key_value_heads,
  [`${arch}.context_length`]: cfg.max_position_embeddings,
  [`${arch}.attention.layer_norm_rms_epsilon`]: f32(cfg.rms_norm_eps),
  [`${arch}.rope.freq_base`]: f32(cfg.rope_theta),
};
const bad = Object.entries(want).filter(([k, v]) => (typeof metadata[k] === 'bigint' ? Number(metadata[k]) : metadata[k]) !== v);
check('gguf_npm_metadata', bad.length === 0 && Number(metadata.version) === 3,
  bad.map(([k, v]) => `${k}: ${metadata[k]} vs ${v}`).join('; ') || `version ${metadata.version}`);

// tensors: the converter's names for every checkpoint tensor
const names = { 'model.embed_tokens.weight': 'token_embd.weight', 'model.norm.weight': 'output_norm.weight',
  'lm_head.weight': 'output.weight' };
const per = { input_layernorm: 'attn_norm', 'self_attn.q_proj': 'attn_q', 'self_attn.k_proj': 'attn_k',
  'self_attn.v_proj': 'attn_v', 'self_attn.o_proj': 'attn_output', 'self_attn.q_norm': 'attn_q_norm',
  'self_attn.k_norm': 'attn_k_norm', post_attention_layernorm: 'ffn_norm', 'mlp.gate_proj': 'ffn_gate',
  'mlp.up_proj': 'ffn_up', 'mlp.down_proj': 'ffn_down' };
const gname = (hf) => {
  if (names[hf]) return names[hf];
  const m = hf.match(/^model\.layers\.(\d+)\.(.+)\.(weight|bias)$/);
  return m && per[m[2]] ? `blk.${m[1]}.${per[m[2]]}.${m[3]}` : null;
};
const expected = new Map();
for (const [hf, t] of Object.entries(header)) {
  if (hf === '__metadata__') continue;
  const g = gname(hf);
  const matrix = t.shape.length === 2 && (outtype !== 'q8_0' || t.shape[1] % 32 === 0);
  const type = t.shape.length === 1 ? 0 : matrix ? { f32: 0, f16: 1, bf16: 30, q8_0: 8 }[outtype] : 1;
  expected.set(g ?? `?${hf}`, { shape: [...t.shape].reverse(), type, hf });
}
if (cfg.rope_scaling?.rope_type === 'llama3') expected.set('rope_freqs.weight', { shape: [hd / 2], type: 0 });
const got = new Map(tensorInfos.map((t) => [t.name, t]));
const diffs = [];
for (const [n, e] of expected) {
  const t = got.get(n);
  if (!t) { diffs.push(`${n} missing`); continue; }
  const shape = t.shape.map(Number);
  if (JSON.stringify(shape) !== JSON.stringify(e.shape) || t.dtype !== e.type)
    diffs.push(`${n}: ${JSON.stringify(shape)} type ${t.dtype} vs ${JSON.stringify(e.shape)} type ${e.type}`);
}
for (const n of got.keys()) if (!expected.has(n)) diffs.push(`${n} unexpected`);
check('gguf_npm_tensor_infos', diffs.length === 0 && tensorInfos.length === expected.size, diffs.slice(0, 3).join('; '));

// layout: aligned, in order, no overlap, inside the file
const align = Number(metadata['general.alignment'] ?? 32);
const bytes = (t) => {
  const n = t.shape.reduce((a, b) => a * Number(b), 1);
  return { 0: 4 * n, 1: 2 * n, 30: 2 * n, 8: (n / 32) * 34 }[t.dtype];
};
const size = statSync(file).size;
let end = 0, layout = [];
for (const t of [...tensorInfos].sort((a, b) => Number(a.offset - b.offset))) {
  const off = Number(t.offset);
  if (off % align || off < end) layout.push(`${t.name} at ${off} (after ${end}, alignment ${align})`);
  end = off + bytes(t);
}
if (Number(tensorDataOffset) % align || Number(tensorDataOffset) + end > size) layout.push(`data at ${tensorDataOffset} + ${end} > ${size}`);
check('gguf_npm_layout', layout.length === 0, layout.slice(0, 3).join('; '));

// f32: each tensor's bytes are the checkpoint's (llama's Q/K rows are permuted by the converter)
if (outtype === 'f32') {
  const buf = readFileSync(file);
  const mism = [];
  for (const [n, e] of expected) {
    if (!e.hf || (arch === 'llama' && /attn_[qk]\./.test(n))) continue;
    const t = got.get(n), s = header[e.hf];
    const a = buf.subarray(Number(tensorDataOffset + t.offset), Number(tensorDataOffset + t.offset) + bytes(t));
    const b = stData.subarray(s.data_offsets[0], s.data_offsets[1]);
    if (s.dtype !== 'F32' || !a.equals(b)) mism.push(n);
  }
  check('gguf_npm_f32_bytes', mism.length === 0, mism.slice(0, 3).join(', '));
}

// tokenizer keys, when the directory has a tokenizer.json
let tj = null;
try { tj = JSON.parse(readFileSync(`${dir}/tokenizer.json`, 'utf8')); } catch { /* none */ }
if (tj) {
  const vocab = Object.keys(tj.model.vocab).length + tj.added_tokens.filter((t) => !(t.content in tj.model.vocab)).length;
  const tokens = metadata['tokenizer.ggml.tokens'] ?? [];
  const ok = metadata['tokenizer.ggml.model'] === 'gpt2' && tokens.length >= vocab
    && (metadata['tokenizer.ggml.merges'] ?? []).length === tj.model.merges.length
    && tj.added_tokens.every((t) => tokens[t.id] === t.content)
    && Object.entries(tj.model.vocab).slice(0, 1000).every(([s, id]) => tokens[id] === s)
    && Number(metadata['tokenizer.ggml.eos_token_id']) === cfg.eos_token_id;
  check('gguf_npm_tokenizer', ok, `model ${metadata['tokenizer.ggml.model']}, ${tokens.length} tokens for ${vocab}, `
    + `${(metadata['tokenizer.ggml.merges'] ?? []).length} merges for ${tj.model.merges.length}`);
}
process.exit(failed ? 1 : 0);
