// make_synth_tokenizers.mjs: small synthetic tokenizer.json files, each exercising a set of
// tokenizer components, and their reference outputs.
//
//   node scripts/make_synth_tokenizers.mjs NODE_MODULES_DIR OUT_DIR
//
// For every spec below it writes OUT_DIR/<name>/tokenizer.json (a tiny BPE vocabulary whose
// merges are trained here, deterministically, on TRAIN), tokenizer_config.json and
// expected.jsonl. expected.jsonl holds, per corpus text, what the Rust `tokenizers` library (the
// npm package `tokenizers`, Hugging Face's Node binding of the Rust crate) computes: ids without
// and with special tokens, and the decodes of the latter with and without skip_special_tokens;
// lines with "decode_ids" are decode-only cases (byte tokens that do not form UTF-8, special ids).
// Every case is also run through transformers.js (@lenml/tokenizers). Where it disagrees with
// Rust, the line keeps the Rust value and records transformers.js's in "tjs" with the reason in
// "why". The reasons are declared per tokenizer (spec.tjs); a disagreement that no reason
// declares, or a declared reason that no case shows, stops the script.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [nm, outDir] = process.argv.slice(2);
if (!nm || !outDir) {
  console.error("usage: make_synth_tokenizers.mjs NODE_MODULES_DIR OUT_DIR");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(nm), "package.json"));
const rust = require("tokenizers");
const tjs = require("@lenml/tokenizers");

// ---- training text and corpus ----------------------------------------------------------------
const TRAIN = [
  "the cat sat on the mat and the dog sat on the log",
  "hello world, hello there; the world is wide and the sea is deep",
  "then they went there and saw that the other one was theirs",
  "in 2024 the 12 cats ate 345 fish, 6 mice and 78 birds",
  "lower case and UPPER CASE and Mixed Case words",
  "don't stop, it's fine, we'll see, they've gone",
  "a-b a_b a.b a,b a!b ab-cd ef.gh",
].join("\n");

const CORPUS = [
  "",
  " ",
  "hello world",
  "Hello World",
  "HELLO WORLD",
  " hello  world ",
  "   leading and trailing   ",
  "the cat sat on the mat",
  "the cats concat the cat.",
  "then there the other",
  "a-b_c d.e,f!g?h",
  "ab-cd ef.gh,,ij",
  "x1y22z333 4444 5",
  "in 2024 the 12 cats ate 345 fish",
  "don't stop, it's fine",
  "\t\ttab\nnew\r\nline",
  "a\u00A0b\u3000c\u2003d\u0085e\uFEFFf\u200Bg",
  "ΟΔΟΣ ΣΑΣ Σ aΣb ΣΣ ὈΔΥΣΣΕΎΣ Σ. (ΣΑΣ) ΑΣ'Σ",
  "ﬁ ﬂ ㎏ ① Ｆｕｌｌ ＡＢＣ ½ ² ™ ǅ",
  "Café e\u0301 İstanbul ẞ Ǆ",
  "日本語 テキスト 한국어",
  "😀 👍🏽 héllo",
  "Ⅻ ٣٤ ४५ 𝟘𝟙 ²³",
  "under_score camelCase kebab-case",
  "▁already▁has▁marks ▁",
  "zzqqxx",
  "~~~ ### @@@",
];

// ---- BPE training -----------------------------------------------------------------------------
// Words are arrays of initial symbols; merge the most frequent adjacent pair (ties: the smallest
// pair in code-unit order) n times. join(a, b) forms the merged token (prefix-aware for "##").
function trainMerges(words, n, join = (a, b) => a + b) {
  words = words.map((w) => w.slice());
  const merges = [];
  for (let k = 0; k < n; k++) {
    const counts = new Map();
    for (const w of words)
      for (let i = 0; i + 1 < w.length; i++) {
        const key = JSON.stringify([w[i], w[i + 1]]);
        counts.set(key, (counts.get(key) ?? 0) + 1);
      }
    let best = null, bestN = 1;
    for (const [key, c] of counts)
      if (c > bestN || (c === bestN && best !== null && key < best)) best = key, bestN = c;
    if (best === null) break;
    const [a, b] = JSON.parse(best);
    merges.push([a, b]);
    const m = join(a, b);
    for (const w of words)
      for (let i = 0; i + 1 < w.length; i++)
        if (w[i] === a && w[i + 1] === b) w.splice(i, 2, m);
  }
  return merges;
}

const chars = (s) => Array.from(s);

// GPT-2 byte <-> character table.
const BYTE_CHARS = (() => {
  const keep = [];
  for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
  for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
  for (let b = 0xae; b <= 0xff; b++) keep.push(b);
  const map = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) map[b] = keep.includes(b) ? String.fromCodePoint(b) : String.fromCodePoint(256 + extra++);
  return map;
})();
const byteLevel = (s) => Array.from(new TextEncoder().encode(s), (b) => BYTE_CHARS[b]);

// A vocabulary from base symbols, the merges' results and extra entries, ids in that order.
function buildVocab(base, merges, join, extra = []) {
  const vocab = {};
  let id = 0;
  for (const t of [...base, ...merges.map(([a, b]) => join(a, b)), ...extra])
    if (!(t in vocab)) vocab[t] = id++;
  return vocab;
}

const BYTE_TOKENS = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`);
const ASCII = Array.from({ length: 95 }, (_, i) => String.fromCharCode(32 + i));

function bpeModel(vocab, merges, opts = {}) {
  return {
    type: "BPE", dropout: null, unk_token: opts.unk ?? null,
    continuing_subword_prefix: opts.prefix ?? null, end_of_word_suffix: opts.suffix ?? null,
    fuse_unk: opts.fuse_unk ?? false, byte_fallback: opts.byte_fallback ?? false,
    ignore_merges: opts.ignore_merges ?? false, vocab, merges,
  };
}

function added(id, content, o = {}) {
  return { id, content, single_word: o.single_word ?? false, lstrip: o.lstrip ?? false, rstrip: o.rstrip ?? false,
           normalized: o.normalized ?? !o.special, special: o.special ?? false };
}

// Added tokens appended after the model vocabulary.
function withAdded(vocab, list) {
  let next = Math.max(...Object.values(vocab)) + 1;
  return list.map(([content, o]) => added(next++, content, o));
}

function template(bos, eos, ids) {
  const single = [], pair = [], special_tokens = {};
  if (bos) single.push({ SpecialToken: { id: bos, type_id: 0 } });
  single.push({ Sequence: { id: "A", type_id: 0 } });
  if (eos) single.push({ SpecialToken: { id: eos, type_id: 0 } });
  pair.push(...single, { Sequence: { id: "B", type_id: 1 } });
  for (const t of [bos, eos]) if (t) special_tokens[t] = { id: t, ids: [ids[t]], tokens: [t] };
  return { type: "TemplateProcessing", single, pair, special_tokens };
}

const replace = (kind, pat, content) => ({ type: "Replace", pattern: { [kind]: pat }, content });
const seq = (key, list) => ({ type: "Sequence", [key]: list });
const split = (kind, pat, behavior, invert = false) => ({ type: "Split", pattern: { [kind]: pat }, behavior, invert });
const metaspace = (scheme, splitFlag, legacy) => ({
  type: "Metaspace", replacement: "▁", prepend_scheme: scheme, split: splitFlag,
  ...(legacy === undefined ? {} : { add_prefix_space: legacy }),
});

// ---- the specs ------------------------------------------------------------------------------
const SPECS = [];

// Byte-level BPE: NFKC, ByteLevel with its GPT-2 regex and a prefix space, a template with BOS/EOS,
// added tokens with every flag.
{
  const words = (TRAIN.match(/ ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+/gu) || []).map(byteLevel);
  const merges = trainMerges(words, 80);
  const vocab = buildVocab(BYTE_CHARS, merges, (a, b) => a + b);
  const add = withAdded(vocab, [["<|bos|>", { special: true }], ["<|eos|>", { special: true }],
    ["<mask>", { special: true, lstrip: true }], ["<sep>", { special: true, rstrip: true }],
    ["[X]", { normalized: false }], ["ｈｉ", { normalized: true }], ["cat", { single_word: true, normalized: false }]]);
  const ids = Object.fromEntries(add.map((t) => [t.content, t.id]));
  SPECS.push({
    name: "bytelevel_template",
    json: {
      added_tokens: add, normalizer: { type: "NFKC" },
      pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      post_processor: template("<|bos|>", "<|eos|>", ids), decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
      model: bpeModel(vocab, merges),
    },
    texts: ["hi there <mask> x <sep>  y", "a  <mask>b<sep>\tc", "the cat, concat cats cat", "[X]hi[X] hi HI ｈｉ",
            "cat", " cat ", "<|bos|>hello<|eos|>"],
    decodes: [[vocab["æ"]], [vocab["æ"], vocab["Ĺ"]], [ids["<|bos|>"], vocab["Ġthe"] ?? 0, ids["<|eos|>"]]],
    tjs: "transformers.js matches added tokens on the raw text only and ignores single_word: a normalized:true " +
         "token (\"ｈｉ\", NFKC \"hi\") is not found in normalized text, and single_word \"cat\" also splits " +
         "\"concat\"/\"cats\"; it decodes \"ｈｉ\" as is, where Rust >= 0.23 decodes the normalised form \"hi\"",
  });
}

// Byte-level without the regex, no prefix space; Lowercase + Strip normalizers; ignore_merges.
{
  const words = TRAIN.split("\n").map((l) => byteLevel(l.toLowerCase()));
  const merges = trainMerges(words, 60);
  const vocab = buildVocab(BYTE_CHARS, merges, (a, b) => a + b, ["helloĠworld", "ĠĠ", "σ", "ς"].map((s) => s));
  SPECS.push({
    name: "bytelevel_lower_ignore_merges",
    json: {
      added_tokens: [],
      normalizer: seq("normalizers", [{ type: "Lowercase" }, { type: "Strip", strip_left: true, strip_right: true }]),
      pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
      post_processor: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
      decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
      model: bpeModel(vocab, merges, { ignore_merges: true }),
    },
    texts: ["Hello World", "HELLOWORLD", "hello world  ", "\u0085 x \u0085", "\uFEFF y \uFEFF"],
    decodes: [[vocab["Ġ"], vocab["æ"]]],
    tjs: "transformers.js lowercases with String.toLowerCase, which makes a word-final Σ ς; Rust's Lowercase maps " +
         "char by char (char::to_lowercase), always σ. Its Strip trims JavaScript whitespace (U+FEFF yes, U+0085 no); " +
         "Rust's is char::is_whitespace (the reverse)",
  });
}

// Llama-2 style: Prepend + Replace normalizers, byte fallback with unk, the SentencePiece decoder chain.
function spmSpec(name, { fuse_unk, partialBytes }) {
  const words = TRAIN.split("\n").map((l) => chars("▁" + l.replaceAll(" ", "▁")));
  const merges = trainMerges(words, 70);
  const base = ["<unk>", ...(partialBytes ? BYTE_TOKENS.slice(0, 0x80) : BYTE_TOKENS), "▁",
                ...chars("abcdefghijklmnopqrstuvwxyz,.'")];
  const vocab = buildVocab(base, merges, (a, b) => a + b);
  const add = withAdded(vocab, [["<s>", { special: true }], ["</s>", { special: true }]]);
  const ids = Object.fromEntries(add.map((t) => [t.content, t.id]));
  return {
    name,
    json: {
      added_tokens: add,
      normalizer: seq("normalizers", [{ type: "Prepend", prepend: "▁" }, replace("String", " ", "▁")]),
      pre_tokenizer: null,
      post_processor: template("<s>", null, ids),
      decoder: seq("decoders", [replace("String", "▁", " "), { type: "ByteFallback" }, { type: "Fuse" },
                                { type: "Strip", content: " ", start: 1, stop: 0 }]),
      model: bpeModel(vocab, merges, { unk: "<unk>", fuse_unk, byte_fallback: true }),
    },
    texts: ["<s>hello</s> world", "Zürich ÄÖÜ", "日本 x", "a</s>"],
    decodes: [[vocab["<0xE6>"] ?? 0, vocab["<0x97>"] ?? 0], [vocab["<0xE6>"] ?? 0, vocab["<0x97>"] ?? 0, vocab["<0xA5>"] ?? 0, vocab["a"]],
              [vocab["<0xFF>"] ?? 0, vocab["a"], vocab["<0xC3>"] ?? 0], [ids["<s>"], vocab["▁"], vocab["a"], ids["</s>"]]],
  };
}
SPECS.push({
  ...spmSpec("spm_bytefallback", { fuse_unk: true, partialBytes: false }),
  tjs: "transformers.js's ByteFallback decoder (TextDecoder) turns an invalid byte run into one U+FFFD per maximal " +
       "invalid subsequence (Rust: one per byte token) and drops a BOM that starts a byte run",
});
SPECS.push({
  ...spmSpec("spm_partial_bytes", { fuse_unk: false, partialBytes: true }),
  tjs: "for characters without byte tokens transformers.js emits one unk per merged piece, Rust one per character",
});

// Metaspace pre-tokenizer and decoder: every prepend scheme, split on and off.
function metaSpec(name, pre, dec, opts, normalizer = null) {
  const words = TRAIN.split("\n").map((l) => chars("▁" + l.replaceAll(" ", "▁")));
  const merges = trainMerges(words, 60);
  const base = ["<unk>", "▁", ...chars("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,.'-_!?")];
  const vocab = buildVocab(base, merges, (a, b) => a + b);
  const add = withAdded(vocab, [["<s>", { special: true }], ["<sep>", { special: true }], ["<nl>", { normalized: false }]]);
  const ids = Object.fromEntries(add.map((t) => [t.content, t.id]));
  return {
    name,
    json: {
      added_tokens: add, normalizer, pre_tokenizer: pre, post_processor: template("<s>", null, ids), decoder: dec,
      model: bpeModel(vocab, merges, { unk: "<unk>", fuse_unk: opts.fuse_unk }),
    },
    texts: ["<sep>hello world", "hello<sep>world <sep> x", "<nl>the cat", "the cat<nl>sat", " <sep>  a", "▁x ▁▁y"],
    decodes: [[vocab["▁"], vocab["▁"], vocab["a"], vocab["▁"]], [vocab["a"], vocab["▁"], vocab["▁"]]],
  };
}
SPECS.push({
  ...metaSpec("metaspace_first", metaspace("first", true), metaspace("first", true), { fuse_unk: false }),
  tjs: "transformers.js reads only the legacy add_prefix_space (absent here), so it never prepends ▁, and it " +
       "never splits on ▁; its decoder keeps the leading space",
});
SPECS.push({
  ...metaSpec("metaspace_first_legacy", metaspace("first", true, true), metaspace("first", true, true), { fuse_unk: true }),
  tjs: "transformers.js never splits on ▁ (Rust splits with MergedWithNext when split is true), and its decoder " +
       "drops only the first token's leading space where Rust's drops every ▁ of the first token",
});
SPECS.push({
  ...metaSpec("metaspace_always_nosplit", metaspace("always", false, true), metaspace("always", false, true), { fuse_unk: true }),
  tjs: "transformers.js's Metaspace decoder drops only the first token's leading space where Rust's drops every ▁ " +
       "of the first token",
});
SPECS.push({
  ...metaSpec("metaspace_never", metaspace("never", true, false),
              seq("decoders", [metaspace("never", true, false), { type: "Strip", content: " ", start: 1, stop: 0 }]),
              { fuse_unk: false }, { type: "Strip", strip_left: false, strip_right: true }),
  tjs: "transformers.js never splits on ▁ (Rust splits with MergedWithNext when split is true)",
});

// Split with every behaviour, plain and inverted; merges trained across the split points.
for (const [behavior, invert, kind, pat, why] of [
  ["Removed", false, "Regex", "[,.!?]+|\\s", "transformers.js runs the pattern as a JavaScript regex, whose \\s has U+FEFF and not U+0085 (Oniguruma's: the reverse)"],
  ["Isolated", false, "Regex", "[,.!?]+|\\s", null],
  ["MergedWithPrevious", false, "Regex", "[,.!?]+|\\s", "transformers.js implements Split as Isolated for MergedWithPrevious"],
  ["MergedWithNext", false, "Regex", "[,.!?]+|\\s", "transformers.js implements Split as Isolated for MergedWithNext"],
  ["Contiguous", false, "Regex", "[,.!?]|\\s", "transformers.js implements Split as Isolated for Contiguous"],
  ["Removed", true, "Regex", "\\p{L}+", null],
  ["Isolated", true, "String", "-", "transformers.js's inverted Split keeps only the matches, whatever the behaviour"],
  ["MergedWithPrevious", true, "Regex", "\\p{L}+", "transformers.js's inverted Split keeps only the matches, whatever the behaviour"],
  ["MergedWithNext", true, "Regex", "\\p{L}+", "transformers.js's inverted Split keeps only the matches, whatever the behaviour"],
  ["Contiguous", true, "Regex", "\\p{L}", "transformers.js's inverted Split keeps only the matches, whatever the behaviour"],
]) {
  const words = TRAIN.split("\n").map(chars);
  const merges = trainMerges(words, 60);
  const vocab = buildVocab(["[UNK]", ...ASCII], merges, (a, b) => a + b);
  SPECS.push({
    name: `split_${behavior.toLowerCase()}${invert ? "_invert" : ""}`,
    json: {
      added_tokens: [], normalizer: null, pre_tokenizer: split(kind, pat, behavior, invert), post_processor: null,
      decoder: { type: "Fuse" }, model: bpeModel(vocab, merges, { unk: "[UNK]" }),
    },
    texts: ["a--b-c-", "-lead,,trail.. x", "x  y   z"],
    decodes: [],
    tjs: why,
  });
}

// Whitespace + Digits (runs), WordPiece-style continuing_subword_prefix; Fuse + Replace decoders.
{
  const words = (TRAIN.match(/\w+/g) || []).map((w) => chars(w).map((c, i) => (i ? "##" + c : c)));
  const join = (a, b) => a + b.replace(/^##/, "");
  const merges = trainMerges(words, 60, join);
  const letters = chars("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_,.'!?-");
  const vocab = buildVocab(["[UNK]", ...letters, ...letters.map((c) => "##" + c)], merges, join, ["12", "2024"]);
  SPECS.push({
    name: "whitespace_digits_prefix",
    json: {
      added_tokens: [], normalizer: null,
      pre_tokenizer: seq("pretokenizers", [{ type: "Whitespace" }, { type: "Digits", individual_digits: false }]),
      post_processor: null, decoder: seq("decoders", [{ type: "Fuse" }, replace("String", "##", "")]),
      model: bpeModel(vocab, merges, { unk: "[UNK]", prefix: "##" }),
    },
    texts: ["hello12world 2024", "a½b Ⅻ ٣٤ x²"],
    decodes: [],
    tjs: "transformers.js ignores continuing_subword_prefix, and its Whitespace \\w and Digits \\d are ASCII-only",
  });
}

// WhitespaceSplit + Digits (single), end_of_word_suffix, unk fusing; Replace + Fuse + Strip decoders.
{
  const words = TRAIN.split(/\s+/).map((w) => { const c = chars(w); c[c.length - 1] += "</w>"; return c; });
  const merges = trainMerges(words, 60);
  const letters = chars("abcdefghijklmnopqrstuvwxyz0123456789,.'!?-");
  const vocab = buildVocab(["<unk>", ...letters, ...letters.map((c) => c + "</w>")], merges, (a, b) => a + b);
  SPECS.push({
    name: "wssplit_digits_suffix",
    json: {
      added_tokens: [], normalizer: null,
      pre_tokenizer: seq("pretokenizers", [{ type: "WhitespaceSplit" }, { type: "Digits", individual_digits: true }]),
      post_processor: null,
      // Strip before Fuse: Rust's Strip decoder panics on an empty token when stop > 0.
      decoder: seq("decoders", [replace("String", "</w>", " "), { type: "Strip", content: " ", start: 0, stop: 1 }, { type: "Fuse" }]),
      model: bpeModel(vocab, merges, { unk: "<unk>", suffix: "</w>", fuse_unk: true }),
    },
    texts: ["the cat12 sat", "ZZZ the QQ", "a½b Ⅻ ٣٤ x²"],
    decodes: [],
    tjs: "transformers.js fuses unknown tokens across pre-tokenized words (Rust: within a word) and splits on " +
         "JavaScript's whitespace (U+FEFF yes, U+0085 no)",
  });
}

// A normalizer chain: NFKC, Lowercase, Replace (regex), Strip (left only), Prepend; normalized added tokens.
{
  const words = TRAIN.split(/\s+/).map((w) => chars(w.toLowerCase()));
  const merges = trainMerges(words, 50);
  const vocab = buildVocab(["[UNK]", ...ASCII, "σ", "ς", "ı", "i̇"], merges, (a, b) => a + b);
  const add = withAdded(vocab, [["[CLS]", { special: true }], ["Hello", { normalized: true }], ["[SEP]", { special: true, lstrip: true, rstrip: true }]]);
  const ids = Object.fromEntries(add.map((t) => [t.content, t.id]));
  SPECS.push({
    name: "norm_chain",
    json: {
      added_tokens: add,
      normalizer: seq("normalizers", [{ type: "NFKC" }, { type: "Lowercase" }, replace("Regex", "\\s+", " "),
                                      { type: "Strip", strip_left: true, strip_right: false }, { type: "Prepend", prepend: ">" }]),
      pre_tokenizer: { type: "WhitespaceSplit" },
      post_processor: template("[CLS]", "[SEP]", ids), decoder: { type: "Fuse" },
      model: bpeModel(vocab, merges, { unk: "[UNK]" }),
    },
    texts: ["HELLO world", "say Hello", "x [SEP]  y", "ΟΔΟΣ [SEP] ΣΑΣ"],
    decodes: [],
    tjs: "transformers.js matches added tokens on the raw text only (a normalized:true token is not found after " +
         "Lowercase), decodes them from their content (Rust >= 0.23: from the normalised form), prepends to empty " +
         "sections, lowercases a word-final Σ to ς (Rust: σ), and its Strip and \\s use JavaScript's whitespace",
  });
}

// ---- running the references -----------------------------------------------------------------
const CONFIG = { tokenizer_class: "PreTrainedTokenizerFast", clean_up_tokenization_spaces: false };

function fullJson(spec) {
  const j = spec.json;
  return { version: "1.0", truncation: null, padding: null, added_tokens: j.added_tokens, normalizer: j.normalizer,
           pre_tokenizer: j.pre_tokenizer, post_processor: j.post_processor, decoder: j.decoder, model: j.model };
}

async function rustCase(tok, text) {
  const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
  const ids_special = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
  return { ids, ids_special, ...(await rustDecode(tok, ids_special)) };
}
async function rustDecode(tok, ids) {
  return { decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) };
}

function tjsCase(tok, text) {
  try {
    const ids = Array.from(tok.encode(text, { add_special_tokens: false }));
    const ids_special = Array.from(tok.encode(text, { add_special_tokens: true }));
    return { ids, ids_special, ...tjsDecode(tok, ids_special) };
  } catch (err) {
    return { error: String(err.message ?? err) };
  }
}
function tjsDecode(tok, ids) {
  try {
    // transformers.js refuses to decode an empty list; the answer is "".
    const d = (skip) => (ids.length ? tok.decode(ids, { skip_special_tokens: skip }) : "");
    return { decoded: d(false), decoded_skip: d(true) };
  } catch (err) {
    return { error: String(err.message ?? err) };
  }
}

function differences(r, t) {
  const out = {};
  for (const k of Object.keys(r)) if (JSON.stringify(r[k]) !== JSON.stringify(t[k])) out[k] = t[k] ?? null;
  if (t.error) out.error = t.error;
  return out;
}

let problems = 0;
for (const spec of SPECS) {
  const dir = path.join(outDir, spec.name);
  fs.mkdirSync(dir, { recursive: true });
  const json = fullJson(spec);
  const text = JSON.stringify(json, null, 1) + "\n";
  fs.writeFileSync(path.join(dir, "tokenizer.json"), text);
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(CONFIG, null, 2) + "\n");
  const rtok = rust.Tokenizer.fromString(text);
  let ttok = null, tjsLoadError = null;
  try {
    ttok = tjs.TokenizerLoader.fromPreTrained({ tokenizerJSON: JSON.parse(text), tokenizerConfig: CONFIG });
  } catch (err) {
    tjsLoadError = String(err.message ?? err);
  }
  const lines = [];
  let diverged = 0;
  const record = (line, r, t) => {
    const d = differences(r, t);
    if (Object.keys(d).length) {
      diverged++;
      line.tjs = d;
      line.why = spec.tjs ?? "UNDECLARED";
    }
    lines.push(JSON.stringify(line));
  };
  for (const t of [...CORPUS, ...spec.texts]) {
    const r = await rustCase(rtok, t);
    record({ text: t, ...r }, r, ttok ? tjsCase(ttok, t) : { error: tjsLoadError });
  }
  for (const ids of spec.decodes) {
    const r = await rustDecode(rtok, ids);
    record({ decode_ids: ids, ...r }, r, ttok ? tjsDecode(ttok, ids) : { error: tjsLoadError });
  }
  fs.writeFileSync(path.join(dir, "expected.jsonl"), lines.join("\n") + "\n");
  if (diverged && !spec.tjs) {
    console.error(`make_synth_tokenizers: ${spec.name}: ${diverged} cases differ from transformers.js, no reason declared`);
    problems++;
  }
  if (!diverged && spec.tjs) {
    console.error(`make_synth_tokenizers: ${spec.name}: a transformers.js difference is declared but none shows`);
    problems++;
  }
  console.error(`make_synth_tokenizers: ${spec.name}: ${lines.length} cases, ${diverged} differ from transformers.js`);
}
process.exit(problems ? 1 : 0);
