#!/usr/bin/python3
"""Reference renders of chat templates with Debian's Jinja2, configured as transformers does
(ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks, loopcontrols + generation tag),
tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now).

Run with /usr/bin/python3 (python3-jinja2). Writes tests/data/chat/jinja2.json: one record per case
with the template (file name or inline source), the full variables, and the output (or the error
and its template line) plus the {% generation %} spans transformers would report.
"""
import json
import os
import sys
import traceback
from contextlib import contextmanager
from datetime import datetime, timezone

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(ROOT, "tests", "data", "chat")
FIXED_NOW = 1735787045  # 2025-01-02 03:04:05 UTC; strftime_now renders this instant in UTC


# ---------------------------------------------------------------- transformers' environment
class AssistantTracker(Extension):
    """transformers' {% generation %} extension: records (start, end) string indices."""
    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        environment.extend(activate_tracker=self.activate_tracker)
        self._rendered_blocks = None
        self._generation_indices = None

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        rv = caller()
        if self.is_active():
            start_index = len("".join(self._rendered_blocks))
            end_index = start_index + len(rv)
            self._generation_indices.append((start_index, end_index))
        return rv

    def is_active(self):
        return self._rendered_blocks or self._generation_indices

    @contextmanager
    def activate_tracker(self, rendered_blocks, generation_indices):
        try:
            if self.is_active():
                raise ValueError("AssistantTracker should not be reused before closed")
            self._rendered_blocks = rendered_blocks
            self._generation_indices = generation_indices
            yield
        finally:
            self._rendered_blocks = None
            self._generation_indices = None


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(FIXED_NOW, tz=timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def template_lineno(exc):
    if isinstance(exc, jinja2.TemplateSyntaxError):
        return exc.lineno
    line = None
    for fr in traceback.extract_tb(exc.__traceback__):
        if fr.filename == "<template>":
            line = fr.lineno
    return line


def render(env, source, variables):
    try:
        tmpl = env.from_string(source)
    except Exception as exc:  # syntax errors
        return {"error": f"{type(exc).__name__}: {exc}", "lineno": template_lineno(exc)}
    blocks, spans = [], []
    try:
        with tmpl.environment.activate_tracker(blocks, spans):
            for b in tmpl.generate(**variables):
                blocks.append(b)
            out = "".join(blocks)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "lineno": template_lineno(exc)}
    return {"output": out, "spans": [list(s) for s in spans]}


# ---------------------------------------------------------------- special tokens
def special_tokens_map(config_path):
    """transformers' special_tokens_map: the set special tokens, as strings."""
    with open(config_path, encoding="utf-8") as f:
        cfg = json.load(f)
    out = {}

    def text(v):
        if isinstance(v, dict):
            return v.get("content")
        return v

    for k in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        v = text(cfg.get(k))
        if v:
            out[k] = v
    extra = [text(v) for v in cfg.get("additional_special_tokens") or []]
    if extra:
        out["additional_special_tokens"] = extra
    return out


# ---------------------------------------------------------------- conversations
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather in a city — «quoted», 中文 ok",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7.5}},
        "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {"name": "get_time", "description": "Current time",
                                              "parameters": {"type": "object", "properties": {}}}}

CONVERSATIONS = {
    "basic": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Hello!"},
    ],
    "multi_turn_think": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "<think>\nAgain add.\n</think>\n\n6"},
    ],
    "reasoning_content": [
        {"role": "user", "content": "Pick a colour."},
        {"role": "assistant", "content": "Blue.", "reasoning_content": "\nThe sky is blue.\n"},
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "\nBecause it is calm.", "reasoning_content": "Think about calm."},
    ],
    "tools": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris and the time?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
            {"type": "function", "function": {"name": "get_time", "arguments": "{\"tz\": \"CET\"}"}}]},
        {"role": "tool", "name": "get_weather", "content": "{\"temp\": 21.5, \"sky\": \"clear\"}"},
        {"role": "tool", "name": "get_time", "content": "12:00"},
        {"role": "assistant", "content": "<think>\nCombine.\n</think>\n\nIt is 21.5 °C and noon in Paris."},
    ],
    "tools_content_and_call": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Oslo", "days": 2, "ratio": 1.0}}]},
        {"role": "tool", "content": "rain"},
        {"role": "user", "content": "<tool_response>\nmanual\n</tool_response>"},
    ],
    "unicode": [
        {"role": "user", "content": "Ça va? 你好 🙂 \"quotes\" and \\backslash\\"},
        {"role": "assistant", "content": "Très bien — 谢谢! 🎉"},
    ],
    "system_later": [
        {"role": "user", "content": "a"},
        {"role": "system", "content": "late system"},
        {"role": "assistant", "content": "b"},
    ],
    "llama_spaces": [
        {"role": "system", "content": "  padded system  \n"},
        {"role": "user", "content": "\n\thello\t\n"},
        {"role": "assistant", "content": " hi "},
        {"role": "user", "content": "bye"},
    ],
}


def model_cases():
    q3 = special_tokens_map(os.path.join(DATA, "models", "qwen3", "tokenizer_config.json"))
    l3 = special_tokens_map(os.path.join(DATA, "models", "llama3", "tokenizer_config.json"))
    cases = []

    def add(name, tfile, tokens, messages, tools=None, gen=False, **kw):
        v = dict(tokens)
        v.update(kw)
        v.update({"messages": messages, "tools": tools, "documents": None, "add_generation_prompt": gen})
        cases.append({"name": name, "template": tfile, "vars": v})

    C = CONVERSATIONS
    add("qwen3_basic_gen", "qwen3.jinja", q3, C["basic"], gen=True)
    add("qwen3_basic_gen_nothink", "qwen3.jinja", q3, C["basic"], gen=True, enable_thinking=False)
    add("qwen3_basic_gen_think_true", "qwen3.jinja", q3, C["basic"], gen=True, enable_thinking=True)
    add("qwen3_multi_turn_think", "qwen3.jinja", q3, C["multi_turn_think"])
    add("qwen3_multi_turn_think_prefix_gen", "qwen3.jinja", q3, C["multi_turn_think"][:4], gen=True)
    add("qwen3_reasoning_content", "qwen3.jinja", q3, C["reasoning_content"])
    add("qwen3_tools", "qwen3.jinja", q3, C["tools"], tools=[WEATHER_TOOL, TIME_TOOL])
    add("qwen3_tools_gen_nothink", "qwen3.jinja", q3, C["tools"][:5], tools=[WEATHER_TOOL, TIME_TOOL], gen=True,
        enable_thinking=False)
    add("qwen3_tools_no_system", "qwen3.jinja", q3, C["tools_content_and_call"], tools=[WEATHER_TOOL], gen=True)
    add("qwen3_unicode", "qwen3.jinja", q3, C["unicode"])
    add("qwen3_system_later", "qwen3.jinja", q3, C["system_later"])
    add("llama3_basic_gen", "llama3.jinja", l3, C["basic"], gen=True)
    add("llama3_multi_turn", "llama3.jinja", l3, C["multi_turn_think"])
    add("llama3_spaces", "llama3.jinja", l3, C["llama_spaces"])
    add("llama3_unicode", "llama3.jinja", l3, C["unicode"])
    # the constructs template with its generation spans
    for conv in ["basic", "multi_turn_think", "tools", "unicode"]:
        add(f"sft_{conv}", "sft_generation.jinja", {"bos_token": "<s>", "eos_token": "</s>"}, C[conv],
            tools=[WEATHER_TOOL] if conv == "tools" else None, gen=conv == "basic")
        add(f"constructs_{conv}", "constructs.jinja", {"bos_token": "<s>", "eos_token": "</s>"}, C[conv],
            tools=[WEATHER_TOOL, TIME_TOOL] if conv == "tools" else None, gen=True, enable_thinking=False)
    return cases


def write_cli_fixtures(records):
    """Inputs and outputs for `still chat-template --model tests/data/chat/models/M` (the special
    tokens then come from the model's tokenizer_config.json, not from the input)."""
    cli = os.path.join(DATA, "cli")
    os.makedirs(cli, exist_ok=True)
    for f in os.listdir(cli):
        os.remove(os.path.join(cli, f))
    for r in records:
        model = {"qwen3.jinja": "qwen3", "llama3.jinja": "llama3"}.get(r.get("template"))
        if not model or "output" not in r:
            continue
        tokens = special_tokens_map(os.path.join(DATA, "models", model, "tokenizer_config.json"))
        v = {k: x for k, x in r["vars"].items() if k not in tokens and k != "add_generation_prompt"}
        args = ["--model", f"tests/data/chat/models/{model}"]
        if r["vars"]["add_generation_prompt"]:
            args.append("--add_generation_prompt")
        if "enable_thinking" in v and r["name"].endswith("nothink"):
            args += ["--chat_template_kwargs", json.dumps({"enable_thinking": v.pop("enable_thinking")})]
        inp = v["messages"] if set(v) <= {"messages", "tools", "documents"} and v.get("tools") is None else v
        with open(os.path.join(cli, r["name"] + ".in.json"), "w", encoding="utf-8") as f:
            json.dump(inp, f, ensure_ascii=False, indent=1)
        with open(os.path.join(cli, r["name"] + ".args"), "w", encoding="utf-8") as f:
            f.write("\n".join(args) + "\n")
        with open(os.path.join(cli, r["name"] + ".out.txt"), "w", encoding="utf-8") as f:
            f.write(r["output"])


def main():
    sys.path.insert(0, os.path.dirname(__file__))
    from ref_chat_cases import MICRO_CASES  # noqa: E402

    env = make_env()
    records = []
    for case in model_cases() + MICRO_CASES:
        if "template" in case:
            with open(os.path.join(DATA, "templates", case["template"]), encoding="utf-8") as f:
                source = f.read()
        else:
            source = case["source"]
        variables = case.get("vars", {})
        rec = {"name": case["name"]}
        if "template" in case:
            rec["template"] = case["template"]
        else:
            rec["source"] = source
        rec["vars"] = variables
        rec.update(render(env, source, variables))
        if "error" in rec and not case.get("expect_error"):
            print(f"ref_chat_templates: case {case['name']} failed unexpectedly: {rec['error']}", file=sys.stderr)
            sys.exit(1)
        if "error" not in rec and case.get("expect_error"):
            print(f"ref_chat_templates: case {case['name']} should fail but rendered", file=sys.stderr)
            sys.exit(1)
        records.append(rec)
    write_cli_fixtures(records)
    names = [r["name"] for r in records]
    assert len(names) == len(set(names)), "duplicate case names"
    out = os.path.join(DATA, "jinja2.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"generator": f"scripts/ref_chat_templates.py, Jinja2 {jinja2.__version__}",
                   "fixed_now": FIXED_NOW, "cases": records}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"ref_chat_templates: {len(records)} cases -> {os.path.relpath(out, ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
