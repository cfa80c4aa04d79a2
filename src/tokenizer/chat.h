// chat.h: chat templates rendered exactly as Hugging Face transformers renders them.
//
// transformers compiles a template with Jinja2's ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True, extensions=[loopcontrols, generation-tag]), overrides `tojson` with
// json.dumps(ensure_ascii=False), adds the globals raise_exception and strftime_now, and renders
// with messages, tools, documents, add_generation_prompt, the special tokens of
// tokenizer_config.json and any extra keyword arguments (enable_thinking, ...). This module is a
// small sandboxed interpreter for the Jinja subset those templates use (docs/chat-template.md).
// Unknown syntax, unknown filters and failing templates are errors naming the template line.
#ifndef STILL_CHAT_H
#define STILL_CHAT_H

#include "../core/common.h"

#include <cjson/cJSON.h>
#include <time.h>

typedef struct ChatTemplate ChatTemplate;

// One `{% generation %}` block of the rendered text: the assistant-token mask transformers
// builds for assistant_only_loss. Offsets are half-open; bytes index the UTF-8 output, chars
// count code points (Python string indices, as transformers reports them).
typedef struct GenSpan {
    size_t start, end;             // bytes
    size_t char_start, char_end;   // code points
} GenSpan;

typedef struct GenSpans {
    GenSpan *spans;   // (n) in output order; caller frees with gen_spans_free
    size_t n, cap;
} GenSpans;

void gen_spans_free(GenSpans *s);

// Load the template of a model directory: chat_template.jinja if present, else chat_template of
// tokenizer_config.json (a string, or a list of {name, template}: `name` picks one, NULL picks
// "default"). Special tokens (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
// mask_token, additional_special_tokens) come from tokenizer_config.json when it exists.
Status chat_template_load(const char *model_dir, const char *name, ChatTemplate **out, Err *e);

// Compile template source directly (no special tokens; add them with chat_template_set_var).
// `what` names the source in messages (a path, or "chat template").
Status chat_template_compile(const char *source, const char *what, ChatTemplate **out, Err *e);

// Add or replace a variable every render sees (a special token, say). v is copied.
Status chat_template_set_var(ChatTemplate *t, const char *name, const cJSON *v, Err *e);

// Fixed time for strftime_now (reproducible renders); 0 restores the clock.
void chat_template_set_now(ChatTemplate *t, time_t now);

void chat_template_free(ChatTemplate *t);

// Render. messages: a JSON array; tools, documents: JSON or NULL (then None in the template);
// extra_vars: a JSON object whose keys become variables (enable_thinking, ...), may be NULL.
// *out is malloc'd UTF-8; spans (may be NULL) receives the {% generation %} spans.
// JSON numbers become Python ints when integral and within 2^53, floats otherwise; use
// chat_template_render_json to keep the int / float distinction of the JSON text exactly.
Status chat_template_render(const ChatTemplate *t, const cJSON *messages, const cJSON *tools,
                            const cJSON *documents, int add_generation_prompt, const cJSON *extra_vars,
                            char **out, GenSpans *spans, Err *e);

// Render from JSON text, parsed with Python's json.loads number rules (1.0 stays a float).
// input_json: an array of messages, or an object {"messages": [...], "tools": ..., "documents": ...,
// other keys} whose other keys become variables (add_generation_prompt there wins over the
// argument). kwargs_json (may be NULL): an object of extra variables (enable_thinking, ...).
Status chat_template_render_json(const ChatTemplate *t, const char *input_json, const char *kwargs_json,
                                 int add_generation_prompt, char **out, GenSpans *spans, Err *e);

// --chat_template_kwargs of the commands that render prompts: text (may be NULL -> *out NULL)
// must be a JSON object of extra template variables. The caller owns *out (cJSON_Delete).
Status chat_kwargs_parse(const char *text, cJSON **out, Err *e);

#endif
