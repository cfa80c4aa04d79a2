// data.h: dataset files in TRL's formats -> examples (token ids + per-token loss mask).
//
// Formats (detected from the first row, as TRL's SFTTrainer):
//   text                       language modeling; EOS appended when the text lacks it
//   prompt / completion        strings (EOS appended to the completion) or message lists
//                              (chat template; prompt rendered with add_generation_prompt)
//   messages                   conversational language modeling (no EOS appended)
//   conversations              ShareGPT {from, value}, converted to messages first
//   input_ids                  already tokenised: a "labels" column used as is (-100 = no loss), else
//                              optional assistant_masks (always) / completion_mask (completion-only loss)
// Completion-only loss is on by default only when the first row has "prompt" and "completion"
// (TRL's completion_only_loss=None); it masks the prompt of prompt/completion rows and applies a
// pre-tokenised completion_mask.
// Files: JSONL (one object per line) or one JSON array. Text goes through a TextCodec, the
// adapter to the tokenizer and chat template, so this file holds the TRL rules and nothing else.
#ifndef STILL_DATA_H
#define STILL_DATA_H

#include "../core/common.h"

#include <cjson/cJSON.h>

typedef struct I32Vec {
    int32_t *v;
    size_t n, cap;
} I32Vec;

void i32vec_push(I32Vec *a, int32_t x);
void i32vec_free(I32Vec *a);

typedef struct TextSpan {
    size_t start, end;  // bytes of the rendered text, half-open
} TextSpan;

// What data.c needs from a tokenizer and a chat template.
typedef struct TextCodec {
    void *ctx;
    int vocab_size;
    int32_t eos_id;          // -1 if none
    const char *eos_token;   // string appended as TRL does; NULL if none
    // Append the ids of text to out. add_special: run the post-processor (BOS etc.).
    Status (*encode)(void *ctx, const char *text, size_t len, int add_special, I32Vec *out, Err *e);
    // Render messages (JSON array) through the chat template; NULL when the model has none.
    // tools (a list, or NULL = None) and kwargs (an object of extra variables, or NULL) as
    // data_template_vars gives them. spans (may be NULL) receives the {% generation %} blocks;
    // *n_spans their count.
    Status (*render)(void *ctx, const cJSON *messages, const cJSON *tools, int add_generation_prompt,
                     const cJSON *kwargs, char **out, TextSpan **spans, int *n_spans, Err *e);
    int has_generation_blocks;  // the template contains {% generation %} ... {% endgeneration %}
} TextCodec;

typedef enum {
    FMT_TEXT = 0,
    FMT_PROMPT_COMPLETION,
    FMT_MESSAGES,
    FMT_IDS,
} DataFormat;

typedef struct DataConfig {
    const char *text_field;        // "text"
    int max_length;                // truncation (keep_start); <= 0: none
    int truncate;                  // 0 when packing (packing cuts itself)
    int completion_only_loss;      // -1: auto (on when the first row has "prompt" and "completion")
    int assistant_only_loss;
    const cJSON *chat_template_kwargs;  // object or NULL
    int skip_bad_rows;
    int vocab_size;                // > 0: ids must lie in [0, vocab_size) (the model's)
} DataConfig;

typedef struct Example {
    int32_t *ids;    // (n)
    uint8_t *mask;   // (n) 1 = this token is a label (TRL: labels != -100), before the shift
    int n;
} Example;

typedef struct Dataset {
    Example *ex;      // (n)
    int n;
    DataFormat format;
    int conversational;
    int completion_only_loss;  // as resolved from the config and the first row
    int n_bad;        // rows skipped with --skip_bad_rows
    int n_dropped;    // examples dropped because no label token survived truncation
    int n_truncated;
    char first_bad[512];  // message of the first skipped row
} Dataset;

const char *data_format_name(DataFormat f);
// Read path and build examples. codec may be NULL for pre-tokenised data. A bad row is an
// error naming path:line and the reason, or (skip_bad_rows) counted in n_bad.
Status data_load(const char *path, const DataConfig *cfg, const TextCodec *codec, Dataset *out, Err *e);

// Every row of a JSONL file or JSON array, in order, with its location ("file:line" or
// "file: row k") for messages. A line that is not JSON is an error, or with skip_bad_rows (and
// not the first row) counted in *n_bad (the first message kept in first_bad). fn's errors stop.
typedef Status (*DataRowFn)(void *ctx, const cJSON *row, int first, const char *where, Err *e);
Status data_foreach_row(const char *path, int skip_bad_rows, DataRowFn fn, void *ctx, int *n_bad, char *first_bad,
                        size_t first_bad_size, Err *e);
// The format of a dataset file and the completion-only loss it gets, from the keys of its first
// row (TRL decides both from the first example); no codec needed.
Status data_detect(const char *path, const DataConfig *cfg, DataFormat *format, int *completion_only_loss, Err *e);
// What a row passes to the chat template, as TRL's _prepare_dataset passes it: its "tools" column
// (a list of tool schemas, or a JSON string of one, parsed; null or absent: None) and the extra
// variables: kwargs (--chat_template_kwargs, may be NULL) overlaid with the row's own
// "chat_template_kwargs" object (the row's keys win). *tools and *vars are new (NULL when
// nothing); the caller deletes them. Errors name the column.
Status data_template_vars(const cJSON *row, const cJSON *kwargs, cJSON **tools, cJSON **vars, Err *e);
// The checks every format applies, for the trainers with formats of their own (reward_data.c):
// row[key] as a list of token ids (each in [0, vocab_size) when vocab_size > 0) appended to out;
// arr as a list of messages (ShareGPT rows converted), a new array in *out. Errors name the key.
Status data_int_list(const cJSON *row, const char *key, int vocab_size, I32Vec *out, Err *e);
Status data_messages(const cJSON *arr, const char *field, cJSON **out, Err *e);
// A hub dataset id is an error with the export recipe.
Status data_check_local(const char *path, Err *e);
void data_free(Dataset *d);
// Is this dataset argument a hub id rather than a local file? (owner/name, no such path)
int data_looks_like_hub_id(const char *s);

#endif
