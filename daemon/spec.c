#include "spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/hf_io.h"
#include "model/rope.h"
#include "owner.h"

#define T(x) Traind__V1__##x   // types
#define K(x) TRAIND__V1__##x   // constants

static int fail(val_err *e, grpc_status_code code, const char *field, const char *msg) {
  e->code = code;
  snprintf(e->msg, sizeof e->msg, "%s: %s", field, msg);
  return -1;
}

// The proto's Arch numbers the architecture table's rows from 1 (0 is
// ARCH_UNSPECIFIED, which validation refuses).
_Static_assert(K(ARCH__ARCH_LLAMA) == ENG_ARCH_LLAMA + 1 && K(ARCH__ARCH_QWEN2) == ENG_ARCH_QWEN2 + 1 &&
                   K(ARCH__ARCH_QWEN3) == ENG_ARCH_QWEN3 + 1 && K(ARCH__ARCH_QWEN3_5) == ENG_ARCH_QWEN3_5 + 1 &&
                   K(ARCH__ARCH_MISTRAL) == ENG_ARCH_MISTRAL + 1,
               "proto Arch = eng_arch + 1");

void spec_config_from_pb(const T(ModelConfig) *m, eng_config *c) {
  memset(c, 0, sizeof *c);
  // The architecture decides the layer's tensors (as in transformers' model classes).
  eng_arch_apply(c, m->arch > 0 && (int)m->arch <= (int)ENG_ARCH_COUNT ? (eng_arch)(m->arch - 1) : ENG_ARCH_LLAMA);
  c->vocab = m->vocab_size;
  c->d_model = m->hidden_size;
  c->n_layers = m->num_hidden_layers;
  c->n_heads = m->num_attention_heads;
  c->n_kv_heads = m->num_key_value_heads ? m->num_key_value_heads : m->num_attention_heads;
  c->head_dim = m->head_dim ? m->head_dim : m->hidden_size / m->num_attention_heads;
  c->d_ff = m->intermediate_size;
  c->max_pos = m->max_position_embeddings ? m->max_position_embeddings : 4096;
  c->rope_theta = m->rope_theta > 0 ? m->rope_theta : 10000.0f;
  c->rms_eps = m->rms_norm_eps > 0 ? m->rms_norm_eps : 1e-6f;
  c->init_std = m->initializer_range > 0 ? m->initializer_range : 0.02f;
  c->tie_embeddings = m->tie_word_embeddings;
  c->full_every = m->full_attention_interval;
  c->dn.k_heads = m->linear_num_key_heads, c->dn.v_heads = m->linear_num_value_heads;
  c->dn.k_dim = m->linear_key_head_dim, c->dn.v_dim = m->linear_value_head_dim;
  c->dn.conv = m->linear_conv_kernel_dim, c->rope_dim = m->rotary_dim;
  c->vlm = m->multimodal;
  const int rt = m->rope_type && *m->rope_type ? eng_rope_find(m->rope_type) : ENG_ROPE_DEFAULT;
  c->rope.type = rt < 0 ? ENG_ROPE_TYPES : rt; // validation refuses it by name before this
  c->rope.factor = m->rope_factor, c->rope.low_freq_factor = m->rope_low_freq_factor;
  c->rope.high_freq_factor = m->rope_high_freq_factor;
  c->rope.original_max_pos = m->rope_original_max_position_embeddings;
  c->rope.attention_factor = m->rope_attention_factor, c->rope.beta_fast = m->rope_beta_fast;
  c->rope.beta_slow = m->rope_beta_slow, c->rope.mscale = m->rope_mscale;
  c->rope.mscale_all_dim = m->rope_mscale_all_dim, c->rope.no_truncate = m->rope_no_truncate;
  c->window = m->sliding_window;
}

void spec_config_to_pb(const eng_config *c, T(ModelConfig) *m) {
  traind__v1__model_config__init(m);
  m->arch = (T(Arch))(c->arch + 1);
  m->vocab_size = c->vocab;
  m->hidden_size = c->d_model;
  m->num_hidden_layers = c->n_layers;
  m->num_attention_heads = c->n_heads;
  m->num_key_value_heads = c->n_kv_heads;
  m->head_dim = c->head_dim;
  m->intermediate_size = c->d_ff;
  m->max_position_embeddings = c->max_pos;
  m->rope_theta = c->rope_theta;
  m->rms_norm_eps = c->rms_eps;
  m->initializer_range = c->init_std;
  m->tie_word_embeddings = c->tie_embeddings;
  m->full_attention_interval = c->full_every;
  m->linear_num_key_heads = c->dn.k_heads, m->linear_num_value_heads = c->dn.v_heads;
  m->linear_key_head_dim = c->dn.k_dim, m->linear_value_head_dim = c->dn.v_dim;
  m->linear_conv_kernel_dim = c->dn.conv, m->rotary_dim = c->rope_dim;
  m->multimodal = c->vlm;
  m->rope_type = (char *)eng_rope_name(c->rope.type);
  m->rope_factor = c->rope.factor, m->rope_low_freq_factor = c->rope.low_freq_factor;
  m->rope_high_freq_factor = c->rope.high_freq_factor;
  m->rope_original_max_position_embeddings = c->rope.original_max_pos;
  m->rope_attention_factor = c->rope.attention_factor, m->rope_beta_fast = c->rope.beta_fast;
  m->rope_beta_slow = c->rope.beta_slow, m->rope_mscale = c->rope.mscale;
  m->rope_mscale_all_dim = c->rope.mscale_all_dim, m->rope_no_truncate = c->rope.no_truncate;
  m->sliding_window = c->window;
}

int spec_fs(const val_roots *roots, eng_fs **out, val_err *e) {
  eng_err ee = {0};
  if (eng_fs_new(out, (const char *const *)roots->dirs, roots->n, &ee))
    return fail(e, GRPC_STATUS_RESOURCE_EXHAUSTED, "spec", ee.msg);
  const owner_access *w = roots->who;
  if (w && w->set && eng_fs_set_caller(*out, w->uid, w->gid, w->groups, w->n_groups, &ee)) {
    eng_fs_free(*out);
    *out = NULL;
    return fail(e, GRPC_STATUS_INTERNAL, "spec", ee.msg);
  }
  return 0;
}

int spec_model_config(const T(JobSpec) *s, const val_roots *roots, eng_config *c, val_err *e) {
  eng_err ee = {0};
  if (s->model->source_case == K(MODEL_SPEC__SOURCE_CONFIG)) {
    spec_config_from_pb(s->model->config, c);
    if (eng_config_validate(c, "spec.model.config", &ee)) return fail(e, GRPC_STATUS_INVALID_ARGUMENT, "spec.model.config", ee.msg);
    return 0;
  }
  char *dir;
  eng_fs *fs;
  if (val_path(s->model->hf_dir, "spec.model.hf_dir", 1, roots, &dir, e)) return -1;
  if (spec_fs(roots, &fs, e)) {
    free(dir);
    return -1;
  }
  int untied; // the runner's eng_open says so in the job's log
  int rc = eng_hf_load_config(fs, dir, c, &untied, &ee);
  eng_fs_free(fs);
  free(dir);
  if (rc) return fail(e, GRPC_STATUS_INVALID_ARGUMENT, "spec.model.hf_dir", ee.msg);
  return 0;
}

static float opt_or(int set, float v, float dflt) { return set ? v : dflt; }

static int dv_gpu(const T(JobSpec) *s) { return s->device && s->device->target_case == K(DEVICE_SPEC__TARGET_GPU); }

void spec_plan_free(spec_plan *p) {
  free(p->model_dir);
  free(p->train_path);
  free(p->eval_path);
  free(p->data_cache);
  free(p->ref_dir);
  free(p->band_file);
  free(p->plan_json);
  if (p->plan) eng_plan_free(p->plan);
  free(p->plan);
  eng_fs_free(p->fs);
  memset(p, 0, sizeof *p);
}

int spec_plan_build(const T(JobSpec) *s, const eng_config *c, const spec_defaults *d, const val_roots *roots,
                    spec_plan *p, val_err *e) {
  memset(p, 0, sizeof *p);
  eng_spec *g = &p->eng;
  eng_spec_defaults(g);
  const T(TrainingSpec) *t = s->training;
  if (t->seq_len > c->max_pos) {
    char msg[256];
    snprintf(msg, sizeof msg, "%d is longer than the model's max_position_embeddings (%d)", t->seq_len, c->max_pos);
    return fail(e, GRPC_STATUS_INVALID_ARGUMENT, "spec.training.seq_len", msg);
  }
  g->config = *c;
  g->seed = s->seed;
  g->seq_len = t->seq_len;
  g->batch = t->batch_size;
  g->micro_batches = t->micro_batches ? t->micro_batches : 1;
  int64_t per_step = (int64_t)t->batch_size * t->seq_len;
  p->total_steps = t->budget_case == K(TRAINING_SPEC__BUDGET_STEPS) ? t->steps : (t->tokens + per_step - 1) / per_step;
  g->total_steps = (int)p->total_steps;
  g->warmup_steps = t->warmup_steps;
  g->optimizer = t->optimizer == K(OPTIMIZER__OPTIMIZER_ADAMW) ? ENG_OPT_ADAMW : ENG_OPT_ADAMW8;
  g->grad_dtype = t->grad_fp32 ? ENG_GRAD_F32 : ENG_GRAD_BF16;
  g->clip_lagged = t->clip_lagged;
  if (t->method == K(METHOD__METHOD_POETX)) {
    g->method = ENG_METHOD_POETX;
    const T(PoetSpec) *ps = t->poet;
    if (ps && ps->block_size) g->poet_block = ps->block_size;
    if (ps && ps->merge_every) g->poet_merge_every = ps->merge_every;
    if (ps && ps->lr_opt_case) g->poet_lr = ps->lr;
    if (ps) g->poet_memory = ps->memory_mode;
    if (ps) g->poet_base_bf16 = ps->base_bf16;
  }
  g->lr = t->lr;
  g->min_lr = t->schedule == K(LR_SCHEDULE__LR_SCHEDULE_CONSTANT) ? t->lr : opt_or(t->min_lr_opt_case, t->min_lr, t->lr / 10);
  g->beta1 = opt_or(t->beta1_opt_case, t->beta1, g->beta1);
  g->beta2 = opt_or(t->beta2_opt_case, t->beta2, g->beta2);
  g->eps = opt_or(t->eps_opt_case, t->eps, g->eps);
  g->weight_decay = opt_or(t->weight_decay_opt_case, t->weight_decay, g->weight_decay);
  g->clip = opt_or(t->clip_opt_case, t->clip_norm, g->clip);

  const T(DataSpec) *dt = s->data;
  g->eval_every = dt->eval_every;
  g->eval_batches = dt->eval_batches ? dt->eval_batches : 4;
  g->data_format = (eng_data_format)dt->format; // the enums share their order
  g->chat_template = *dt->chat_template ? dt->chat_template : NULL;
  g->no_pack = dt->no_pack;

  const T(BudgetSpec) *bs = s->budget;
  if (bs) {
    g->budget = (eng_budget){.max_tokens = bs->max_tokens, .max_flops = bs->max_flops,
                             .max_wall_s = bs->max_wall_seconds, .gain_tau = bs->gain_tau,
                             .gain_patience = bs->gain_patience, .gain_window = bs->gain_window,
                             .gl_alpha = bs->gl_alpha};
    eng_err be = {0};
    if (eng_budget_validate(&g->budget, *dt->eval_path && dt->eval_every > 0, &be)) {
      e->code = GRPC_STATUS_INVALID_ARGUMENT;
      snprintf(e->msg, sizeof e->msg, "spec.%s", be.msg);
      return -1;
    }
  }

  const T(SelectSpec) *sel = s->select;
  if (sel) {
    g->select = (eng_select){.rule = *sel->rule ? (eng_select_rule)eng_select_rule_parse(sel->rule) : ENG_SELECT_NONE,
                             .pool = sel->pool, .adaptive = sel->adaptive, .band_lo = sel->band_lo,
                             .band_hi = sel->band_hi};
    // The given paths for the checks; the resolved ones are set below.
    if (*sel->reference_dir) g->select.reference = sel->reference_dir;
    if (*sel->band_file) g->select.band_file = sel->band_file;
    eng_err se = {0};
    if (eng_select_validate(&g->select, g->budget.max_tokens > 0 || g->budget.max_flops > 0, &se)) {
      e->code = GRPC_STATUS_INVALID_ARGUMENT;
      snprintf(e->msg, sizeof e->msg, "spec.%s", se.msg);
      return -1;
    }
    if (g->select.rule != ENG_SELECT_NONE && dv_gpu(s)) {
      e->code = GRPC_STATUS_FAILED_PRECONDITION;
      snprintf(e->msg, sizeof e->msg, "spec.select.rule: online selection scores on the cpu backend in this build");
      return -1;
    }
    g->select.reference = g->select.band_file = NULL; // the resolved paths, below, when the job will run
  }

  const T(CheckpointSpec) *ck = s->checkpoints;
  p->ckpt_every = ck && ck->every_steps ? ck->every_steps : d->ckpt_every;
  p->ckpt_keep = ck && ck->keep ? ck->keep : d->ckpt_keep;

  const T(DeviceSpec) *dv = s->device;
  const int gpu = dv && dv->target_case == K(DEVICE_SPEC__TARGET_GPU);
  // A GPU's default cap is all it has free (the engine's 0).
  g->device_cap = (size_t)(dv && dv->memory_bytes ? dv->memory_bytes : gpu ? 0 : d->cpu_memory_bytes);
  g->ckpt_every = dv && dv->recompute_every ? dv->recompute_every : 1;
  g->ckpt_place = !dv                                                       ? ENG_PLACE_DEVICE
                  : dv->boundaries == K(PLACEMENT__PLACEMENT_HOST)  ? ENG_PLACE_HOST
                  : dv->boundaries == K(PLACEMENT__PLACEMENT_STORE) ? ENG_PLACE_STORE
                                                                    : ENG_PLACE_DEVICE;
  if (gpu) {
    // Refused up front where the engine cannot open it: no CUDA in this
    // build, no driver, no such device.
    eng_err ge = {0};
    int n = eng_gpu_count(&ge);
    char msg[600];
    if (n < 0) snprintf(msg, sizeof msg, "%s; use cpu", ge.msg);
    else snprintf(msg, sizeof msg, "gpu %d does not exist: this machine has %d usable GPU%s", dv->gpu, n,
                  n == 1 ? "" : "s");
    if (n < 0 || dv->gpu >= n) return fail(e, GRPC_STATUS_FAILED_PRECONDITION, "spec.device.gpu", msg);
    // The planner's profile is calibrated on the cpu backend (planning.c).
    if (dv->plan)
      return fail(e, GRPC_STATUS_FAILED_PRECONDITION, "spec.device.plan",
                  "the planner's device profile is the cpu backend's; a GPU job takes the uniform policy "
                  "(recompute_every, boundaries)");
    g->device_gpu = dv->gpu;
  }

  // A planned job's policy is the planner's, which refuses what cannot fit
  // (naming the budget) when the job is planned.
  p->use_planner = dv && dv->plan;
  eng_err ee = {0};
  size_t need;
  // Sizing needs no files: without them the engine must not expect an
  // eval set either.
  eng_spec sizing = *g;
  sizing.eval_every = 0;
  sizing.budget.gain_tau = sizing.budget.gl_alpha = 0; // checked above, with the eval data
  if (eng_spec_device_bytes(&sizing, &need, &ee)) {
    e->code = GRPC_STATUS_INVALID_ARGUMENT;
    snprintf(e->msg, sizeof e->msg, "%s%s",
             !strncmp(ee.msg, "spec", 4) ? "" : !strncmp(ee.msg, "budget.", 7) ? "spec." : "spec: ", ee.msg);
    return -1;
  }
  if (need > g->device_cap && !p->use_planner && !(gpu && !g->device_cap)) {
    char msg[256];
    snprintf(msg, sizeof msg, "the job needs %zu bytes of device arena and the cap is %zu", need, g->device_cap);
    return fail(e, GRPC_STATUS_INVALID_ARGUMENT, "spec.device.memory_bytes", msg);
  }
  if (!roots) return 0;
  if ((sel && *sel->reference_dir &&
       val_path(sel->reference_dir, "spec.select.reference_dir", 1, roots, &p->ref_dir, e)) ||
      (sel && *sel->band_file && val_path(sel->band_file, "spec.select.band_file", 0, roots, &p->band_file, e))) {
    spec_plan_free(p);
    return -1;
  }
  g->select.reference = p->ref_dir;
  g->select.band_file = p->band_file;
  if ((s->model->source_case == K(MODEL_SPEC__SOURCE_HF_DIR) &&
       val_path(s->model->hf_dir, "spec.model.hf_dir", 1, roots, &p->model_dir, e)) ||
      val_path(dt->train_path, "spec.data.train_path", 0, roots, &p->train_path, e) ||
      (*dt->eval_path && val_path(dt->eval_path, "spec.data.eval_path", 0, roots, &p->eval_path, e)) ||
      spec_fs(roots, &p->fs, e)) {
    spec_plan_free(p);
    return -1;
  }
  g->model_dir = p->model_dir;
  g->train_path = p->train_path;
  g->eval_path = p->eval_path;
  g->fs = p->fs;
  // Each owner has a directory of tokenized data of their own: a cache
  // entry is found by a digest of the file, which one user could forge to
  // poison another's.
  if (d->state_dir) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tokens/%lu", d->state_dir,
             (unsigned long)(roots->who && roots->who->set ? roots->who->uid : getuid()));
    if (!(p->data_cache = strdup(dir))) {
      spec_plan_free(p);
      return fail(e, GRPC_STATUS_RESOURCE_EXHAUSTED, "spec.data", "out of memory");
    }
    g->data_cache = p->data_cache;
  }
  return 0;
}
