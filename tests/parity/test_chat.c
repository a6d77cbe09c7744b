// engine/tok/chat.h against transformers' apply_chat_template: the ids and
// the assistant mask of every conversation of tests/fixtures/chat
// (multi-turn, with and without a system prompt, assistant last or not,
// contents with edge white space, CJK and emoji, an empty assistant turn, a
// literal special token in a content), with and without the generation
// prompt, for the ChatML template of tests/fixtures/tok/qwen2 (and through
// the Qwen3.5-style tokenizer of tests/fixtures/tok/qwen3_5) and the
// Llama-3 one of tests/fixtures/tok/llama3, each recognised from its
// tokenizer_config.json. Templates of other families are refused by name,
// Qwen3's and Qwen3.5's thinking templates among them.
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tok/chat.h"
#include "tok_fixture.h"

static int run(const char *tok_dir, const char *fixture, eng_chat_kind want_kind) {
  char path[4096];
  eng_err e = {0};
  eng_chat chat;
  CHECK_OK(eng_chat_load(&chat, NULL, tok_fixture_path(tok_dir, NULL), NULL, &e), &e);
  CHECK(chat.kind == want_kind, "%s: recognised as %s", tok_dir, eng_chat_name(chat.kind));
  eng_tok_enc *enc;
  eng_tok *t = tok_fixture(tok_dir, &enc);
  snprintf(path, sizeof path, "%s/tests/fixtures/chat/%s.jsonl", TRAIND_SOURCE_DIR, fixture);
  FILE *f = fopen(path, "r");
  CHECK(f, "cannot open %s", path);
  char *line = NULL;
  size_t cap = 0, lineno = 0, bad = 0, masked = 0, refused_roles = 0;
  uint8_t *mask = NULL;
  size_t mask_cap = 0;
  while (getline(&line, &cap, f) > 0) {
    lineno++;
    json_t *c = json_loads(line, 0, NULL);
    CHECK(c, "%s line %zu: not JSON", path, lineno);
    json_t *msgs = json_object_get(c, "messages");
    int n = (int)json_array_size(msgs);
    eng_chat_msg *m = calloc((size_t)n + 1, sizeof *m);
    for (int i = 0; i < n; i++) {
      json_t *x = json_array_get(msgs, (size_t)i);
      m[i].role = json_string_value(json_object_get(x, "role"));
      m[i].content = json_string_value(json_object_get(x, "content"));
      m[i].len = json_string_length(json_object_get(x, "content"));
    }
    int roles_ok = 1;
    for (int i = 0; i < n; i++) roles_ok &= eng_chat_role_ok(m[i].role);
    if (!roles_ok) {
      // transformers renders any role name into these templates; traind
      // refuses a role its users' templates treat otherwise (Qwen2.5 wraps
      // "tool" in a user turn), rather than train on a guess.
      eng_tok_ids ids = {0};
      CHECK(eng_chat_encode(&chat, enc, m, n, 0, 0, &ids, &mask, &mask_cap, &e) == ENG_EINVAL &&
                strstr(e.msg, "is not system, user or assistant"),
            "%s line %zu: a conversation with another role is not refused: %s", path, lineno, e.msg);
      refused_roles++;
      eng_tok_ids_free(&ids);
    }
    for (int gen = 0; roles_ok && gen < 2; gen++) {
      eng_tok_ids ids = {0};
      CHECK_OK(eng_chat_encode(&chat, enc, m, n, 0, gen, &ids, &mask, &mask_cap, &e), &e);
      json_t *want = json_object_get(c, gen ? "gen_prompt_ids" : "ids"), *wmask = json_object_get(c, "assistant_masks");
      int ok = ids.n == json_array_size(want);
      for (size_t k = 0; ok && k < ids.n; k++) ok = ids.ids[k] == json_integer_value(json_array_get(want, k));
      for (size_t k = 0; ok && !gen && k < ids.n; k++) {
        ok = mask[k] == json_integer_value(json_array_get(wmask, k));
        masked += mask[k];
      }
      if (!ok) {
        fprintf(stderr, "%s line %zu%s: differs\n  got :", path, lineno, gen ? " (generation prompt)" : "");
        for (size_t k = 0; k < ids.n; k++) fprintf(stderr, " %d%s", ids.ids[k], !gen && mask[k] ? "*" : "");
        fprintf(stderr, "\n  want:");
        for (size_t k = 0; k < json_array_size(want); k++)
          fprintf(stderr, " %lld%s", (long long)json_integer_value(json_array_get(want, k)),
                  !gen && json_integer_value(json_array_get(wmask, k)) ? "*" : "");
        fprintf(stderr, "\n");
        bad++;
      }
      eng_tok_ids_free(&ids);
    }
    free(m);
    json_decref(c);
  }
  fclose(f);
  free(line);
  free(mask);
  printf("%s: %zu conversations (%zu refused for their roles), %zu assistant tokens, %zu differ from transformers\n",
         fixture, lineno, refused_roles, masked, bad);
  CHECK(lineno >= 20 && masked > 0, "%s: too few cases", fixture);
  eng_tok_enc_free(enc);
  eng_tok_free(t);
  eng_chat_free(&chat);
  return (int)bad;
}

static void refused(const char *tmpl, const char *why) {
  eng_chat c;
  eng_err e = {0};
  CHECK_OK(eng_chat_from_template(&c, tmpl, NULL, NULL, NULL, &e), &e);
  CHECK(c.kind == ENG_CHAT_NONE && c.why && strstr(c.why, why), "template not refused as \"%s\": %s", why,
        c.why ? c.why : eng_chat_name(c.kind));
  // A conversation through it is refused with that reason.
  eng_chat_msg m = {"user", "hi", 2};
  eng_tok_ids ids = {0};
  uint8_t *mask = NULL;
  size_t mcap = 0;
  CHECK(eng_chat_encode(&c, NULL, &m, 1, 0, 0, &ids, &mask, &mcap, &e) == ENG_EINVAL && strstr(e.msg, why),
        "encode through a refused template: %s", e.msg);
  eng_chat_free(&c);
}

int main(void) {
  int bad = run("qwen2", "chatml", ENG_CHAT_CHATML) + run("qwen3_5", "chatml_qwen3_5", ENG_CHAT_CHATML) +
            run("llama3", "llama3", ENG_CHAT_LLAMA3);
  CHECK(bad == 0, "%d conversations differ from transformers", bad);

  refused("{% for m in messages %}{{ m.content }}{% endfor %}", "neither ChatML");
  refused("{{'<|im_start|>'}}{% if '<think>' in content %}{% endif %}{{'<|im_end|>'}}", "Qwen3");
  refused("<|start_header_id|><|eot_id|>Cutting Knowledge Date: December 2023", "Llama-3.1");
  // Forcing a family works whatever the template says, and unknown names are refused.
  eng_chat c;
  eng_err e = {0};
  CHECK_OK(eng_chat_from_template(&c, "{{ whatever }}", "llama3", "<|begin_of_text|>", NULL, &e), &e);
  CHECK(c.kind == ENG_CHAT_LLAMA3, "forced llama3");
  eng_chat_free(&c);
  CHECK(eng_chat_from_template(&c, NULL, "vicuna", NULL, NULL, &e) == ENG_EINVAL && strstr(e.msg, "vicuna"),
        "unknown forced template: %s", e.msg);
  printf("ok\n");
  return 0;
}
