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

  uint64_t nsamples; // per epoch
  uint64_t nfile;    // samples in the file (nsamples unless eng_data_keep chose some)
  uint32_t *kept;    // served sample i is the file's sample kept[i]; NULL: all, in file order
  uint32_t *order;   // the current epoch's permutation when shuffling, else NULL
  eng_data_pos pos;
};

// Reads the whole of the open file fd, d's source, into *buf (malloc'd,
// owned by the caller; NUL-terminated for convenience, *len excludes the NUL).
int eng_data_file_read(const eng_data *d, int fd, char **buf, size_t *len, eng_err *e);

// Loaders: fill the source fields of d (path, seq_len and vocab are set)
// from the open file fd and validate every token. The shard loader keeps fd
// (d->fd, closed by eng_data_close); the others read it whole. The
// pretraining loaders set ntok and the tokens; the JSONL loader sets the
// records, nsamples and ntok.
int eng_data_bin_load(eng_data *d, int fd, eng_err *e);
int eng_data_text_load(eng_data *d, int fd, eng_err *e);
int eng_data_jsonl_load(eng_data *d, int fd, eng_err *e);

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
