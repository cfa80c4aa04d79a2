// pref_setup.h: the setup the preference trainers (DPO, KTO) share: the policy on its backend, the
// reference model TRL would use, and the tokenizer + chat template a dataset needs.
#ifndef STILL_PREF_SETUP_H
#define STILL_PREF_SETUP_H

#include "../dist/dist.h"
#include "codec.h"
#include "ep.h"
#include "peft.h"
#include "tp.h"

typedef struct PrefPolicySpec {
    const char *backend, *model_dir;
    int threads, dtype, max_plans, gradient_checkpointing;
    int ep_size, zero_stage;  // --ep_size (ep.h; <= 1: none), --zero_stage
    size_t max_memory;
    uint64_t seed;
    const PeftConfig *peft;
    Dist *dist;  // NULL: one process
} PrefPolicySpec;

// The spec of a preference trainer's config c (DpoConfig, KtoConfig: fields of the same names).
#define PREF_POLICY_SPEC(c)                                                                                            \
    ((PrefPolicySpec){.backend = (c)->backend, .model_dir = (c)->model_dir, .threads = (c)->threads,                 \
                      .dtype = (c)->dtype, .max_plans = (c)->max_plans,                                              \
                      .gradient_checkpointing = (c)->train.gradient_checkpointing, .max_memory = (c)->max_memory,    \
                      .ep_size = (c)->ep_size, .zero_stage = (c)->train.zero_stage, .seed = (c)->train.seed,         \
                      .peft = &(c)->train.peft, .dist = (c)->dist})

// Backend and the policy (fp32 masters, or a frozen base with an adapter), ready to train.
Status pref_load_policy(const PrefPolicySpec *s, Backend **be, Model **m, Err *e);

// The policy a preference trainer trains: loaded (pref_load_policy) and, where the mesh has a
// tensor-parallel axis, cut to this rank's part (tp.h), with --ep_size its experts split over
// the ranks (ep.h); the reference stays whole on every rank either way. *dist becomes the data
// axis the trainer batches over; pref_policy_close puts the world back and frees it all.
typedef struct PrefPolicy {
    Backend *be;
    Model *m;
    Tp tp;
    Ep ep;
    Dist *world;  // *dist as it was
} PrefPolicy;
Status pref_policy_open(PrefPolicy *p, const PrefPolicySpec *s, Dist **dist, Err *e);
void pref_policy_close(PrefPolicy *p, Dist **dist);
// The dtype checkpoints are saved in: --save_dtype, else --dtype, else the policy checkpoint's.
DType pref_save_dtype(int save_dtype, int dtype, const Model *m);
// Micro-batches per epoch of n items (what: "pairs", "rows") in global batches of gb, whole
// batches only with drop_last; an error naming the dataset when there are none.
Status pref_batch_count(const char *dataset, const char *what, int n, int gb, int drop_last, int *out, Err *e);
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
