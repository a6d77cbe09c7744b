#include "model/model.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/bf16.h"
#include "common/rng.h"
#include "kernels/kernels.h"

// align: 64, or a page for memory that a GPU backend page-locks (pinning
// works on whole pages, and a page must not be shared with another pinned
// allocation, which CUDA refuses to register twice).
static void *alloc_zeroed(size_t bytes, size_t align) {
  void *p = NULL;
  bytes = bytes ? (bytes + align - 1) & ~(align - 1) : align; // every pointer valid, even for an empty shard
  if (posix_memalign(&p, align, bytes) != 0) return NULL;
  memset(p, 0, bytes);
  return p;
}

// The shard's tensors in layout order; the update walks them in this order.
static int shard_tensors(const eng_layout *lo, int s, eng_tensor *ts) {
  int n = 0;
  if (s == 0) {
    ts[n++] = lo->embed;
  } else if (s == lo->n_layers + 1) {
    ts[n++] = lo->final_norm;
    if (lo->lm_head.numel) ts[n++] = lo->lm_head;
  } else {
    for (int p = 0; p < ENG_P_LAYER_COUNT; p++)
      if (eng_layout_proto(lo, s - 1)[p].numel) ts[n++] = eng_layout_layer_tensor(lo, s - 1, p);
  }
  return n;
}

// The optimizer options of tensor t of shard s.
static eng_adamw8_opts tensor_opt_opts(const eng_layout *lo, int s, const eng_tensor *t, const eng_model_opts *o) {
  int big = t->cols && (s == 0 || s == lo->n_layers + 1); // the embedding or lm_head
  return (eng_adamw8_opts){.min_quant_numel = o->opt_min_quant,
                           .fp32_state = o->opt_fp32 || (big && o->opt_fp32_embed_head)};
}

// Whether tensor t of shard s stays as it is: POET-X's W0 and biases.
static int tensor_frozen(const eng_layout *lo, int s, const eng_tensor *t, const eng_model_opts *o) {
  if (!o->poet_block || s == 0 || s == lo->n_layers + 1) return 0;
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
    // A layer shard's tensors sit at the prototype's offsets.
    if (t->off == lo->layer_proto[eng_poet_param[k]].off) return 1;
    if (eng_poet_bias[k] != ENG_P_LAYER_COUNT && lo->layer_proto[eng_poet_bias[k]].numel &&
        t->off == lo->layer_proto[eng_poet_bias[k]].off)
      return 1;
  }
  return 0;
}

// The gradient store of shard s holds bf16 (the embedding's is always fp32).
static int shard_g_bf16(int s, const eng_model_opts *o) { return o->grad_bf16 && s != 0; }

// Rows of an untied embedding's gradient store under options o: the most a
// step touches, 0 for the whole table (tied, the head's gradient covers it).
static int embed_rows(const eng_layout *lo, const eng_config *c, const eng_model_opts *o) {
  return lo->lm_head.numel && o->embed_rows > 0 && o->embed_rows < c->vocab ? o->embed_rows : 0;
}

// Where each tensor's gradient sits in shard s's store (g_off) and its size:
// the layout's offsets, or, when some tensors are frozen (POET-X's W0), the
// others packed: a frozen tensor has no gradient store.
static size_t shard_g_layout(const eng_layout *lo, int s, const eng_tensor *ts, int n, const eng_model_opts *o,
                             size_t *g_off) {
  int any = 0;
  for (int i = 0; i < n; i++) any |= tensor_frozen(lo, s, &ts[i], o);
  if (!any) {
    for (int i = 0; i < n; i++) g_off[i] = ts[i].off;
    return eng_layout_shard_numel(lo, s);
  }
  size_t at = 0;
  for (int i = 0; i < n; i++) {
    g_off[i] = tensor_frozen(lo, s, &ts[i], o) ? SIZE_MAX : at;
    if (g_off[i] != SIZE_MAX) at += ts[i].numel;
  }
  return at;
}

// How POET-X's state is held: θ's gradients in the store's dtype, its
// moments as the other tensors' (8-bit, or fp32).
static void poet_opts(eng_poet_model *pm, const eng_model_opts *o) {
  pm->g_bf16 = o->grad_bf16;
  pm->opt_opts = (eng_adamw8_opts){.min_quant_numel = o->opt_min_quant, .fp32_state = o->opt_fp32};
}

// The elements of tensor t of shard s whose optimizer state this process
// holds, [*off, + *n) (all of them, unless opt_parts), and that state's
// options.
static void tensor_part(const eng_layout *lo, int s, const eng_tensor *t, const eng_model_opts *o, size_t *off,
                        size_t *n, eng_adamw8_opts *ao) {
  *ao = tensor_opt_opts(lo, s, t, o);
  *off = 0;
  *n = tensor_frozen(lo, s, t, o) ? 0 : t->numel;
  if (o->opt_parts > 1) {
    eng_adamw8_opts po = eng_adamw8_part_opts(*n, ao);
    eng_adamw8_part(*n, ao, o->opt_parts, o->opt_part, off, n);
    *ao = po;
  }
}

// Whether the fp32 master holds parts (eng_shard.w_part): the working copy
// is what computes, so no process needs the whole master.
static int master_parted(const eng_model_opts *o) { return o->work_bf16 && o->opt_parts > 1; }

static int shard_alloc(eng_model *m, int s, const eng_model_opts *o, eng_err *e) {
  const eng_layout *lo = &m->lo;
  eng_shard *sh = &m->shards[s];
  sh->numel = eng_layout_shard_numel(lo, s);
  sh->g_bf16 = shard_g_bf16(s, o);
  sh->n_tensors = shard_tensors(lo, s, sh->tensors);
  sh->g_numel = shard_g_layout(lo, s, sh->tensors, sh->n_tensors, o, sh->g_off);
  eng_adamw8_opts ao[ENG_SHARD_MAX_TENSORS];
  size_t part_n[ENG_SHARD_MAX_TENSORS];
  for (int i = 0; i < sh->n_tensors; i++) {
    sh->frozen[i] = (uint8_t)tensor_frozen(lo, s, &sh->tensors[i], o);
    tensor_part(lo, s, &sh->tensors[i], o, &sh->opt_off[i], &part_n[i], &ao[i]);
  }
  // A bf16 base holds the frozen tensors, and w the others packed as the
  // gradient store packs them; a master in parts packs the parts; else w
  // holds every tensor at its offset.
  int based = o->poet_base_bf16 && sh->g_numel < sh->numel;
  sh->w_part = master_parted(o);
  sh->w_numel = sh->numel;
  for (int i = 0; i < sh->n_tensors; i++) sh->w_off[i] = sh->tensors[i].off;
  if (based) sh->w_numel = shard_g_layout(lo, s, sh->tensors, sh->n_tensors, o, sh->w_off);
  if (sh->w_part) {
    sh->w_numel = 0;
    for (int i = 0; i < sh->n_tensors; i++) sh->w_off[i] = sh->w_numel, sh->w_numel += part_n[i];
  }
  if (s == 0 && m->rows_cap) sh->g_numel = (size_t)m->rows_cap * (size_t)m->cfg.d_model; // by rows
  size_t pinned_align = o->work_bf16 ? 4096 : 64; // g and work cross PCIe on a GPU
  sh->w = alloc_zeroed(sh->w_numel * sizeof(float), 64);
  sh->base = based ? alloc_zeroed(sh->numel * sizeof(uint16_t), 64) : NULL;
  sh->g = alloc_zeroed(sh->g_numel * (sh->g_bf16 ? sizeof(uint16_t) : sizeof(float)), pinned_align);
  sh->work = o->work_bf16 ? alloc_zeroed(sh->numel * sizeof(uint16_t), pinned_align) : NULL;
  if (!sh->w || !sh->g || (o->work_bf16 && !sh->work) || (based && !sh->base))
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate shard %d (%zu values)", s, sh->numel);
  for (int i = 0; i < sh->n_tensors; i++) {
    int rc = eng_adamw8_state_init(&sh->opt[i], part_n[i], &ao[i], NULL, e);
    if (rc) return rc;
  }
  return 0;
}

int eng_model_alloc(eng_model *m, const eng_config *c, const eng_model_opts *o, eng_err *e) {
  memset(m, 0, sizeof *m);
  if (o->poet_base_bf16 && (!o->poet_block || o->work_bf16))
    return eng_err_set(e, ENG_EINVAL, "a bf16 base is POET-X's, on the cpu backend (no working copy)");
  m->cfg = *c;
  eng_layout_init(&m->lo, c);
  if (o->poet_block) {
    int rc = eng_poet_model_shape(&m->poet, &m->lo, o->poet_block, e);
    poet_opts(&m->poet, o);
    if (!rc) rc = eng_poet_model_alloc(&m->poet, e);
    if (rc) {
      eng_poet_model_free(&m->poet);
      return rc;
    }
  }
  if ((m->rows_cap = embed_rows(&m->lo, c, o))) {
    m->row_of = malloc((size_t)c->vocab * sizeof *m->row_of);
    m->token_of = malloc((size_t)m->rows_cap * sizeof *m->token_of);
    if (m->row_of)
      for (int v = 0; v < c->vocab; v++) m->row_of[v] = -1;
  }
  m->shards = calloc((size_t)m->lo.n_shards, sizeof *m->shards);
  if (!m->shards || (m->rows_cap && (!m->row_of || !m->token_of))) {
    free(m->shards), free(m->row_of), free(m->token_of);
    m->shards = NULL, m->row_of = m->token_of = NULL;
    eng_poet_model_free(&m->poet);
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate the shard table");
  }
  for (int s = 0; s < m->lo.n_shards; s++) {
    int rc = shard_alloc(m, s, o, e);
    if (rc) {
      eng_model_free(m);
      return rc;
    }
  }
  return 0;
}

void eng_model_free(eng_model *m) {
  if (m->shards) {
    for (int s = 0; s < m->lo.n_shards; s++) {
      eng_shard *sh = &m->shards[s];
      free(sh->w);
      free(sh->base);
      free(sh->g);
      free(sh->work);
      for (int i = 0; i < sh->n_tensors; i++) eng_adamw8_state_free(&sh->opt[i]);
    }
  }
  free(m->shards);
  free(m->row_of);
  free(m->token_of);
  m->shards = NULL;
  m->row_of = m->token_of = NULL;
  eng_poet_model_free(&m->poet);
}

size_t eng_model_grad_bytes(const eng_model *m) {
  size_t n = m->row_of ? ((size_t)m->cfg.vocab + (size_t)m->rows_cap) * sizeof(int32_t) : 0;
  for (int s = 0; s < m->lo.n_shards; s++)
    n += m->shards[s].g_numel * (m->shards[s].g_bf16 ? sizeof(uint16_t) : sizeof(float));
  return n;
}

void eng_model_embed_grad_reset(eng_model *m) {
  const size_t d = (size_t)m->cfg.d_model;
  if (!m->row_of) {
    memset(m->shards[0].g, 0, m->shards[0].g_numel * sizeof(float));
    return;
  }
  for (int r = 0; r < m->rows_used; r++) m->row_of[m->token_of[r]] = -1;
  memset(m->shards[0].g, 0, (size_t)m->rows_used * d * sizeof(float));
  m->rows_used = 0;
}

// The store's rows of tokens ids[0..k), given rows as tokens first appear.
static int rows_of(eng_model *m, const int32_t *ids, int k, int32_t *rows, eng_err *e) {
  for (int i = 0; i < k; i++) {
    int32_t v = ids[i];
    if (m->row_of[v] < 0) {
      if (m->rows_used == m->rows_cap)
        return eng_err_set(e, ENG_ESTATE, "the embedding's gradient store has %d rows, and a step has more tokens",
                           m->rows_cap);
      m->token_of[m->rows_used] = v;
      m->row_of[v] = m->rows_used++;
    }
    rows[i] = m->row_of[v];
  }
  return 0;
}

int eng_model_embed_grad_add(eng_model *m, const float *dx, const int32_t *ids, int n, int group, eng_err *e) {
  const int d = m->cfg.d_model;
  if (group > 0) { // group by group, each a run of its own
    for (int i0 = 0; i0 < n; i0 += group) {
      int k = n - i0 < group ? n - i0 : group;
      int rc;
      if (!m->row_of) {
        rc = eng_k_embed_bwd_group(m->shards[0].g, dx + (size_t)i0 * d, ids + i0, k, d);
      } else {
        int32_t *rows = malloc((size_t)k * sizeof *rows);
        rc = rows ? rows_of(m, ids + i0, k, rows, e) : ENG_ENOMEM;
        if (!rc) rc = eng_k_embed_bwd_group(m->shards[0].g, dx + (size_t)i0 * d, rows, k, d);
        free(rows);
        if (rc && rc != ENG_ENOMEM) return rc;
      }
      if (rc) return eng_err_set(e, ENG_ENOMEM, "the embedding's gradient: no memory for a group of %d tokens", k);
    }
    return 0;
  }
  if (!m->row_of) {
    eng_k_embed_bwd(m->shards[0].g, dx, ids, n, d);
    return 0;
  }
  // The same kernel over the tokens' rows, a run of tokens at a time: each
  // element's sum takes its terms in token order, as in the whole table.
  enum { RUN = 1024 };
  int32_t rows[RUN];
  for (int i0 = 0; i0 < n; i0 += RUN) {
    const int k = n - i0 < RUN ? n - i0 : RUN;
    int rc = rows_of(m, ids + i0, k, rows, e);
    if (rc) return rc;
    eng_k_embed_bwd(m->shards[0].g, dx + (size_t)i0 * d, rows, k, d);
  }
  return 0;
}

size_t eng_model_embed_grad_floats(const eng_model *m) {
  return m->row_of ? (size_t)m->rows_used * (size_t)m->cfg.d_model : m->shards[0].g_numel;
}

size_t eng_model_opt_bytes(const eng_model *m) {
  size_t n = 0;
  for (int s = 0; s < m->lo.n_shards; s++)
    for (int i = 0; i < m->shards[s].n_tensors; i++) n += m->shards[s].opt[i].bytes;
  return n;
}

size_t eng_model_master_bytes(const eng_model *m) {
  size_t n = 0;
  for (int s = 0; s < m->lo.n_shards; s++)
    n += m->shards[s].w_numel * sizeof(float) + (m->shards[s].base ? m->shards[s].numel * sizeof(uint16_t) : 0);
  return n;
}

void eng_model_work_refresh(eng_model *m) {
  for (int s = 0; s < m->lo.n_shards; s++) {
    eng_shard *sh = &m->shards[s];
    // The optimizer writes the working copy with the same rounding (nearest even).
    if (sh->work && !sh->w_part) eng_bf16_from_f32_n(sh->work, sh->w, sh->numel, ENG_ISA_AUTO);
  }
}

// Index of tensor t among shard s's tensors.
static int tensor_index(const eng_shard *sh, const eng_tensor *t) {
  int i = 0;
  while (i < sh->n_tensors - 1 && sh->tensors[i].off != t->off) i++;
  return i;
}

float *eng_model_tensor(eng_model *m, int s, const eng_tensor *t) {
  eng_shard *sh = &m->shards[s];
  size_t off = sh->w_off[tensor_index(sh, t)];
  return off == SIZE_MAX || sh->w_part ? NULL : sh->w + off;
}

void eng_model_tensor_get(const eng_model *m, int s, const eng_tensor *t, float *dst) {
  const eng_shard *sh = &m->shards[s];
  size_t off = sh->w_off[tensor_index(sh, t)];
  if (off == SIZE_MAX) eng_bf16_to_f32_here(dst, sh->base + t->off, t->numel); // on copy-in's worker, too
  else memcpy(dst, sh->w + off, t->numel * sizeof(float));
}

void eng_model_tensor_set(eng_model *m, int s, const eng_tensor *t, const float *src) {
  eng_shard *sh = &m->shards[s];
  const int i = tensor_index(sh, t);
  size_t off = sh->w_off[i];
  if (sh->w_part) { // this process's part of the master; the working copy whole
    memcpy(sh->w + off, src + sh->opt_off[i], sh->opt[i].numel * sizeof(float));
    eng_bf16_from_f32_n(sh->work + t->off, src, t->numel, ENG_ISA_AUTO);
  } else if (off == SIZE_MAX) {
    eng_bf16_from_f32_n(sh->base + t->off, src, t->numel, ENG_ISA_AUTO);
  } else {
    memcpy(sh->w + off, src, t->numel * sizeof(float));
  }
}

void eng_model_shard_get(const eng_model *m, int s, float *dst) {
  const eng_shard *sh = &m->shards[s];
  if (!sh->base) {
    memcpy(dst, sh->w, sh->numel * sizeof(float));
    return;
  }
  for (int i = 0; i < sh->n_tensors; i++) eng_model_tensor_get(m, s, &sh->tensors[i], dst + sh->tensors[i].off);
}

void eng_model_shard_set(eng_model *m, int s, const float *src) {
  eng_shard *sh = &m->shards[s];
  for (int i = 0; i < sh->n_tensors; i++) eng_model_tensor_set(m, s, &sh->tensors[i], src + sh->tensors[i].off);
}

void eng_model_grad_get(const eng_model *m, int s, const eng_tensor *t, float *dst) {
  const eng_shard *sh = &m->shards[s];
  size_t off = SIZE_MAX;
  for (int i = 0; i < sh->n_tensors; i++)
    if (sh->tensors[i].off == t->off) off = sh->g_off[i];
  if (off == SIZE_MAX) { // frozen
    memset(dst, 0, t->numel * sizeof *dst);
  } else if (s == 0 && m->row_of) {
    const size_t d = (size_t)m->cfg.d_model;
    for (int v = 0; v < m->cfg.vocab; v++) {
      if (m->row_of[v] < 0) memset(dst + v * d, 0, d * sizeof *dst);
      else memcpy(dst + v * d, (const float *)sh->g + (size_t)m->row_of[v] * d, d * sizeof *dst);
    }
  } else if (sh->g_bf16) {
    const uint16_t *g = (const uint16_t *)sh->g + off;
    for (size_t i = 0; i < t->numel; i++) dst[i] = eng_bf16_to_f32(g[i]);
  } else {
    memcpy(dst, (const float *)sh->g + off, t->numel * sizeof(float));
  }
}

typedef struct init_ctx {
  eng_model *m;
  uint64_t seed;
  uint64_t index;
  float *scratch; // the largest tensor's values, under a bf16 base or a master in parts
} init_ctx;

static int ends_with(const char *s, const char *tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && strcmp(s + a - b, tail) == 0;
}

static int init_tensor(void *ctx, int shard, const eng_tensor *t) {
  init_ctx *ic = ctx;
  float *p = eng_model_tensor(ic->m, shard, t);
  if (!p) p = ic->scratch; // a tensor of the bf16 base (drawn in fp32, then rounded) or in parts
  eng_rng r;
  eng_rng_seed(&r, ic->seed, ++ic->index);
  if (t->cols) {
    const double std = ic->m->cfg.init_std;
    for (size_t i = 0; i < t->numel; i++) p[i] = (float)(std * eng_rng_normal(&r));
  } else if (ends_with(t->name, "A_log")) {
    // Gated DeltaNet's decay rates: log of U(0.01, 16), as transformers draws them.
    for (size_t i = 0; i < t->numel; i++) p[i] = logf(0.01f + 15.99f * (float)((eng_rng_u64(&r) >> 11) * 0x1p-53));
  } else {
    // Vectors: norm weights start at 1 (zero-centred ones, x̂·(1 + w), at 0;
    // not the gated norm's), biases at 0 (names end in "bias") but
    // DeltaNet's dt_bias at 1.
    const int bias = ends_with(t->name, "bias") && !ends_with(t->name, "dt_bias");
    const int zero = bias || (ic->m->cfg.norm_plus_one && !ends_with(t->name, "dt_bias") &&
                              !ends_with(t->name, "linear_attn.norm.weight"));
    for (size_t i = 0; i < t->numel; i++) p[i] = zero ? 0.0f : 1.0f;
  }
  // POET-X starts from scratch with each row of a frozen W0 at unit norm.
  const eng_shard *sh = &ic->m->shards[shard];
  if (t->cols && sh->frozen[tensor_index(sh, t)])
    for (int i = 0; i < t->rows; i++) {
      float *row = p + (size_t)i * t->cols;
      double sum = 0;
      for (int j = 0; j < t->cols; j++) sum += (double)row[j] * row[j];
      float inv = sum > 0 ? (float)(1.0 / sqrt(sum)) : 0.0f;
      for (int j = 0; j < t->cols; j++) row[j] *= inv;
    }
  if (p == ic->scratch) eng_model_tensor_set(ic->m, shard, t, p);
  return 0;
}

int eng_model_init_random(eng_model *m, uint64_t seed, eng_err *e) {
  init_ctx ic = {m, seed, 0, NULL};
  size_t most = 0;
  for (int s = 0; s < m->lo.n_shards; s++)
    for (int i = 0; (m->shards[s].base || m->shards[s].w_part) && i < m->shards[s].n_tensors; i++)
      if (m->shards[s].tensors[i].numel > most) most = m->shards[s].tensors[i].numel;
  if (most && !(ic.scratch = malloc(most * sizeof(float))))
    return eng_err_set(e, ENG_ENOMEM, "cannot allocate %zu bytes to initialise the model", most * sizeof(float));
  eng_layout_visit(&m->lo, init_tensor, &ic);
  free(ic.scratch);
  return 0;
}

int eng_model_state_parts(const eng_config *c, const eng_model_opts *o, eng_model_bytes *b) {
  eng_layout lo;
  eng_layout_init(&lo, c);
  memset(b, 0, sizeof *b);
  for (int s = 0; s < lo.n_shards; s++) {
    size_t numel = eng_layout_shard_numel(&lo, s), g_off[ENG_SHARD_MAX_TENSORS];
    eng_tensor ts[ENG_SHARD_MAX_TENSORS];
    int nt = shard_tensors(&lo, s, ts);
    size_t g_numel = shard_g_layout(&lo, s, ts, nt, o, g_off);
    int based = o->poet_base_bf16 && g_numel < numel; // then w packs as g does
    size_t parts = 0; // a master in parts: this process's parts
    for (int i = 0; i < nt; i++) {
      eng_adamw8_opts ao;
      size_t off, n;
      tensor_part(&lo, s, &ts[i], o, &off, &n, &ao);
      b->opt += eng_adamw8_state_bytes(n, &ao); // none for a frozen tensor (n = 0)
      parts += n;
    }
    b->master += master_parted(o) ? parts * sizeof(float)
                 : based           ? g_numel * sizeof(float) + numel * sizeof(uint16_t)
                                   : numel * sizeof(float);
    b->work += o->work_bf16 ? numel * sizeof(uint16_t) : 0;
    const int rows = s == 0 ? embed_rows(&lo, c, o) : 0;
    if (rows) // the rows, and the maps between rows and tokens
      b->grad += (size_t)rows * (size_t)c->d_model * sizeof(float) + ((size_t)c->vocab + rows) * sizeof(int32_t);
    else
      b->grad += g_numel * (shard_g_bf16(s, o) ? 2 : 4);
  }
  if (o->poet_block) {
    eng_poet_model pm;
    eng_err ignored;
    if (eng_poet_model_shape(&pm, &lo, o->poet_block, &ignored)) return -1;
    poet_opts(&pm, o);
    b->poet = eng_poet_model_bytes(&pm);
  }
  return 0;
}

size_t eng_model_state_bytes(const eng_config *c, const eng_model_opts *o) {
  eng_model_bytes b;
  if (eng_model_state_parts(c, o, &b)) return 0;
  return b.master + b.work + b.grad + b.opt + b.poet;
}
