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
  return (size_t)pm->n_layers * (4 * pm->n_theta * sizeof(float) + pm->n_perm * sizeof(int32_t)) +
         eng_poet_model_merge_floats(pm) * sizeof(float);
}

int eng_poet_model_alloc(eng_poet_model *pm, eng_err *e) {
  pm->layers = calloc((size_t)pm->n_layers, sizeof *pm->layers);
  pm->merge_work = malloc(eng_poet_model_merge_floats(pm) * sizeof(float));
  if (!pm->layers || !pm->merge_work) return eng_err_set(e, ENG_ENOMEM, "cannot allocate the POET-X layer table");
  for (int l = 0; l < pm->n_layers; l++) {
    eng_poet_lstate *s = &pm->layers[l];
    float *f = calloc(4 * pm->n_theta + 1, sizeof(float));
    s->perm = malloc((pm->n_perm + 1) * sizeof(int32_t));
    if (!f || !s->perm) {
      free(f);
      return eng_err_set(e, ENG_ENOMEM, "cannot allocate layer %d's POET-X state (%zu bytes)", l,
                         eng_poet_model_bytes(pm) / (size_t)pm->n_layers);
    }
    s->theta = f, s->m1 = f + pm->n_theta, s->m2 = f + 2 * pm->n_theta, s->g = f + 3 * pm->n_theta;
    for (int k = 0; k < ENG_POET_WEIGHTS; k++)
      for (int side = 0; side < 2; side++)
        for (int i = 0; i < pm->dim[k][side]; i++) s->perm[pm->perm_off[k][side] + (size_t)i] = i;
  }
  return 0;
}

void eng_poet_model_free(eng_poet_model *pm) {
  if (pm->layers)
    for (int l = 0; l < pm->n_layers; l++) {
      free(pm->layers[l].theta); // the one allocation of θ, m1, m2, g
      free(pm->layers[l].perm);
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
  memset(s->g, 0, pm->n_theta * sizeof *s->g);
  for (int k = 0; k < ENG_POET_WEIGHTS; k++)
    for (int side = 0; side < 2; side++)
      eng_poet_cayley_bwd(pm->dim[k][side] / pm->b, pm->b, s->theta + pm->theta_off[k][side],
                          drot + rot_off(pm, k, side), s->g + pm->theta_off[k][side], work);
  double sum = 0;
  for (size_t i = 0; i < pm->n_theta; i++) sum += (double)s->g[i] * s->g[i];
  return sum;
}

// Floats of a merge's work, and of the largest weight (a bf16 base's W0
// widens into the work beyond that).
static size_t merge_floats(const eng_poet_model *pm, size_t *weight) {
  size_t most = 0;
  *weight = 0;
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
    size_t n = eng_poet_merge_work(pm->dim[k][1], pm->dim[k][0], pm->b), mn = (size_t)pm->dim[k][0] * pm->dim[k][1];
    if (n > most) most = n;
    if (mn > *weight) *weight = mn;
  }
  return most;
}

size_t eng_poet_model_merge_floats(const eng_poet_model *pm) {
  size_t weight, n = merge_floats(pm, &weight);
  return n + (pm->base_bf16 ? weight : 0);
}

double eng_poet_model_merge(eng_poet_model *pm, const eng_layout *lo, int l, float *w, uint16_t *base, uint64_t seed,
                            int64_t merge, float *work) {
  eng_poet_lstate *s = &pm->layers[l];
  double worst = 0;
  size_t weight, plain = merge_floats(pm, &weight);
  for (int k = 0; k < ENG_POET_WEIGHTS; k++) {
    const eng_tensor *t = &lo->layer_proto[eng_poet_param[k]];
    // The new permutations are drawn into the layer's own arrays by the
    // merge, from a stream of their own: draw them apart, then hand them in.
    eng_rng r;
    eng_rng_seed(&r, seed, perm_stream(merge, l, k));
    int32_t *pin = s->perm + pm->perm_off[k][0], *pout = s->perm + pm->perm_off[k][1];
    size_t mn = (size_t)t->rows * t->cols;
    float *W0 = base ? work + plain : w + t->off;
    if (base) eng_bf16_to_f32_n(W0, base + t->off, mn, ENG_ISA_AUTO);
    double err = eng_poet_merge(t->rows, t->cols, pm->b, W0, base ? base + t->off : NULL,
                                s->theta + pm->theta_off[k][0], s->theta + pm->theta_off[k][1], pin, pout, &r, work);
    if (err > worst) worst = err;
  }
  memset(s->m1, 0, pm->n_theta * sizeof *s->m1);
  memset(s->m2, 0, pm->n_theta * sizeof *s->m2);
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
