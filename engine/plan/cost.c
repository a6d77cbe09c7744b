#include "plan/cost.h"

#include <math.h>
#include <string.h>

#include "compute/flops.h"
#include "exec/exec.h"
#include "kernels/kernels.h"
#include "model/layout.h"
#include "model/model.h"
#include "poet/state.h"

// A GEMM of `rows` rows at the profile's rate, less efficient when short.
static double gemm_rate(const eng_profile *p, double rows, int bwd) {
  double r = bwd && p->gemm_bwd_flops > 0 ? p->gemm_bwd_flops : p->gemm_flops;
  return p->gemm_half_rows > 0 ? r * rows / (rows + p->gemm_half_rows) : r;
}

typedef struct layer_work {
  double gemm, mix, mix_bwd_ratio, elem; // forward FLOPs, FLOPs, bytes for `tokens` tokens
} layer_work;

// A layer of kind's forward on seqs sequences of T tokens.
static layer_work layer_fwd_work(const eng_config *c, int kind, double seqs, double T, int act_bytes) {
  const double n = seqs * T, d = c->d_model, ff = c->d_ff;
  const double qd = (double)c->n_heads * c->head_dim, kvd = (double)c->n_kv_heads * c->head_dim;
  eng_layer_flops f = eng_flops_layer_fwd(c, kind, seqs, T);
  layer_work w = {.gemm = f.gemm, .mix = f.mix, .mix_bwd_ratio = f.mix_bwd_ratio};
  // Passes over activations: two norms (read, write), two residual adds
  // (two reads, one write), SwiGLU (two reads, one write); and the mixer's:
  // attention's RoPE on q and k (read, write; the q/k norms as many again),
  // its output gate (two reads, one write); a Gated DeltaNet's conv with
  // SiLU over q|k|v and its L2 norms of q and k (read, write each), its
  // gated norm (two reads, one write).
  double mix_elem;
  if (kind == ENG_KIND_DN) {
    const double kt = (double)c->dn.k_heads * c->dn.k_dim, vt = (double)c->dn.v_heads * c->dn.v_dim;
    mix_elem = 2.0 * (2.0 * kt + vt) + 2.0 * 2.0 * kt + 3.0 * vt;
  } else {
    mix_elem = 2.0 * (qd + kvd) * (1 + c->qk_norm) + 3.0 * qd * c->attn_gate;
  }
  w.elem = n * act_bytes * (10.0 * d + mix_elem + 3.0 * ff);
  return w;
}

// Host bytes of the training state (DESIGN §2), part by part as the engine
// allocates it (model/model.h): fp32 master, moments, gradient store (the
// embedding's in fp32, untied by the rows of a step's tokens), pinned working
// copy, POET-X's state.
static int host_state_bytes(const eng_config *c, const eng_profile *p, int tokens, eng_plan_cost *k, eng_err *e) {
  // With ranks, rank 0's: the optimizer state of its part (the parts differ by
  // at most a block), the embedding's gradient store whole (the ranks' rows
  // differ), the fp32 master in parts where a working copy computes.
  const int ranks = p->ranks > 1 ? p->ranks : 1;
  eng_model_opts mo = {.grad_bf16 = p->grad_store_bytes == 2, .opt_fp32 = !p->opt_8bit,
                       .work_bf16 = p->pinned_copy, .poet_block = p->poet_block,
                       .poet_base_bf16 = p->poet_base_bf16, .embed_rows = ranks > 1 ? 0 : tokens,
                       .opt_parts = ranks, .opt_part = 0};
  eng_model_bytes b;
  if (eng_model_state_parts(c, &mo, &b)) return eng_err_set(e, ENG_EINVAL, "plan: the model state does not fit");
  k->host_master = (double)b.master;
  k->host_opt = (double)b.opt;
  k->host_grad = (double)b.grad;
  k->host_pinned = (double)b.work;
  k->host_poet = (double)b.poet;
  k->host_state = k->host_master + k->host_opt + k->host_grad + k->host_pinned + k->host_poet;
  return 0;
}

// Optimizer time of forward entry e (0..L-1 the layers, L the head stage).
static double opt_of(const eng_plan_cost *k, int e) {
  return e < k->L ? k->t_opt_layer : e == k->L ? k->t_opt_head : 0.0;
}

// The forward paced by the optimizer, the weight stream and the ranks'
// communication (no plan choice touches them): entries 0..L-1 are the layers, L the head stage. Weights
// of entry e copy in once its update is done and its slot is free (the entry
// two back has finished); the copies run in order on the host-to-device link.
void eng_plan_cost_pace(eng_plan_cost *k) {
  const int L = k->L;
  k->t_rec = fmax(k->t_fwd, k->w_layer / k->h2d);
  double opt_done[ENG_PLAN_MAX_LAYERS + 2], thread_free[ENG_PLAN_MAX_LAYERS + 1];
  double start[ENG_PLAN_MAX_LAYERS + 1] = {0}, end_f[ENG_PLAN_MAX_LAYERS + 1];
  // The previous step's last gradient and dX of boundary 0 land first;
  // clipping needs every gradient, so the optimizer starts then, embedding
  // first, whose update lets the batch's boundary 0 be gathered. With ranks,
  // the sum over them comes first and the gather of every update after.
  double t = (k->g_layer + k->bnd) / k->d2h + k->t_reduce + k->t_opt_embed;
  const double emb_done = t;
  const int inl = k->opt_inline && k->ranks <= 1; // updates between the forward's entries
  if (k->ranks > 1) {
    t += L * k->t_opt_layer + k->t_opt_head + k->t_gather; // every update is in before the forward
    for (int e = 0; e <= L + 1; e++) opt_done[e] = t;
  } else if (inl) {
    // On the compute thread, one entry ahead: layers 0 and 1 before F_0,
    // then entry e+1 between F_{e-1} and F_e.
    opt_done[0] = t + opt_of(k, 0);
    opt_done[1] = opt_done[0] + opt_of(k, 1);
    thread_free[0] = opt_done[1];
  } else {
    // On its own thread, in order, beside compute.
    for (int e = 0; e <= L; e++) opt_done[e] = (t += opt_of(k, e));
  }
  double b0_end = (k->ranks > 1 ? t : emb_done) + k->bnd / k->h2d; // boundary 0 gathered from the updated table
  double lane = b0_end;
  for (int e = 0; e <= L; e++) {
    if (inl && e > 0) thread_free[e] = opt_done[e + 1] = end_f[e - 1] + opt_of(k, e + 1);
    double issue = e >= 2 ? end_f[e - 2] : 0.0;
    lane = fmax(fmax(issue, opt_done[e]), lane) + (e < L ? k->w_layer : k->w_head) / k->h2d;
    double s = fmax(e > 0 ? end_f[e - 1] : b0_end, lane);
    if (inl) s = fmax(s, thread_free[e]);
    start[e] = s;
    end_f[e] = s + (e < L ? k->t_fwd : 0.0);
  }
  k->t_pre = start[0];
  for (int l = 0; l < L; l++) k->d_fwd[l] = start[l + 1] - start[l];
}

int eng_plan_cost_make(const eng_config *c, int batch, int seq_len, int micro_batch,
                       const eng_profile *p, eng_plan_cost *out, eng_err *e) {
  int rc = eng_config_validate(c, "plan", e);
  if (rc) return rc;
  if (c->n_layers > ENG_PLAN_MAX_LAYERS)
    return eng_err_set(e, ENG_EINVAL, "plan: %d layers, more than the planner's %d", c->n_layers,
                       ENG_PLAN_MAX_LAYERS);
  if (batch < 1 || seq_len < 1 || micro_batch < 1 || batch % micro_batch)
    return eng_err_set(e, ENG_EINVAL, "plan: batch %d, sequence %d, micro-batch %d: the micro-batch must divide the batch",
                       batch, seq_len, micro_batch);
  eng_layout lo;
  eng_layout_init(&lo, c);
  eng_plan_cost *k = out;
  memset(k, 0, sizeof *k);
  const double B = batch, T = seq_len, d = c->d_model, V = c->vocab;
  const double mbrows = (double)micro_batch * seq_len;
  k->L = c->n_layers;
  k->batch = batch;
  k->seq_len = seq_len;
  k->micro_batch = micro_batch;
  k->n_micro = batch / micro_batch;
  k->d_model = c->d_model;
  k->act_bytes = p->act_bytes;
  k->params = (double)lo.total_numel;

  k->bnd = B * T * d * p->act_bytes;
  double head_numel = d + V * d; // final norm + the head matrix (lm_head or the tied embedding)
  k->w_head = head_numel * p->weight_bytes;
  k->g_head = head_numel * p->grad_bytes;

  // A layer's figures are the mean over the model's layers: one number when
  // they are alike; for a hybrid, its kinds weighted by their counts. The
  // schedule then prices every layer the same, which for Qwen3.6-27B is off
  // by about 3% per layer (its attention and Gated DeltaNet layers hold
  // 372M and 383M weights; a full-attention layer's mixing at 1024 tokens is
  // under 2% of its products), and right over any run of full_every layers.
  double attn_bwd = p->attn_bwd_flops > 0 ? p->attn_bwd_flops : p->attn_flops, numel = 0, count[2] = {0, 0};
  for (int l = 0; l < c->n_layers; l++) count[eng_layout_kind(&lo, l)] += 1;
  for (int kind = 0; kind < 2; kind++) {
    if (!count[kind]) continue;
    const double share = count[kind] / c->n_layers; // 1 where the layers are alike: the figures exact
    layer_work w = layer_fwd_work(c, kind, B, T, p->act_bytes);
    // The delta rule's chunked products run at the attention kernels' rate.
    k->t_fwd += share * (w.gemm / gemm_rate(p, mbrows, 0) + w.mix / p->attn_flops + w.elem / p->elem_bytes_per_s);
    k->t_bwd += share * (2.0 * w.gemm / gemm_rate(p, mbrows, 1) + w.mix_bwd_ratio * w.mix / attn_bwd +
                         2.0 * w.elem / p->elem_bytes_per_s);
    numel += share * (double)(kind == ENG_KIND_DN ? lo.dn_numel : lo.layer_numel);
  }
  k->w_layer = numel * p->weight_bytes;
  k->g_layer = numel * p->grad_bytes;
  k->t_opt_layer = numel / p->opt_params_per_s;
  if (p->poet_block) {
    // POET-X: W0 streams in as before and θ with it; what comes back and
    // what the optimizer updates are the norms' gradients and θ's.
    eng_poet_model pm;
    if ((rc = eng_poet_model_shape(&pm, &lo, p->poet_block, e))) return eng_err_prefix(e, "plan: ");
    eng_poet_flops pw = eng_flops_poet_layer(&pm, B * T, p->poet_fast);
    double norms = (double)lo.layer_numel, b = pm.b;
    for (int i = 0; i < ENG_POET_WEIGHTS; i++) norms -= (double)lo.layer_proto[eng_poet_param[i]].numel;
    for (int i = 0; i < ENG_POET_WEIGHTS; i++)
      if (eng_poet_bias[i] != ENG_P_LAYER_COUNT) norms -= (double)lo.layer_proto[eng_poet_bias[i]].numel;
    double rot = p->poet_flops > 0 ? p->poet_flops : gemm_rate(p, mbrows, 0);
    k->t_fwd += pw.fwd / rot + pw.cayley / gemm_rate(p, b, 0);
    const double gemm = layer_fwd_work(c, ENG_KIND_ATTN, B, T, p->act_bytes).gemm; // every layer: no hybrid
    k->t_bwd += pw.bwd / rot + (pw.z_bwd - gemm) / gemm_rate(p, mbrows, 1) + pw.cayley_bwd / gemm_rate(p, b, 1);
    k->w_layer += 4.0 * (double)(pm.n_theta + pm.n_perm);
    k->g_layer = norms * p->grad_bytes + 4.0 * (double)pm.n_theta;
    k->t_opt_layer = (norms + (double)pm.n_theta) / p->opt_params_per_s;
    if (p->poet_merge_every > 0) k->t_opt_layer += pw.merge / gemm_rate(p, b, 0) / p->poet_merge_every;
  }
  k->t_refwd = k->t_fwd;
  // Head: logits, dh and dW (2 + 2 + 2 FLOPs per token per element of the
  // matrix); the chunk's logits are written, read and overwritten in fp32.
  k->t_head = 2.0 * B * T * V * d / gemm_rate(p, mbrows, 0) + 4.0 * B * T * V * d / gemm_rate(p, mbrows, 1) +
              3.0 * B * T * V * 4.0 / p->elem_bytes_per_s;
  k->t_opt_embed = (double)lo.embed.numel / p->opt_params_per_s;
  k->t_opt_head = (double)(lo.final_norm.numel + lo.lm_head.numel) / p->opt_params_per_s;
  k->opt_inline = p->opt_inline;
  k->h2d = p->h2d;
  k->d2h = p->d2h;
  k->nvme_read = p->nvme_read;
  k->nvme_write = p->nvme_write;

  // Device: the executor's own layout (exec.h, eng_exec_arena_of) for the
  // profile's backend says what every plan needs, one kept layer and one
  // buffer of the boundary pool; a plan adds kept layers and pool buffers.
  eng_exec_policy ep = {.batch = batch, .seq_len = seq_len, .micro_batches = batch / micro_batch,
                        .cuda = !strcmp(p->backend, "cuda"), .grad_bf16 = p->grad_bytes == 2,
                        .poet_block = p->poet_block, .poet_fast = p->poet_fast};
  eng_exec_arena ar;
  if ((rc = eng_exec_arena_of(c, &ep, &ar, e))) return eng_err_prefix(e, "plan: ");
  if ((double)ar.bnd_bytes != k->bnd)
    return eng_err_set(e, ENG_EINVAL, "plan: profile %s keeps activations in %d bytes, its %s backend in %zu",
                       p->name, p->act_bytes, p->backend, ar.bnd_bytes / ((size_t)batch * seq_len * c->d_model));
  k->dev_fixed = (double)ar.fixed;
  k->bnd_dev = (double)ar.bnd;
  k->inner = (double)ar.inner;
  if ((rc = host_state_bytes(c, p, batch * seq_len, k, e))) return rc;
  k->ranks = p->ranks > 1 ? p->ranks : 1;
  if (k->ranks > 1) {
    const double W = k->ranks, share = (W - 1) / W;
    k->t_opt_layer /= W, k->t_opt_embed /= W, k->t_opt_head /= W; // a rank updates its part
    k->comm_reduce = 2.0 * share * k->host_grad;
    k->comm_gather = share * k->params * (p->pinned_copy ? p->weight_bytes : 4);
    k->calls_reduce = 1 + lo.n_shards;
    k->calls_gather = 1 + (lo.lm_head.numel ? 2 : 1); // the embedding; the final norm and an untied head
    for (int l = 0; l < c->n_layers; l++)
      for (int t = 0; t < ENG_P_LAYER_COUNT; t++) k->calls_gather += eng_layout_proto(&lo, l)[t].numel != 0;
    k->t_reduce = k->comm_reduce / p->comm_bps + k->calls_reduce * p->comm_latency;
    k->t_gather = k->comm_gather / p->comm_bps + k->calls_gather * p->comm_latency;
  }

  k->dev_budget = p->device_bytes - p->device_reserve;
  k->host_budget = p->host_bytes - p->host_reserve;
  k->cap_dev = k->dev_budget - k->dev_fixed;
  if (p->device_act_bytes > 0) k->cap_dev = fmin(k->cap_dev, p->device_act_bytes);
  k->cap_host = k->host_budget - k->host_state;
  if (p->host_act_bytes > 0) k->cap_host = fmin(k->cap_host, p->host_act_bytes);
  k->cap_nvme = p->nvme_bytes;
  eng_plan_cost_pace(k);
  return 0;
}
