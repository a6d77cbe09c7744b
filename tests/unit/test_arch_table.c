// The architecture table (model/arch.h): the README's table of architectures
// is the one the rows print; every row is found by its names, round-trips
// through config.json with its defaults and layer tensors, and refuses each
// key it lists, by name.
#define _GNU_SOURCE
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "read_all.h"
#include "model/config.h"

// The README's lines between its archs markers equal what the rows print.
static void readme_matches(void) {
  char *readme = read_all(TRAIND_SOURCE_DIR "/README.md", NULL);
  const char *begin = strstr(readme, "<!-- archs: begin");
  CHECK(begin, "README.md has no \"<!-- archs: begin\" marker");
  begin = strchr(begin, '\n') + 1;
  const char *end = strstr(begin, "<!-- archs: end -->");
  CHECK(end, "README.md has no \"<!-- archs: end -->\" marker");
  char *table;
  size_t n;
  FILE *f = open_memstream(&table, &n);
  eng_arch_print_table(f);
  fclose(f);
  CHECK((size_t)(end - begin) == n && memcmp(begin, table, n) == 0,
        "README.md's table of architectures is not the table's; replace it with `traind-train --archs`:\n%s", table);
  free(table);
  free(readme);
}

static void names_found(void) {
  for (int a = 0; a < ENG_ARCH_COUNT; a++) {
    const eng_arch_row *r = eng_arch_row_of((eng_arch)a);
    CHECK(r && r->model_type && r->hf_class && r->layer && r->refuse && r->save_null, "row %d incomplete", a);
    CHECK(eng_arch_find(r->model_type, 0) == a, "%s not found by model_type", r->model_type);
    CHECK(eng_arch_find(r->hf_class, 1) == a, "%s not found by class", r->hf_class);
    CHECK(strcmp(eng_arch_name((eng_arch)a), r->model_type) == 0, "name of %d", a);
    char list[512];
    CHECK(strstr(eng_arch_list(list, sizeof list, 0, ", "), r->model_type), "%s not listed", r->model_type);
    CHECK(strstr(eng_arch_list(list, sizeof list, 1, ", "), r->hf_class), "%s not listed", r->hf_class);
  }
  CHECK(eng_arch_row_of(ENG_ARCH_COUNT) == NULL && eng_arch_find("gpt2", 0) < 0, "outside the table");
  CHECK(strcmp(eng_arch_name(ENG_ARCH_COUNT), "unknown") == 0, "unknown name");
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", path);
}

// A minimal config.json of row a, plus `extra` (",\"key\": value" or "").
static void write_config(const char *path, const eng_arch_row *r, const char *extra) {
  char text[1024];
  snprintf(text, sizeof text,
           "{\"model_type\": \"%s\", \"architectures\": [\"%s\"], \"vocab_size\": 96, \"hidden_size\": 48,"
           " \"num_hidden_layers\": 3, \"num_attention_heads\": 6, \"num_key_value_heads\": 2, \"head_dim\": 8,"
           " \"intermediate_size\": 72%s}",
           r->model_type, r->hf_class, extra);
  write_file(path, text);
}

static void round_trips_and_refuses(const char *dir) {
  char path[512], saved[512];
  snprintf(path, sizeof path, "%s/config.json", dir);
  snprintf(saved, sizeof saved, "%s/saved.json", dir);
  for (int a = 0; a < ENG_ARCH_COUNT; a++) {
    const eng_arch_row *r = eng_arch_row_of((eng_arch)a);
    eng_err e = {0};
    eng_config c, back;
    write_config(path, r, "");
    CHECK_OK(eng_config_load(NULL, path, &c, &e), &e);
    CHECK(c.arch == (eng_arch)a && c.qkv_bias == r->qkv_bias && c.qk_norm == r->qk_norm, "%s: layer tensors",
          r->model_type);
    CHECK(c.max_pos == r->max_pos_absent, "%s: max_position_embeddings default %d", r->model_type, c.max_pos);
    CHECK(c.window == (r->window_key ? r->window_absent : 0), "%s: sliding window default %d", r->model_type,
          c.window);
    CHECK_OK(eng_config_save(&c, saved, "float32", NULL, NULL, &e), &e);
    CHECK_OK(eng_config_load(NULL, saved, &back, &e), &e);
    CHECK(memcmp(&c, &back, sizeof c) == 0, "%s: config.json does not round-trip", r->model_type);
    json_error_t je;
    json_t *o = json_load_file(saved, 0, &je);
    CHECK(o, "%s: %s", saved, je.text);
    for (const eng_arch_refusal *x = r->refuse; x->key; x++)
      CHECK(json_is_false(json_object_get(o, x->key)), "%s: export does not write %s false", r->model_type, x->key);
    for (const char *const *k = r->save_null; *k; k++)
      CHECK(json_is_null(json_object_get(o, *k)), "%s: export does not write %s null", r->model_type, *k);
    json_decref(o);
    // Each refused key set true is refused, by name.
    for (const eng_arch_refusal *x = r->refuse; x->key; x++) {
      char extra[128];
      snprintf(extra, sizeof extra, ", \"%s\": true", x->key);
      write_config(path, r, extra);
      eng_err e2 = {0};
      CHECK(eng_config_load(NULL, path, &c, &e2) == ENG_ENOTSUP && strstr(e2.msg, x->key) && strstr(e2.msg, x->what),
            "%s: %s true not refused by name: %s", r->model_type, x->key, e2.msg);
    }
    // A row's window key sizes the window; null is none. Both round-trip.
    if (r->window_key) {
      const char *values[] = {"24", "null"};
      for (int i = 0; i < 2; i++) {
        char extra[128];
        snprintf(extra, sizeof extra, ", \"%s\": %s", r->window_key, values[i]);
        write_config(path, r, extra);
        CHECK_OK(eng_config_load(NULL, path, &c, &e), &e);
        CHECK(c.window == (i ? 0 : 24), "%s: %s %s gives a window of %d", r->model_type, r->window_key, values[i],
              c.window);
        CHECK_OK(eng_config_save(&c, saved, "float32", NULL, NULL, &e), &e);
        CHECK_OK(eng_config_load(NULL, saved, &back, &e), &e);
        CHECK(back.window == c.window, "%s: the window does not round-trip", r->model_type);
      }
    }
    // Absent keys take the family's defaults.
    char text[512];
    snprintf(text, sizeof text,
             "{\"model_type\": \"%s\", \"vocab_size\": 96, \"hidden_size\": 128, \"num_hidden_layers\": 1,"
             " \"num_attention_heads\": 64, \"intermediate_size\": 72}",
             r->model_type);
    write_file(path, text);
    CHECK_OK(eng_config_load(NULL, path, &c, &e), &e);
    CHECK(c.n_kv_heads == (r->kv_heads_absent ? r->kv_heads_absent : 64), "%s: kv heads default %d", r->model_type,
          c.n_kv_heads);
    CHECK(c.head_dim == (r->head_dim_absent ? r->head_dim_absent : 128 / 64), "%s: head_dim default %d",
          r->model_type, c.head_dim);
  }
}

int main(void) {
  readme_matches();
  names_found();
  char dir[] = "/tmp/test_arch_table.XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp");
  round_trips_and_refuses(dir);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cleanup");
  printf("test_arch_table: ok (%d architectures)\n", (int)ENG_ARCH_COUNT);
  return 0;
}
