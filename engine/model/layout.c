#include "model/layout.h"

#include <stdio.h>
#include <string.h>

#include "model/arch.h"

static const struct { const char *suffix; } layer_names[ENG_P_LAYER_COUNT] = {
    [ENG_P_ATTN_NORM] = {"input_layernorm.weight"},
    [ENG_P_WQ] = {"self_attn.q_proj.weight"},
    [ENG_P_BQ] = {"self_attn.q_proj.bias"},
    [ENG_P_WK] = {"self_attn.k_proj.weight"},
    [ENG_P_BK] = {"self_attn.k_proj.bias"},
    [ENG_P_WV] = {"self_attn.v_proj.weight"},
    [ENG_P_BV] = {"self_attn.v_proj.bias"},
    [ENG_P_QNORM] = {"self_attn.q_norm.weight"},
    [ENG_P_KNORM] = {"self_attn.k_norm.weight"},
    [ENG_P_WO] = {"self_attn.o_proj.weight"},
    [ENG_P_MLP_NORM] = {"post_attention_layernorm.weight"},
    [ENG_P_WGATE] = {"mlp.gate_proj.weight"},
    [ENG_P_WUP] = {"mlp.up_proj.weight"},
    [ENG_P_WDOWN] = {"mlp.down_proj.weight"},
    [ENG_P_DN_QKV] = {"linear_attn.in_proj_qkv.weight"},
    [ENG_P_DN_Z] = {"linear_attn.in_proj_z.weight"},
    [ENG_P_DN_B] = {"linear_attn.in_proj_b.weight"},
    [ENG_P_DN_A] = {"linear_attn.in_proj_a.weight"},
    [ENG_P_DN_CONV] = {"linear_attn.conv1d.weight"},
    [ENG_P_DN_DT] = {"linear_attn.dt_bias"},
    [ENG_P_DN_ALOG] = {"linear_attn.A_log"},
    [ENG_P_DN_NORM] = {"linear_attn.norm.weight"},
    [ENG_P_DN_OUT] = {"linear_attn.out_proj.weight"},
};

static size_t place(eng_tensor *t, size_t off, int rows, int cols, int present) {
  t->off = off;
  t->rows = present ? rows : 0;
  t->cols = present ? cols : 0;
  t->numel = present ? (size_t)rows * (size_t)(cols ? cols : 1) : 0;
  return off + t->numel;
}

// a then b into name (truncated to fit). Not snprintf: the daemon lays out
// every submitted job's model, and formatting was a visible part of that.
static void name_set(char *name, size_t n, const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > n - 1) la = n - 1;
  if (lb > n - 1 - la) lb = n - 1 - la;
  memcpy(name, a, la);
  memcpy(name + la, b, lb);
  name[la + lb] = 0;
}

// Where the text model's tensors are named: "model.", or under a multimodal
// checkpoint's prefix.
static const char *prefix_of(const eng_config *c) {
  return c->vlm ? eng_arch_row_of(c->arch)->vlm_prefix : "model.";
}

static void proto_name(eng_tensor *p, const char *prefix) {
  char layer0[64];
  name_set(layer0, sizeof layer0, prefix, "layers.0.");
  for (int i = 0; i < ENG_P_LAYER_COUNT; i++) name_set(p[i].name, sizeof p[i].name, layer0, layer_names[i].suffix);
}

size_t eng_layout_dn_proto(eng_tensor p[ENG_P_LAYER_COUNT], const eng_config *c) {
  memset(p, 0, sizeof(eng_tensor) * ENG_P_LAYER_COUNT);
  const int d = c->d_model, ff = c->d_ff, hv = c->dn.v_heads;
  const int kt = c->dn.k_heads * c->dn.k_dim, vt = hv * c->dn.v_dim;
  size_t off = 0;
  off = place(&p[ENG_P_ATTN_NORM], off, d, 0, 1);
  // qkv, z, b and a back to back: the layer multiplies by them as one
  // [2kt + 2vt + 2Hv, d] matrix (exec/layer_dn.c).
  off = place(&p[ENG_P_DN_QKV], off, 2 * kt + vt, d, 1);
  off = place(&p[ENG_P_DN_Z], off, vt, d, 1);
  off = place(&p[ENG_P_DN_B], off, hv, d, 1);
  off = place(&p[ENG_P_DN_A], off, hv, d, 1);
  off = place(&p[ENG_P_DN_CONV], off, 2 * kt + vt, c->dn.conv, 1);
  p[ENG_P_DN_CONV].mid1 = 1; // nn.Conv1d's [channels, 1, kernel]
  off = place(&p[ENG_P_DN_DT], off, hv, 0, 1);
  off = place(&p[ENG_P_DN_ALOG], off, hv, 0, 1);
  off = place(&p[ENG_P_DN_NORM], off, c->dn.v_dim, 0, 1);
  off = place(&p[ENG_P_DN_OUT], off, d, vt, 1);
  off = place(&p[ENG_P_MLP_NORM], off, d, 0, 1);
  off = place(&p[ENG_P_WGATE], off, ff, d, 1);
  off = place(&p[ENG_P_WUP], off, ff, d, 1);
  off = place(&p[ENG_P_WDOWN], off, d, ff, 1);
  proto_name(p, prefix_of(c));
  return off;
}

void eng_layout_init(eng_layout *lo, const eng_config *c) {
  memset(lo, 0, sizeof *lo);
  const int d = c->d_model, q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
  const int ff = c->d_ff, hd = c->head_dim;
  lo->n_layers = c->n_layers;
  lo->n_shards = c->n_layers + 2;
  lo->full_every = c->full_every;
  lo->prefix = prefix_of(c);
  lo->pass = c->vlm ? eng_arch_row_of(c->arch)->vlm_pass : NULL;

  // Layer shard: tensors in enum order, which is also the order the forward
  // reads them, so one layer's weights are one contiguous copy.
  eng_tensor *p = lo->layer_proto;
  size_t off = 0;
  off = place(&p[ENG_P_ATTN_NORM], off, d, 0, 1);
  // q, k, v weights back to back and then their biases: the cpu layer
  // multiplies by them as one [H·hd·(1 + gate) + 2·KV·hd, d] matrix (exec/layer.c).
  // With an output gate, q_proj gives each head's query then its gate.
  off = place(&p[ENG_P_WQ], off, q * (1 + c->attn_gate), d, 1);
  off = place(&p[ENG_P_WK], off, kv, d, 1);
  off = place(&p[ENG_P_WV], off, kv, d, 1);
  off = place(&p[ENG_P_BQ], off, q, 0, c->qkv_bias);
  off = place(&p[ENG_P_BK], off, kv, 0, c->qkv_bias);
  off = place(&p[ENG_P_BV], off, kv, 0, c->qkv_bias);
  off = place(&p[ENG_P_QNORM], off, hd, 0, c->qk_norm);
  off = place(&p[ENG_P_KNORM], off, hd, 0, c->qk_norm);
  off = place(&p[ENG_P_WO], off, d, q, 1);
  off = place(&p[ENG_P_MLP_NORM], off, d, 0, 1);
  // gate and up back to back: the cpu layer multiplies by both as one [2ff, d]
  // matrix (exec/layer.c).
  off = place(&p[ENG_P_WGATE], off, ff, d, 1);
  off = place(&p[ENG_P_WUP], off, ff, d, 1);
  off = place(&p[ENG_P_WDOWN], off, d, ff, 1);
  lo->layer_numel = off;
  proto_name(p, lo->prefix);

  place(&lo->embed, 0, c->vocab, d, 1);
  name_set(lo->embed.name, sizeof lo->embed.name, lo->prefix, "embed_tokens.weight");
  off = place(&lo->final_norm, 0, d, 0, 1);
  name_set(lo->final_norm.name, sizeof lo->final_norm.name, lo->prefix, "norm.weight");
  off = place(&lo->lm_head, off, c->vocab, d, !c->tie_embeddings);
  name_set(lo->lm_head.name, sizeof lo->lm_head.name, "lm_head.weight", "");
  lo->head_numel = off;
  if (c->full_every) lo->dn_numel = eng_layout_dn_proto(lo->dn_proto, c);
  lo->total_numel = lo->embed.numel + lo->head_numel;
  for (int l = 0; l < c->n_layers; l++) lo->total_numel += eng_layout_shard_numel(lo, l + 1);
}

int eng_tensor_hf_shape(const eng_tensor *t, int64_t shape[3]) {
  shape[0] = t->rows;
  if (!t->cols) return 1;
  if (!t->mid1) return shape[1] = t->cols, 2;
  shape[1] = 1, shape[2] = t->cols;
  return 3;
}

eng_layer_kind eng_layout_kind(const eng_layout *lo, int l) {
  return lo->full_every && (l + 1) % lo->full_every ? ENG_KIND_DN : ENG_KIND_ATTN;
}

const eng_tensor *eng_layout_proto(const eng_layout *lo, int l) {
  return eng_layout_kind(lo, l) == ENG_KIND_DN ? lo->dn_proto : lo->layer_proto;
}

size_t eng_layout_shard_numel(const eng_layout *lo, int s) {
  if (s == 0) return lo->embed.numel;
  if (s == lo->n_layers + 1) return lo->head_numel;
  return eng_layout_kind(lo, s - 1) == ENG_KIND_DN ? lo->dn_numel : lo->layer_numel;
}

eng_tensor eng_layout_layer_tensor(const eng_layout *lo, int l, eng_layer_param p) {
  eng_tensor t = eng_layout_proto(lo, l)[p];
  snprintf(t.name, sizeof t.name, "%slayers.%d.%s", lo->prefix, l, layer_names[p].suffix);
  return t;
}

int eng_layout_find(const eng_layout *lo, const char *name, int *shard, eng_tensor *t) {
  if (strcmp(name, lo->embed.name) == 0) {
    *shard = 0, *t = lo->embed;
    return 0;
  }
  if (strcmp(name, lo->final_norm.name) == 0) {
    *shard = lo->n_layers + 1, *t = lo->final_norm;
    return 0;
  }
  if (lo->lm_head.numel && strcmp(name, lo->lm_head.name) == 0) {
    *shard = lo->n_layers + 1, *t = lo->lm_head;
    return 0;
  }
  const size_t np = strlen(lo->prefix);
  if (strncmp(name, lo->prefix, np)) return -1;
  name += np;
  int l, n = 0;
  if (sscanf(name, "layers.%d.%n", &l, &n) != 1 || n == 0 || l < 0 || l >= lo->n_layers) return -1;
  // Only the canonical spelling: "layers.01.x" or "+1" is not layer 1.
  char prefix[48];
  if (snprintf(prefix, sizeof prefix, "layers.%d.", l) != n || strncmp(name, prefix, (size_t)n)) return -1;
  for (int p = 0; p < ENG_P_LAYER_COUNT; p++) {
    if (eng_layout_proto(lo, l)[p].numel && strcmp(name + n, layer_names[p].suffix) == 0) {
      *shard = l + 1;
      *t = eng_layout_layer_tensor(lo, l, (eng_layer_param)p);
      return 0;
    }
  }
  return -1;
}

int eng_layout_passes(const eng_layout *lo, const char *name) {
  for (const char *const *p = lo->pass; p && *p; p++)
    if (!strncmp(name, *p, strlen(*p))) return 1;
  return 0;
}

int eng_layout_visit(const eng_layout *lo, eng_layout_visit_fn fn, void *ctx) {
  int rc = fn(ctx, 0, &lo->embed);
  for (int l = 0; !rc && l < lo->n_layers; l++) {
    for (int p = 0; !rc && p < ENG_P_LAYER_COUNT; p++) {
      if (!eng_layout_proto(lo, l)[p].numel) continue;
      eng_tensor t = eng_layout_layer_tensor(lo, l, (eng_layer_param)p);
      rc = fn(ctx, l + 1, &t);
    }
  }
  if (!rc) rc = fn(ctx, lo->n_layers + 1, &lo->final_norm);
  if (!rc && lo->lm_head.numel) rc = fn(ctx, lo->n_layers + 1, &lo->lm_head);
  return rc;
}
