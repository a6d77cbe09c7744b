// The engine's public API: glue between the spec, the model state, the data,
// the executor and the optimizer schedule.
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cuda.h"
#include "common/bf16.h"
#include "common/clock.h"
#include "data/data.h"
#include "compute/peak.h"
#include "exec/exec.h"
#include "kernels/cpu/gemm.h"
#include "model/hf_io.h"
#include "model/model.h"
#include "optim/adamw.h"
#include "optim/adamw8.h"
#include "plan/sim.h"
#include "run.h"

// Version 3 moved the q/k/v biases behind the three weights in a layer shard;
// a version 2 checkpoint of a model without those biases has the same bytes.
// A POET-X run's checkpoints are version 4: the same layout plus its state,
// which an older traind must not read as a plain model.
// POET-X checkpoints are version 5 (4: θ's moments were fp32 beside θ,
// before they took the run's optimizer state; refused by name).
enum { MAX_NONFINITE_STREAK = 3, META_VERSION = 3, META_VERSION_POET_FP32_MOMENTS = 4, META_VERSION_POET = 5 };


void eng_spec_defaults(eng_spec *s) {
  memset(s, 0, sizeof *s);
  s->seed = 1234;
  s->eval_batches = 4;
  s->seq_len = 256;
  s->batch = 8;
  s->micro_batches = 1;
  s->optimizer = ENG_OPT_ADAMW8;
  s->grad_dtype = ENG_GRAD_BF16;
  s->lr = 3e-4f;
  s->min_lr = 3e-5f;
  s->beta1 = 0.9f;
  s->beta2 = 0.95f;
  s->eps = 1e-8f;
  s->weight_decay = 0.1f;
  s->clip = 1.0f;
  s->warmup_steps = 0;
  s->total_steps = 0;
  s->device_gpu = -1;
  s->device_cap = (size_t)1 << 30;
  s->ckpt_every = 1;
  s->ckpt_place = ENG_PLACE_DEVICE;
  s->poet_block = 256;
  s->poet_merge_every = 200;
  s->poet_lr = 5e-4f;
}

static int spec_validate(const eng_spec *s, eng_err *e) {
#define BAD(...) return eng_err_set(e, ENG_EINVAL, "spec: " __VA_ARGS__)
  if (s->seq_len < 2) BAD("seq_len must be at least 2 (got %d)", s->seq_len);
  if (s->batch < 1) BAD("batch must be positive (got %d)", s->batch);
  if (!s->plan && (s->micro_batches < 1 || s->batch % s->micro_batches)) // a plan's split: plan_check
    BAD("micro_batches (%d) must be positive and divide batch (%d)", s->micro_batches, s->batch);
  if (!(s->lr >= 0) || !(s->min_lr >= 0)) BAD("lr and min_lr must be non-negative");
  if (!(s->beta1 >= 0 && s->beta1 < 1) || !(s->beta2 >= 0 && s->beta2 < 1))
    BAD("beta1 and beta2 must lie in [0, 1)");
  if (!(s->eps > 0)) BAD("eps must be positive");
  if (!(s->weight_decay >= 0)) BAD("weight_decay must be non-negative");
  if (!(s->clip >= 0)) BAD("clip must be non-negative (0 turns clipping off)");
  if (s->warmup_steps < 0 || s->total_steps < 0) BAD("warmup_steps and total_steps must be non-negative");
  if (s->device_gpu < -1) BAD("device_gpu must be -1 (the cpu backend) or a GPU index (got %d)", s->device_gpu);
  if (s->ckpt_every < 0) BAD("ckpt_every must be non-negative");
  if (!(s->link_bps >= 0) || !(s->spill_bps >= 0)) BAD("link_bps and spill_bps must be non-negative (0: no cap)");
  if (s->link_bps > 0 && s->device_gpu >= 0) BAD("link_bps caps the cpu backend's copies; a GPU's link is its own");
  if (s->ckpt_place < ENG_PLACE_DEVICE || s->ckpt_place > ENG_PLACE_STORE) BAD("unknown ckpt_place %d", s->ckpt_place);
  if (s->ckpt_place == ENG_PLACE_STORE && (!s->spill || !s->spill->act_put || !s->spill->act_get || !s->spill->act_drop))
    BAD("ckpt_place store needs a spill store with activation entries");
  if (s->optimizer != ENG_OPT_ADAMW && s->optimizer != ENG_OPT_ADAMW8) BAD("unknown optimizer %d", s->optimizer);
  if (s->grad_dtype != ENG_GRAD_BF16 && s->grad_dtype != ENG_GRAD_F32) BAD("unknown grad_dtype %d", s->grad_dtype);
  if (s->eval_every < 0 || (s->eval_every > 0 && !s->eval_path)) BAD("eval_every needs an eval_path");
  if (s->eval_batches < 1) BAD("eval_batches must be positive");
  if (!(s->peak_flops >= 0) || !isfinite(s->peak_flops)) BAD("peak_flops must be a finite non-negative FLOP/s");
  int rc = eng_budget_validate(&s->budget, s->eval_path && s->eval_every > 0, e);
  if (!rc) rc = eng_select_validate(&s->select, s->budget.max_tokens > 0 || s->budget.max_flops > 0, e);
  if (rc) return rc;
  if (s->method != ENG_METHOD_FULL && s->method != ENG_METHOD_POETX) BAD("unknown method %d", s->method);
  if (s->method == ENG_METHOD_POETX) {
    if (s->poet_block < 2) BAD("poet_block must be at least 2 (got %d)", s->poet_block);
    if (s->poet_merge_every < 1) BAD("poet_merge_every must be positive (got %d)", s->poet_merge_every);
    if (!(s->poet_lr >= 0)) BAD("poet_lr must be non-negative");
    if (s->device_gpu >= 0)
      return eng_err_set(e, ENG_ENOTSUP, "spec: method poetx runs on the cpu backend only in this build (its "
                         "CUDA kernels are not written yet); device_gpu must be -1");
    if (s->clip_lagged) BAD("clip_lagged is not available with method poetx (its clipping ramps after each merge)");
  } else if (s->poet_base_bf16) {
    BAD("poet_base_bf16 is method poetx's (the frozen W0 it holds in bf16)");
  }
  if (s->work_bf16 && s->device_gpu < 0) {
    if (s->method == ENG_METHOD_POETX) BAD("work_bf16 is not available with method poetx (its merges write W0 whole)");
    if (s->plan) BAD("work_bf16: plans are made for the cpu backend streaming the fp32 master; use the uniform policy");
  }
  return 0;
#undef BAD
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

// The spec's model config: model_dir's, or the spec's own. *untied: the
// directory's config ties a head that its weights hold distinct.
static int spec_config(const eng_spec *spec, eng_config *cfg, int *untied, eng_err *e) {
  *untied = 0;
  int rc;
  if (!spec->model_dir) {
    *cfg = spec->config;
    rc = eng_config_validate(cfg, "spec", e);
  } else {
    rc = eng_hf_load_config(spec->fs, spec->model_dir, cfg, untied, e);
  }
  return rc;
}

static eng_exec_policy spec_policy(const eng_spec *s) {
  const int W = eng_run_dist_world(s); // a rank computes its share
  return (eng_exec_policy){.batch = s->batch / W,
                           .seq_len = s->seq_len,
                           .micro_batches = s->micro_batches / W,
                           .ckpt_every = s->ckpt_every,
                           .ckpt_place = s->ckpt_place,
                           .spill = s->spill,
                           .keep_acts = s->keep_acts,
                           .opt_thread = s->opt_thread,
                           .plan = s->plan,
                           .spill_bps = s->spill_bps,
                           .cuda = s->device_gpu >= 0,
                           .grad_bf16 = s->grad_dtype == ENG_GRAD_BF16,
                           .poet_block = s->method == ENG_METHOD_POETX ? s->poet_block : 0,
                           .poet_fast = !s->poet_memory};
}

// A plan checked against the spec and its model c, naming the field that
// differs: made for this model, batch and sequence length, its batch split
// into its micro-batches, and the spec's split the same. The executor checks
// the rest (its boundaries, kept layers and transfers) as it lays them out.
static int plan_check(const eng_spec *s, const eng_config *c, eng_err *e) {
#define BAD(...) return eng_err_set(e, ENG_EINVAL, "spec: plan: " __VA_ARGS__)
  const eng_plan *p = s->plan;
  const int W = eng_run_dist_world(s); // a plan is made for one rank's share
  char over[40] = "";
  if (W > 1) snprintf(over, sizeof over, " over %d ranks", W);
  if (!p->bnd || !p->keep_inner) BAD("has no boundaries (not made by eng_plan_init, eng_plan_load or the planner)");
  if (p->n_layers != c->n_layers) BAD("n_layers is %d, the model has %d layers", p->n_layers, c->n_layers);
  if (p->ranks != W && p->ranks == 1) BAD("was made for one process, this run has %d ranks", W);
  if (p->ranks != W && W == 1) BAD("was made for %d ranks, this run is one process", p->ranks);
  if (p->ranks != W) BAD("was made for %d ranks, this run has %d", p->ranks, W);
  if (p->batch * W != s->batch) BAD("batch is %d, the spec's batch is %d%s", p->batch, s->batch, over);
  if (p->seq_len != s->seq_len) BAD("seq_len is %d, the spec's seq_len is %d", p->seq_len, s->seq_len);
  if (p->micro_batch < 1 || p->n_micro < 1 || (int64_t)p->micro_batch * p->n_micro != p->batch)
    BAD("batch %d is not n_micro %d micro-batches of micro_batch %d", p->batch, p->n_micro, p->micro_batch);
  if (s->micro_batches != p->n_micro * W)
    BAD("n_micro is %d, the spec's micro_batches is %d%s (set it to the plan's)", p->n_micro, s->micro_batches, over);
  return 0;
#undef BAD
}

// The executor's arena for the spec; a device problem names the field.
static int spec_tiers(const eng_spec *s, const eng_config *cfg, eng_exec_tiers *t, eng_err *e) {
  if (s->plan) {
    int rc = plan_check(s, cfg, e);
    if (rc) return rc;
  }
  eng_exec_policy pol = spec_policy(s);
  int rc = eng_exec_tiers_of(cfg, &pol, t, e);
  if (rc == ENG_EDEVICE || (rc == ENG_ENOTSUP && s->device_gpu >= 0))
    eng_err_prefix(e, "spec: device_gpu %d: ", s->device_gpu);
  return rc;
}

// How the spec's model state is held in host memory.
static eng_model_opts spec_model_opts(const eng_spec *s) {
  return (eng_model_opts){.grad_bf16 = s->grad_dtype == ENG_GRAD_BF16,
                          .opt_fp32 = s->optimizer == ENG_OPT_ADAMW,
                          .opt_min_quant = s->opt_min_quant,
                          .opt_fp32_embed_head = s->opt_fp32_embed_head,
                          .work_bf16 = s->device_gpu >= 0 || s->work_bf16,
                          .poet_block = s->method == ENG_METHOD_POETX ? s->poet_block : 0,
                          .poet_base_bf16 = s->method == ENG_METHOD_POETX && s->poet_base_bf16,
                          // Ranks sum the whole table (their rows differ), and each holds
                          // the optimizer state of one part of every tensor (ZeRO-1).
                          .embed_rows = eng_run_dist_world(s) > 1 ? 0 : s->batch * s->seq_len,
                          .opt_parts = eng_run_dist_world(s),
                          .opt_part = eng_run_dist_rank(s)};
}

// One step's FLOPs, and budgets that a single step would pass refused.
static int spec_flops(const eng_spec *s, const eng_config *cfg, eng_step_flops *f, eng_err *e) {
  int rc = eng_flops_step(cfg, s->batch, s->seq_len, s->method == ENG_METHOD_POETX ? s->poet_block : 0,
                          !s->poet_memory, f, e);
  if (rc) return rc;
  const eng_budget *b = &s->budget;
  if (b->max_tokens > 0 && b->max_tokens < (int64_t)s->batch * s->seq_len)
    return eng_err_set(e, ENG_EINVAL, "budget.max_tokens: %lld is less than one step's %d tokens (batch %d x seq_len %d)",
                       (long long)b->max_tokens, s->batch * s->seq_len, s->batch, s->seq_len);
  if (b->max_flops > 0 && b->max_flops < f->model)
    return eng_err_set(e, ENG_EINVAL, "budget.max_flops: %.3g is less than one step's %.3g model FLOPs", b->max_flops,
                       f->model);
  return 0;
}

// The spec checked, its model config and its tiers, without allocating.
static int spec_sizes(const eng_spec *spec, eng_config *cfg, eng_exec_tiers *t, eng_err *e) {
  int untied;
  eng_step_flops f;
  int rc = spec_validate(spec, e);
  if (!rc) rc = spec_config(spec, cfg, &untied, e);
  if (!rc) rc = spec_flops(spec, cfg, &f, e);
  if (!rc) rc = spec_tiers(spec, cfg, t, e);
  return rc;
}

int eng_spec_device_bytes(const eng_spec *spec, size_t *bytes, eng_err *e) {
  eng_config cfg;
  eng_exec_tiers t;
  int rc = spec_sizes(spec, &cfg, &t, e);
  if (!rc) *bytes = t.device;
  return rc;
}

void eng_spec_profile_method(const eng_spec *s, eng_profile *p) {
  p->ranks = eng_run_dist_world(s);
  p->poet_block = s->method == ENG_METHOD_POETX ? s->poet_block : 0;
  p->poet_fast = p->poet_block && !s->poet_memory;
  p->poet_merge_every = p->poet_block ? s->poet_merge_every : 0;
  p->poet_base_bf16 = p->poet_block && s->poet_base_bf16;
}

int eng_spec_host_bytes(const eng_spec *spec, size_t *bytes, eng_err *e) {
  eng_config cfg;
  eng_exec_tiers t;
  int rc = spec_sizes(spec, &cfg, &t, e);
  if (rc) return rc;
  eng_model_opts mo = spec_model_opts(spec);
  size_t batch = 2 * (size_t)spec->batch * spec->seq_len * sizeof(int32_t); // ids and labels
  // The cpu backend's device arena is host memory too.
  *bytes = eng_model_state_bytes(&cfg, &mo) + t.host + batch + (spec->device_gpu < 0 ? t.device : 0);
  // Online selection's pool, and the reducible rule's reference model, a
  // run of its own.
  const eng_select *sel = &spec->select;
  if (sel->rule != ENG_SELECT_NONE)
    *bytes += (size_t)(sel->pool ? sel->pool : 4) * (batch + (size_t)spec->batch * (sizeof(uint64_t) + sizeof(double)));
  if (sel->rule == ENG_SELECT_REDUCIBLE && sel->reference) {
    eng_spec rs;
    size_t ref;
    eng_run_select_ref_spec(spec, &rs);
    if ((rc = eng_spec_host_bytes(&rs, &ref, e))) return eng_err_prefix(e, "select.reference: ");
    *bytes += ref;
  }
  return 0;
}

int eng_gpu_count(eng_err *e) { return eng_dev_cuda_count(e); }

int eng_gpu_describe(int index, eng_gpu_info *info, eng_err *e) {
  memset(info, 0, sizeof *info);
  return eng_dev_cuda_describe(index, info->name, sizeof info->name, &info->memory_bytes, e);
}

// The spec's device: the cpu backend, or the GPU it names.
static int spec_dev_open(const eng_spec *s, eng_dev **dev, eng_err *e) {
  if (s->device_gpu < 0) {
    int rc = eng_dev_open_cpu(dev, s->device_cap, e);
    if (!rc) eng_dev_cpu_links(*dev, s->link_bps, s->link_bps);
    return rc;
  }
  int rc = eng_dev_open_cuda(dev, s->device_gpu, s->device_cap, e);
  if (rc) eng_err_prefix(e, "spec: device_gpu %d: ", s->device_gpu);
  return rc;
}

int eng_cpu_gemm_route(const char **name, const char **blas_core, eng_err *e) {
  char msg[256];
  int r = eng_k_gemm_route_init(msg, sizeof msg);
  if (r < 0) return eng_err_set(e, ENG_EINVAL, "%s", msg);
  if (name) *name = eng_k_gemm_route_name(r);
  if (blas_core) *blas_core = r == ENG_K_GEMM_BLAS ? eng_k_blas_core() : "";
  return 0;
}

// The tokenizer of tokenizer_dir (else model_dir): its tokenizer.json and
// tokenizer_config.json. A model directory without one leaves r->tok NULL
// (text is then read byte by byte, chat refused); a tokenizer_dir without
// one is an error. One that cannot be read (a SentencePiece model, a link
// out of the data roots) fails only data that needs it, with the reason:
// pre-tokenized data trains.
static int run_tok_open(eng_run *r, eng_err *e) {
  const eng_spec *s = &r->spec;
  const char *dir = s->tokenizer_dir ? s->tokenizer_dir : s->model_dir;
  r->eos = -1;
  if (!dir) return s->chat_template ? eng_err_set(e, ENG_EINVAL, "chat_template: no tokenizer to render with") : 0;
  char path[4096];
  snprintf(path, sizeof path, "%s/tokenizer.json", dir);
  eng_err te = {0};
  int fd, rc = eng_fs_open_opt(s->fs, path, &fd, &te);
  if (rc == 1)
    return s->tokenizer_dir ? eng_err_set(e, ENG_EINVAL, "tokenizer_dir %s holds no tokenizer.json", dir)
           : s->chat_template ? eng_err_set(e, ENG_EINVAL, "chat_template: %s holds no tokenizer.json", dir)
                              : 0;
  if (rc == 0) close(fd);
  if (rc == 0 && (rc = eng_tok_load(&r->tok, s->fs, path, &te)) == 0 &&
      (rc = eng_chat_load(&r->chat, s->fs, dir, s->chat_template, &te)) == 0 && r->chat.eos &&
      (r->eos = eng_tok_id(r->tok, r->chat.eos)) < 0)
    rc = eng_err_set(&te, ENG_EINVAL, "%s/tokenizer_config.json: eos_token is not a token of tokenizer.json", dir);
  if (!rc) return 0;
  if (rc == ENG_ENOMEM) {
    *e = te;
    return rc;
  }
  snprintf(r->no_tok, sizeof r->no_tok, "%s", te.msg);
  eng_tok_free(r->tok);
  r->tok = NULL;
  eng_chat_free(&r->chat);
  r->eos = -1;
  return 0;
}

// Passes a long tokenization's progress on as notes, a quarter at a time.
typedef struct data_note {
  const eng_spec *spec;
  int quarter;
} data_note;

static void data_progress(void *ctx, const char *path, uint64_t done, uint64_t total) {
  data_note *dn = ctx;
  int q = total ? (int)(4 * done / total) : 0;
  if (q <= dn->quarter || q >= 4 || !dn->spec->note) return;
  dn->quarter = q;
  char line[4200];
  snprintf(line, sizeof line, "%s: tokenized %d%%", path, 25 * q);
  dn->spec->note(dn->spec->note_ctx, line);
}

int eng_run_data_open(eng_run *r, const char *path, int shuffle, eng_data **d, eng_err *e) {
  const eng_spec *s = &r->spec;
  data_note dn = {s, 0};
  eng_data_opts o = {.seq_len = s->seq_len, .vocab = s->config.vocab, .seed = s->seed, .shuffle = shuffle,
                     .format = s->data_format, .tok = r->tok, .no_tok = r->no_tok[0] ? r->no_tok : NULL,
                     .chat = r->tok ? &r->chat : NULL, .eos = r->eos,
                     .pack = !s->no_pack, .cache_dir = s->data_cache, .progress = data_progress,
                     .progress_ctx = &dn};
  int rc = eng_data_open_opts(d, s->fs, path, &o, e);
  if (!rc && s->note) {
    char line[4400];
    snprintf(line, sizeof line, "%s: %s", path, eng_data_summary(*d));
    s->note(s->note_ctx, line);
  }
  return rc;
}

int eng_open(const eng_spec *spec, eng_run **out, eng_err *e) {
  eng_config cfg;
  int untied;
  int rc = eng_cpu_gemm_route(NULL, NULL, e);
  if (!rc) rc = spec_validate(spec, e);
  if (!rc) rc = eng_run_dist_check(spec, e);
  if (!rc) rc = spec_config(spec, &cfg, &untied, e);
  if (rc) return rc;
  if (untied && spec->note) {
    char line[4400];
    snprintf(line, sizeof line,
             "%s: config.json ties lm_head.weight to the embedding (tie_word_embeddings true), "
             "but the weights hold an lm_head.weight that differs from it; the model is loaded "
             "untied with that head, as transformers loads it",
             spec->model_dir);
    spec->note(spec->note_ctx, line);
  }

  // Refuse a cap that cannot hold the step before any model memory exists
  // (a GPU's cap of 0, all it has free, is known once it is open).
  eng_exec_policy pol = spec_policy(spec);
  eng_exec_tiers tiers;
  if ((rc = spec_tiers(spec, &cfg, &tiers, e))) return rc;
  size_t need = tiers.device;
  if ((spec->device_gpu < 0 || spec->device_cap) && need > spec->device_cap)
    return eng_err_set(e, ENG_ECAP,
                       "device cap of %zu bytes is too small: two layer slots, two gradient slots, "
                       "the boundary activations and one micro-batch of %d sequences need %zu bytes "
                       "(%.1f MiB)",
                       spec->device_cap, spec->batch / spec->micro_batches, need, need / 1048576.0);

  eng_step_flops flops;
  if ((rc = spec_flops(spec, &cfg, &flops, e))) return rc;

  eng_run *r = calloc(1, sizeof *r);
  if (!r) return eng_err_set(e, ENG_ENOMEM, "cannot allocate a run");
  r->flops = flops;
  r->spec = *spec;
  r->model_dir = dup_or_null(spec->model_dir);
  r->train_path = dup_or_null(spec->train_path);
  r->eval_path = dup_or_null(spec->eval_path);
  r->spec.model_dir = r->model_dir;
  r->spec.train_path = r->train_path;
  r->spec.eval_path = r->eval_path;
  r->spec.config = cfg;
  if (spec->plan) {
    snprintf(r->plan_method, sizeof r->plan_method, "%s", spec->plan->method);
    r->plan_fixed = spec->plan->dev_fixed;
  }
  r->spec.plan = NULL; // the caller's, read by open only (the executor holds what it takes from it)
  eng_govern_init(&r->gov, &spec->budget);
  r->last_eval = NAN;
  r->lag_scale = NAN;
  size_t bt = (size_t)spec->batch * spec->seq_len;
  r->ids = malloc(bt * sizeof(int32_t));
  r->labels = malloc(bt * sizeof(int32_t));
  r->pos = malloc(bt * sizeof(int32_t));
  r->data_cache = dup_or_null(spec->data_cache);
  r->spec.data_cache = r->data_cache;
  if (!r->ids || !r->labels || !r->pos || (spec->data_cache && !r->data_cache)) {
    rc = eng_err_set(e, ENG_ENOMEM, "cannot allocate the batch buffers");
    goto fail;
  }
  // The device first: a missing GPU fails before the model takes host memory.
  if ((rc = spec_dev_open(spec, &r->dev, e))) goto fail;
  eng_model_opts mo = spec_model_opts(spec);
  if ((rc = eng_model_alloc(&r->model, &cfg, &mo, e))) goto fail;
  if ((rc = spec->model_dir ? eng_hf_load_model(spec->fs, spec->model_dir, &r->model, e)
                            : eng_model_init_random(&r->model, spec->seed, e)))
    goto fail;
  // POET-X from scratch draws its first permutations; a loaded model keeps
  // the identity until its first merge, so that it starts out computing
  // exactly the model it loaded (W0 is the loaded weight, unpermuted).
  if (r->model.poet.layers && !spec->model_dir) eng_poet_model_perms(&r->model.poet, spec->seed);
  eng_model_work_refresh(&r->model);
  if ((rc = run_tok_open(r, e))) goto fail;
  if (spec->train_path && (rc = eng_run_data_open(r, r->train_path, 1, &r->train, e))) goto fail;
  if (spec->eval_path && (rc = eng_run_data_open(r, r->eval_path, 0, &r->eval, e))) goto fail;
  // read by open only
  r->spec.tokenizer_dir = r->spec.chat_template = NULL;
  if ((rc = eng_exec_open(&r->exec, &r->model, r->dev, &pol, e))) goto fail;
  r->peak = spec->peak_flops > 0 ? spec->peak_flops : spec->device_gpu < 0 ? eng_cpu_peak_flops() : 0;
  if (r->train && (rc = eng_run_select_open(r, e))) goto fail;
  r->wall_mark = eng_now();
  *out = r;
  return 0;
fail:
  eng_close(r);
  return rc;
}

void eng_close(eng_run *r) {
  if (!r) return;
  eng_exec_close(r->exec);
  eng_dev_close(r->dev);
  if (r->train) eng_data_close(r->train);
  if (r->eval) eng_data_close(r->eval);
  eng_model_free(&r->model);
  eng_govern_free(&r->gov);
  eng_run_select_close(r);
  free(r->ids);
  free(r->labels);
  free(r->pos);
  eng_tok_free(r->tok);
  eng_chat_free(&r->chat);
  free(r->data_cache);
  free(r->model_dir);
  free(r->train_path);
  free(r->eval_path);
  free(r);
}


static int check_tokens(const eng_run *r, const int32_t *ids, const int32_t *labels, eng_err *e) {
  size_t n = (size_t)r->spec.batch * r->spec.seq_len;
  int V = r->spec.config.vocab;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= V)
      return eng_err_set(e, ENG_EINVAL, "batch: input id %d at position %zu is outside the vocabulary [0, %d)",
                         ids[i], i, V);
    if (labels[i] != -100 && (labels[i] < 0 || labels[i] >= V))
      return eng_err_set(e, ENG_EINVAL, "batch: label %d at position %zu is neither -100 nor in [0, %d)",
                         labels[i], i, V);
  }
  return 0;
}

static int maybe_eval(eng_run *r, eng_metrics *m, eng_err *e) {
  if (!r->eval || r->spec.eval_every <= 0 || r->step % r->spec.eval_every != 0) return 0;
  int rc = eng_eval(r, &r->last_eval, e);
  m->eval_loss = r->last_eval;
  m->evaluated = 1;
  if (!rc) rc = eng_govern_eval(&r->gov, r->last_eval, e);
  return rc;
}

// Update round t (1-based) at learning rate lr, gradients scaled by scale.
static eng_exec_update update_of(const eng_run *r, float lr, float scale, int64_t t) {
  const eng_spec *s = &r->spec;
  eng_exec_update u = {.lr = lr, .beta1 = s->beta1, .beta2 = s->beta2, .eps = s->eps,
                       .weight_decay = s->weight_decay, .clip_scale = scale, .t = t};
  if (s->method == ENG_METHOD_POETX) { // θ follows lr's schedule; merges every poet_merge_every updates
    u.poet_lr = s->lr > 0 ? (float)((double)s->poet_lr * lr / s->lr) : s->poet_lr;
    u.poet_t = (t - 1) % s->poet_merge_every + 1;
    u.poet_merge = t % s->poet_merge_every == 0 ? t / s->poet_merge_every : 0;
    u.seed = s->seed;
  }
  return u;
}

// The clipping threshold of update t: POET-X ramps it after each merge.
static float clip_of(const eng_run *r, int64_t t) {
  const eng_spec *s = &r->spec;
  return s->method == ENG_METHOD_POETX ? s->clip * eng_poet_clip_ramp(t - 1, s->poet_merge_every) : s->clip;
}

// A step on a batch with positions pos (NULL: 0..T-1 in every row).
static int step_run(eng_run *r, const int32_t *ids, const int32_t *labels, const int32_t *pos, eng_metrics *m,
                    eng_err *e) {
  int rc = check_tokens(r, ids, labels, e);
  if (rc) return rc;
  eng_metrics mm;
  if (!m) m = &mm;
  memset(m, 0, sizeof *m);
  double t0 = eng_now();
  uint64_t in0 = r->dev->bytes_in, out0 = r->dev->bytes_out;
  const eng_spec *s = &r->spec;
  float lr = eng_lr_at(r->step, s->lr, s->min_lr, s->warmup_steps, s->total_steps);
  // Lagged clipping: the update is armed before the backward with the
  // previous step's factor, so shards may update as their gradients land.
  int lagged = s->clip_lagged && isfinite(r->lag_scale);
  if (lagged) {
    eng_exec_update u = update_of(r, lr, r->lag_scale, ++r->updates);
    eng_exec_update_arm(r->exec, &u);
  }
  eng_exec_result res;
  rc = eng_run_dist_run(r, ids, labels, pos, 1, &res, e);
  if (rc) return rc;

  double loss = res.count ? res.loss_sum / (double)res.count : NAN;
  double norm = sqrt(res.grad_sumsq);
  m->skipped = !isfinite(loss) || !isfinite(norm);
  if (m->skipped) {
    // (A lagged update already ran; its pass skipped the non-finite values.)
    if (++r->nonfinite_streak >= MAX_NONFINITE_STREAK)
      return eng_err_set(e, ENG_ENONFINITE,
                         "step %lld: non-finite loss or gradients in %d steps in a row (loss %g, "
                         "gradient norm %g); lower the learning rate or check the data",
                         (long long)r->step, r->nonfinite_streak, loss, norm);
  } else {
    r->nonfinite_streak = 0;
    // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), at most 1.
    float scale = 1.0f, clip = clip_of(r, r->updates + 1);
    if (clip > 0) {
      float coef = (float)(clip / (norm + 1e-6));
      scale = coef < 1.0f ? coef : 1.0f;
    }
    if (!lagged) {
      eng_exec_update u = update_of(r, lr, scale, ++r->updates);
      eng_exec_update_launch(r->exec, &u);
      if ((rc = eng_run_dist_weights_gather(r, &res.t_comm, e))) return rc;
    }
    r->lag_scale = scale;
  }
  r->step++;

  m->step = r->step;
  m->loss = loss;
  m->grad_norm = norm;
  m->lr = lr;
  m->eval_loss = r->last_eval;
  m->tokens = (int64_t)s->batch * s->seq_len;
  m->t_fwd = res.t_fwd;
  m->t_loss = res.t_loss;
  m->t_bwd = res.t_bwd;
  m->t_opt_wait = res.t_wait;
  m->t_act_wait = res.t_act_wait;
  m->t_comm = res.t_comm;
  m->t_total = eng_now() - t0;
  m->tokens_per_s = m->tokens / m->t_total;
  m->peak_arena = r->dev->peak;
  m->host_act = res.host_act;
  m->store_act = res.store_act;
  m->arena_cap = r->dev->cap;
  m->bytes_in = r->dev->bytes_in - in0;
  m->bytes_out = r->dev->bytes_out - out0;
  if (r->model.poet.layers) { // the run waited for every update the step read, merges included
    const eng_poet_model *pm = &r->model.poet;
    m->poet_merges = pm->layers[0].merged;
    for (int l = 0; l < pm->n_layers; l++) {
      if (pm->layers[l].merged < m->poet_merges) m->poet_merges = pm->layers[l].merged;
      if (pm->layers[l].merge_err > m->poet_orth_err) m->poet_orth_err = pm->layers[l].merge_err;
    }
  }
  // What the step spent: recomputed forwards and merges are executed FLOPs.
  m->counted = res.count;
  m->flops_model = r->flops.model;
  m->flops_exec = r->flops.exec + (double)res.refwd_layers * s->batch * r->flops.refwd;
  if (m->poet_merges > r->merges_seen) {
    m->flops_exec += (double)(m->poet_merges - r->merges_seen) * r->flops.merge;
    r->merges_seen = m->poet_merges;
  }
  // A peak the cpu measured while other processes held its cores is too
  // low: no step can execute faster than the peak, so one that did sets it.
  if (s->peak_flops <= 0 && s->device_gpu < 0 && m->t_total > 0 && m->flops_exec / m->t_total > r->peak)
    r->peak = m->flops_exec / m->t_total;
  m->peak_flops = r->peak;
  m->mfu = r->peak > 0 ? m->flops_model / (m->t_total * r->peak) : NAN;
  m->flops_score = r->score_model;
  double now = eng_now();
  eng_govern_step(&r->gov, m->tokens, m->counted, m->flops_model + r->score_model, m->flops_exec + r->score_exec,
                  now - r->wall_mark);
  r->score_model = r->score_exec = 0;
  r->wall_mark = now;
  if ((rc = maybe_eval(r, m, e))) return rc;
  m->total = r->gov.t;
  m->gain = r->gov.gain;
  m->fit_a = r->gov.fit_a;
  m->fit_b = r->gov.fit_b;
  m->stop = r->gov.stop;
  if (s->progress && s->progress(s->progress_ctx, m))
    return eng_err_set(e, ENG_ECANCEL, "the run was cancelled by its progress callback");
  return 0;
}

int eng_step_batch(eng_run *r, const int32_t *ids, const int32_t *labels, const int32_t *pos, eng_metrics *m,
                   eng_err *e) {
  return step_run(r, ids, labels, pos, m, e);
}

int eng_step(eng_run *r, eng_metrics *m, eng_err *e) {
  if (!r->train) return eng_err_set(e, ENG_ESTATE, "spec: no train_path to draw batches from");
  eng_data_pos pos;
  eng_data_pos_get(r->train, &pos);
  int64_t before = r->step;
  int rc = r->spec.select.rule != ENG_SELECT_NONE
               ? eng_run_select_batch(r, e)
               : eng_data_next_samples(r->train, r->spec.batch, r->ids, r->labels, r->pos, NULL, e);
  if (!rc) rc = step_run(r, r->ids, r->labels, eng_run_pos(r->train, r->pos), m, e);
  // A step that did not happen (cancelled, failed) leaves its batch unread,
  // so a retried or resumed run sees the same data.
  if (rc && r->step == before) eng_data_pos_set(r->train, &pos, NULL);
  return rc;
}

int eng_eval(eng_run *r, double *loss, eng_err *e) {
  if (!r->eval) return eng_err_set(e, ENG_ESTATE, "spec: no eval_path to evaluate on");
  // Each evaluation reads the same batches: rewind the held-out set.
  eng_data_pos start = {0, 0};
  int rc = eng_data_pos_set(r->eval, &start, e);
  double sum = 0;
  int64_t count = 0;
  for (int i = 0; !rc && i < r->spec.eval_batches; i++) {
    eng_exec_result res;
    rc = eng_data_next_samples(r->eval, r->spec.batch, r->ids, r->labels, r->pos, NULL, e);
    if (!rc) rc = eng_run_dist_run(r, r->ids, r->labels, eng_run_pos(r->eval, r->pos), 0, &res, e);
    sum += res.loss_sum;
    count += res.count;
  }
  if (!rc) *loss = count ? sum / (double)count : NAN;
  return rc;
}

int eng_debug_grads(eng_run *r, const int32_t *ids, const int32_t *labels, const int32_t *pos, double *loss,
                    float *logits, eng_err *e) {
  int rc = check_tokens(r, ids, labels, e);
  if (rc) return rc;
  eng_exec_result res;
  if ((rc = eng_exec_run(r->exec, ids, labels, pos, 1, logits, r->spec.cancel, &res, e))) return rc;
  eng_exec_quiesce(r->exec);
  *loss = res.count ? res.loss_sum / (double)res.count : NAN;
  return 0;
}

// A POET-X name, "<projection>.theta_in", ".theta_out", ".pin" or ".pout":
// its layer, weight and side, and whether it names a permutation; -1 when
// it is none (or the run is no POET-X run).
static int poet_name(const eng_run *r, const char *name, int *l, int *k, int *side, int *perm) {
  const char *dot = strrchr(name, '.');
  if (!r->model.poet.layers || !dot) return -1;
  const char *leaves[] = {"theta_in", "theta_out", "pin", "pout"};
  int leaf = -1;
  for (int i = 0; i < 4; i++)
    if (!strcmp(dot + 1, leaves[i])) leaf = i;
  if (leaf < 0) return -1;
  *side = leaf & 1;
  *perm = leaf >= 2;
  for (*l = 0; *l < r->model.lo.n_layers; ++*l)
    for (*k = 0; *k < ENG_POET_WEIGHTS; ++*k) {
      eng_tensor t = eng_layout_layer_tensor(&r->model.lo, *l, eng_poet_param[*k]);
      size_t n = strlen(t.name) - strlen("weight"); // "model.layers.L.<projection>."
      if ((size_t)(dot - name) + 1 == n && !strncmp(name, t.name, n)) return 0;
    }
  return -1;
}

// θ's or a permutation's length for a POET-X name.
static size_t poet_numel(const eng_poet_model *pm, int k, int side, int perm) {
  return perm ? (size_t)pm->dim[k][side] : (size_t)(pm->dim[k][side] / pm->b) * eng_poet_tri(pm->b);
}

void eng_debug_arena(const eng_run *r, const void **base, size_t *bytes) {
  *base = r->dev->base;
  *bytes = r->dev->reserved;
}

int eng_debug_poet_set(eng_run *r, const char *name, const void *src, size_t numel, eng_err *e) {
  int l, k, side, perm;
  if (poet_name(r, name, &l, &k, &side, &perm))
    return eng_err_set(e, ENG_EINVAL, "no POET-X state named \"%s\" in this run", name);
  eng_poet_model *pm = &r->model.poet;
  if (numel != poet_numel(pm, k, side, perm))
    return eng_err_set(e, ENG_EINVAL, "\"%s\" has %zu values, not %zu", name, poet_numel(pm, k, side, perm), numel);
  eng_exec_quiesce(r->exec);
  if (perm) {
    if (!eng_poet_is_perm(src, numel))
      return eng_err_set(e, ENG_EINVAL, "\"%s\" is not a permutation of 0..%zu", name, numel - 1);
    memcpy(r->model.poet.layers[l].perm + pm->perm_off[k][side], src, numel * sizeof(int32_t));
  } else {
    memcpy(r->model.poet.layers[l].theta + pm->theta_off[k][side], src, numel * sizeof(float));
  }
  return 0;
}

int eng_debug_param(eng_run *r, const char *name, char which, float *dst, size_t numel, eng_err *e) {
  int shard, l, k, side, perm;
  eng_tensor t;
  if (!poet_name(r, name, &l, &k, &side, &perm) && !perm) {
    const eng_poet_model *pm = &r->model.poet;
    if (numel != poet_numel(pm, k, side, 0))
      return eng_err_set(e, ENG_EINVAL, "\"%s\" has %zu values, not %zu", name, poet_numel(pm, k, side, 0), numel);
    eng_exec_quiesce(r->exec);
    const eng_poet_lstate *st = &pm->layers[l];
    size_t off = pm->theta_off[k][side];
    if (which != 'g') memcpy(dst, st->theta + off, numel * sizeof(float));
    else if (pm->g_bf16) eng_bf16_to_f32_n(dst, (const uint16_t *)st->g + off, numel, ENG_ISA_AUTO);
    else memcpy(dst, (const float *)st->g + off, numel * sizeof(float));
    return 0;
  }
  if (eng_layout_find(&r->model.lo, name, &shard, &t))
    return eng_err_set(e, ENG_EINVAL, "no parameter named \"%s\" in this model", name);
  if (which != 'g' && r->model.shards[shard].w_part)
    return eng_err_set(e, ENG_ENOTSUP, "parameter \"%s\": the fp32 master is in parts over the ranks (data "
                       "parallel with a bf16 working copy); a checkpoint or an export holds it whole", name);
  if (t.numel != numel)
    return eng_err_set(e, ENG_EINVAL, "parameter \"%s\" has %zu values, not %zu", name, t.numel, numel);
  eng_exec_quiesce(r->exec);
  if (which == 'g') eng_model_grad_get(&r->model, shard, &t, dst);
  else eng_model_tensor_get(&r->model, shard, &t, dst);
  return 0;
}

// ---- training state -------------------------------------------------------------

// "meta": little-endian int64 fields; the shape fields refuse a checkpoint of
// another model.
enum {
  META_MAGIC, META_VER, META_STEP, META_UPDATES, META_STREAK, META_EPOCH, META_INDEX,
  META_LAG, META_VOCAB, META_D, META_LAYERS, META_HEADS, META_KV, META_HD, META_FF, META_TIE,
  META_ARCH, META_OPT_BYTES, META_COUNT
};
static const int64_t META_MAGIC_VALUE = 0x74726e6431LL; // "trnd1"

static int64_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static void meta_fill(const eng_run *r, int64_t *mt) {
  const eng_config *c = &r->model.cfg;
  eng_data_pos pos = {0, 0};
  if (r->train) eng_data_pos_get(r->train, &pos);
  int64_t v[META_COUNT] = {
      META_MAGIC_VALUE, r->model.poet.layers ? META_VERSION_POET : META_VERSION, r->step, r->updates, r->nonfinite_streak,
      (int64_t)pos.epoch, (int64_t)pos.index, float_bits(r->lag_scale), c->vocab, c->d_model,
      c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->d_ff, c->tie_embeddings, c->arch,
      // the optimizer's layout (8-bit or fp32 moments, thresholds) shows in its size
      (int64_t)eng_run_dist_opt_bytes(r)};
  memcpy(mt, v, sizeof v);
}

// A checkpoint's shard names, known here only: "w.<shard>" holds a layout
// shard's fp32 weights, "o.<shard>.<tensor>" a tensor's optimizer state.
// POET-X runs add "poet" (int64 block size and merge interval), and per
// layer "poet.<layer>" (θ: fp32), "poet_o.<layer>" (θ's optimizer state,
// its region's raw bytes as "o.*") and "perm.<layer>" (the permutations:
// int32), in poet/state.h's layout.
static const char *weights_name(char buf[32], int shard) {
  snprintf(buf, 32, "w.%d", shard);
  return buf;
}

static int poet_save(const eng_run *r, const eng_store *st, eng_err *e) {
  const eng_poet_model *pm = &r->model.poet;
  int64_t meta[2] = {pm->b, r->spec.poet_merge_every};
  int rc = st->ckpt_put(st->ctx, "poet", meta, sizeof meta, e);
  for (int l = 0; !rc && l < pm->n_layers; l++) {
    char name[32];
    snprintf(name, sizeof name, "poet.%d", l);
    rc = st->ckpt_put(st->ctx, name, pm->layers[l].theta, pm->n_theta * sizeof(float), e);
    snprintf(name, sizeof name, "poet_o.%d", l);
    if (!rc) rc = st->ckpt_put(st->ctx, name, pm->layers[l].opt.mem, pm->layers[l].opt.bytes, e);
    snprintf(name, sizeof name, "perm.%d", l);
    if (!rc) rc = st->ckpt_put(st->ctx, name, pm->layers[l].perm, pm->n_perm * sizeof(int32_t), e);
  }
  return rc;
}

// The POET-X state of a checkpoint: its block size and merge interval (in
// meta), and with pm shaped for it, θ and permutations (poet_read; an
// export needs no more) and θ's optimizer state (poet_read_opt).
static int poet_meta(const eng_store *st, int64_t step, int64_t meta[2], eng_err *e) {
  size_t n;
  int rc = st->ckpt_size(st->ctx, step, "poet", &n, e);
  if (!rc && n != 2 * sizeof(int64_t)) rc = eng_err_set(e, ENG_EINVAL, "its \"poet\" entry has %zu bytes", n);
  if (!rc) rc = st->ckpt_get(st->ctx, step, "poet", meta, 2 * sizeof(int64_t), e);
  return rc;
}

static int poet_read(const eng_store *st, int64_t step, eng_poet_model *pm, eng_err *e) {
  int rc = 0;
  for (int l = 0; !rc && l < pm->n_layers; l++) {
    char name[32];
    snprintf(name, sizeof name, "poet.%d", l);
    rc = st->ckpt_get(st->ctx, step, name, pm->layers[l].theta, pm->n_theta * sizeof(float), e);
    snprintf(name, sizeof name, "perm.%d", l);
    if (!rc) rc = st->ckpt_get(st->ctx, step, name, pm->layers[l].perm, pm->n_perm * sizeof(int32_t), e);
    if (!rc && !eng_poet_model_perms_ok(pm, l))
      rc = eng_err_set(e, ENG_EINVAL, "layer %d's permutations are corrupt", l);
  }
  return rc;
}

static int poet_read_opt(const eng_store *st, int64_t step, eng_poet_model *pm, eng_err *e) {
  int rc = 0;
  for (int l = 0; !rc && l < pm->n_layers; l++) {
    char name[32];
    eng_adamw8_state *o = &pm->layers[l].opt;
    snprintf(name, sizeof name, "poet_o.%d", l);
    rc = st->ckpt_get(st->ctx, step, name, o->mem, o->bytes, e); // read in place, then vetted
    if (!rc) rc = eng_adamw8_state_restore(o, o->mem, o->bytes, e);
    if (rc) eng_err_prefix(e, "layer %d's optimizer state: ", l);
  }
  return rc;
}

// The largest shard's values in fp32 where a shard is not held as fp32
// whole (a bf16 base, a master in parts: it is read or written whole
// through them), else NULL.
static int whole_scratch(const eng_run *r, float **whole, eng_err *e) {
  *whole = NULL;
  size_t most = 0;
  for (int s = 0; s < r->model.lo.n_shards; s++) {
    const eng_shard *sh = &r->model.shards[s];
    if ((sh->base || sh->w_part) && sh->numel > most) most = sh->numel;
  }
  if (most && !(*whole = malloc(most * sizeof(float))))
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes for a shard's weights", most * sizeof(float));
  return 0;
}

// The compute tally and the stopping rules' state (compute/govern.h), so a
// resumed run spends against its budgets from where it was. A checkpoint
// of a traind before them has none: the run counts from zero.
static int compute_save(const eng_run *r, const eng_store *st, eng_err *e) {
  void *p;
  size_t n;
  int rc = eng_govern_pack(&r->gov, &p, &n, e);
  if (rc) return rc;
  rc = st->ckpt_put(st->ctx, "compute", p, n, e);
  free(p);
  return rc;
}

static int compute_load(eng_run *r, const eng_store *st, int64_t step, eng_err *e) {
  size_t n;
  eng_err absent;
  if (st->ckpt_size(st->ctx, step, "compute", &n, &absent)) return 0;
  void *p = malloc(n ? n : 1);
  if (!p) return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes for the compute tally", n);
  int rc = st->ckpt_get(st->ctx, step, "compute", p, n, e);
  if (!rc) rc = eng_govern_unpack(&r->gov, p, n, e);
  free(p);
  if (rc) eng_err_prefix(e, "checkpoint at step %lld: ", (long long)step);
  return rc;
}

// A hybrid's shape beyond the meta's fields (model/config.h), as the
// checkpoint's "hybrid" entry: a run without one writes none, so older
// checkpoints read as before.
static const char *const hybrid_fields[] = {"full_attention_interval", "linear_num_key_heads",
                                            "linear_num_value_heads", "linear_key_head_dim",
                                            "linear_value_head_dim", "linear_conv_kernel_dim", "rotary dims"};
enum { HYBRID_FIELDS = sizeof hybrid_fields / sizeof hybrid_fields[0] };

static void hybrid_fill(const eng_config *c, int64_t h[HYBRID_FIELDS]) {
  const int64_t v[HYBRID_FIELDS] = {c->full_every, c->dn.k_heads, c->dn.v_heads, c->dn.k_dim,
                                    c->dn.v_dim,   c->dn.conv,    c->rope_dim};
  memcpy(h, v, sizeof v);
}

// The checkpoint at step was made by a run of this hybrid shape (meta's
// arch, compared before, says whether both are hybrids).
static int hybrid_check(const eng_run *r, const eng_store *st, int64_t step, eng_err *e) {
  int64_t got[HYBRID_FIELDS], want[HYBRID_FIELDS];
  size_t n;
  int rc = st->ckpt_size(st->ctx, step, "hybrid", &n, e);
  if (!rc && n != sizeof got) rc = eng_err_set(e, ENG_EINVAL, "its \"hybrid\" entry has %zu bytes", n);
  if (!rc) rc = st->ckpt_get(st->ctx, step, "hybrid", got, sizeof got, e);
  if (rc) return eng_err_prefix(e, "checkpoint at step %lld: ", (long long)step);
  hybrid_fill(&r->model.cfg, want);
  for (int i = 0; i < HYBRID_FIELDS; i++)
    if (got[i] != want[i])
      return eng_err_set(e, ENG_ESTATE, "checkpoint at step %lld belongs to a hybrid of another shape (its %s is "
                         "%lld, this run's %lld)", (long long)step, hybrid_fields[i], (long long)got[i],
                         (long long)want[i]);
  return 0;
}

int eng_save(eng_run *r, const eng_store *st, eng_err *e) {
  eng_exec_quiesce(r->exec);
  st = eng_run_dist_store(r, st); // every rank saves; rank 0 writes
  int64_t mt[META_COUNT];
  meta_fill(r, mt);
  int rc = st->ckpt_begin(st->ctx, r->step, e);
  if (!rc) rc = st->ckpt_put(st->ctx, "meta", mt, sizeof mt, e);
  if (!rc && r->model.cfg.full_every) {
    int64_t h[HYBRID_FIELDS];
    hybrid_fill(&r->model.cfg, h);
    rc = st->ckpt_put(st->ctx, "hybrid", h, sizeof h, e);
  }
  if (!rc) rc = compute_save(r, st, e);
  if (!rc) rc = eng_run_select_save(r, st, e);
  // Shard by shard, straight from the model state: host memory never doubles
  // (a shard of a bf16 base or of a master in parts goes through one shard's
  // fp32, its layout's as every shard's, so a checkpoint reads the same
  // whatever holds the weights). The optimizer state goes as its regions' raw
  // bytes (optim/adamw8.h).
  float *whole = NULL;
  if (!rc && (rc = whole_scratch(r, &whole, e))) return rc;
  for (int s = 0; !rc && s < r->model.lo.n_shards; s++) {
    const eng_shard *sh = &r->model.shards[s];
    char name[32];
    const int via = sh->base || sh->w_part; // whole through the scratch
    const float *w = via ? whole : sh->w;
    if (via) rc = eng_run_dist_shard_get(r, s, whole, e);
    if (!rc) rc = st->ckpt_put(st->ctx, weights_name(name, s), w, sh->numel * sizeof(float), e);
    for (int i = 0; !rc && i < sh->n_tensors; i++) {
      snprintf(name, sizeof name, "o.%d.%d", s, i);
      rc = eng_run_dist_state_save(r, st, sh, i, name, e);
    }
  }
  free(whole);
  if (!rc && r->model.poet.layers) rc = poet_save(r, st, e);
  if (!rc) rc = st->ckpt_commit(st->ctx, e);
  return rc;
}

int eng_load(eng_run *r, const eng_store *st, eng_err *e) {
  int64_t step;
  int rc = st->ckpt_latest(st->ctx, &step, e);
  if (rc) return rc; // 1: nothing to resume from
  int64_t mt[META_COUNT], want[META_COUNT];
  if ((rc = st->ckpt_get(st->ctx, step, "meta", mt, sizeof mt, e))) return rc;
  meta_fill(r, want);
  if (mt[META_MAGIC] == META_MAGIC_VALUE && mt[META_VER] == META_VERSION_POET_FP32_MOMENTS)
    return eng_err_set(e, ENG_EINVAL, "checkpoint at step %lld: a POET-X checkpoint of an older traind (version 4, "
                       "whose θ moments this version does not read); export it with that version and import the "
                       "model", (long long)step);
  if (mt[META_MAGIC] == META_MAGIC_VALUE && (mt[META_VER] == META_VERSION_POET) != (want[META_VER] == META_VERSION_POET))
    return eng_err_set(e, ENG_ESTATE, "checkpoint at step %lld was written by a run %s method poetx, this run %s",
                       (long long)step, mt[META_VER] == META_VERSION_POET ? "with" : "without",
                       want[META_VER] == META_VERSION_POET ? "has it" : "has not");
  // Version 2 stacked the q/k/v biases elsewhere; layers without them kept their layout.
  const eng_arch_row *was = eng_arch_row_of((eng_arch)mt[META_ARCH]);
  int same_layout = mt[META_VER] == want[META_VER] || (mt[META_VER] == 2 && !(was && was->qkv_bias));
  if (mt[META_MAGIC] == META_MAGIC_VALUE && mt[META_VER] == 2 && !same_layout)
    return eng_err_set(e, ENG_EINVAL, "checkpoint at step %lld: written by an older traind whose qwen2 layer "
                       "layout this version does not read; export it with that version and import the model",
                       (long long)step);
  if (mt[META_MAGIC] != META_MAGIC_VALUE || !same_layout)
    return eng_err_set(e, ENG_EINVAL, "checkpoint at step %lld: unknown format (magic %llx, version %lld)",
                       (long long)step, (unsigned long long)mt[META_MAGIC], (long long)mt[META_VER]);
  for (int i = META_VOCAB; i < META_COUNT; i++)
    if (mt[i] != want[i])
      return eng_err_set(e, ENG_ESTATE, "checkpoint at step %lld belongs to another model shape or optimizer "
                         "(meta field %d is %lld, this run has %lld)", (long long)step, i,
                         (long long)mt[i], (long long)want[i]);
  if (r->model.cfg.full_every && (rc = hybrid_check(r, st, step, e))) return rc;
  eng_exec_quiesce(r->exec);
  float *whole = NULL;
  if ((rc = whole_scratch(r, &whole, e))) return rc;
  for (int s = 0; !rc && s < r->model.lo.n_shards; s++) {
    eng_shard *sh = &r->model.shards[s];
    char name[32];
    const int via = sh->base || sh->w_part; // whole through the scratch
    rc = st->ckpt_get(st->ctx, step, weights_name(name, s), via ? whole : sh->w, sh->numel * sizeof(float), e);
    if (!rc && via) eng_model_shard_set(&r->model, s, whole);
    for (int i = 0; !rc && i < sh->n_tensors; i++) {
      snprintf(name, sizeof name, "o.%d.%d", s, i);
      rc = eng_run_dist_state_load(r, st, step, sh, i, name, e);
      if (rc) eng_err_prefix(e, "checkpoint at step %lld, %s: ", (long long)step, sh->tensors[i].name);
    }
  }
  free(whole);
  if (!rc && r->model.poet.layers) {
    int64_t pmeta[2];
    rc = poet_meta(st, step, pmeta, e);
    if (!rc && (pmeta[0] != r->model.poet.b || pmeta[1] != r->spec.poet_merge_every))
      rc = eng_err_set(e, ENG_ESTATE, "checkpoint at step %lld has poet_block %lld and poet_merge_every %lld, this "
                       "run %d and %d", (long long)step, (long long)pmeta[0], (long long)pmeta[1], r->model.poet.b,
                       r->spec.poet_merge_every);
    if (!rc) rc = poet_read(st, step, &r->model.poet, e);
    if (!rc) rc = poet_read_opt(st, step, &r->model.poet, e);
    if (rc) eng_err_prefix(e, "checkpoint at step %lld, POET-X state: ", (long long)step);
  }
  if (rc) return rc;
  eng_model_work_refresh(&r->model); // what streams must be what was loaded
  r->step = mt[META_STEP];
  r->updates = mt[META_UPDATES];
  for (int l = 0; l < r->model.poet.n_layers; l++) { // the merges the loaded updates made (their errors are not kept)
    r->model.poet.layers[l].merged = r->updates / r->spec.poet_merge_every;
    r->model.poet.layers[l].merge_err = 0;
  }
  r->merges_seen = r->model.poet.layers ? r->updates / r->spec.poet_merge_every : 0;
  if ((rc = compute_load(r, st, step, e)) || (rc = eng_run_select_load(r, st, step, e))) return rc;
  r->wall_mark = eng_now();
  r->nonfinite_streak = (int)mt[META_STREAK];
  uint32_t lag = (uint32_t)mt[META_LAG];
  memcpy(&r->lag_scale, &lag, sizeof lag);
  if (r->train) {
    eng_data_pos pos = {(uint64_t)mt[META_EPOCH], (uint64_t)mt[META_INDEX]};
    rc = eng_data_pos_set(r->train, &pos, e);
  }
  return rc;
}

// Under POET-X an export holds the effective weights: layer shards are
// copied (into *copies, which the caller frees) with their projections
// merged; the other shards are w's own. base: the shards' bf16 bases
// (NULL: none), which the copies widen.
static int poet_effective_shards(const eng_layout *lo, const eng_poet_model *pm, float *const *w,
                                 const eng_model *base, const float **ws, float ***copies, eng_err *e) {
  *copies = calloc((size_t)lo->n_shards, sizeof **copies);
  if (!*copies) return eng_err_set(e, ENG_ENOMEM, "cannot allocate %d shard pointers", lo->n_shards);
  for (int s = 0; s < lo->n_shards; s++) {
    ws[s] = w[s];
    if (s < 1 || s > lo->n_layers) continue;
    if (!((*copies)[s] = malloc(lo->layer_numel * sizeof(float))))
      return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes for layer %d's merged weights",
                         lo->layer_numel * sizeof(float), s - 1);
    if (base) eng_model_shard_get(base, s, (*copies)[s]);
    else memcpy((*copies)[s], w[s], lo->layer_numel * sizeof(float));
    eng_poet_model_effective(pm, lo, s - 1, (*copies)[s], pm->merge_work);
    ws[s] = (*copies)[s];
  }
  return 0;
}

static void copies_free(float **copies, int n) {
  if (copies)
    for (int s = 0; s < n; s++) free(copies[s]);
  free(copies);
}

// A master in parts (data parallel with a working copy): every shard
// gathered whole into *copies (freed by the caller), which rank 0 writes;
// the other ranks take part in the gathers through one shard's buffer.
static int gathered_shards(eng_run *r, const float **ws, float ***copies, eng_err *e) {
  const int n = r->model.lo.n_shards, keep = eng_run_dist_rank(&r->spec) == 0;
  if (!(*copies = calloc((size_t)n, sizeof **copies)))
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate %d shard pointers", n);
  size_t most = 0;
  for (int s = 0; s < n; s++) most = r->model.shards[s].numel > most ? r->model.shards[s].numel : most;
  int rc = 0;
  for (int s = 0; !rc && s < n; s++) {
    size_t bytes = (keep ? r->model.shards[s].numel : most) * sizeof(float);
    if ((keep || s == 0) && !((*copies)[s] = malloc(bytes ? bytes : 1)))
      rc = eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes to gather shard %d's weights", bytes, s);
    ws[s] = (*copies)[keep ? s : 0];
    if (!rc) rc = eng_run_dist_shard_get(r, s, (float *)ws[s], e);
  }
  return rc;
}

int eng_export_hf(eng_run *r, const char *dir, int bf16, eng_err *e) {
  eng_exec_quiesce(r->exec);
  const eng_layout *lo = &r->model.lo;
  const float *ws[lo->n_shards];
  float *w[lo->n_shards], **copies = NULL;
  for (int s = 0; s < lo->n_shards; s++) ws[s] = w[s] = r->model.shards[s].w;
  int rc = 0;
  if (r->model.shards[0].w_part) rc = gathered_shards(r, ws, &copies, e);
  else if (r->model.poet.layers) rc = poet_effective_shards(lo, &r->model.poet, w, &r->model, ws, &copies, e);
  if (!rc && eng_run_dist_rank(&r->spec) == 0) // the ranks hold the same model: one writes
    rc = eng_hf_save(dir, &r->model.cfg, lo, ws, bf16, 0, r->spec.fs, r->model_dir, e);
  copies_free(copies, lo->n_shards);
  return rc;
}

int eng_ckpt_export_hf(const eng_store *st, int64_t step, const eng_config *c, const char *dir, int bf16,
                       size_t max_shard_bytes, const eng_fs *src_fs, const char *src_dir, eng_err *e) {
  int rc = eng_config_validate(c, "export config", e);
  if (rc) return rc;
  if (step < 0 && (rc = st->ckpt_latest(st->ctx, &step, e)))
    return rc == 1 ? eng_err_set(e, ENG_EINVAL, "no checkpoint to export") : rc;
  eng_layout lo;
  eng_layout_init(&lo, c);
  float **w = calloc((size_t)lo.n_shards, sizeof *w);
  if (!w) return eng_err_set(e, ENG_ENOMEM, "cannot allocate %d shard pointers", lo.n_shards);
  for (int i = 0; i < lo.n_shards && !rc; i++) {
    char name[32];
    weights_name(name, i);
    size_t want = eng_layout_shard_numel(&lo, i) * sizeof(float), have;
    rc = st->ckpt_size(st->ctx, step, name, &have, e);
    if (!rc && have != want)
      rc = eng_err_set(e, ENG_EINVAL, "checkpoint at step %lld: shard \"%s\" has %zu bytes, the export config gives "
                       "%zu: config and checkpoint differ", (long long)step, name, have, want);
    if (!rc && !(w[i] = malloc(want)))
      rc = eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes for shard \"%s\"", want, name);
    if (!rc) rc = st->ckpt_get(st->ctx, step, name, w[i], want, e);
  }
  // A POET-X checkpoint exports its effective weights.
  int64_t mt[META_COUNT];
  eng_poet_model pm = {0};
  float **copies = NULL;
  const float **ws = calloc((size_t)lo.n_shards, sizeof *ws);
  if (!ws && !rc) rc = eng_err_set(e, ENG_ENOMEM, "cannot allocate %d shard pointers", lo.n_shards);
  for (int i = 0; ws && i < lo.n_shards; i++) ws[i] = w[i];
  if (!rc) rc = st->ckpt_get(st->ctx, step, "meta", mt, sizeof mt, e);
  if (!rc && mt[META_VER] == META_VERSION_POET_FP32_MOMENTS)
    rc = eng_err_set(e, ENG_EINVAL, "checkpoint at step %lld: a POET-X checkpoint of an older traind (version 4); "
                     "export it with that version", (long long)step);
  if (!rc && mt[META_VER] == META_VERSION_POET) {
    int64_t pmeta[2];
    rc = poet_meta(st, step, pmeta, e);
    if (!rc) rc = eng_poet_model_shape(&pm, &lo, (int)pmeta[0], e);
    if (!rc) rc = eng_poet_model_alloc(&pm, e);
    if (!rc) rc = poet_read(st, step, &pm, e);
    if (!rc) rc = poet_effective_shards(&lo, &pm, w, NULL, ws, &copies, e);
    if (rc) eng_err_prefix(e, "checkpoint at step %lld, POET-X state: ", (long long)step);
  }
  if (!rc) rc = eng_hf_save(dir, c, &lo, ws, bf16, max_shard_bytes, src_fs, src_dir, e);
  copies_free(copies, lo.n_shards);
  eng_poet_model_free(&pm);
  free(ws);
  for (int i = 0; i < lo.n_shards; i++) free(w[i]);
  free(w);
  return rc;
}

int64_t eng_steps_done(const eng_run *r) { return r->step; }
const eng_govern *eng_run_govern(const eng_run *r) { return &r->gov; }

int eng_timeline(const eng_run *r, const eng_plan_span **spans) { return eng_exec_timeline(r->exec, spans); }

int eng_timeline_svg(const eng_run *r, const eng_metrics *m, char **svg, eng_err *e) {
  const eng_spec *s = &r->spec;
  eng_plan title = {.batch = s->batch, .seq_len = s->seq_len, .micro_batch = s->batch / s->micro_batches,
                    .dev_fixed = r->plan_fixed};
  snprintf(title.model, sizeof title.model, "%s", eng_arch_name(r->model.cfg.arch));
  snprintf(title.profile, sizeof title.profile, "%s (measured)", r->dev->name);
  snprintf(title.method, sizeof title.method, "%s", r->plan_method[0] ? r->plan_method : "uniform policy");
  eng_plan_sim got = {0};
  got.step_time = m->t_total;
  got.t_exposed = m->t_act_wait + m->t_opt_wait;
  got.peak_dev = (double)m->peak_arena - (double)r->plan_fixed;
  got.peak_host = (double)m->host_act;
  got.peak_nvme = (double)m->store_act;
  const eng_plan_span *sp;
  got.n_span = eng_timeline(r, &sp);
  got.span = (eng_plan_span *)sp;
  return eng_plan_svg(&title, &got, svg, e);
}
const eng_config *eng_run_config(const eng_run *r) { return &r->model.cfg; }
size_t eng_param_count(const eng_run *r) { return r->model.lo.total_numel; }
size_t eng_opt_state_bytes(const eng_run *r) { return eng_model_opt_bytes(&r->model); }
size_t eng_master_bytes(const eng_run *r) { return eng_model_master_bytes(&r->model); }
size_t eng_work_bytes(const eng_run *r) {
  size_t n = 0;
  for (int s = 0; s < r->model.lo.n_shards; s++)
    n += r->model.shards[s].work ? r->model.shards[s].numel * sizeof(uint16_t) : 0;
  return n;
}
size_t eng_train_state_bytes(const eng_run *r) {
  return eng_model_opt_bytes(&r->model) + eng_model_grad_bytes(&r->model) +
         (r->model.poet.layers ? eng_poet_model_bytes(&r->model.poet) : 0);
}
