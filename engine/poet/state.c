// A model's POET-X state (state.h).
#include "poet/state.h"

#include "common/bf16.h"

#include <stdlib.h>
#include <string.h>

const eng_layer_param eng_poet_param[ENG_POET_WEIGHTS] = {ENG_P_WQ,    ENG_P_WK,  ENG_P_WV,   ENG_P_WO,
                                                          ENG_P_WGATE, ENG_P_WUP, ENG_P_WDOWN};
const eng_layer_param eng_poet_bias[ENG_POET_WEIGHTS] = {ENG_P_BQ,          ENG_P_BK,          ENG_P_BV,
                                                         ENG_P_LAYER_COUNT, ENG_P_LAYER_COUNT, ENG_P_LAYER_COUNT,
                                                         ENG_P_LAYER_COUNT};

int eng_poet_model_shape(eng_poet_model *pm, const eng_layout *lo, int b, eng_err *e) {
  memset(pm, 0, sizeof *pm);
  if (lo->full_every) // its chains and their costs are written for attention layers
    return eng_err_set(e, ENG_ENOTSUP, "spec: method poetx does not cover Gated DeltaNet (hybrid) layers yet");
  if (b < 2) return eng_err_set(e, ENG_EINVAL, "spec: poet_block must be at least 2 (got %d)", b);
  pm->b = b;
  pm->n_layers = lo->n_layers;
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
    const eng_tensor *t = &lo->layer_proto[eng_poet_param[k]];
    pm->dim[k][0] = t->cols;
    pm->dim[k][1] = t->rows;
    for (int side = 0; side < 2; side++) {
      if (pm->dim[k][side] % b)
        return eng_err_set(e, ENG_EINVAL, "spec: poet_block %d does not divide %s [%d, %d] (its %d %s)", b, t->name,
                           t->rows, t->cols, pm->dim[k][side], side ? "rows" : "columns");
      pm->theta_off[k][side] = pm->n_theta;
      pm->n_theta += (size_t)(pm->dim[k][side] / b) * eng_poet_tri(b);
      pm->perm_off[k][side] = pm->n_perm;
      pm->n_perm += (size_t)pm->dim[k][side];
    }
  }
  return 0;
}

size_t eng_poet_model_bytes(const eng_poet_model *pm) {
  size_t layer = pm->n_theta * (sizeof(float) + (pm->g_bf16 ? sizeof(uint16_t) : sizeof(float))) +
                 eng_adamw8_state_bytes(pm->n_theta, &pm->opt_opts) + pm->n_perm * sizeof(int32_t);
  return (size_t)pm->n_layers * layer + eng_poet_model_merge_floats(pm) * sizeof(float);
}

int eng_poet_model_alloc(eng_poet_model *pm, eng_err *e) {
  pm->layers = calloc((size_t)pm->n_layers, sizeof *pm->layers);
  pm->merge_work = malloc(eng_poet_model_merge_floats(pm) * sizeof(float));
  if (!pm->layers || !pm->merge_work) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the POET-X layer table");
  for (int l = 0; l < pm->n_layers; l++) {
    eng_poet_lstate *s = &pm->layers[l];
    s->theta = calloc(pm->n_theta + 1, sizeof(float));
    s->g = calloc(pm->n_theta + 1, pm->g_bf16 ? sizeof(uint16_t) : sizeof(float));
    s->perm = malloc((pm->n_perm + 1) * sizeof(int32_t));
    if (!s->theta || !s->g || !s->perm)
      return eng_err_set(e, ENG_ENOMEM, "cannot allocate layer %d's POET-X state (%zu bytes)", l,
                         eng_poet_model_bytes(pm) / (size_t)pm->n_layers);
    int rc = eng_adamw8_state_init(&s->opt, pm->n_theta, &pm->opt_opts, NULL, e);
    if (rc) return rc;
    for (int k = 0; k < ENG_POET_WEIGHTS; k++)
      for (int side = 0; side < 2; side++)
        for (int i = 0; i < pm->dim[k][side]; i++) s->perm[pm->perm_off[k][side] + (size_t)i] = i;
  }
  return 0;
}

void eng_poet_model_free(eng_poet_model *pm) {
  if (pm->layers)
    for (int l = 0; l < pm->n_layers; l++) {
      free(pm->layers[l].theta);
      free(pm->layers[l].g);
      free(pm->layers[l].perm);
      eng_adamw8_state_free(&pm->layers[l].opt);
    }
  free(pm->layers);
  free(pm->merge_work);
  pm->layers = NULL;
  pm->merge_work = NULL;
}

// The stream of weight k's permutations in layer l after `merge` merges (0:
// the start). Disjoint from the streams eng_model_init_random draws from
// (1, 2, ...) by its high bit.
static uint64_t perm_stream(int64_t merge, int l, int k) {
  return (UINT64_C(1) << 63) | ((uint64_t)merge << 32) | ((uint64_t)l << 8) | (uint64_t)k;
}

static void draw_perms(eng_poet_model *pm, int l, int k, uint64_t seed, int64_t merge) {
  eng_rng r;
  eng_rng_seed(&r, seed, perm_stream(merge, l, k));
  for (int side = 0; side < 2; side++)
    eng_poet_perm(&r, pm->dim[k][side], pm->layers[l].perm + pm->perm_off[k][side]);
}

void eng_poet_model_perms(eng_poet_model *pm, uint64_t seed) {
  for (int l = 0; l < pm->n_layers; l++)
    for (int k = 0; k < ENG_POET_WEIGHTS; k++) draw_perms(pm, l, k, seed, 0);
}

int eng_poet_is_perm(const int32_t *perm, size_t n) {
  uint8_t *seen = calloc(n + 1, 1);
  int ok = seen != NULL;
  for (size_t i = 0; i < n && ok; i++) ok = perm[i] >= 0 && (size_t)perm[i] < n && !seen[perm[i]]++;
  free(seen);
  return ok;
}

int eng_poet_model_perms_ok(const eng_poet_model *pm, int l) {
  for (int k = 0; k < ENG_POET_WEIGHTS; k++)
    for (int side = 0; side < 2; side++)
      if (!eng_poet_is_perm(pm->layers[l].perm + pm->perm_off[k][side], (size_t)pm->dim[k][side])) return 0;
  return 1;
}

size_t eng_poet_model_rot_floats(const eng_poet_model *pm) {
  size_t n = 0;
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) n += (size_t)(pm->dim[k][0] + pm->dim[k][1]) * pm->b;
  return n;
}

// Offset of weight k's side in a rotation buffer.
static size_t rot_off(const eng_poet_model *pm, int k, int side) {
  size_t n = 0;
  for (int i = 0; i < k; i++) n += (size_t)(pm->dim[i][0] + pm->dim[i][1]) * pm->b;
  return n + (side ? (size_t)pm->dim[k][0] * pm->b : 0);
}

void eng_poet_model_rotations(const eng_poet_model *pm, int l, float *rot, float *work) {
  const float *theta = pm->layers[l].theta;
  for (int k = 0; k < ENG_POET_WEIGHTS; k++)
    for (int side = 0; side < 2; side++)
      eng_poet_cayley(pm->dim[k][side] / pm->b, pm->b, theta + pm->theta_off[k][side], rot + rot_off(pm, k, side), work);
}

void eng_poet_model_layer(const eng_poet_model *pm, int l, const float *rot, float *drot, float *work,
                          eng_poet_layer *out) {
  memset(out, 0, sizeof *out);
  out->b = pm->b;
  out->work = work;
  const int32_t *perm = pm->layers[l].perm;
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
    out->pin[k] = perm + pm->perm_off[k][0];
    out->pout[k] = perm + pm->perm_off[k][1];
    out->rin[k] = rot + rot_off(pm, k, 0);
    out->rout[k] = rot + rot_off(pm, k, 1);
    if (drot) out->drin[k] = drot + rot_off(pm, k, 0), out->drout[k] = drot + rot_off(pm, k, 1);
  }
}

double eng_poet_model_grad(eng_poet_model *pm, int l, const float *drot, float *work) {
  eng_poet_lstate *s = &pm->layers[l];
  const int b = pm->b;
  const size_t tri = eng_poet_tri(b), bb = (size_t)b * b;
  float *g32 = s->g, *blk = work + 6 * bb; // a block's dθ on its way into a bf16 store
  uint16_t *g16 = s->g;
  if (!pm->g_bf16) memset(g32, 0, pm->n_theta * sizeof *g32);
  for (int k = 0; k < ENG_POET_WEIGHTS; k++)
    for (int side = 0; side < 2; side++) {
      size_t off = pm->theta_off[k][side];
      const float *dr = drot + rot_off(pm, k, side);
      if (!pm->g_bf16) {
        eng_poet_cayley_bwd(pm->dim[k][side] / b, b, s->theta + off, dr, g32 + off, work);
        continue;
      }
      for (int q = 0; q < pm->dim[k][side] / b; q++) { // block by block: the same values
        memset(blk, 0, tri * sizeof *blk);
        eng_poet_cayley_bwd(1, b, s->theta + off + q * tri, dr + q * bb, blk, work);
        eng_bf16_from_f32_n(g16 + off + q * tri, blk, tri, ENG_ISA_AUTO);
      }
    }
  double sum = 0;
  for (size_t i = 0; i < pm->n_theta; i++) {
    double v = pm->g_bf16 ? (double)eng_bf16_to_f32(g16[i]) : (double)g32[i];
    sum += v * v;
  }
  return sum;
}

size_t eng_poet_model_merge_floats(const eng_poet_model *pm) {
  size_t most = 0;
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
    size_t n = eng_poet_merge_work(pm->dim[k][1], pm->dim[k][0], pm->b);
    if (n > most) most = n;
  }
  return most;
}

double eng_poet_model_merge(eng_poet_model *pm, const eng_layout *lo, int l, float *w, uint16_t *base, uint64_t seed,
                            int64_t merge, float *work) {
  eng_poet_lstate *s = &pm->layers[l];
  double worst = 0;
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
    const eng_tensor *t = &lo->layer_proto[eng_poet_param[k]];
    // The new permutations are drawn into the layer's own arrays by the
    // merge, from a stream of their own: draw them apart, then hand them in.
    eng_rng r;
    eng_rng_seed(&r, seed, perm_stream(merge, l, k));
    int32_t *pin = s->perm + pm->perm_off[k][0], *pout = s->perm + pm->perm_off[k][1];
    double err = eng_poet_merge(t->rows, t->cols, pm->b, base ? NULL : w + t->off, base ? base + t->off : NULL,
                                s->theta + pm->theta_off[k][0], s->theta + pm->theta_off[k][1], pin, pout, &r, work);
    if (err > worst) worst = err;
  }
  memset(s->opt.mem, 0, s->opt.bytes); // zero moments (eng_adamw8_state_init's state)
  s->merged = merge;
  s->merge_err = worst;
  return worst;
}

void eng_poet_model_effective(const eng_poet_model *pm, const eng_layout *lo, int l, float *w, float *work) {
  const eng_poet_lstate *s = &pm->layers[l];
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
    const eng_tensor *t = &lo->layer_proto[eng_poet_param[k]];
    int m = t->rows, n = t->cols, b = pm->b;
    float *rin = work, *rout = rin + (size_t)n * b, *cw = rout + (size_t)m * b;
    eng_poet_cayley(n / b, b, s->theta + pm->theta_off[k][0], rin, cw);
    eng_poet_cayley(m / b, b, s->theta + pm->theta_off[k][1], rout, cw);
    eng_poet_effective_here(m, n, b, w + t->off, s->perm + pm->perm_off[k][0], s->perm + pm->perm_off[k][1], rin, rout,
                            cw + 2 * (size_t)b * b);
  }
}
