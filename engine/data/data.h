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
// With a tokenizer (eng_data_opts.tok, engine/tok/tok.h) text comes in as
// text (data_tok.c), the format chosen by content or by opts.format:
// - plain text (any extension but .jsonl/.bin): one document;
// - "*.jsonl" records {"text": string}: a document each;
//   documents are encoded (with the post-processor's template, e.g. a BOS),
//   an EOS appended to each, and the stream cut into windows of seq_len like
//   a shard;
// - "*.jsonl" chat records {"messages": [{"role", "content"}, ...]} or
//   {"prompt": ..., "completion": ...} (strings, or lists of messages):
//   rendered by the model's chat template (tok/chat.h); only assistant
//   (completion) tokens count in the loss. A string pair is the prompt
//   encoded with the template, then the completion and an EOS, the latter
//   two counted. Records are truncated to seq_len (the count is reported).
// Invalid UTF-8, a missing or mistyped field, an unknown role are refused
// naming the file, the line and the field.
//
// Packing (opts.pack): records (chat, or input_ids JSONL) are packed several
// to a sample, first fit in file order, each keeping its own positions
// (restarting at 0) and attending only within itself (the executor's pos
// input); the first label of each record is ENG_DATA_IGNORE so no record is
// predicted from the one before it; the rest of a sample is padding (id 0,
// label ENG_DATA_IGNORE). A packed data set must be read with positions
// (eng_data_next_samples with pos).
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

typedef enum eng_data_format {
  ENG_DATA_AUTO = 0, // by extension, then by content (a JSONL file's first record's fields)
  ENG_DATA_BIN,      // an llm.c shard
  ENG_DATA_IDS,      // JSONL {"input_ids", "labels"}
  ENG_DATA_TEXT,     // plain text, or JSONL {"text"}
  ENG_DATA_CHAT,     // JSONL {"messages"} or {"prompt", "completion"}
} eng_data_format;

struct eng_tok;
struct eng_chat;

// Tells how far a long load has come (bytes of the file read and
// tokenized); may be called often, from the opening thread.
typedef void (*eng_data_progress_fn)(void *ctx, const char *path, uint64_t done, uint64_t total);

typedef struct eng_data_opts {
  int seq_len, vocab;
  uint64_t seed;
  int shuffle;
  eng_data_format format;
  const struct eng_tok *tok;   // text and chat need it; NULL: text through the byte-level tokenizer
  const char *no_tok;          // when tok is NULL: why there is none (in the message refusing chat)
  const struct eng_chat *chat; // chat records need a recognised template
  int32_t eos;                 // id appended to each text document and string completion; -1: none
  int pack;                    // pack records several to a sample (see above)
  // A directory where tokenized data is kept, keyed by the file's contents
  // and everything that shaped its tokens (data_cache.c); NULL: none.
  const char *cache_dir;
  eng_data_progress_fn progress;
  void *progress_ctx;
} eng_data_opts;

// eng_data_open with every option (the plain one: format AUTO, no
// tokenizer, no packing, no cache).
int eng_data_open_opts(eng_data **out, const eng_fs *fs, const char *path, const eng_data_opts *o, eng_err *e);

// Whether samples are packed (positions restart inside them).
int eng_data_packed(const eng_data *d);
// What was loaded, in one line for a log ("1234 records (98765 tokens before
// cutting), 56 cut to seq_len 512, in 300 samples, packed (91.2% of their
// tokens are records), tokens from the cache").
const char *eng_data_summary(const eng_data *d);

// Fills ids and labels, each [batch][seq_len] row-major, with the next batch
// samples and advances the position, starting the next epoch (with its own
// order) whenever one ends, even in the middle of a batch. A packed data set
// needs eng_data_next_samples.
int eng_data_next(eng_data *d, int batch, int32_t *ids, int32_t *labels, eng_err *e);

// The same, and each token's position into pos[batch][seq_len] (restarting
// at 0 where a packed record starts; NULL: not wanted, which a packed data
// set refuses), and the file's index of each sample into samples[batch]
// (NULL: not wanted): the number a score of the sample goes by.
int eng_data_next_samples(eng_data *d, int batch, int32_t *ids, int32_t *labels, int32_t *pos, uint64_t *samples,
                          eng_err *e);

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
// Tokens in the source: shard tokens, text bytes (tokens of a tokenized
// text), or the sum of the records' lengths before padding or truncation.
uint64_t eng_data_tokens(const eng_data *d);

// Releases everything; d may be NULL.
void eng_data_close(eng_data *d);

#endif
