// POSIX 2008 for mkdir, unlink and strdup under -std=c17 too.
#define _POSIX_C_SOURCE 200809L

#include "model/hf_io.h"
#include "model/model.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/json_file.h"
#include "model/arch.h"
#include "model/atomic_file.h"
#include "model/safetensors.h"

#define SINGLE_NAME "model.safetensors"
#define INDEX_NAME "model.safetensors.index.json"

static int join(char *out, size_t cap, const char *dir, const char *name, eng_err *e) {
  int n = snprintf(out, cap, "%s/%s", dir, name);
  if (n < 0 || (size_t)n >= cap)
    return eng_err_set(e, ENG_EINVAL, "%.200s/%s: path is too long", dir, name);
  return ENG_OK;
}

// A tensor's slot among the 3 + L * ENG_P_LAYER_COUNT that a layout can
// have, so the loader can tick off what it has seen.
static size_t slot_of(const eng_layout *lo, int shard, const eng_tensor *t) {
  const size_t per_layer = ENG_P_LAYER_COUNT, head = 1 + (size_t)lo->n_layers * per_layer;
  if (shard == 0) return 0;
  if (shard == lo->n_layers + 1) return t->off == lo->final_norm.off ? head : head + 1;
  const eng_tensor *proto = eng_layout_proto(lo, shard - 1);
  size_t p = 0;
  while (proto[p].off != t->off || !proto[p].numel) p++;
  return 1 + (size_t)(shard - 1) * per_layer + p;
}

// ---- load ----------------------------------------------------------------------

typedef struct loader {
  const eng_fs *fs;
  const eng_layout *lo;
  float *const *shards; // where each shard's values go, or NULL: into m
  eng_model *m;
  unsigned char *seen; // one flag per slot
  const char *source;  // the file that should have held a missing tensor
  int tied_head;       // the layout ties lm_head and a file holds one all the same
} loader;

static int rotary_table(const char *name) {
  static const char suffix[] = ".rotary_emb.inv_freq";
  size_t n = strlen(name), k = sizeof suffix - 1;
  return n >= k && strcmp(name + n - k, suffix) == 0;
}

static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape) {
  size_t at = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < ndim && at < cap; i++)
    at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
  if (at < cap) snprintf(buf + at, cap - at, "]");
}

static int load_tensor(loader *L, const eng_st_file *f, const eng_st_tensor *st, eng_err *e) {
  int shard;
  eng_tensor t;
  // eng_layout_find reads the layer number leniently ("01" is layer 1); only
  // the exact Hugging Face spelling counts, so no tensor can land twice.
  if (eng_layout_find(L->lo, st->name, &shard, &t) != 0 || strcmp(t.name, st->name) != 0) {
    if (rotary_table(st->name) || eng_layout_passes(L->lo, st->name)) return ENG_OK;
    // Compared with the embedding once every file is read (check_tied_head).
    if (L->lo->lm_head.numel == 0 && strcmp(st->name, L->lo->lm_head.name) == 0) {
      L->tied_head = 1;
      return ENG_OK;
    }
    return eng_err_set(e, ENG_EINVAL,
                       "%s: tensor \"%s\" is not a parameter of the model described by config.json",
                       f->path, st->name);
  }
  if (st->dtype != ENG_ST_F32 && st->dtype != ENG_ST_BF16 && st->dtype != ENG_ST_F16)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: tensor \"%s\" has dtype %s; weights must be F32, BF16 or F16", f->path,
                       st->name, eng_st_dtype_name(st->dtype));
  int64_t want[3];
  const int want_ndim = eng_tensor_hf_shape(&t, want);
  int same = st->ndim == want_ndim;
  for (int i = 0; same && i < want_ndim; i++) same = st->shape[i] == want[i];
  if (!same) {
    char found[128], expected[64];
    format_shape(found, sizeof found, st->ndim, st->shape);
    format_shape(expected, sizeof expected, want_ndim, want);
    return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\" has shape %s, but config.json implies %s",
                       f->path, st->name, found, expected);
  }
  // A tensor the model holds in bf16 is read whole in fp32, then rounded.
  float *dst = L->shards ? L->shards[shard] + t.off : eng_model_tensor(L->m, shard, &t), *tmp = NULL;
  if (!dst && !(dst = tmp = malloc(t.numel * sizeof(float))))
    return eng_err_set(e, ENG_ENOMEM, "%s: tensor \"%s\": cannot allocate %zu bytes", f->path, st->name,
                       t.numel * sizeof(float));
  int rc = eng_st_read_f32(f, st, dst, e);
  if (!rc && tmp) eng_model_tensor_set(L->m, shard, &t, tmp);
  free(tmp);
  if (!rc) L->seen[slot_of(L->lo, shard, &t)] = 1;
  return rc;
}

// The first tensor of the layout, in Hugging Face order, that no file held.
typedef struct missing {
  const loader *L;
  eng_tensor t;
} missing;

static int find_missing(void *ctx, int shard, const eng_tensor *t) {
  missing *m = ctx;
  if (m->L->seen[slot_of(m->L->lo, shard, t)]) return 0;
  m->t = *t;
  return 1;
}

static int check_complete(const loader *L, eng_err *e) {
  missing m = {.L = L};
  if (!eng_layout_visit(L->lo, find_missing, &m)) return ENG_OK;
  char shape[64];
  int64_t dims[3];
  format_shape(shape, sizeof shape, eng_tensor_hf_shape(&m.t, dims), dims);
  return eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\" (shape %s) is missing", L->source, m.t.name,
                     shape);
}

// The layout ties the head to the embedding, so a stored head may only be a
// copy of it: another one would be dropped, which loading must never do.
static int check_tied_head(const loader *L, const char *dir, eng_err *e) {
  int distinct = 0;
  int rc = L->tied_head ? eng_hf_head_distinct(L->fs, dir, L->lo->embed.name, &distinct, e) : ENG_OK;
  if (!rc && distinct)
    rc = eng_err_set(e, ENG_EINVAL,
                     "%s: tensor \"%s\" differs from the embedding, but the configuration it is "
                     "loaded with ties the two; load it untied (eng_hf_load_config)",
                     dir, L->lo->lm_head.name);
  return rc;
}

static int load_single(loader *L, const char *path, eng_err *e) {
  eng_st_file f;
  int rc = eng_st_open(&f, L->fs, path, e);
  for (int i = 0; !rc && i < f.n_tensors; i++) rc = load_tensor(L, &f, &f.tensors[i], e);
  eng_st_close(&f);
  return rc;
}

// A shard file named by the index must sit in the directory itself.
static int check_shard_name(const char *index, const char *tensor, const json_t *v, eng_err *e) {
  const char *s = json_string_value(v);
  if (!s)
    return eng_err_set(e, ENG_EINVAL, "%s: field \"weight_map\" entry \"%s\" must be a string",
                       index, tensor);
  if (!*s || strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: field \"weight_map\" entry \"%s\" names \"%s\", which is not a file "
                       "name in the model directory",
                       index, tensor, s);
  return ENG_OK;
}

// Reads every tensor that the weight map assigns to file, from that file.
static int load_shard(loader *L, const char *dir, const char *index, const json_t *map,
                      const char *file, eng_err *e) {
  char path[4096];
  int rc = join(path, sizeof path, dir, file, e);
  eng_st_file f;
  if (!rc) rc = eng_st_open(&f, L->fs, path, e);
  if (rc == ENG_EIO)
    eng_err_prefix(e, "%s: field \"weight_map\" names a file that cannot be read: ", index);
  if (rc) return rc;
  const char *name;
  const json_t *v;
  json_object_foreach((json_t *)map, name, v) {
    if (strcmp(json_string_value(v), file) != 0) continue;
    const eng_st_tensor *t = eng_st_find(&f, name);
    rc = t ? load_tensor(L, &f, t, e)
           : eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\" is not in this file, where %s places it",
                         path, name, index);
    if (rc) break;
  }
  eng_st_close(&f);
  return rc;
}

// Reads an index and checks every entry of its weight map; *root is the
// parsed file, for the caller to release, and *map its weight map.
static int load_index(const eng_fs *fs, const char *index, json_t **root, const json_t **map, eng_err *e) {
  int rc = eng_json_load(fs, index, root, e);
  if (rc) return rc;
  *map = json_object_get(*root, "weight_map");
  if (!json_is_object(*root) || !json_is_object(*map))
    return eng_err_set(e, ENG_EINVAL, "%s: field \"weight_map\" must be an object", index);
  const char *name;
  const json_t *v;
  json_object_foreach((json_t *)*map, name, v) {
    rc = check_shard_name(index, name, v, e);
    if (rc) return rc;
  }
  return ENG_OK;
}

static int load_sharded(loader *L, const char *dir, const char *index, eng_err *e) {
  json_t *root;
  const json_t *map;
  int rc = load_index(L->fs, index, &root, &map, e);
  // Each file once, in order of first mention; the number of shard files is
  // small, so finding earlier mentions by a scan is cheap.
  if (!rc) {
    void *it = json_object_iter((json_t *)map);
    for (; !rc && it; it = json_object_iter_next((json_t *)map, it)) {
      const char *file = json_string_value(json_object_iter_value(it));
      int first = 1;
      for (void *p = json_object_iter((json_t *)map); p != it && first;
           p = json_object_iter_next((json_t *)map, p))
        first = strcmp(json_string_value(json_object_iter_value(p)), file) != 0;
      if (first) rc = load_shard(L, dir, index, map, file, e);
    }
  }
  json_decref(root);
  return rc;
}

// The weight files of dir: model.safetensors when it exists (as transformers
// reads it), else the index.
static int weight_paths(const eng_fs *fs, const char *dir, char single[static 4096], char index[static 4096],
                        int *sharded, eng_err *e) {
  int rc = join(single, 4096, dir, SINGLE_NAME, e);
  if (!rc) rc = join(index, 4096, dir, INDEX_NAME, e);
  if (rc) return rc;
  int has_single = eng_fs_exists(fs, single);
  *sharded = !has_single && eng_fs_exists(fs, index);
  if (!*sharded && !has_single)
    return eng_err_set(e, ENG_EIO, "%s: holds neither %s nor %s", dir, SINGLE_NAME, INDEX_NAME);
  return ENG_OK;
}

int eng_hf_open_tensor(const eng_fs *fs, const char *dir, const char *name, eng_st_file *f, const eng_st_tensor **t,
                       eng_err *e) {
  char single[4096], index[4096], path[4096];
  int sharded;
  memset(f, 0, sizeof *f);
  *t = NULL;
  int rc = weight_paths(fs, dir, single, index, &sharded, e);
  if (rc) return rc;
  if (!sharded) {
    rc = eng_st_open(f, fs, single, e);
    if (!rc) *t = eng_st_find(f, name);
    return rc;
  }
  json_t *root;
  const json_t *map;
  rc = load_index(fs, index, &root, &map, e);
  const json_t *file = rc ? NULL : json_object_get(map, name);
  if (file) rc = join(path, sizeof path, dir, json_string_value(file), e);
  if (file && !rc) rc = eng_st_open(f, fs, path, e);
  if (file && !rc && !(*t = eng_st_find(f, name)))
    rc = eng_err_set(e, ENG_EINVAL, "%s: tensor \"%s\" is not in this file, where %s places it",
                     path, name, index);
  json_decref(root);
  if (rc) eng_st_close(f);
  return rc;
}

static int load_weights(loader L, const char *dir, eng_err *e) {
  char single[4096], index[4096];
  int sharded;
  int rc = weight_paths(L.fs, dir, single, index, &sharded, e);
  if (rc) return rc;
  const eng_layout *lo = L.lo;
  L.source = sharded ? index : single;
  L.seen = calloc(3 + (size_t)lo->n_layers * ENG_P_LAYER_COUNT, 1);
  if (!L.seen) return eng_err_set(e, ENG_ENOMEM, "%s: out of memory", dir);
  rc = sharded ? load_sharded(&L, dir, index, e) : load_single(&L, single, e);
  if (!rc) rc = check_complete(&L, e);
  if (!rc) rc = check_tied_head(&L, dir, e);
  free(L.seen);
  return rc;
}

int eng_hf_load_weights(const eng_fs *fs, const char *dir, const eng_layout *lo, float *const *shards,
                        eng_err *e) {
  return load_weights((loader){.fs = fs, .lo = lo, .shards = shards}, dir, e);
}

int eng_hf_load_model(const eng_fs *fs, const char *dir, eng_model *m, eng_err *e) {
  return load_weights((loader){.fs = fs, .lo = &m->lo, .m = m}, dir, e);
}

// ---- save ----------------------------------------------------------------------

// One tensor to write, with its name copied out of the visit's temporary.
typedef struct item {
  eng_st_src src;
  char name[sizeof((eng_tensor *)0)->name];
  size_t bytes;
} item;

typedef struct collect {
  const float *const *shards;
  eng_st_dtype dtype;
  item *items;
  int n;
} collect;

static int collect_tensor(void *ctx, int shard, const eng_tensor *t) {
  collect *c = ctx;
  item *it = &c->items[c->n++];
  memcpy(it->name, t->name, sizeof it->name);
  it->src = (eng_st_src){.name = it->name, .dtype = c->dtype, .data = c->shards[shard] + t->off};
  it->src.ndim = eng_tensor_hf_shape(t, it->src.shape);
  it->bytes = eng_st_src_nbytes(&it->src);
  return 0;
}

static int make_dirs(const char *dir, eng_err *e) {
  char buf[4096];
  if (strlen(dir) >= sizeof buf)
    return eng_err_set(e, ENG_EINVAL, "%.200s...: path is too long", dir);
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char c = *p;
    *p = '\0';
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
      return eng_err_set(e, ENG_EIO, "%s: cannot create directory: %s", buf, strerror(errno));
    *p = c;
    if (!c) break;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return eng_err_set(e, ENG_EIO, "%s: not a directory", dir);
  return ENG_OK;
}

static int remove_if_present(const char *path, eng_err *e) {
  if (unlink(path) != 0 && errno != ENOENT)
    return eng_err_set(e, ENG_EIO, "%s: cannot remove the stale file: %s", path, strerror(errno));
  return ENG_OK;
}

// Writes items [from, to) to one file.
static int write_group(const char *path, const item *items, int from, int to, eng_err *e) {
  eng_st_src *src = malloc(sizeof *src * (size_t)(to - from + 1));
  if (!src) return eng_err_set(e, ENG_ENOMEM, "%s: out of memory", path);
  for (int i = from; i < to; i++) src[i - from] = items[i].src;
  int rc = eng_st_write(path, src, to - from, e);
  free(src);
  return rc;
}

// Greedy packing in order: a file closes when the next tensor would take it
// past max_bytes, as transformers' own sharding does.
static int write_sharded(const char *dir, const item *items, int n, size_t max_bytes, eng_err *e) {
  int *start = malloc(sizeof *start * (size_t)(n + 1));
  json_t *root = json_object(), *map = json_object();
  int rc = ENG_OK;
  if (!start || !root || !map) rc = eng_err_set(e, ENG_ENOMEM, "%s: out of memory", dir);
  int groups = 0;
  size_t total = 0, in_group = 0;
  for (int i = 0; !rc && i < n; i++) {
    if (i == 0 || (in_group > 0 && in_group + items[i].bytes > max_bytes)) {
      start[groups++] = i;
      in_group = 0;
    }
    in_group += items[i].bytes;
    total += items[i].bytes;
  }
  if (!rc) start[groups] = n;
  char file[64], path[4096];
  for (int g = 0; !rc && g < groups; g++) {
    snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", g + 1, groups);
    rc = join(path, sizeof path, dir, file, e);
    if (!rc) rc = write_group(path, items, start[g], start[g + 1], e);
    for (int i = start[g]; !rc && i < start[g + 1]; i++)
      if (json_object_set_new(map, items[i].src.name, json_string(file)))
        rc = eng_err_set(e, ENG_ENOMEM, "%s: out of memory", dir);
  }
  char *text = NULL;
  if (!rc) {
    if (!json_object_set_new(root, "metadata",
                             json_pack("{sI}", "total_size", (json_int_t)total)) &&
        !json_object_set(root, "weight_map", map))
      text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!text) rc = eng_err_set(e, ENG_ENOMEM, "%s: out of memory", dir);
  }
  if (!rc) rc = join(path, sizeof path, dir, INDEX_NAME, e);
  if (!rc) rc = eng_afile_write_all(path, text, strlen(text), e);
  if (!rc) rc = join(path, sizeof path, dir, SINGLE_NAME, e);
  if (!rc) rc = remove_if_present(path, e);
  free(text);
  json_decref(map);
  json_decref(root);
  free(start);
  return rc;
}

static int write_single(const char *dir, const item *items, int n, eng_err *e) {
  char path[4096];
  int rc = join(path, sizeof path, dir, SINGLE_NAME, e);
  if (!rc) rc = write_group(path, items, 0, n, e);
  if (!rc) rc = join(path, sizeof path, dir, INDEX_NAME, e);
  if (!rc) rc = remove_if_present(path, e);
  return rc;
}

// The files of a model directory that are not the model: the tokenizer in
// each form transformers reads, and the generation defaults. The engine
// never reads them, but without them an export is a model nobody can prompt.
static const char *const side_files[] = {
    "tokenizer.json",    "tokenizer_config.json",  "special_tokens_map.json",
    "vocab.json",        "merges.txt",             "tokenizer.model",
    "added_tokens.json", "generation_config.json", "chat_template.jinja",
    // a multimodal checkpoint's image and video processors
    "preprocessor_config.json", "video_preprocessor_config.json", "processor_config.json",
};

static int copy_side_files(const eng_fs *fs, const char *src, const char *dir, eng_err *e) {
  char from[4096], to[4096];
  for (size_t i = 0; i < sizeof side_files / sizeof side_files[0]; i++) {
    int rc = join(from, sizeof from, src, side_files[i], e);
    if (!rc) rc = join(to, sizeof to, dir, side_files[i], e);
    if (!rc) rc = eng_afile_copy(fs, from, to, e);
    if (rc < 0) return rc; // 1: the source has no such file
  }
  return ENG_OK;
}

// The weight files of a source directory, each open, to copy its
// pass-through tensors (eng_layout_passes) from.
typedef struct sources {
  eng_st_file *files;
  int n;
} sources;

static void sources_close(sources *s) {
  for (int i = 0; i < s->n; i++) eng_st_close(&s->files[i]);
  free(s->files);
}

static int sources_open(const eng_fs *fs, const char *dir, sources *s, eng_err *e) {
  char single[4096], index[4096], path[4096];
  int sharded;
  memset(s, 0, sizeof *s);
  int rc = weight_paths(fs, dir, single, index, &sharded, e);
  if (rc) return rc;
  json_t *root = NULL;
  const json_t *map = NULL;
  if (sharded) rc = load_index(fs, index, &root, &map, e);
  const size_t cap = sharded && !rc ? json_object_size(map) : 1;
  if (!rc && !(s->files = calloc(cap ? cap : 1, sizeof *s->files)))
    rc = eng_err_set(e, ENG_ENOMEM, "%s: out of memory", dir);
  if (!rc && !sharded) {
    rc = eng_st_open(&s->files[0], fs, single, e);
    s->n = !rc;
  }
  // Each file once, in order of first mention (as load_sharded reads them).
  void *it = sharded && !rc ? json_object_iter((json_t *)map) : NULL;
  for (; !rc && it; it = json_object_iter_next((json_t *)map, it)) {
    const char *file = json_string_value(json_object_iter_value(it));
    int first = 1;
    for (void *p = json_object_iter((json_t *)map); p != it && first; p = json_object_iter_next((json_t *)map, p))
      first = strcmp(json_string_value(json_object_iter_value(p)), file) != 0;
    if (!first) continue;
    rc = join(path, sizeof path, dir, file, e);
    if (!rc) rc = eng_st_open(&s->files[s->n], fs, path, e);
    s->n += !rc;
  }
  json_decref(root);
  if (rc) sources_close(s);
  return rc;
}

int eng_hf_save(const char *dir, const eng_config *c, const eng_layout *lo,
                const float *const *shards, int bf16, size_t max_shard_bytes, const eng_fs *src_fs,
                const char *src_dir, eng_err *e) {
  int rc = eng_config_validate(c, dir, e);
  if (rc) return rc;
  eng_layout want;
  eng_layout_init(&want, c);
  if (want.n_layers != lo->n_layers || want.layer_numel != lo->layer_numel || want.dn_numel != lo->dn_numel ||
      want.full_every != lo->full_every ||
      want.embed.numel != lo->embed.numel || want.head_numel != lo->head_numel)
    return eng_err_set(e, ENG_ESTATE, "%s: the parameter layout does not match the config", dir);
  rc = make_dirs(dir, e);
  if (rc) return rc;

  // A multimodal checkpoint's other tensors come from its source as they are.
  sources src = {0};
  size_t n_pass = 0;
  if (lo->pass && !src_dir)
    return eng_err_set(e, ENG_EINVAL, "%s: the export of %s's text model needs its source directory, which "
                       "holds the tensors that pass through", dir, eng_arch_row_of(c->arch)->vlm_class);
  if (lo->pass && (rc = sources_open(src_fs, src_dir, &src, e))) return rc;
  for (int f = 0; f < src.n; f++)
    for (int i = 0; i < src.files[f].n_tensors; i++) n_pass += eng_layout_passes(lo, src.files[f].tensors[i].name);

  collect col = {.shards = shards, .dtype = bf16 ? ENG_ST_BF16 : ENG_ST_F32};
  col.items = malloc(sizeof *col.items * (3 + (size_t)lo->n_layers * ENG_P_LAYER_COUNT + n_pass));
  if (!col.items) {
    sources_close(&src);
    return eng_err_set(e, ENG_ENOMEM, "%s: out of memory", dir);
  }
  eng_layout_visit(lo, collect_tensor, &col);
  for (int f = 0; f < src.n; f++)
    for (int i = 0; i < src.files[f].n_tensors; i++) {
      const eng_st_tensor *t = &src.files[f].tensors[i];
      if (!eng_layout_passes(lo, t->name)) continue;
      item *it = &col.items[col.n++];
      it->src = eng_st_src_copy(&src.files[f], t);
      it->bytes = t->end - t->begin;
    }
  size_t total = 0;
  for (int i = 0; i < col.n; i++) total += col.items[i].bytes;

  rc = max_shard_bytes == 0 || total <= max_shard_bytes
           ? write_single(dir, col.items, col.n, e)
           : write_sharded(dir, col.items, col.n, max_shard_bytes, e);
  free(col.items);
  sources_close(&src);
  if (!rc && src_dir) rc = copy_side_files(src_fs, src_dir, dir, e);
  char path[4096], ids_from[4096];
  if (!rc) rc = join(path, sizeof path, dir, "config.json", e);
  if (!rc && src_dir) rc = join(ids_from, sizeof ids_from, src_dir, "config.json", e);
  if (!rc) rc = eng_config_save(c, path, bf16 ? "bfloat16" : "float32", src_fs, src_dir ? ids_from : NULL, e);
  return rc;
}
