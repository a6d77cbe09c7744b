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

  // Pretraining source (shard or text): ntok tokens of tok_bytes (2 or 4)
  // each, unsigned, at tok. tok points into map (a shard) or text_ids.
  const void *tok;
  int tok_bytes;
  uint64_t ntok;
  void *map;       // the mmapped shard, or NULL
  size_t map_len;
  int32_t *text_ids; // owned tokens of a text file, or NULL

  // JSONL records: record r is rec_ids/rec_labels[rec_off[r] .. rec_off[r+1]),
  // already truncated to seq_len. rec_ids is NULL for a pretraining source.
  int32_t *rec_ids;
  int32_t *rec_labels;
  uint64_t *rec_off;

  uint64_t nsamples; // per epoch
  uint32_t *order;   // the current epoch's permutation when shuffling, else NULL
  eng_data_pos pos;
};

// Reads the whole file into *buf (malloc'd, owned by the caller; NUL-terminated
// for convenience, *len excludes the NUL).
int eng_data_file_read(const char *path, char **buf, size_t *len, eng_err *e);

// Loaders: fill the source fields of d (path, seq_len and vocab are set) and
// validate every token. The pretraining loaders set tok, tok_bytes and ntok;
// the JSONL loader sets the records, nsamples and ntok.
int eng_data_bin_load(eng_data *d, eng_err *e);
int eng_data_text_load(eng_data *d, eng_err *e);
int eng_data_jsonl_load(eng_data *d, eng_err *e);

// Allocates the permutation (when shuffling) and draws the one of pos.epoch.
int eng_data_order_init(eng_data *d, eng_err *e);

// Whether the file starts with the shard magic (content sniffing for files
// whose extension says nothing). Unreadable files answer 0 and fail later
// with a proper message.
int eng_data_bin_sniff(const char *path);

#endif
