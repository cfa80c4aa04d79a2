// checkpoint.h: output_dir/checkpoint-N directories a training run writes and resumes from.
//
// checkpoint-N/ holds a loadable Hugging Face model (model.safetensors, config.json,
// generation_config.json, the tokenizer files) and, unless save_only_model, the trainer state:
// optimizer.safetensors (AdamW moments "exp_avg.<name>", "exp_avg_sq.<name>", and fp32 master
// weights "master.<name>" when the model is saved in another dtype) and trainer_state.json
// (transformers' TrainerState fields -- global_step, log_history, best_metric... -- then the data
// position, seed and counters resuming checks). Tensors are streamed to disk piece by piece. Every file is written atomically; checkpoint_complete.json is
// written last, and resuming refuses a directory without it.
//
// Distributed runs: rank 0 writes every file. The optimizer state is always complete (with ZeRO-1
// the moments are gathered to rank 0 first), so a checkpoint does not depend on the number of
// ranks that wrote it; trainer_state.json records that number (world_size) and resuming
// re-shards on any number of ranks with the same global batch.
#ifndef STILL_CHECKPOINT_H
#define STILL_CHECKPOINT_H

#include "optim.h"

#define CKPT_MARKER "checkpoint_complete.json"

typedef struct TrainState {
    int step;              // optimizer steps done
    int total_steps;
    int steps_per_epoch;
    int micro_batches;     // per epoch
    int batch_size, grad_accum;  // per-rank rows per micro-batch; micro-batches per step
    int world;             // ranks that trained it (global batch = world * batch_size)
    uint64_t seed;
    double num_tokens;     // tokens seen (TRL's num_tokens)
    int logging_steps, eval_steps, save_steps;  // recorded in trainer_state.json as Trainer does
    const char *metrics_path;  // metrics.jsonl: its lines so far become log_history (may be NULL)
} TrainState;

// The AdamW moments a checkpoint saves: n_params floats each in the tensor table's order, in
// host memory or (on_device) in buffers of the model's backend, read tensor by tensor.
typedef struct CkptMoments {
    const float *m, *v;
    int on_device;
} CkptMoments;

// Write model, config, generation config and tokenizer files (copied from src_model_dir) into dir.
Status checkpoint_write_model(const char *dir, const Model *m, DType save_dtype, const char *src_model_dir, Err *e);
// Write output_dir/checkpoint-<step>; opt_m, opt_v: the complete AdamW moments (host, n_params
// each), NULL = model only (--save_only_model).
Status checkpoint_save(const char *output_dir, const Model *m, const float *opt_m, const float *opt_v,
                       const TrainState *s, DType save_dtype, const char *src_model_dir, Err *e);
// The same with extra state: extra(ctx, checkpoint_dir, e) runs before the completion marker.
// mo NULL: model only. Before writing, the free space of output_dir is checked against what the
// checkpoint takes (an error names both); a checkpoint that cannot be completed is removed.
typedef Status (*CheckpointExtraFn)(void *ctx, const char *ckpt_dir, Err *e);
Status checkpoint_save_ex(const char *output_dir, const Model *m, const CkptMoments *mo, const TrainState *s,
                          DType save_dtype, const char *src_model_dir, CheckpointExtraFn extra, void *ctx, Err *e);
// ST_EIO naming both numbers when output_dir's filesystem has less free space than the checkpoint needs.
Status checkpoint_check_space(const char *output_dir, const Model *m, DType save_dtype, int with_opt,
                              const char *src_model_dir, Err *e);
// The final model in output_dir from a checkpoint just written: model.safetensors hard-linked
// (one copy on disk; a plain copy where the filesystem has no links), the small files beside it.
Status checkpoint_publish(const char *ckpt_dir, const char *output_dir, Err *e);
int checkpoint_is_complete(const char *dir);
// The complete checkpoint-N of output_dir with the highest N; ST_ENOTFOUND if none.
Status checkpoint_latest(const char *output_dir, char **path, Err *e);
// Keep the `limit` newest complete checkpoints (limit <= 0: keep all).
Status checkpoint_prune(const char *output_dir, int limit, Err *e);
// Restore weights (into m), the complete moments (host opt_m, opt_v: n_params each) and state
// from a checkpoint written with optimizer state.
Status checkpoint_load(const char *dir, Model *m, float *opt_m, float *opt_v, TrainState *s, Err *e);
// The same for m a part (model.h ModelPart) of the checkpoint's model (table whole): only the
// part's elements of each tensor, weights and moments (opt_m, opt_v: m's n_params), are kept, one
// tensor at a time.
Status checkpoint_load_part(const char *dir, Model *m, const ModelPart *part, const TensorTable *whole, float *opt_m,
                            float *opt_v, TrainState *s, Err *e);

#endif
