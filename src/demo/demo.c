// demo.c: the demo's stages (demo.h). Each stage fills the configuration struct of a library
// function and, flag by flag from the same values, the command line that builds that struct.
#include "demo.h"

#include "../core/alloc.h"
#include "../core/fileio.h"
#include "../core/log.h"
#include "../train/checkpoint.h"
#include "../train/distill.h"
#include "../train/dpo.h"
#include "../train/eval.h"
#include "../train/grpo.h"
#include "../train/metrics.h"
#include "../train/sft.h"
#include "pairs.h"
#include "task.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <ctype.h>
#include <string.h>

static const char *const DEMO_METRIC = "exact_match:answer";  // every eval's, and the GRPO reward

// Sizes, step counts and learning rates of one demo variant.
typedef struct DemoPlan {
    TaskConfig task;
    TaskModel teacher, student;
    int pad;                       // pad_to_multiple_of of every stage
    int sft_batch;                 // rows per SFT step
    int teacher_steps, student_steps;
    double teacher_lr, student_lr;
    int opsd_steps;
    double opsd_lr;
    TeacherMode opsd_mode;
    int distill_steps, distill_batch;
    double distill_lr;
    float distill_beta;
    int grpo_steps, grpo_batch, grpo_generations, grpo_warmup;
    double grpo_lr;
    float grpo_temperature;
    int pair_samples;              // samples a training prompt for the DPO pairs (temperature 1; 0: greedy)
    int dpo_steps, dpo_batch, dpo_warmup;
    double dpo_lr, dpo_beta;
    int lora_r;                    // the LoRA variant of the DPO stage: rank, alpha, its rate
    double lora_alpha, lora_lr;
    int warmup_steps, logging_steps;
    int eval_batch;
} DemoPlan;

static void demo_plan(int quick, uint64_t seed, DemoPlan *p) {
    memset(p, 0, sizeof *p);
    p->task = (TaskConfig){.digits = 2, .n_test = 1000, .seed = seed};
    // the student has under half the teacher's parameters
    p->teacher = (TaskModel){.hidden = 96, .layers = 2, .heads = 6, .kv_heads = 2, .head_dim = 16, .ffn = 288};
    p->student = (TaskModel){.hidden = 64, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 192};
    p->pad = 8;
    p->sft_batch = 64;
    p->teacher_steps = quick ? 400 : 1500;
    p->teacher_lr = 2e-3;
    p->student_steps = 200;
    p->student_lr = 3e-3;
    // self-distillation: the SFT student's frozen weights read the hinted prompt (docs/demo.md)
    p->opsd_steps = 400;
    p->opsd_lr = 3e-3;
    p->opsd_mode = TEACHER_FIXED;
    p->distill_steps = quick ? 200 : 250;  // where GRPO still has room (docs/demo.md)
    p->distill_batch = 64;
    p->distill_lr = 3e-3;
    p->distill_beta = 0.0f;  // forward KL (docs/demo.md, "Why these settings")
    // GRPO: 64 prompts x 8 samples a step at temperature 0.3, lr 5e-4 with warmup and cosine decay,
    // 200 steps (docs/demo.md, "Why these settings"); the quick variant's fewer steps from its
    // less distilled student gain too (docs/demo.md, "--quick").
    p->grpo_steps = quick ? 60 : 200;
    p->grpo_batch = 512;
    p->grpo_generations = 8;
    p->grpo_temperature = 0.3f;
    p->grpo_lr = 5e-4;
    p->grpo_warmup = 10;
    // DPO: the GRPO student's greedy answer to every training prompt; a wrong one makes a pair (the
    // answer chosen, the student's answer rejected). beta 10 at lr 5e-5: each pair stops pulling
    // once its margin passes a few tenths of a nat, so the policy moves where its greedy answer is
    // wrong and little elsewhere (docs/demo.md: pairs of temperature-1 samples, beta 3 and lr 2e-4
    // gained on one machine and lost on another; TRL's beta 0.1 lost everywhere)
    p->pair_samples = 0;
    p->dpo_steps = 100;
    p->dpo_batch = 64;
    p->dpo_warmup = 10;
    p->dpo_lr = 5e-5;
    p->dpo_beta = 10.0;
    p->lora_r = 8;
    p->lora_alpha = 16;
    p->lora_lr = 5e-4;
    p->warmup_steps = 20;
    p->logging_steps = quick ? 10 : 25;
    p->eval_batch = 500;
}

static void cap_steps(DemoPlan *p, int max_steps) {
    if (max_steps <= 0) return;
    int *steps[] = {&p->teacher_steps, &p->student_steps, &p->opsd_steps, &p->distill_steps, &p->grpo_steps,
                    &p->dpo_steps};
    for (size_t i = 0; i < ARRAY_LEN(steps); i++) *steps[i] = MIN(*steps[i], max_steps);
    p->warmup_steps = MIN(p->warmup_steps, max_steps / 2);
    p->grpo_warmup = MIN(p->grpo_warmup, max_steps / 2);
    p->dpo_warmup = MIN(p->dpo_warmup, max_steps / 2);
    p->logging_steps = MIN(p->logging_steps, max_steps);
}

// ---- command lines ------------------------------------------------------------------------

// A value as one shell word: as it is when no shell treats any of its characters specially, else
// in single quotes (a quote inside as '\''), so that a path with a space or `$(...)` in it stays
// one argument and never runs.
static void put_word(StrBuf *cmd, const char *v) {
    int plain = *v != '\0';
    for (const char *p = v; *p && plain; p++) plain = isalnum((unsigned char)*p) || strchr("_./:=+,-@%", *p);
    if (plain) {
        sb_puts(cmd, v);
        return;
    }
    sb_putc(cmd, '\'');
    for (const char *p = v; *p; p++) {
        if (*p == '\'') sb_puts(cmd, "'\\''");
        else sb_putc(cmd, *p);
    }
    sb_putc(cmd, '\'');
}

static void flag_s(StrBuf *cmd, const char *name, const char *v) {
    sb_printf(cmd, " --%s ", name);
    put_word(cmd, v);
}
static void flag_i(StrBuf *cmd, const char *name, long long v) { sb_printf(cmd, " --%s %lld", name, v); }

// A number as the shortest text that reads back as the same double.
static void flag_f(StrBuf *cmd, const char *name, double v) {
    char buf[64];
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    flag_s(cmd, name, buf);
}

static void cmd_begin(StrBuf *cmd, const DemoConfig *dc, const char *command) {
    put_word(cmd, dc->still);
    sb_printf(cmd, " %s", command);
}

// Flags every command of the demo gives: the seed and the thread count (the numbers depend on it).
static void cmd_end(StrBuf *cmd, const DemoConfig *dc) {
    flag_i(cmd, "seed", (long long)dc->seed);
    flag_i(cmd, "threads", dc->threads);
    sb_putc(cmd, '\n');
}

// The trainer loop's settings (TrainingArguments), shared by the three trainers: the struct and
// the flags from the same values. Everything not given is the commands' default.
static void train_args(TrainConfig *t, StrBuf *cmd, const DemoConfig *dc, const DemoPlan *p, const char *out,
                       int steps, double lr, SchedType sched, int warmup) {
    memset(t, 0, sizeof *t);
    t->output_dir = out;
    t->grad_accum = 1;
    t->num_train_epochs = 3;
    t->max_steps = steps;
    t->opt = (OptimConfig){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .max_grad_norm = 1.0, .sched = sched};
    t->warmup_steps = sched == SCHED_CONSTANT ? 0 : warmup;
    t->logging_steps = p->logging_steps;
    t->save_steps = 0;  // --save_strategy no: the final model only
    t->seed = dc->seed;
    flag_s(cmd, "output_dir", out);
    flag_i(cmd, "max_steps", steps);
    flag_f(cmd, "learning_rate", lr);
    flag_s(cmd, "lr_scheduler_type", optim_schedule_name(sched));
    if (t->warmup_steps > 0) flag_f(cmd, "warmup_steps", t->warmup_steps);
    flag_i(cmd, "logging_steps", t->logging_steps);
    flag_s(cmd, "save_strategy", "no");
}

// ---- stages -------------------------------------------------------------------------------

typedef struct Paths {
    char *root, *task, *configs, *eval;
    char *pairs;  // the DPO stages' preference pairs
} Paths;

static char *join(const char *a, const char *b) { return path_join(a, b); }

// `still init`: a random model of shape `shape` with the task's tokenizer.
static Status init_model(const DemoConfig *dc, const TaskModel *shape, const char *config_path, const char *tok_dir,
                         const char *out, size_t *params, StrBuf *cmd, Err *e) {
    TRY(task_write_model_config(shape, config_path, e));
    cmd_begin(cmd, dc, "init");
    flag_s(cmd, "model_config", config_path);
    flag_s(cmd, "tokenizer", tok_dir);
    flag_s(cmd, "output_dir", out);
    cmd_end(cmd, dc);
    ModelConfig cfg;
    TRY(config_load(config_path, &cfg, e));
    Backend *be = NULL;
    Model *m = NULL;
    Status st = backend_create(dc->backend, dc->threads, &be, e);
    if (st == ST_OK) st = model_create_random(&cfg, be, dc->seed, &m, e);
    if (st == ST_OK) st = checkpoint_write_model(out, m, DT_F32, tok_dir, e);
    if (st == ST_OK) *params = m->tt.n_params;
    if (m) model_free(m);  // the model owns cfg
    else config_free(&cfg);
    if (be) backend_destroy(be);
    return st;
}

// `still sft` with prompt-completion rows (completion-only loss, EOS appended).
static Status sft_stage(const DemoConfig *dc, const DemoPlan *p, const char *model, const char *dataset,
                        const char *out, int steps, double lr, TrainResult *res, StrBuf *cmd, Err *e) {
    SftConfig c;
    memset(&c, 0, sizeof c);
    cmd_begin(cmd, dc, "sft");
    c.model_dir = model, c.dataset = dataset;
    flag_s(cmd, "model", model);
    flag_s(cmd, "dataset", dataset);
    c.backend = dc->backend, c.threads = dc->threads;
    c.dtype = -1, c.save_dtype = -1;
    c.data = (DataConfig){.text_field = "text", .max_length = 1024, .completion_only_loss = -1};
    c.packing_strategy = PACK_BFD;
    c.batch = (BatchConfig){.B = p->sft_batch, .pad_to_multiple_of = p->pad, .shuffle = 1, .seed = dc->seed};
    flag_i(cmd, "per_device_train_batch_size", c.batch.B);
    flag_i(cmd, "pad_to_multiple_of", c.batch.pad_to_multiple_of);
    c.eval_batch_size = 8;
    train_args(&c.train, cmd, dc, p, out, steps, lr, SCHED_COSINE, p->warmup_steps);
    cmd_end(cmd, dc);
    return sft_run(&c, res, e);
}

// One `still distill` run: the student samples completions of the prompts and the teacher scores
// them on the student's tokens.
typedef struct DistillStage {
    const char *teacher;        // a model directory, or NULL: the student itself (--teacher self)
                                // reading the hinted prompt (TASK_HINT_TEMPLATE) in `mode`
    TeacherMode mode;
    float beta;                 // generalized JSD: 0 forward KL(teacher || student), 1 reverse KL
    int steps;
    double lr;
} DistillStage;

static Status distill_stage(const DemoConfig *dc, const DemoPlan *p, const char *student, const DistillStage *ds,
                            const char *prompts, const char *out, TrainResult *res, StrBuf *cmd, Err *e) {
    DistillConfig c;
    memset(&c, 0, sizeof c);
    cmd_begin(cmd, dc, "distill");
    c.model_dir = student, c.teacher_dir = ds->teacher, c.dataset = prompts;
    flag_s(cmd, "model", student);
    flag_s(cmd, "teacher", ds->teacher ? ds->teacher : "self");
    flag_s(cmd, "dataset", prompts);
    c.teacher_mode = TEACHER_FIXED, c.teacher_ema_decay = 0.999;
    if (!ds->teacher) {
        c.teacher_mode = ds->mode;
        flag_s(cmd, "teacher_mode", distill_teacher_mode_name(ds->mode));
        c.teacher_prompt_template = TASK_HINT_TEMPLATE;
        flag_s(cmd, "teacher_prompt_template", TASK_HINT_TEMPLATE);
    }
    c.backend = dc->backend, c.threads = dc->threads;
    c.dtype = -1, c.save_dtype = -1, c.teacher_dtype = (DType)-1;
    c.loss = (DistillLoss){.kind = DISTILL_LOSS_JSD, .beta = ds->beta, .top_k = 0, .tau = 1.0f};
    flag_f(cmd, "beta", ds->beta);
    GenConfig *g = &c.gen;
    gen_config_default(g);
    g->do_sample = 1, g->temperature = 1.0f, g->top_p = 0.95, g->top_k = 0;
    g->min_p = 0, g->repetition_penalty = 1, g->no_repeat_ngram_size = 0, g->min_new_tokens = 0;
    g->prefill_chunk_size = 512;
    g->max_new_tokens = p->task.digits + 4;
    flag_i(cmd, "max_completion_length", g->max_new_tokens);
    c.lmbda = 0.5;
    c.shuffle = 1;
    c.pad_to_multiple_of = p->pad;
    flag_i(cmd, "pad_to_multiple_of", p->pad);
    c.B = p->distill_batch;
    flag_i(cmd, "per_device_train_batch_size", c.B);
    train_args(&c.train, cmd, dc, p, out, ds->steps, ds->lr, SCHED_COSINE, p->warmup_steps);
    cmd_end(cmd, dc);
    return distill_run(&c, res, e);
}

// `still grpo` with the exact-match reward against the prompts' answer column.
static Status grpo_stage(const DemoConfig *dc, const DemoPlan *p, const char *model, const char *prompts,
                         const char *out, TrainResult *res, StrBuf *cmd, Err *e) {
    const char *rewards[] = {DEMO_METRIC};
    GrpoConfig c;
    grpo_config_default(&c, GRPO_ALGO_GRPO);
    cmd_begin(cmd, dc, "grpo");
    c.model_dir = model, c.dataset = prompts;
    flag_s(cmd, "model", model);
    flag_s(cmd, "dataset", prompts);
    c.reward_specs = rewards, c.n_rewards = 1;
    flag_s(cmd, "reward", rewards[0]);
    c.backend = dc->backend, c.threads = dc->threads;
    c.num_generations = p->grpo_generations;
    flag_i(cmd, "num_generations", c.num_generations);
    c.max_completion_length = p->task.digits + 4;
    flag_i(cmd, "max_completion_length", c.max_completion_length);
    c.per_device_train_batch_size = p->grpo_batch;
    flag_i(cmd, "per_device_train_batch_size", c.per_device_train_batch_size);
    c.temperature = p->grpo_temperature;
    flag_f(cmd, "temperature", c.temperature);
    c.pad_to_multiple_of = p->pad;
    flag_i(cmd, "pad_to_multiple_of", p->pad);
    train_args(&c.train, cmd, dc, p, out, p->grpo_steps, p->grpo_lr, SCHED_COSINE, p->grpo_warmup);
    cmd_end(cmd, dc);
    return grpo_run(&c, res, e);
}

// `still demo --pairs_from`: the DPO pairs from the samples of an eval run (pairs.h).
static Status pairs_stage(const DemoConfig *dc, const char *generations, const char *prompts, const char *out,
                          int *n_pairs, StrBuf *cmd, Err *e) {
    PairsConfig c = {.generations = generations, .prompts = prompts, .answer_key = "answer", .metric = DEMO_METRIC,
                     .output = out};
    cmd_begin(cmd, dc, "demo");
    flag_s(cmd, "pairs_from", generations);
    flag_s(cmd, "pairs_prompts", prompts);
    flag_s(cmd, "pairs_output", out);
    sb_putc(cmd, '\n');
    return demo_write_pairs(&c, n_pairs, e);
}

// `still dpo` (sigmoid loss, the reference: the start model's frozen weights; with lora: a LoRA
// adapter on the frozen start model, the reference the base with the adapter off).
static Status dpo_stage(const DemoConfig *dc, const DemoPlan *p, const char *model, const char *pairs, const char *out,
                        int lora, TrainResult *res, StrBuf *cmd, Err *e) {
    DpoConfig c;
    dpo_config_default(&c);
    cmd_begin(cmd, dc, "dpo");
    c.model_dir = model, c.dataset = pairs;
    flag_s(cmd, "model", model);
    flag_s(cmd, "dataset", pairs);
    c.backend = dc->backend, c.threads = dc->threads;
    c.loss.beta = p->dpo_beta;
    flag_f(cmd, "beta", c.loss.beta);
    c.per_device_train_batch_size = p->dpo_batch;
    flag_i(cmd, "per_device_train_batch_size", c.per_device_train_batch_size);
    c.pad_to_multiple_of = p->pad;
    flag_i(cmd, "pad_to_multiple_of", p->pad);
    train_args(&c.train, cmd, dc, p, out, p->dpo_steps, lora ? p->lora_lr : p->dpo_lr, SCHED_COSINE, p->dpo_warmup);
    if (lora) {
        PeftConfig *pc = &c.train.peft;
        pc->use_peft = 1;
        pc->lora = (LoraConfig){.r = p->lora_r, .alpha = p->lora_alpha, .dropout = 0};
        TRY(lora_parse_targets("all-linear", &pc->lora, e));
        flag_s(cmd, "use_peft", "true");
        flag_i(cmd, "lora_r", pc->lora.r);
        flag_f(cmd, "lora_alpha", pc->lora.alpha);
        flag_f(cmd, "lora_dropout", pc->lora.dropout);
        flag_s(cmd, "lora_target_modules", "all-linear");
    }
    cmd_end(cmd, dc);
    return dpo_run(&c, res, e);
}

// One `still eval` run.
typedef struct EvalStage {
    const char *model;
    const char *adapter;  // a LoRA adapter on model, or NULL
    const char *dataset;
    const char *out;
    int samples;          // 0: greedy; else this many samples a prompt at temperature 1
} EvalStage;

// `still eval`: greedy completions (or samples) of the problems, exact match against their answers.
static Status eval_stage(const DemoConfig *dc, const DemoPlan *p, const EvalStage *es, double *accuracy,
                         double *seconds, StrBuf *cmd, Err *e) {
    const char *metrics[] = {DEMO_METRIC};
    EvalConfig c;
    memset(&c, 0, sizeof c);
    cmd_begin(cmd, dc, "eval");
    c.dataset = es->dataset;
    flag_s(cmd, "model", es->model);
    c.adapter = es->adapter;
    if (es->adapter) flag_s(cmd, "adapter", es->adapter);
    flag_s(cmd, "dataset", es->dataset);
    c.metrics = metrics, c.n_metrics = 1;
    flag_s(cmd, "metric", metrics[0]);
    c.output_dir = es->out;
    flag_s(cmd, "output_dir", es->out);
    c.reward_timeout = 60;
    c.loss = 0;
    flag_s(cmd, "loss", "false");
    GenConfig *g = &c.gen;
    eval_gen_config_default(g);
    g->max_new_tokens = p->task.digits + 4;
    flag_i(cmd, "max_new_tokens", g->max_new_tokens);
    g->do_sample = es->samples > 0, g->temperature = 1.0f, g->top_k = 0, g->top_p = 1.0, g->min_p = 0;
    g->num_return_sequences = MAX(1, es->samples);
    if (g->do_sample) {
        flag_s(cmd, "do_sample", "true");
        flag_i(cmd, "num_return_sequences", g->num_return_sequences);
    }
    g->batch_size = p->eval_batch;
    flag_i(cmd, "batch_size", g->batch_size);
    g->pad_to_multiple_of = p->pad;
    flag_i(cmd, "pad_to_multiple_of", p->pad);
    g->seed = dc->seed;
    cmd_end(cmd, dc);
    EvalResult r = {0};
    Status st = eval_run(es->model, dc->backend, dc->threads, -1, &c, &r, e);
    if (st == ST_OK) {
        *accuracy = r.n_metrics == 1 && r.counts[0] > 0 ? r.values[0] : 0.0;
        *seconds = r.seconds;
    }
    eval_result_free(&r);
    return st;
}

// ---- the run ------------------------------------------------------------------------------

// The output directory: created, or an earlier demo's output (marked) replaced. Anything else
// that is not empty is left alone.
static const char *MARKER = ".still-demo";

static Status fresh_dir(const char *dir, Err *e) {
    if (dir_exists(dir)) {
        char *marker = join(dir, MARKER);
        int ours = file_exists(marker);
        free(marker);
        if (!ours) {
            DIR *d = opendir(dir);
            int empty = 1;
            struct dirent *de;
            while (d && (de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = 0;
            if (d) closedir(d);
            if (!empty)
                return err_set(e, ST_EINVAL, "%s exists and is not an earlier demo's output: give another --output_dir",
                               dir);
        } else {
            TRY(dir_remove_tree(dir, e));
        }
    }
    TRY(dir_create(dir, e));
    char *marker = join(dir, MARKER);
    const char *text = "written by `still demo`; the next demo run replaces this directory\n";
    Status st = file_write_atomic(marker, text, strlen(text), e);
    free(marker);
    return st;
}

static void stage_begin(int id, const char *who, const TaskModel *shape, const char *what, int steps) {
    fprintf(stderr, "\n[%d/%d] %s", id + 1, DEMO_N_STAGES, who);
    if (shape) fprintf(stderr, " (%.0fk parameters)", task_model_params(shape) / 1e3);
    fprintf(stderr, ": %s, %d steps\n", what, steps);
}

// Train (the stage's function) then evaluate; fills the stage's row of the report.
typedef Status (*TrainFn)(const DemoConfig *dc, const DemoPlan *p, const Paths *ps, const TaskFiles *tf,
                          DemoReport *r, TrainResult *res, StrBuf *cmd, Err *e);

static Status run_stage(const DemoConfig *dc, const DemoPlan *p, const Paths *ps, const TaskFiles *tf, DemoReport *r,
                        DemoStageId id, const char *name, const char *dir_name, TrainFn train, Err *e) {
    DemoStage *s = &r->stages[id];
    s->name = name;
    s->model_dir = join(ps->root, dir_name);
    double t0 = metrics_now();
    StrBuf cmd = {0};
    TrainResult res;
    memset(&res, 0, sizeof res);
    Status st = train(dc, p, ps, tf, r, &res, &cmd, e);
    char *eval_dir = join(ps->eval, dir_name);
    EvalStage es = {.model = s->base_dir ? s->base_dir : s->model_dir, .adapter = s->base_dir ? s->model_dir : NULL,
                    .dataset = tf->test, .out = eval_dir};
    if (st == ST_OK) st = eval_stage(dc, p, &es, &s->accuracy, &s->eval_seconds, &cmd, e);
    free(eval_dir);
    s->steps = res.steps;
    s->train_seconds = res.train_seconds;
    s->tokens_per_second = res.tokens_per_second;
    s->seconds = metrics_now() - t0;
    s->commands = sb_take(&cmd);
    if (st != ST_OK) return err_prefix(e, "%s: ", name);
    r->n_stages = id + 1;
    fprintf(stderr, "    %s: %.1f%% exact match on %d held-out problems (%.1f s)\n", name, 100 * s->accuracy, r->n_test,
            s->seconds);
    return ST_OK;
}

static Status train_teacher(const DemoConfig *dc, const DemoPlan *p, const Paths *ps, const TaskFiles *tf,
                            DemoReport *r, TrainResult *res, StrBuf *cmd, Err *e) {
    DemoStage *s = &r->stages[DEMO_TEACHER];
    char *cfg = join(ps->configs, "teacher.json"), *init = join(ps->root, "teacher-init");
    Status st = init_model(dc, &p->teacher, cfg, tf->tokenizer_dir, init, &s->params, cmd, e);
    if (st == ST_OK) st = sft_stage(dc, p, init, tf->train, s->model_dir, p->teacher_steps, p->teacher_lr, res, cmd, e);
    free(cfg), free(init);
    return st;
}

static Status train_student(const DemoConfig *dc, const DemoPlan *p, const Paths *ps, const TaskFiles *tf,
                            DemoReport *r, TrainResult *res, StrBuf *cmd, Err *e) {
    DemoStage *s = &r->stages[DEMO_STUDENT];
    char *cfg = join(ps->configs, "student.json"), *init = join(ps->root, "student-init");
    Status st = init_model(dc, &p->student, cfg, tf->tokenizer_dir, init, &s->params, cmd, e);
    if (st == ST_OK)
        st = sft_stage(dc, p, init, tf->train_hinted, s->model_dir, p->student_steps, p->student_lr, res, cmd, e);
    // the same student on the held-out problems with their answers: its self-distillation teacher
    char *eval_dir = join(ps->eval, "student-sft-hinted");
    double seconds;
    EvalStage es = {.model = s->model_dir, .dataset = tf->test_hinted, .out = eval_dir};
    if (st == ST_OK) st = eval_stage(dc, p, &es, &r->hinted_accuracy, &seconds, cmd, e);
    free(cfg), free(init), free(eval_dir);
    return st;
}

static Status train_opsd(const DemoConfig *dc, const DemoPlan *p, const Paths *ps, const TaskFiles *tf, DemoReport *r,
                         TrainResult *res, StrBuf *cmd, Err *e) {
    r->stages[DEMO_OPSD].params = r->stages[DEMO_STUDENT].params;
    DistillStage ds = {.teacher = NULL, .mode = p->opsd_mode, .beta = p->distill_beta, .steps = p->opsd_steps,
                       .lr = p->opsd_lr};
    return distill_stage(dc, p, r->stages[DEMO_STUDENT].model_dir, &ds, tf->prompts, r->stages[DEMO_OPSD].model_dir,
                         res, cmd, e);
}

static Status train_distill(const DemoConfig *dc, const DemoPlan *p, const Paths *ps, const TaskFiles *tf,
                            DemoReport *r, TrainResult *res, StrBuf *cmd, Err *e) {
    r->stages[DEMO_DISTILL].params = r->stages[DEMO_STUDENT].params;
    DistillStage ds = {.teacher = r->stages[DEMO_TEACHER].model_dir, .beta = p->distill_beta, .steps = p->distill_steps,
                       .lr = p->distill_lr};
    return distill_stage(dc, p, r->stages[DEMO_OPSD].model_dir, &ds, tf->prompts, r->stages[DEMO_DISTILL].model_dir,
                         res, cmd, e);
}

static Status train_grpo(const DemoConfig *dc, const DemoPlan *p, const Paths *ps, const TaskFiles *tf, DemoReport *r,
                         TrainResult *res, StrBuf *cmd, Err *e) {
    r->stages[DEMO_GRPO].params = r->stages[DEMO_STUDENT].params;
    return grpo_stage(dc, p, r->stages[DEMO_DISTILL].model_dir, tf->prompts, r->stages[DEMO_GRPO].model_dir, res, cmd, e);
}

// The GRPO student answers every training prompt (greedy, or sampled with pair_samples); its wrong
// answers are the rejected completions of the pairs (pairs.h), which DPO trains it on.
static Status train_dpo(const DemoConfig *dc, const DemoPlan *p, const Paths *ps, const TaskFiles *tf, DemoReport *r,
                        TrainResult *res, StrBuf *cmd, Err *e) {
    r->stages[DEMO_DPO].params = r->stages[DEMO_STUDENT].params;
    const char *grpo = r->stages[DEMO_GRPO].model_dir;
    char *samples = join(ps->eval, p->pair_samples ? "student-grpo-samples" : "student-grpo-train");
    char *generations = join(samples, "generations.jsonl");
    EvalStage es = {.model = grpo, .dataset = tf->prompts, .out = samples, .samples = p->pair_samples};
    double accuracy, seconds;
    Status st = eval_stage(dc, p, &es, &accuracy, &seconds, cmd, e);
    if (st == ST_OK) st = pairs_stage(dc, generations, tf->prompts, ps->pairs, &r->n_pairs, cmd, e);
    if (st == ST_OK) st = dpo_stage(dc, p, grpo, ps->pairs, r->stages[DEMO_DPO].model_dir, 0, res, cmd, e);
    free(samples), free(generations);
    return st;
}

// The same pairs, a LoRA adapter on the frozen GRPO student.
static Status train_dpo_lora(const DemoConfig *dc, const DemoPlan *p, const Paths *ps, const TaskFiles *tf,
                             DemoReport *r, TrainResult *res, StrBuf *cmd, Err *e) {
    (void)tf;
    DemoStage *s = &r->stages[DEMO_DPO_LORA];
    s->base_dir = xstrdup(r->stages[DEMO_GRPO].model_dir);
    s->params = task_lora_params(&p->student, p->lora_r);  // the adapter's weights: all that trains
    return dpo_stage(dc, p, s->base_dir, ps->pairs, s->model_dir, 1, res, cmd, e);
}

Status demo_run(const DemoConfig *c, DemoReport *r, Err *e) {
    memset(r, 0, sizeof *r);
    DemoPlan p;
    demo_plan(c->quick, c->seed, &p);
    cap_steps(&p, c->max_steps);
    r->digits = p.task.digits;
    r->threads = c->threads;
    double t0 = metrics_now();
    TRY(fresh_dir(c->output_dir, e));
    Paths ps = {.root = xstrdup(c->output_dir)};
    ps.task = join(ps.root, "task");
    ps.configs = join(ps.root, "configs");
    ps.eval = join(ps.root, "eval");
    ps.pairs = join(ps.root, "pairs.jsonl");
    TaskFiles tf = {0};
    Status st = task_write(&p.task, ps.task, &tf, e);
    if (st == ST_OK) st = dir_create(ps.configs, e);
    if (st == ST_OK) st = dir_create(ps.eval, e);
    r->n_train = tf.n_train, r->n_test = tf.n_test;
    r->data_seconds = metrics_now() - t0;
    if (st == ST_OK)
        fprintf(stderr, "still demo: %d-digit addition, %d training problems, %d held out; %s; %d threads\n",
                p.task.digits, tf.n_train, tf.n_test, ps.task, c->threads);
    static const struct {
        DemoStageId id;
        int from, variant;
        const char *name, *dir, *who, *what;
        TrainFn fn;
    } stages[] = {
        {DEMO_TEACHER, -1, 0, "teacher SFT", "teacher", "teacher", "SFT from scratch", train_teacher},
        {DEMO_STUDENT, -1, 0, "student SFT", "student-sft", "student",
         "brief SFT from scratch (problems as they are and with their answer first)", train_student},
        {DEMO_OPSD, DEMO_STUDENT, 0, "student OPSD", "student-opsd", "student",
         "on-policy self-distillation (its SFT weights, given the answer, as the teacher)", train_opsd},
        {DEMO_DISTILL, DEMO_OPSD, 0, "student distill", "student-distill", "student",
         "on-policy distillation from the teacher (on the student's own rollouts)", train_distill},
        {DEMO_GRPO, DEMO_DISTILL, 0, "student GRPO", "student-grpo", "student", "GRPO with the exact-match reward",
         train_grpo},
        {DEMO_DPO, DEMO_GRPO, 0, "student DPO", "student-dpo", "student",
         "DPO, its own wrong answers to the training prompts rejected, the reference answers chosen", train_dpo},
        {DEMO_DPO_LORA, DEMO_GRPO, 1, "student DPO LoRA", "student-dpo-lora", "student",
         "the same DPO as a LoRA adapter on the GRPO student (a variant, not in the chain)", train_dpo_lora},
    };
    const int steps[DEMO_N_STAGES] = {p.teacher_steps, p.student_steps, p.opsd_steps, p.distill_steps,
                                      p.grpo_steps,    p.dpo_steps,     p.dpo_steps};
    const TaskModel *shapes[DEMO_N_STAGES] = {&p.teacher, &p.student};
    for (size_t i = 0; st == ST_OK && i < ARRAY_LEN(stages); i++) {
        DemoStageId id = stages[i].id;
        r->stages[id].from = stages[i].from;
        r->stages[id].variant = stages[i].variant;
        stage_begin((int)id, stages[i].who, shapes[id], stages[i].what, steps[id]);
        st = run_stage(c, &p, &ps, &tf, r, id, stages[i].name, stages[i].dir, stages[i].fn, e);
    }
    r->lora_r = p.lora_r;
    r->seconds = metrics_now() - t0;
    task_files_free(&tf);
    free(ps.root), free(ps.task), free(ps.configs), free(ps.eval), free(ps.pairs);
    return st;
}

// ---- the report ---------------------------------------------------------------------------

void demo_print_report(FILE *f, const DemoConfig *c, const DemoReport *r) {
    fprintf(f, "\nstill demo: %d-digit addition, greedy exact match on %d held-out problems, %d threads\n\n", r->digits,
            r->n_test, r->threads);
    fprintf(f, "%-17s %9s %6s %9s %8s %10s\n", "stage", "params", "steps", "accuracy", "time", "tokens/s");
    for (int i = 0; i < r->n_stages; i++) {
        const DemoStage *s = &r->stages[i];
        fprintf(f, "%-17s %9zu %6d %8.1f%% %7.1fs %10.0f\n", s->name, s->params, s->steps, 100 * s->accuracy,
                s->seconds, s->tokens_per_second);
    }
    fprintf(f, "%-17s %9s %6s %9s %7.1fs\n", "total", "", "", "", r->seconds);
    // each of the student's stages against the one before it
    if (r->n_stages > DEMO_STUDENT)
        fprintf(f, "\nstudent SFT with the answer written before the problem (the OPSD teacher): %.1f%%\n",
                100 * r->hinted_accuracy);
    if (r->n_stages > DEMO_DPO) fprintf(f, "student DPO's preference pairs: %d (the GRPO student's wrong greedy answers to training prompts)\n", r->n_pairs);
    for (int i = DEMO_OPSD; i < r->n_stages; i++) {
        const DemoStage *s = &r->stages[i], *from = &r->stages[s->from];
        fprintf(f, "%s: %+.1f points over %s", s->name, 100 * (s->accuracy - from->accuracy), from->name);
        if (s->variant)
            fprintf(f, " (its start: a rank-%d adapter on %s, %zu trainable weights; a variant of %s, not in the chain)",
                    r->lora_r, from->name, s->params, r->stages[i - 1].name);
        fputc('\n', f);
    }
    fprintf(f, "\nmodels (Hugging Face layout; metrics.jsonl and loss.svg beside each):\n");
    for (int i = 0; i < r->n_stages; i++) {
        const DemoStage *s = &r->stages[i];
        fprintf(f, "  %-17s %s", s->name, s->model_dir);
        if (s->base_dir) fprintf(f, " (a LoRA adapter: --model %s --adapter %s)", s->base_dir, s->model_dir);
        fputc('\n', f);
    }
    fprintf(f, "\nthe same, by hand (also in %s/commands.sh; the task files come from the demo):\n", c->output_dir);
    for (int i = 0; i < r->n_stages; i++) fprintf(f, "# %s\n%s", r->stages[i].name, r->stages[i].commands);
}

Status demo_write_json(const DemoConfig *c, const DemoReport *r, Err *e) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "task", "addition");
    cJSON_AddNumberToObject(o, "digits", r->digits);
    cJSON_AddNumberToObject(o, "train_problems", r->n_train);
    cJSON_AddNumberToObject(o, "test_problems", r->n_test);
    cJSON_AddNumberToObject(o, "threads", r->threads);
    cJSON_AddBoolToObject(o, "quick", c->quick);
    if (c->max_steps > 0) cJSON_AddNumberToObject(o, "max_steps", c->max_steps);
    cJSON_AddNumberToObject(o, "seed", (double)c->seed);
    if (r->n_stages > DEMO_STUDENT) cJSON_AddNumberToObject(o, "student_sft_hinted_accuracy", r->hinted_accuracy);
    if (r->n_stages > DEMO_DPO) cJSON_AddNumberToObject(o, "dpo_pairs", r->n_pairs);
    cJSON *arr = cJSON_AddArrayToObject(o, "stages");
    for (int i = 0; i < r->n_stages; i++) {
        const DemoStage *s = &r->stages[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "stage", s->name);
        cJSON_AddStringToObject(j, "model", s->model_dir);
        if (s->base_dir) cJSON_AddStringToObject(j, "adapter_base_model", s->base_dir);
        if (s->from >= 0) cJSON_AddStringToObject(j, "from", r->stages[s->from].name);
        cJSON_AddBoolToObject(j, "in_chain", !s->variant);
        cJSON_AddNumberToObject(j, "params", (double)s->params);
        cJSON_AddNumberToObject(j, "steps", s->steps);
        cJSON_AddNumberToObject(j, "accuracy", s->accuracy);
        cJSON_AddNumberToObject(j, "seconds", s->seconds);
        cJSON_AddNumberToObject(j, "train_seconds", s->train_seconds);
        cJSON_AddNumberToObject(j, "eval_seconds", s->eval_seconds);
        cJSON_AddNumberToObject(j, "tokens_per_second", s->tokens_per_second);
        cJSON_AddStringToObject(j, "commands", s->commands);
        cJSON_AddItemToArray(arr, j);
    }
    cJSON_AddNumberToObject(o, "seconds", r->seconds);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    char *path = join(c->output_dir, "demo.json");
    Status st = file_write_atomic(path, text, strlen(text), e);
    free(path);
    free(text);
    TRY(st);
    StrBuf sh = {0};
    // the output directory appears only quoted, in the commands: in a comment a newline in it would end the comment
    sb_printf(&sh, "#!/bin/sh\n# The stages of `still demo`, by hand. The task files (task/) and the model configs\n"
                   "# (configs/) in the demo's output directory are the demo's own. Sleeping OpenMP waits, as the\n"
                   "# demo runs them.\nset -e\nexport OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}\n");
    for (int i = 0; i < r->n_stages; i++) sb_printf(&sh, "\n# %s\n%s", r->stages[i].name, r->stages[i].commands);
    path = join(c->output_dir, "commands.sh");
    st = file_write_atomic(path, sh.data, sh.len, e);
    free(path);
    sb_free(&sh);
    return st;
}

void demo_report_free(DemoReport *r) {
    for (int i = 0; i < DEMO_N_STAGES; i++)
        free(r->stages[i].model_dir), free(r->stages[i].base_dir), free(r->stages[i].commands);
    memset(r, 0, sizeof *r);
}
