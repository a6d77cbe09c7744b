// Token datasets: a source file cut into fixed-length samples, served in
// batches in a reproducible order that a resumed run can continue exactly.
//
// Formats, chosen by extension (and, for other extensions, by content):
// - "*.bin": an llm.c-style shard. A 1024-byte header of 256 little-endian
//   int32: [0] = 20240520 (magic), [1] = version (1: uint16 tokens, 2: uint32
//   tokens), [2] = number of tokens; then exactly that many tokens. The file is
//   read a sample at a time (pread), never copied whole nor mapped: a shard
//   that shrinks or changes under a run fails that run's next batch with an
//   error naming it, where a mapping would kill the process (SIGBUS). A file
//   with another extension whose first four bytes are the magic is read as a
//   shard too.
// - "*.jsonl": supervised fine-tuning records, one JSON object per line,
//   {"input_ids": [int, ...], "labels": [int, ...]}. "labels" is optional
//   (absent means labels = input_ids); other fields are ignored; blank lines
//   are skipped. Each record is one sample: a record shorter than seq_len is
//   padded with input id 0 and label -100 (ignored by the loss); a longer one
//   is truncated to its first seq_len tokens. The records are kept in memory
//   as two int32 arrays with per-record offsets.
// - anything else: plain text read by the byte-level tokenizer (token = byte
//   value, see data/tokenizer.h); needs vocab >= 256. Loaded in memory.
//
// Pretraining sources (.bin and text) are cut into non-overlapping windows of
// seq_len tokens; the tail shorter than seq_len is dropped. A window is both
// the input_ids and the labels of its sample (the Hugging Face convention:
// labels aligned with input_ids, the loss shifts them by one).
//
// The file is opened under a file policy (common/fs_open.h; NULL: anywhere).
// Everything is validated at open in one pass — token ids against vocab, the
// shard header against the file size, every JSONL field — so that training
// never fails on data mid-run unless the file changes. Errors name the file
// and the place (token position, line, column, field), never the file's
// bytes, and are ENG_EINVAL for bad content, ENG_EIO when the file cannot be
// read.
//
// Order: with shuffle, epoch e visits every sample once, in the order of a
// Fisher-Yates permutation of 0..n-1 (eng_rng_shuffle_u32) drawn from
// eng_rng_seed(seed, ENG_DATA_RNG_STREAM + e). Without shuffle (eval sets)
// every epoch is in file order. The position (epoch, index of the next sample
// within the epoch) is all the state there is: saving it with a checkpoint and
// restoring it into a data set opened with the same arguments continues with
// exactly the same samples.
#ifndef ENG_DATA_DATA_H
#define ENG_DATA_DATA_H

#include <stdint.h>

#include "common/err.h"
#include "common/fs_open.h"

// Label value that the loss ignores (the PyTorch/Hugging Face convention).
#define ENG_DATA_IGNORE (-100)

// Stream base of the order permutations: a tag ("data") far from the small
// stream numbers that other users of the job's seed (weight init) take, so the
// data order is independent of them.
#define ENG_DATA_RNG_STREAM 0x6461746100000000ull

typedef struct eng_data eng_data;

// Where the next sample comes from: index is in [0, samples per epoch).
typedef struct eng_data_pos {
  uint64_t epoch;
  uint64_t index;
} eng_data_pos;

// Opens path as a data set of samples of seq_len tokens with ids in
// [0, vocab). seed and shuffle set the order (see above). On success *out
// owns the source (close it with eng_data_close) and its position is
// (0, 0); on failure *out is NULL and nothing is left open.
int eng_data_open(eng_data **out, const eng_fs *fs, const char *path, int seq_len, int vocab, uint64_t seed,
                  int shuffle, eng_err *e);

// Fills ids and labels, each [batch][seq_len] row-major, with the next batch
// samples and advances the position, starting the next epoch (with its own
// order) whenever one ends, even in the middle of a batch.
int eng_data_next(eng_data *d, int batch, int32_t *ids, int32_t *labels, eng_err *e);

// The same, and the file's index of each sample into samples[batch] (NULL:
// not wanted): the number a score of the sample goes by.
int eng_data_next_samples(eng_data *d, int batch, int32_t *ids, int32_t *labels, uint64_t *samples, eng_err *e);

// Serves only the file's samples i with keep[i] != 0 (keep has
// eng_data_file_samples entries), in an order drawn as for the whole file,
// from position (0, 0). ENG_EINVAL when it keeps none.
int eng_data_keep(eng_data *d, const uint8_t *keep, eng_err *e);
// Samples in the file, whatever eng_data_keep kept.
uint64_t eng_data_file_samples(const eng_data *d);

// The position of the next sample.
void eng_data_pos_get(const eng_data *d, eng_data_pos *p);
// Moves to p (from eng_data_pos_get on a data set opened with the same path,
// seq_len, vocab, seed and shuffle). An index past the samples per epoch
// (the file changed since) is refused and the position left as it was.
int eng_data_pos_set(eng_data *d, const eng_data_pos *p, eng_err *e);

// Samples per epoch: windows of a pretraining source, records of a JSONL
// file (of them, those eng_data_keep kept).
uint64_t eng_data_samples(const eng_data *d);
// Tokens in the source: shard tokens, text bytes, or the sum of the JSONL
// records' input_ids lengths before padding or truncation.
uint64_t eng_data_tokens(const eng_data *d);

// Releases everything; d may be NULL.
void eng_data_close(eng_data *d);

#endif
