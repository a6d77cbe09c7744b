// The tokenizer benchmark's driver (run by tests/bench/tokenize.sh).
//
//   bench_tok_rate TOKENIZER_JSON DOCS [REPS [IDS_OUT]]
// Encodes every document of DOCS (UTF-8 text, documents separated by NUL
// bytes) with engine/tok on one thread, without special tokens, REPS times
// (default 5), each time through a fresh encoder (its word cache empty, as a
// freshly loaded Rust tokenizer's is) into one reused id buffer. Loading the
// tokenizer and reading the file are not timed. Prints
// "tok_rate docs <n> bytes <b> tokens <t>" (the tokens of one pass; every
// pass must give the same count) and
// "tok_rate tokens_per_s <median> mb_per_s <median> s <median>" (MB = 1e6 bytes).
// IDS_OUT: the ids of the last pass, every document's one after another, are
// written there as int32 in the host's byte order (for tokenize.sh to compare with
// tokenizers' ids); kept after each document, outside the timed encodes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok.h"

#include "bench.h"

#define DIE(...)                                                                                   \
  do {                                                                                             \
    fprintf(stderr, "bench_tok_rate: " __VA_ARGS__);                                               \
    fprintf(stderr, "\n");                                                                         \
    exit(1);                                                                                       \
  } while (0)

static char *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) DIE("cannot open %s", path);
  size_t cap = 1 << 20, len = 0;
  char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
    len += got;
    if (len == cap) buf = realloc(buf, cap *= 2);
  }
  if (!buf || ferror(f)) DIE("cannot read %s", path);
  fclose(f);
  *n = len;
  return buf;
}

int main(int argc, char **argv) {
  if (argc < 3) DIE("usage: bench_tok_rate TOKENIZER_JSON DOCS [REPS [IDS_OUT]]");
  int reps = argc > 3 ? atoi(argv[3]) : 5;
  if (reps < 1 || reps > 100) DIE("REPS must be 1 to 100");
  eng_err e = {0};
  eng_tok *t;
  if (eng_tok_load(&t, NULL, argv[1], &e)) DIE("%s", e.msg);

  size_t len;
  char *text = read_all(argv[2], &len);
  size_t ndocs = 0, cap = 1024;
  size_t *start = malloc(cap * sizeof *start), *dlen = malloc(cap * sizeof *dlen);
  for (size_t p = 0; p < len;) {
    const char *z = memchr(text + p, 0, len - p);
    size_t end = z ? (size_t)(z - text) : len;
    if (ndocs == cap) {
      start = realloc(start, (cap *= 2) * sizeof *start);
      dlen = realloc(dlen, cap * sizeof *dlen);
      if (!start || !dlen) DIE("out of memory");
    }
    start[ndocs] = p, dlen[ndocs] = end - p, ndocs++;
    p = end + 1;
  }
  size_t bytes = 0;
  for (size_t i = 0; i < ndocs; i++) bytes += dlen[i];

  double *secs = malloc(reps * sizeof *secs);
  size_t tokens = 0;
  eng_tok_ids ids = {0};
  FILE *keep = NULL;
  for (int r = 0; r < reps; r++) {
    if (r == reps - 1 && argc > 4 && !(keep = fopen(argv[4], "wb"))) DIE("cannot write %s", argv[4]);
    eng_tok_enc *enc;
    if (eng_tok_enc_new(&enc, t, &e)) DIE("%s", e.msg);
    size_t n = 0;
    double t0 = eng_now(), kept = 0;
    for (size_t i = 0; i < ndocs; i++) {
      ids.n = 0;
      if (eng_tok_encode(enc, text + start[i], dlen[i], 0, &ids, &e)) DIE("document %zu: %s", i, e.msg);
      n += ids.n;
      if (keep) { // not timed
        double t1 = eng_now();
        if (fwrite(ids.ids, sizeof *ids.ids, ids.n, keep) != ids.n) DIE("cannot write %s", argv[4]);
        kept += eng_now() - t1;
      }
    }
    secs[r] = eng_now() - t0 - kept;
    if (keep && fclose(keep)) DIE("cannot write %s", argv[4]);
    keep = NULL;
    eng_tok_enc_free(enc);
    if (r == 0) tokens = n;
    else if (n != tokens) DIE("pass %d gave %zu tokens, pass 1 %zu", r + 1, n, tokens);
  }
  double s = bench_median(secs, reps);
  printf("tok_rate docs %zu bytes %zu tokens %zu\n", ndocs, bytes, tokens);
  printf("tok_rate tokens_per_s %.0f mb_per_s %.2f s %.3f\n", (double)tokens / s, (double)bytes / s / 1e6, s);
  eng_tok_ids_free(&ids);
  free(secs);
  free(start);
  free(dlen);
  free(text);
  eng_tok_free(t);
  return 0;
}
