// pref_setup.h: the setup the preference trainers (DPO, KTO) share: the policy on its backend, the
// reference model TRL would use, and the tokenizer + chat template a dataset needs.
#ifndef STILL_PREF_SETUP_H
#define STILL_PREF_SETUP_H

#include "../dist/dist.h"
#include "codec.h"
#include "peft.h"

typedef struct PrefPolicySpec {
    const char *backend, *model_dir;
    int threads, dtype, max_plans, gradient_checkpointing;
    size_t max_memory;
    uint64_t seed;
    const PeftConfig *peft;
    Dist *dist;  // NULL: one process
} PrefPolicySpec;

// Backend and the policy (fp32 masters, or a frozen base with an adapter), ready to train.
Status pref_load_policy(const PrefPolicySpec *s, Backend **be, Model **m, Err *e);
// The reference: ref_dir frozen (matrices stored as dtype, -1 = its checkpoint's), else with an
// adapter the base with the adapter off (no copy), else a frozen copy of model_dir (the initial
// weights, also when resuming). Its vocabulary must be the policy's.
Status pref_load_reference(const char *ref_dir, const char *model_dir, Model *m, int dtype, Model **out, Err *e);
// What a dataset file needs to be tokenised: the model's codec (when needs_codec) and the parsed
// --chat_template_kwargs. Free with pref_codec_free.
typedef struct PrefCodec {
    ModelCodec mc;
    int have;
    cJSON *kwargs;
} PrefCodec;
Status pref_codec_open(PrefCodec *pc, const char *model_dir, int needs_codec, const char *chat_template_kwargs, Err *e);
const TextCodec *pref_codec_get(const PrefCodec *pc);
void pref_codec_free(PrefCodec *pc);

#endif
