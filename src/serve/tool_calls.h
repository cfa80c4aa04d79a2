// tool_calls.h: a completion's text split into content and OpenAI tool calls, for the format of
// Qwen3's chat template: each call is `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`.
// A block whose JSON does not parse, or has no string "name", stays in the content.
#ifndef STILL_SERVE_TOOL_CALLS_H
#define STILL_SERVE_TOOL_CALLS_H

#include "../core/alloc.h"

#include <cjson/cJSON.h>

// Returns the number of calls parsed. *content: the text outside the parsed blocks, stripped of
// surrounding whitespace (caller frees). *calls: a JSON array of {"id", "type": "function",
// "function": {"name", "arguments": JSON text}} (NULL when there are none; caller deletes). ids
// are "call_<id_base>_<k>".
int serve_parse_tool_calls(const char *text, const char *id_base, char **content, cJSON **calls);

// The same text streamed: fed the text so far each time it grows (final = 1 at its end), it gives
// the content outside the parsed blocks as it becomes certain — text that could be the start of
// "<tool_call>" waits, whitespace at the start and end of the content is dropped as the whole-text
// parser strips it — and each call once its block has closed. Concatenated, the content pieces
// are serve_parse_tool_calls' content and the calls its calls, in order, with the same ids.
typedef struct ToolStream {
    size_t scan;        // bytes of the text consumed
    int in_block;       // inside <tool_call> ... (scan is just after the opening tag)
    int started;        // content has been given (leading whitespace is behind)
    StrBuf ws;          // whitespace after the last content given (given once content follows)
    int ncalls;
} ToolStream;

// content: (s, n) with call NULL; a call: call (owned by the stream, valid during the call), s NULL.
typedef void (*ToolStreamFn)(void *user, const char *s, size_t n, const cJSON *call);
void tool_stream_feed(ToolStream *ts, const char *text, size_t len, int final, const char *id_base, ToolStreamFn fn,
                      void *user);
void tool_stream_free(ToolStream *ts);

#endif
