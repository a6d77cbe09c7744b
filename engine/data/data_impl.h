// Internals of engine/data shared by its files: the data set struct and the
// loaders of each format. Not part of the engine's API.
#ifndef ENG_DATA_IMPL_H
#define ENG_DATA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "data/data.h"

struct eng_data {
  char *path;      // owned copy, named in every message
  int seq_len;
  int vocab;
  int shuffle;
  uint64_t seed;

  // Pretraining source: ntok tokens, in text_ids (a text file) or in the
  // shard open at fd, tok_bytes (2 or 4) each, unsigned, after its header.
  uint64_t ntok;
  int32_t *text_ids; // owned tokens of a text file, or NULL
  int fd;            // the shard, or -1
  int tok_bytes;
  uint64_t size;     // the shard's bytes when opened
  unsigned char *raw; // one sample's bytes, read from the shard

  // JSONL records: record r is rec_ids/rec_labels[rec_off[r] .. rec_off[r+1]),
  // already truncated to seq_len. rec_ids is NULL for a pretraining source.
  int32_t *rec_ids;
  int32_t *rec_labels;
  uint64_t *rec_off;

  // Packed records: sample w is records win_rec[win_off[w] .. win_off[w+1]),
  // concatenated. NULL: a sample is one record (or one window of a stream).
  uint32_t *win_rec;
  uint64_t *win_off;
  uint64_t nrec;      // records (of a JSONL file), packed or not
  uint64_t cap_toks, cap_recs; // capacity of the record arrays while loading
  uint64_t ntrunc;    // records cut to seq_len
  int from_cache;     // the tokens came from the cache (data_cache.c)
  char summary[256];  // eng_data_summary

  uint64_t nsamples; // per epoch
  uint64_t nfile;    // samples in the file (nsamples unless eng_data_keep chose some)
  uint32_t *kept;    // served sample i is the file's sample kept[i]; NULL: all, in file order
  uint32_t *order;   // the current epoch's permutation when shuffling, else NULL
  eng_data_pos pos;
};

// Loaders: fill the source fields of d (path, seq_len and vocab are set)
// and validate every token. The shard loader keeps fd (d->fd, closed by
// eng_data_close); the others take the whole file, read by data.c. The
// pretraining loaders set ntok and the tokens; the record loaders the
// records, nrec and ntok.
int eng_data_bin_load(eng_data *d, int fd, eng_err *e);
int eng_data_text_load(eng_data *d, const char *buf, size_t len, eng_err *e);
// The tokenizing loaders (data_tok.c): text documents into ntok/text_ids,
// or chat records into the record arrays; buf[0..len) is the whole file.
int eng_data_tok_text(eng_data *d, const eng_data_opts *o, const char *buf, size_t len, int jsonl, eng_err *e);
int eng_data_tok_chat(eng_data *d, const eng_data_opts *o, const char *buf, size_t len, eng_err *e);
// Parses input_ids JSONL records from buf[0..len) (data_jsonl.c).
int eng_data_jsonl_parse(eng_data *d, const char *buf, size_t len, eng_err *e);
// Appends one record of n tokens to the record arrays, truncated to seq_len
// (data_jsonl.c); labels NULL means labels = ids.
int eng_data_rec_add(eng_data *d, const int32_t *ids, const int32_t *labels, size_t n, eng_err *e);

// Packs the records into samples (data_pack.c): sets win_rec, win_off and
// nsamples.
int eng_data_pack(eng_data *d, eng_err *e);

// The tokenize-once cache (data_cache.c): key is a digest of the file's
// bytes and every option that shaped its tokens. get returns 1 on a hit
// (the source fields of d filled), 0 on a miss; put stores d's tokens
// (failures to write are not errors: the next run tokenizes again).
uint64_t eng_data_cache_key(const eng_data_opts *o, const char *buf, size_t len);
int eng_data_cache_get(eng_data *d, const char *dir, uint64_t key, eng_err *e);
void eng_data_cache_put(const eng_data *d, const char *dir, uint64_t key);

// Reads n tokens of the shard from token index at into ids, checking them
// against vocab again and the file against its size at open: it may have
// changed since.
int eng_data_bin_read(eng_data *d, uint64_t at, size_t n, int32_t *ids, eng_err *e);

// Allocates the permutation (when shuffling) and draws the one of pos.epoch.
int eng_data_order_init(eng_data *d, eng_err *e);

// Whether the open file starts with the shard magic (content sniffing for
// files whose extension says nothing).
int eng_data_bin_sniff(int fd);

#endif
