// A plan as JSON: what the daemon stores with a job and what a resumed job
// runs again, so parsing is strict (every field, every range) and names what
// is wrong.
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/json_kind.h"
#include "model/atomic_file.h"
#include "plan/plan.h"

#define PLAN_JSON_VERSION 1

static const char *win_kind_name[] = {"F", "H", "B"};

static json_t *num_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

int eng_plan_to_json(const eng_plan *p, char **out, eng_err *e) {
  const int L = p->n_layers;
  json_t *root = json_object();
  json_object_set_new(root, "version", json_integer(PLAN_JSON_VERSION));
  json_object_set_new(root, "model", json_string(p->model));
  json_object_set_new(root, "profile", json_string(p->profile));
  json_object_set_new(root, "n_layers", json_integer(L));
  json_object_set_new(root, "batch", json_integer(p->batch));
  json_object_set_new(root, "seq_len", json_integer(p->seq_len));
  json_object_set_new(root, "micro_batch", json_integer(p->micro_batch));
  json_object_set_new(root, "n_micro", json_integer(p->n_micro));
  json_object_set_new(root, "ranks", json_integer(p->ranks));
  json_object_set_new(root, "act_bytes", json_integer(p->act_bytes));
  json_object_set_new(root, "bnd_bytes", json_integer((json_int_t)p->bnd_bytes));
  json_object_set_new(root, "row_bytes", json_integer((json_int_t)p->row_bytes));
  json_object_set_new(root, "max_block", json_integer(p->max_block));
  json_t *bnd = json_array();
  for (int i = 0; i <= L; i++) {
    json_t *b = json_object();
    json_object_set_new(b, "materialised", json_boolean(p->bnd[i].materialised));
    if (p->bnd[i].materialised) {
      json_object_set_new(b, "tier", json_string(eng_tier_name(p->bnd[i].tier)));
      json_object_set_new(b, "block_end", json_integer(p->bnd[i].block_end));
    }
    json_array_append_new(bnd, b);
  }
  json_object_set_new(root, "boundaries", bnd);
  json_t *keep = json_array();
  for (int l = 0; l < L; l++) json_array_append_new(keep, json_boolean(p->keep_inner[l]));
  json_object_set_new(root, "keep_inner", keep);
  json_t *win = json_array();
  for (int w = 0; w <= 2 * L; w++) {
    const eng_plan_win *x = &p->win[w];
    json_array_append_new(win, json_pack("{s:s, s:i, s:i, s:f, s:f}", "kind", win_kind_name[x->kind], "layer",
                                         x->layer, "recompute_from", x->recompute_from, "t_compute", x->t_compute,
                                         "t_exposed", x->t_exposed));
  }
  json_object_set_new(root, "windows", win);
  json_t *xf = json_array();
  for (int t = 0; t < p->n_xfer; t++) {
    const eng_plan_xfer *x = &p->xfer[t];
    json_array_append_new(xf, json_pack("[i, s, i, I, I]", x->boundary, eng_lane_name(x->lane), x->window,
                                        (json_int_t)x->offset, (json_int_t)x->bytes));
  }
  json_object_set_new(root, "transfers", xf);
  json_t *pr = json_object();
  json_object_set_new(pr, "step_time", json_real(p->step_time));
  json_object_set_new(pr, "tokens_per_s", json_real(p->tokens_per_s));
  json_object_set_new(pr, "t_compute", json_real(p->t_compute));
  json_object_set_new(pr, "t_recompute", json_real(p->t_recompute));
  json_object_set_new(pr, "t_exposed", json_real(p->t_exposed));
  json_object_set_new(pr, "t_comm", json_real(p->t_comm));
  json_object_set_new(pr, "model_step_time", json_real(p->model_step_time));
  json_object_set_new(pr, "peak_dev", json_integer((json_int_t)p->peak_dev));
  json_object_set_new(pr, "peak_host", json_integer((json_int_t)p->peak_host));
  json_object_set_new(pr, "peak_nvme", json_integer((json_int_t)p->peak_nvme));
  json_object_set_new(pr, "dev_fixed", json_integer((json_int_t)p->dev_fixed));
  json_object_set_new(pr, "host_state", json_integer((json_int_t)p->host_state));
  json_object_set_new(pr, "params", json_integer((json_int_t)p->params));
  json_object_set_new(root, "predicted", pr);
  json_t *so = json_object();
  json_object_set_new(so, "method", json_string(p->method));
  json_object_set_new(so, "optimal", json_boolean(p->optimal));
  json_object_set_new(so, "gap", num_or_null(p->gap));
  json_object_set_new(so, "solve_time", json_real(p->solve_time));
  json_object_set_new(so, "objective", num_or_null(p->objective));
  json_object_set_new(so, "bound", num_or_null(p->bound));
  json_object_set_new(root, "solver", so);
  *out = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  json_decref(root);
  if (!*out) return eng_err_set(e, ENG_ENOMEM, "plan: cannot format the plan as JSON");
  return 0;
}

// ---- parsing ----------------------------------------------------------------------

typedef struct rd {
  eng_err *e;
  int rc;
} rd;

static const json_t *field(rd *r, const json_t *obj, const char *where, const char *key) {
  if (r->rc) return NULL;
  const json_t *v = json_object_get(obj, key);
  if (!v) r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: %s: field \"%s\" is missing", where, key);
  return v;
}

static long long get_int(rd *r, const json_t *obj, const char *where, const char *key, long long lo, long long hi) {
  const json_t *v = field(r, obj, where, key);
  if (!v) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
    r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: %s: field \"%s\" must be an integer in [%lld, %lld], got %s", where,
                        key, lo, hi, eng_json_kind(v));
    return 0;
  }
  return json_integer_value(v);
}

static double get_num(rd *r, const json_t *obj, const char *where, const char *key, int nullable) {
  const json_t *v = field(r, obj, where, key);
  if (!v) return 0;
  if (nullable && json_is_null(v)) return NAN;
  if (!json_is_number(v)) {
    r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: %s: field \"%s\" must be a number, got %s", where, key,
                        eng_json_kind(v));
    return 0;
  }
  return json_number_value(v);
}

static int get_bool(rd *r, const json_t *obj, const char *where, const char *key) {
  const json_t *v = field(r, obj, where, key);
  if (!v) return 0;
  if (!json_is_boolean(v)) {
    r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: %s: field \"%s\" must be true or false, got %s", where, key,
                        eng_json_kind(v));
    return 0;
  }
  return json_is_true(v);
}

static void get_str(rd *r, const json_t *obj, const char *where, const char *key, char *dst, size_t cap) {
  const json_t *v = field(r, obj, where, key);
  if (!v) return;
  if (!json_is_string(v) || strlen(json_string_value(v)) >= cap) {
    r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: %s: field \"%s\" must be a string of fewer than %zu characters",
                        where, key, cap);
    return;
  }
  strcpy(dst, json_string_value(v));
}

static const json_t *get_array(rd *r, const json_t *obj, const char *key, size_t len) {
  const json_t *v = field(r, obj, "plan", key);
  if (!v) return NULL;
  if (!json_is_array(v) || (len && json_array_size(v) != len)) {
    r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: field \"%s\" must be an array of %zu entries", key, len);
    return NULL;
  }
  return v;
}

static int name_index(const char *s, const char *(*name)(int), int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(s, name(i))) return i;
  return -1;
}

static const char *tier_name_i(int i) { return eng_tier_name((eng_tier)i); }
static const char *lane_name_i(int i) { return eng_lane_name((eng_lane)i); }
static const char *kind_name_i(int i) { return win_kind_name[i]; }

static void read_body(rd *r, const json_t *root, eng_plan *p) {
  const int L = p->n_layers;
  const long long big = (long long)1 << 62;
  get_str(r, root, "plan", "model", p->model, sizeof p->model);
  get_str(r, root, "plan", "profile", p->profile, sizeof p->profile);
  p->batch = (int)get_int(r, root, "plan", "batch", 1, 1 << 30);
  p->seq_len = (int)get_int(r, root, "plan", "seq_len", 1, 1 << 30);
  p->micro_batch = (int)get_int(r, root, "plan", "micro_batch", 1, 1 << 30);
  p->n_micro = (int)get_int(r, root, "plan", "n_micro", 1, 1 << 30);
  // Plans of a traind before data parallelism have no ranks: one process.
  p->ranks = json_object_get(root, "ranks") ? (int)get_int(r, root, "plan", "ranks", 1, 1 << 20) : 1;
  p->act_bytes = (int)get_int(r, root, "plan", "act_bytes", 1, 8);
  p->bnd_bytes = (uint64_t)get_int(r, root, "plan", "bnd_bytes", 1, big);
  p->row_bytes = (uint64_t)get_int(r, root, "plan", "row_bytes", 1, big);
  p->max_block = (int)get_int(r, root, "plan", "max_block", 0, L);
  if (!r->rc && (p->batch != p->micro_batch * p->n_micro || p->bnd_bytes % p->row_bytes))
    r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: batch %d is not micro_batch %d x n_micro %d, or the boundary is not whole rows",
                        p->batch, p->micro_batch, p->n_micro);
  const json_t *bnd = get_array(r, root, "boundaries", (size_t)L + 1);
  for (int i = 0; !r->rc && i <= L; i++) {
    const json_t *b = json_array_get(bnd, (size_t)i);
    char where[32];
    snprintf(where, sizeof where, "boundary %d", i);
    if (!json_is_object(b)) {
      r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: %s must be an object", where);
      break;
    }
    p->bnd[i].materialised = get_bool(r, b, where, "materialised");
    if (r->rc || !p->bnd[i].materialised) continue;
    char tier[16];
    get_str(r, b, where, "tier", tier, sizeof tier);
    int t = r->rc ? 0 : name_index(tier, tier_name_i, 3);
    if (t < 0) r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: %s: unknown tier \"%s\"", where, tier);
    p->bnd[i].tier = (eng_tier)(t < 0 ? 0 : t);
    p->bnd[i].block_end = (int)get_int(r, b, where, "block_end", i + 1, L);
  }
  const json_t *keep = get_array(r, root, "keep_inner", (size_t)L);
  for (int l = 0; !r->rc && l < L; l++) {
    const json_t *v = json_array_get(keep, (size_t)l);
    if (!json_is_boolean(v)) r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: keep_inner[%d] must be true or false", l);
    p->keep_inner[l] = json_is_true(v);
  }
  const json_t *win = get_array(r, root, "windows", 2 * (size_t)L + 1);
  for (int w = 0; !r->rc && w <= 2 * L; w++) {
    const json_t *x = json_array_get(win, (size_t)w);
    char where[32], kind[4];
    snprintf(where, sizeof where, "window %d", w);
    if (!json_is_object(x)) {
      r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: %s must be an object", where);
      break;
    }
    get_str(r, x, where, "kind", kind, sizeof kind);
    int k = r->rc ? 0 : name_index(kind, kind_name_i, 3);
    if (k < 0) r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: %s: unknown kind \"%s\"", where, kind);
    p->win[w].kind = (eng_win_kind)(k < 0 ? 0 : k);
    p->win[w].layer = (int)get_int(r, x, where, "layer", -1, L - 1);
    p->win[w].recompute_from = (int)get_int(r, x, where, "recompute_from", -1, L - 1);
    p->win[w].t_compute = get_num(r, x, where, "t_compute", 0);
    p->win[w].t_exposed = get_num(r, x, where, "t_exposed", 0);
  }
  const json_t *xf = get_array(r, root, "transfers", 0);
  for (size_t t = 0; !r->rc && t < json_array_size(xf); t++) {
    json_int_t b, w, off, n;
    const char *lane;
    json_error_t je;
    if (json_unpack_ex(json_array_get(xf, t), &je, JSON_STRICT, "[I, s, I, I, I]", &b, &lane, &w, &off, &n)) {
      r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: transfer %zu must be [boundary, lane, window, offset, bytes]: %s", t,
                          je.text);
      break;
    }
    int l = name_index(lane, lane_name_i, ENG_LANE_COUNT);
    if (l < 0 || b < 0 || b > L || w < 0 || w > 2 * L || off < 0 || n <= 0 || (uint64_t)(off + n) > p->bnd_bytes) {
      r->rc = eng_err_set(r->e, ENG_EINVAL, "plan JSON: transfer %zu is out of range", t);
      break;
    }
    r->rc = eng_plan_xfer_add(p, (int)b, (eng_lane)l, (int)w, (uint64_t)off, (uint64_t)n, r->e);
  }
  const json_t *pr = field(r, root, "plan", "predicted");
  if (!r->rc) {
    p->step_time = get_num(r, pr, "predicted", "step_time", 0);
    p->tokens_per_s = get_num(r, pr, "predicted", "tokens_per_s", 0);
    p->t_compute = get_num(r, pr, "predicted", "t_compute", 0);
    p->t_recompute = get_num(r, pr, "predicted", "t_recompute", 0);
    p->t_exposed = get_num(r, pr, "predicted", "t_exposed", 0);
    p->t_comm = json_object_get(pr, "t_comm") ? get_num(r, pr, "predicted", "t_comm", 0) : 0.0;
    p->model_step_time = get_num(r, pr, "predicted", "model_step_time", 0);
    p->peak_dev = (uint64_t)get_int(r, pr, "predicted", "peak_dev", 0, big);
    p->peak_host = (uint64_t)get_int(r, pr, "predicted", "peak_host", 0, big);
    p->peak_nvme = (uint64_t)get_int(r, pr, "predicted", "peak_nvme", 0, big);
    p->dev_fixed = (uint64_t)get_int(r, pr, "predicted", "dev_fixed", 0, big);
    p->host_state = (uint64_t)get_int(r, pr, "predicted", "host_state", 0, big);
    p->params = json_object_get(pr, "params") ? (uint64_t)get_int(r, pr, "predicted", "params", 0, big) : 0;
  }
  const json_t *so = field(r, root, "plan", "solver");
  if (!r->rc) {
    get_str(r, so, "solver", "method", p->method, sizeof p->method);
    p->optimal = get_bool(r, so, "solver", "optimal");
    p->gap = get_num(r, so, "solver", "gap", 1);
    p->solve_time = get_num(r, so, "solver", "solve_time", 0);
    p->objective = get_num(r, so, "solver", "objective", 1);
    p->bound = get_num(r, so, "solver", "bound", 1);
  }
}

// Reads a parsed document (owned by the caller) into p.
static int from_root(const json_t *root, eng_plan *p, eng_err *e) {
  memset(p, 0, sizeof *p);
  rd r = {e, 0};
  int L = 0;
  if (!json_is_object(root)) r.rc = eng_err_set(e, ENG_EINVAL, "plan JSON: a plan must be an object, got %s", eng_json_kind(root));
  long long version = r.rc ? 0 : get_int(&r, root, "plan", "version", 0, 1 << 20);
  if (!r.rc && version != PLAN_JSON_VERSION)
    r.rc = eng_err_set(e, ENG_EINVAL, "plan JSON: version %lld, this build reads version %d", version, PLAN_JSON_VERSION);
  if (!r.rc) L = (int)get_int(&r, root, "plan", "n_layers", 1, 1 << 20);
  if (!r.rc) r.rc = eng_plan_init(p, L, e);
  if (!r.rc) read_body(&r, root, p);
  if (r.rc && p->bnd) eng_plan_free(p);
  return r.rc;
}

int eng_plan_from_json(const char *text, eng_plan *p, eng_err *e) {
  memset(p, 0, sizeof *p);
  json_error_t je;
  json_t *root = json_loads(text, 0, &je);
  if (!root) return eng_err_set(e, ENG_EINVAL, "plan JSON: line %d: %s", je.line, je.text);
  int rc = from_root(root, p, e);
  json_decref(root);
  return rc;
}

int eng_plan_save(const eng_plan *p, const char *path, eng_err *e) {
  char *text;
  int rc = eng_plan_to_json(p, &text, e);
  if (rc) return rc;
  size_t n = strlen(text);
  text[n] = '\n'; // replaces the terminator: the length is known
  rc = eng_afile_write_all(path, text, n + 1, e);
  free(text);
  if (rc) eng_err_prefix(e, "saving the plan: ");
  return rc;
}

int eng_plan_load(const char *path, eng_plan *p, eng_err *e) {
  memset(p, 0, sizeof *p);
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) return eng_err_set(e, ENG_EINVAL, "%s: line %d: %s", path, je.line, je.text);
  int rc = from_root(root, p, e);
  json_decref(root);
  if (rc) eng_err_prefix(e, "%s: ", path);
  return rc;
}
