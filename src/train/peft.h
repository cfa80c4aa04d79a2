// peft.h: what every trainer does with TRL's PEFT flags (--use_peft, --lora_*, --adapter) and
// --gradient_checkpointing once its model is loaded: attach a new LoRA adapter or continue one,
// and turn recomputation on (docs/lora.md). The model code and the loop do the rest.
#ifndef STILL_PEFT_H
#define STILL_PEFT_H

#include "../model/lora.h"

typedef struct PeftConfig {
    int use_peft;             // train a LoRA adapter instead of every weight
    LoraConfig lora;          // --lora_r, --lora_alpha, ... (a new adapter)
    const char *adapter;      // --adapter DIR: continue training this adapter (PEFT's is_trainable)
} PeftConfig;

// Load a trainer's model: fp32 masters for full training; with an adapter the base is frozen
// (model_load_frozen: its checkpoint's dtype unless dtype >= 0, used in place where it can be).
Status peft_load_model(const char *dir, Backend *be, const PeftConfig *p, int dtype, Model **out, Err *e);
// The same for a part of the model only (model.h ModelPart; NULL: the whole).
Status peft_load_model_part(const char *dir, Backend *be, const PeftConfig *p, int dtype, const ModelPart *part,
                            Model **out, Err *e);
// After loading: attach the adapter (new, keyed by seed, or read from --adapter) and set
// gradient checkpointing. Logs what trains.
Status peft_prepare(Model *m, const PeftConfig *p, int gradient_checkpointing, uint64_t seed, Err *e);
// The frozen base a trainer compares with (GRPO's reference, a fixed self-teacher): with an
// adapter, the same weights with the adapter off (model_share, no copy); NULL without one.
Model *peft_base_model(const Model *m);

#endif
