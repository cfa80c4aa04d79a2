// tool_calls.h: a completion's text split into content and OpenAI tool calls, for the format of
// Qwen3's chat template: each call is `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
// A block whose JSON does not parse, or has no string "name", stays in the content.
#ifndef STILL_SERVE_TOOL_CALLS_H
#define STILL_SERVE_TOOL_CALLS_H

#include <cjson/cJSON.h>

// Returns the number of calls parsed. *content: the text outside the parsed blocks, stripped of
// surrounding whitespace (caller frees). *calls: a JSON array of {"id", "type": "function",
// "function": {"name", "arguments": JSON text}} (NULL when there are none; caller deletes). ids
// are "call_<id_base>_<k>".
int serve_parse_tool_calls(const char *text, const char *id_base, char **content, cJSON **calls);

#endif
